//go:build linux

package tun

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// hairpin is one namespace with one TUN whose subnet also holds a second,
// absent host (.3): with forwarding on, what the endpoint writes to .3 the
// kernel routes straight back into the same device, so one endpoint reads
// its own frames after a real trip through the kernel (TTL minus one).
type hairpin struct {
	ns   *netcfg.NetNS
	e    *Endpoint
	peer *Endpoint // an endpoint-shaped stand-in for the absent .3 host (addresses only)
}

func newHairpin(t testing.TB, mod func(*Config)) *hairpin {
	t.Helper()
	ns := newNS(t)
	sysctl(t, ns, "net/ipv4/ip_forward", "1")
	for _, k := range []string{"all", "default"} {
		sysctl(t, ns, "net/ipv4/conf/"+k+"/send_redirects", "0")
		sysctl(t, ns, "net/ipv4/conf/"+k+"/rp_filter", "0")
	}
	cfg := Config{Addr: pfx("10.71.1.2/24"), KernelAddr: pfx("10.71.1.1/24")}
	if mod != nil {
		mod(&cfg)
	}
	h := &hairpin{ns: ns, e: openIn(t, ns, cfg)}
	// Frames are built by linktest.Frame from two endpoints' addresses;
	// the peer is a closed endpoint value that only answers Addrs/Format.
	h.peer = &Endpoint{format: link.FormatIP, addrs: []netip.Addr{netip.MustParseAddr("10.71.1.3")}}
	return h
}

func (h *hairpin) frame(t testing.TB, psn bth.PSN, payload int) []byte {
	t.Helper()
	f, err := linktest.Frame(h.e, h.peer, psn, payload)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// readOne reads one frame with a deadline (the endpoint is closed if none
// comes).
func readOne(t testing.TB, e *Endpoint, buf []byte) []byte {
	t.Helper()
	wd := linktest.NewWatchdog(linktest.Timeout, e)
	defer wd.Stop()
	sizes := []int{0}
	n, err := e.Read([][]byte{buf}, sizes, 0)
	if err != nil {
		t.Fatal(wd.Err(err, 0, 1))
	}
	if n != 1 {
		t.Fatalf("Read = %d", n)
	}
	return buf[:sizes[0]]
}

// offloadModes runs a test with the default offloads and with NoOffload.
func offloadModes(t *testing.T, fn func(t *testing.T, mod func(*Config))) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoOffload=%v", off), func(t *testing.T) {
			fn(t, func(c *Config) { c.NoOffload = off })
		})
	}
}

func TestHairpin(t *testing.T) { offloadModes(t, testHairpin) }

func testHairpin(t *testing.T, mod func(*Config)) {
	h := newHairpin(t, mod)
	f := h.frame(t, 9, 100)
	if n, err := h.e.Write([][]byte{f}, 0); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := readOne(t, h.e, make([]byte, 2048))
	if !linktest.Equivalent(got, f, link.FormatIP) || got[8] != f[8]-1 {
		t.Fatalf("got %x\nwant %x (TTL one less)", got, f)
	}
	var p wire.Packet
	if err := p.Decode(got, wire.FramingIP); err != nil {
		t.Fatalf("forwarded frame: %v", err)
	}
}

func TestWriteRejects(t *testing.T) {
	h := newHairpin(t, func(c *Config) { c.BatchSize = 4 })
	good := h.frame(t, 1, 16)
	big := append(slices.Clone(good), make([]byte, DefaultMTU)...)
	notIP := slices.Clone(good)
	notIP[0] = 0x55
	tests := []struct {
		name  string
		bufs  [][]byte
		off   int
		wantN int
		want  error
	}{
		{"not ip", [][]byte{notIP}, 0, 0, ErrBadFrame},
		{"short", [][]byte{good[:19]}, 0, 0, ErrBadFrame},
		{"ipv6 short", [][]byte{append([]byte{0x60}, good[1:39]...)}, 0, 0, ErrBadFrame},
		{"empty", [][]byte{{}}, 0, 0, ErrBadFrame},
		{"offset past end", [][]byte{good}, len(good) + 1, 0, ErrBadFrame},
		{"negative offset", [][]byte{good}, -1, 0, ErrBadFrame},
		{"over mtu after good", [][]byte{good, big}, 0, 1, link.ErrFrameTooLarge},
		{"batch too big", [][]byte{good, good, good, good, good}, 0, 0, nil},
	}
	for _, tc := range tests {
		n, err := h.e.Write(tc.bufs, tc.off)
		if n != tc.wantN || err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Write = %d, %v; want %d, %v", tc.name, n, err, tc.wantN, tc.want)
		}
	}
	if st := h.e.Stats(); st.TxRejected != 7 || st.TxFrames != 1 {
		t.Errorf("stats %+v; want 7 rejected, 1 sent", st)
	}
	// The one good frame made the round trip.
	if got := readOne(t, h.e, make([]byte, 2048)); !linktest.Equivalent(got, good, link.FormatIP) {
		t.Fatalf("got %x", got)
	}
}

func TestTAPWriteRejects(t *testing.T) {
	ns := newNS(t)
	e := openIn(t, ns, Config{Mode: TAP, Addr: pfx("10.71.3.2/24")})
	ok := make([]byte, wire.EthernetLen+DefaultMTU)
	ok[12], ok[13] = 0x08, 0x00
	tagged := make([]byte, wire.EthernetLen+wire.VLANLen+DefaultMTU)
	tagged[12], tagged[13], tagged[16], tagged[17] = 0x81, 0x00, 0x08, 0x00
	for _, tc := range []struct {
		name string
		f    []byte
		want error
	}{
		{"short", ok[:13], ErrBadFrame},
		{"tag cut", tagged[:17], ErrBadFrame},
		{"over mtu", append(slices.Clone(ok), 0), link.ErrFrameTooLarge},
		{"tagged over mtu", append(slices.Clone(tagged), 0), link.ErrFrameTooLarge},
		{"mtu", ok, nil},
		{"tagged mtu", tagged, nil},
	} {
		n, err := e.Write([][]byte{tc.f}, 0)
		if tc.want == nil {
			if n != 1 || err != nil {
				t.Errorf("%s: Write = %d, %v", tc.name, n, err)
			}
		} else if n != 0 || !errors.Is(err, tc.want) {
			t.Errorf("%s: Write = %d, %v; want %v", tc.name, n, err, tc.want)
		}
	}
}

// TestReadFilterAndCounters has a kernel UDP socket send into the TUN: a
// datagram to another port is not RoCE (dropped, RxNotRoCE), one to 4791
// longer than the reader's buffer is dropped whole (RxTooLarge), and the
// next one is delivered.
func TestReadFilterAndCounters(t *testing.T) { offloadModes(t, testReadFilterAndCounters) }

func testReadFilterAndCounters(t *testing.T, mod func(*Config)) {
	ns := newNS(t)
	cfg := Config{Addr: pfx("10.71.1.2/24"), KernelAddr: pfx("10.71.1.1/24")}
	mod(&cfg)
	e := openIn(t, ns, cfg)
	send := func(port uint16, n int) {
		t.Helper()
		err := ns.Do(func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(e.Addrs()[0], port)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(bytes.Repeat([]byte{byte(n)}, n))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(9, 10)
	send(wire.RoCEv2Port, 500)
	send(wire.RoCEv2Port, 20)
	got := readOne(t, e, make([]byte, 200))
	if len(got) != 20+wire.IPv4Len+wire.UDPLen || got[len(got)-1] != 20 {
		t.Fatalf("read %d bytes %x; want the 20-byte datagram", len(got), got)
	}
	if st := e.Stats(); st.RxNotRoCE < 1 || st.RxTooLarge != 1 || st.RxFrames != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDevice checks what Open leaves in the kernel and that Close removes
// the device.
func TestDevice(t *testing.T) {
	ns := newNS(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"tun", Config{Name: "grtun0", Addr: pfx("10.71.1.2/24"), KernelAddr: pfx("10.71.1.1/24"), MTU: 1500,
			Routes: []netip.Prefix{pfx("10.72.0.0/16")}}},
		{"tun6", Config{Name: "grtun1", Addr: pfx("fd71:1::2/64"), KernelAddr: pfx("fd71:1::1/64")}},
		{"tap", Config{Name: "grtap0", Mode: TAP, Addr: pfx("10.71.3.2/24"), MTU: 9000}},
		{"raw", Config{Name: "grtun2", Addr: pfx("10.71.4.2/24"), KernelAddr: pfx("10.71.4.1/24"), NoConfigure: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := openIn(t, ns, tc.cfg)
			if e.Name() != tc.cfg.Name {
				t.Errorf("Name %q", e.Name())
			}
			var l netcfg.Link
			var addrs []netip.Addr
			if err := ns.Do(func() (err error) {
				if l, err = netcfg.LinkByName(e.Name()); err != nil {
					return err
				}
				addrs, err = netcfg.Addrs(e.Name())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if tc.cfg.NoConfigure {
				if l.Up || len(addrs) != 0 {
					t.Errorf("NoConfigure: link %+v, addresses %v", l, addrs)
				}
			} else {
				if !l.Up || l.MTU != e.MTU() {
					t.Errorf("link %+v; want up, MTU %d", l, e.MTU())
				}
				if tc.cfg.KernelAddr.IsValid() && !slices.Contains(addrs, tc.cfg.KernelAddr.Addr()) {
					t.Errorf("addresses %v lack the kernel's %v", addrs, tc.cfg.KernelAddr)
				}
				if slices.Contains(addrs, e.Addrs()[0]) {
					t.Errorf("the goroce host's address %v is on the kernel side: %v", e.Addrs()[0], addrs)
				}
			}
			if tc.cfg.Mode == TAP {
				if e.Format() != link.FormatEthernet || len(e.HardwareAddr()) != 6 || bytes.Equal(e.HardwareAddr(), l.HardwareAddr) {
					t.Errorf("TAP format %v, host MAC %v, device MAC %v", e.Format(), e.HardwareAddr(), l.HardwareAddr)
				}
			} else if e.Format() != link.FormatIP || e.HardwareAddr() != nil {
				t.Errorf("TUN format %v, MAC %v", e.Format(), e.HardwareAddr())
			}
			// A second device of the same name fails cleanly.
			var dup *Endpoint
			if err := ns.Do(func() (err error) { dup, err = Open(tc.cfg); return err }); err == nil {
				dup.Close()
				t.Error("second Open of the same name succeeded")
			} else {
				if !errors.Is(err, netcfg.ErrExists) {
					t.Errorf("second Open: %v; want netcfg.ErrExists", err)
				}
			}
			e.Close()
			err := ns.Do(func() error { _, err := netcfg.LinkByName(tc.cfg.Name); return err })
			if !errors.Is(err, netcfg.ErrNoInterface) {
				t.Errorf("after Close: %v; want the device gone", err)
			}
		})
	}
}

// TestOpenMappedAddrs: IPv4-mapped Addr and KernelAddr are configured as
// the IPv4 addresses they stand for (a mapped KernelAddr used to reach
// netcfg as an IPv4 address with a /120 prefix, and netlink panicked).
func TestOpenMappedAddrs(t *testing.T) {
	ns := newNS(t)
	e := openIn(t, ns, Config{Addr: pfx("::ffff:10.71.5.2/120"), KernelAddr: pfx("::ffff:10.71.5.1/120")})
	var addrs []netip.Addr
	must(t, ns.Do(func() (err error) { addrs, err = netcfg.Addrs(e.Name()); return err }))
	if want := netip.MustParseAddr("10.71.5.1"); !slices.Contains(addrs, want) {
		t.Errorf("kernel addresses %v lack %v", addrs, want)
	}
	if got := e.Addrs(); len(got) != 1 || got[0] != netip.MustParseAddr("10.71.5.2") {
		t.Errorf("Addrs = %v; want [10.71.5.2]", got)
	}
}

// TestZeroAllocs: a Write and a Read of a batch through the kernel allocate
// nothing.
func TestZeroAllocs(t *testing.T) { offloadModes(t, testZeroAllocs) }

func testZeroAllocs(t *testing.T, mod func(*Config)) {
	h := newHairpin(t, mod)
	frames := make([][]byte, 8)
	for i := range frames {
		frames[i] = h.frame(t, bth.PSN(i), 256)
	}
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, h.e) // a lost frame fails, never hangs
	defer wd.Stop()
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := h.e.Write(frames, 0); n != len(frames) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		for got := 0; got < len(frames); {
			n, err := h.e.Read(bufs, sizes, 0)
			if err != nil {
				t.Fatal(wd.Err(err, got, len(frames)))
			}
			got += n
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Write+Read of %d frames", allocs, len(frames))
	}
}

// persistent makes a persistent device (what `ip tuntap add` does:
// TUNSETIFF, TUNSETPERSIST, close) inside ns.
func persistent(t *testing.T, ns *netcfg.NetNS, name string, mode Mode) {
	t.Helper()
	err := ns.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if mode == TAP {
			flags = unix.IFF_TAP | unix.IFF_NO_PI
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		return unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1)
	})
	if err != nil {
		t.Fatalf("persistent %s %s: %v", mode, name, err)
	}
}

// TestAttach opens existing persistent devices (Config.Attach): the MTU is
// the device's, nothing is configured, traffic flows, and the device
// outlives the endpoint. Attaching to a missing device, one of the other
// mode or a non-TUN interface fails with a clear error.
func TestAttach(t *testing.T) {
	ns := newNS(t)
	persistent(t, ns, "grptun0", TUN)
	persistent(t, ns, "grptap0", TAP)
	if err := netcfg.SetMTU(ns, "grptun0", 1400); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"grptun0", "grptap0"} {
		if err := netcfg.SetUp(ns, dev); err != nil {
			t.Fatal(err)
		}
	}
	// Configure the TUN by hand, as an admin would, for a hairpin: the
	// kernel routes frames to the absent .3 back into the device.
	sysctl(t, ns, "net/ipv4/ip_forward", "1")
	for _, k := range []string{"all", "default"} {
		sysctl(t, ns, "net/ipv4/conf/"+k+"/send_redirects", "0")
		sysctl(t, ns, "net/ipv4/conf/"+k+"/rp_filter", "0")
	}
	must(t, netcfg.AddAddr(ns, "grptun0", pfx("10.71.9.1/24")))
	e := openIn(t, ns, Config{Name: "grptun0", Addr: pfx("10.71.9.2/32"), Attach: true})
	if e.MTU() != 1400 || e.Name() != "grptun0" || e.Format() != link.FormatIP {
		t.Fatalf("attached: MTU %d name %q format %v; want 1400, grptun0, IP", e.MTU(), e.Name(), e.Format())
	}
	peer := &Endpoint{format: link.FormatIP, addrs: []netip.Addr{netip.MustParseAddr("10.71.9.3")}}
	f, err := linktest.Frame(e, peer, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.Write([][]byte{f}, 0); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := readOne(t, e, make([]byte, 2048)); !linktest.Equivalent(got, f, link.FormatIP) {
		t.Fatal("the hairpinned frame differs")
	}
	tap := openIn(t, ns, Config{Name: "grptap0", Mode: TAP, Addr: pfx("10.71.8.2/24"), Attach: true})
	if tap.Format() != link.FormatEthernet || tap.MTU() != 1500 {
		t.Fatalf("attached TAP: format %v MTU %d", tap.Format(), tap.MTU())
	}
	e.Close()
	tap.Close()
	for _, dev := range []string{"grptun0", "grptap0"} {
		if err := ns.Do(func() error { _, err := netcfg.LinkByName(dev); return err }); err != nil {
			t.Errorf("%s gone after Close: %v", dev, err)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		is   error
		msg  string
	}{
		{"missing", Config{Name: "grnosuch0", Addr: pfx("10.71.9.2/32"), Attach: true}, netcfg.ErrNoInterface, "grnosuch0"},
		{"tun as tap", Config{Name: "grptun0", Mode: TAP, Addr: pfx("10.71.9.2/32"), Attach: true}, ErrBadConfig, `"grptun0" is a tun device, not tap`},
		{"tap as tun", Config{Name: "grptap0", Addr: pfx("10.71.9.2/32"), Attach: true}, ErrBadConfig, `"grptap0" is a tap device, not tun`},
		{"not tuntap", Config{Name: "lo", Addr: pfx("10.71.9.2/32"), Attach: true}, ErrBadConfig, "not TUN/TAP"},
		{"no name", Config{Addr: pfx("10.71.9.2/32"), Attach: true}, ErrBadConfig, "Attach needs the device Name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ns.Do(func() error {
				e, err := Open(tc.cfg)
				if err == nil {
					e.Close()
				}
				return err
			})
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Open = %v; want %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
}
