//go:build linux

package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/netcfg"
)

func skipUnlessRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (TUN/TAP devices, network namespaces)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN/TAP support: %v", err)
	}
}

// newNS creates a fresh network namespace (lo up), closed at cleanup.
func newNS(t testing.TB) *netcfg.NetNS {
	t.Helper()
	skipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// sysctl writes /proc/sys/<key> (dots become slashes) inside ns: net
// sysctls belong to the namespace of the writer.
func sysctl(t testing.TB, ns *netcfg.NetNS, key, value string) {
	t.Helper()
	p := filepath.Join("/proc/sys", filepath.FromSlash(dotsToSlashes(key)))
	if err := ns.Do(func() error { return os.WriteFile(p, []byte(value), 0) }); err != nil {
		t.Fatalf("sysctl %s=%s: %v", key, value, err)
	}
}

func dotsToSlashes(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '.' {
			b[i] = '/'
		}
	}
	return string(b)
}

// openIn opens a device inside ns; it is closed at cleanup.
func openIn(t testing.TB, ns *netcfg.NetNS, cfg Config) *Endpoint {
	t.Helper()
	var e *Endpoint
	if err := ns.Do(func() (err error) { e, err = Open(cfg); return err }); err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// routed is the two-host topology of the package documentation: host A's
// TUN in namespace A, host B's in namespace B, the namespaces joined by a
// veth and forwarding IP. A's packets: fd → tunA → nsA routes → veth → nsB
// routes → tunB → fd.
type routed struct {
	A, B   *netcfg.NetNS
	CA, CB Config // device configurations (Addr: the goroce host)
}

// plan holds the addresses of one family.
type plan struct {
	vethA, vethB   netip.Prefix // the veth ends (A, B)
	hostA, kernelA netip.Prefix // goroce host A, kernel side of tunA
	hostB, kernelB netip.Prefix
}

var plans = map[bool]plan{
	false: {
		vethA: pfx("10.71.0.1/30"), vethB: pfx("10.71.0.2/30"),
		hostA: pfx("10.71.1.2/24"), kernelA: pfx("10.71.1.1/24"),
		hostB: pfx("10.71.2.2/24"), kernelB: pfx("10.71.2.1/24"),
	},
	true: {
		vethA: pfx("fd71::1/64"), vethB: pfx("fd71::2/64"),
		hostA: pfx("fd71:1::2/64"), kernelA: pfx("fd71:1::1/64"),
		hostB: pfx("fd71:2::2/64"), kernelB: pfx("fd71:2::1/64"),
	},
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// newRouted builds the namespaces, the veth (with the given MTU) and the
// routes; the TUNs are opened per test with CA and CB.
func newRouted(t testing.TB, v6 bool, mtu int) *routed {
	t.Helper()
	p := plans[v6]
	r := &routed{A: newNS(t), B: newNS(t)}
	for _, ns := range []*netcfg.NetNS{r.A, r.B} {
		if v6 {
			sysctl(t, ns, "net.ipv6.conf.all.forwarding", "1")
		} else {
			sysctl(t, ns, "net.ipv4.ip_forward", "1")
			sysctl(t, ns, "net.ipv4.conf.all.rp_filter", "0")
			sysctl(t, ns, "net.ipv4.conf.default.rp_filter", "0")
		}
	}
	if err := netcfg.VethPair("va", "vb", r.A, r.B, mtu); err != nil {
		t.Fatal(err)
	}
	must(t, netcfg.AddAddr(r.A, "va", p.vethA))
	must(t, netcfg.AddAddr(r.B, "vb", p.vethB))
	must(t, netcfg.AddRoute(r.A, p.hostB.Masked(), p.vethB.Addr(), ""))
	must(t, netcfg.AddRoute(r.B, p.hostA.Masked(), p.vethA.Addr(), ""))
	r.CA = Config{Addr: p.hostA, KernelAddr: p.kernelA, MTU: mtu}
	r.CB = Config{Addr: p.hostB, KernelAddr: p.kernelB, MTU: mtu}
	r.warm(t, v6)
	return r
}

// open opens both TUNs (with mod applied to both configurations).
func (r *routed) open(t testing.TB, mod func(*Config)) (a, b *Endpoint) {
	t.Helper()
	ca, cb := r.CA, r.CB
	if mod != nil {
		mod(&ca)
		mod(&cb)
	}
	return openIn(t, r.A, ca), openIn(t, r.B, cb)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// warm resolves the neighbours on the veth both ways before a test sends
// RoCE frames: while a neighbour is unresolved the kernel queues only a few
// packets per neighbour and drops the rest, which a lossless-link test must
// not see. A UDP datagram to the discard port of the other end comes back
// as ICMP port unreachable only after both ends resolved each other.
func (r *routed) warm(t testing.TB, v6 bool) {
	t.Helper()
	p := plans[v6]
	for _, w := range []struct {
		ns  *netcfg.NetNS
		dst netip.Addr
	}{{r.A, p.vethB.Addr()}, {r.B, p.vethA.Addr()}} {
		err := w.ns.Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(w.dst, 9)))
			if err != nil {
				return err
			}
			defer c.Close()
			buf := make([]byte, 16)
			for range 50 {
				if _, err := c.Write(buf); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
					return err
				}
				c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := c.Read(buf); errors.Is(err, syscall.ECONNREFUSED) {
					return nil
				}
			}
			return fmt.Errorf("no ICMP port unreachable from %v in 5 s", w.dst)
		})
		if err != nil {
			t.Fatalf("resolving the veth neighbours: %v", err)
		}
	}
}
