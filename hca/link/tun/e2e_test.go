//go:build linux

package tun

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// openHCA opens a device over ep; it (and ep) is closed at cleanup.
func openHCA(t testing.TB, ep link.Endpoint, opts hca.Options) *hca.Device {
	t.Helper()
	d, err := hca.Open(ep, opts)
	if err != nil {
		ep.Close()
		t.Fatalf("hca.Open over %v link: %v", ep.Format(), err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// runChecks connects an RC QP pair over the two devices and runs every RC
// operation once with data verification (bench.RunChecks), then a short
// RDMA WRITE stream of multi-packet messages.
func runChecks(t *testing.T, da, db *hca.Device, mtu bth.MTU) {
	t.Helper()
	p, err := bench.NewPair(da, db, bench.PairConfig{Type: hca.RC, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range bench.RunChecks(ctx, p) {
		if c.Err != nil {
			t.Errorf("%s: %v", c.Name, c.Err)
		} else {
			t.Logf("%s: ok", c.Name)
		}
	}
	if t.Failed() {
		return
	}
	r, err := bench.WriteBW(ctx, p, 64<<10, 200, 16, 0)
	if err != nil {
		t.Fatalf("WriteBW: %v", err)
	}
	t.Logf("RDMA WRITE 64 KiB x %d: %.1f MB/s", r.Iters, r.BytesPerSec/1e6)
}

// TestHCAOverTUN runs two goroce HCAs, each on its own TUN in its own
// namespace, the namespaces routed through a veth: every RC operation
// crosses two kernel forwarding hops each way.
func TestHCAOverTUN(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		r := newRouted(t, v6, DefaultMTU)
		for _, c := range []struct {
			mtu       bth.MTU
			noOffload bool
		}{{bth.MTU1024, false}, {bth.MTU4096, false}, {bth.MTU1024, true}, {bth.MTU4096, true}} {
			mtu := c.mtu
			t.Run(fmt.Sprintf("v6=%v/mtu=%d/NoOffload=%v", v6, mtu.Bytes(), c.noOffload), func(t *testing.T) {
				ea, eb := r.open(t, func(cfg *Config) { cfg.NoOffload = c.noOffload })
				da := openHCA(t, ea, hca.Options{Name: "tunA"})
				db := openHCA(t, eb, hca.Options{Name: "tunB"})
				runChecks(t, da, db, mtu)
				for _, e := range []*Endpoint{ea, eb} {
					st := e.Stats()
					if st.RxTooLarge != 0 || st.TxRejected != 0 || st.TxErrors != 0 || st.RxErrors != 0 {
						t.Errorf("%s: %+v", e.Name(), st)
					}
				}
			})
		}
	}
}

// TestHCATUNToUDP runs a goroce HCA on a TUN against one on the UDP socket
// link in the same namespace: the UDP link binds the kernel's address on the
// TUN, and the kernel delivers between the device and the socket. RoCEv2
// is RoCEv2 whatever produced it: IP IDs, source ports and ICRCs made by
// one side are verified by the other.
func TestHCATUNToUDP(t *testing.T) {
	for _, tc := range []struct{ v6, noOffload bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		v6 := tc.v6
		t.Run(fmt.Sprintf("v6=%v/NoOffload=%v", v6, tc.noOffload), func(t *testing.T) {
			ns := newNS(t)
			p := plans[v6]
			et := openIn(t, ns, Config{Addr: p.hostA, KernelAddr: p.kernelA, NoOffload: tc.noOffload})
			var eu *udp.Endpoint
			if err := ns.Do(func() (err error) {
				eu, err = udp.Open(udp.Config{Addr: p.kernelA.Addr()})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			dt := openHCA(t, et, hca.Options{Name: "tun"})
			du := openHCA(t, raceUDP{eu}, hca.Options{Name: "udp"})
			for _, mtu := range []bth.MTU{bth.MTU1024, bth.MTU4096} {
				t.Run(fmt.Sprintf("mtu=%d", mtu.Bytes()), func(t *testing.T) {
					runChecks(t, dt, du, mtu) // the TUN host requests
					runChecks(t, du, dt, mtu) // the UDP host requests
				})
			}
			if st := eu.Stats(); st.RxMalformed != 0 || st.RxWrongAddress != 0 || st.TxRejected != 0 {
				t.Errorf("udp link: %+v", st)
			}
			if st := et.Stats(); st.RxTooLarge != 0 || st.TxRejected != 0 {
				t.Errorf("tun link: %+v", st)
			}
			t.Logf("tun %+v", et.Stats())
		})
	}
}

// TestHCAOverTAP runs two goroce HCAs on two TAPs enslaved to one Linux
// bridge in a fresh namespace, with RoCEv1 (Ethernet + GRH, bridged, not
// routable) and with RoCEv2 over IPv4 and over IPv6. goroce answers no ARP
// or neighbour solicitation, so the next-hop MACs come from a static
// resolver.
func TestHCAOverTAP(t *testing.T) {
	for _, c := range []struct {
		name   string
		v1     bool
		a, b   string
		etherT uint16 // the ethertype every RoCE frame must carry
	}{
		{"RoCEv1", true, "10.71.3.2/24", "10.71.3.3/24", wire.EtherTypeRoCEv1},
		{"RoCEv2-IPv4", false, "10.71.3.2/24", "10.71.3.3/24", wire.EtherTypeIPv4},
		{"RoCEv2-IPv6", false, "fd71::2/64", "fd71::3/64", wire.EtherTypeIPv6},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := newNS(t)
			newBridge(t, ns, "br71")
			ea, eb := openTAPs(t, ns, pfx(c.a), pfx(c.b))
			res := staticResolver{
				ea.Addrs()[0]: ea.HardwareAddr(),
				eb.Addrs()[0]: eb.HardwareAddr(),
			}
			ca, cb := &etherCount{Endpoint: ea, want: c.etherT}, &etherCount{Endpoint: eb, want: c.etherT}
			da := openHCA(t, ca, hca.Options{Name: "tapA", RoCEv1: c.v1, Resolver: res})
			db := openHCA(t, cb, hca.Options{Name: "tapB", RoCEv1: c.v1, Resolver: res})
			// Over IPv6 the pair uses GID index 0, the link-local GID made
			// from the MAC, as rxe users do with -g 0.
			for _, g := range da.GIDs() {
				res[g.GID.Addr()] = ea.HardwareAddr()
			}
			for _, g := range db.GIDs() {
				res[g.GID.Addr()] = eb.HardwareAddr()
			}
			runChecks(t, da, db, bth.MTU1024)
			runChecks(t, db, da, bth.MTU4096)
			for _, e := range []*etherCount{ca, cb} {
				if e.match.Load() == 0 || e.rest.Load() != 0 {
					t.Errorf("frames written: %d with ethertype %#04x, %d others", e.match.Load(), c.etherT, e.rest.Load())
				}
			}
			for _, e := range []*Endpoint{ea, eb} {
				if st := e.Stats(); st.RxTooLarge != 0 || st.TxRejected != 0 || st.TxErrors != 0 || st.RxErrors != 0 {
					t.Errorf("%s: %+v", e.Name(), st)
				}
			}
		})
	}
}

// openTAPs opens two TAPs in ns with goroce's addresses pa and pb and
// enslaves them to the bridge br71 (newBridge).
func openTAPs(t testing.TB, ns *netcfg.NetNS, pa, pb netip.Prefix) (a, b *Endpoint) {
	t.Helper()
	a = openIn(t, ns, Config{Mode: TAP, Addr: pa})
	b = openIn(t, ns, Config{Mode: TAP, Addr: pb})
	enslave(t, ns, "br71", a.Name())
	enslave(t, ns, "br71", b.Name())
	return a, b
}

// raceUDP tells the race detector about the kernel handoff between the
// UDP link and the TUN, as the TUN's own Read and Write do (race_on.go);
// embedding keeps udp.Endpoint's SourcePort (link.SourcePorter).
type raceUDP struct{ *udp.Endpoint }

func (r raceUDP) Write(bufs [][]byte, offset int) (int, error) {
	raceRelease()
	return r.Endpoint.Write(bufs, offset)
}

func (r raceUDP) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := r.Endpoint.Read(bufs, sizes, offset)
	if n > 0 {
		raceAcquire()
	}
	return n, err
}

// etherCount counts the frames written through it with ethertype want and
// with any other, to show which encapsulation went over the wire.
type etherCount struct {
	link.Endpoint
	want        uint16
	match, rest atomic.Int64
}

func (c *etherCount) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		if wire.Ethernet(b[offset:]).EtherType() == c.want {
			c.match.Add(1)
		} else {
			c.rest.Add(1)
		}
	}
	return c.Endpoint.Write(bufs, offset)
}

type staticResolver map[netip.Addr]net.HardwareAddr

func (r staticResolver) Resolve(dst netip.Addr) (net.HardwareAddr, error) {
	if m, ok := r[dst.Unmap()]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("no MAC for %v", dst)
}
