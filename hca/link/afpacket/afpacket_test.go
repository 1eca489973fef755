package afpacket

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
)

// openPair opens an endpoint on each end of a fresh veth pair.
func openPair(t testing.TB, opts netcfg.TwoHostsOptions) (a, b *Endpoint, h *netcfg.Hosts) {
	t.Helper()
	h = netcfg.TwoHosts(t, opts)
	var err error
	if a, err = Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS}); err != nil {
		t.Fatal(err)
	}
	if b, err = Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS}); err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, h
}

func TestLinktest(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		a, b, _ := openPair(t, netcfg.TwoHostsOptions{})
		needRing(t, a)
		needRing(t, b)
		return a, b
	})
}

func TestLinktestJumbo(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		a, b, _ := openPair(t, netcfg.TwoHostsOptions{MTU: 9000})
		if a.MTU() != 9000 {
			t.Fatalf("MTU %d, want the interface's 9000", a.MTU())
		}
		return a, b
	})
}

func TestProperties(t *testing.T) {
	a, _, h := openPair(t, netcfg.TwoHostsOptions{IPv6: true, MTU: 4200})
	if a.MTU() != 4200 || a.Format() != link.FormatEthernet || a.BatchSize() != link.IdealBatchSize || a.Interface() != "veth-a" {
		t.Fatalf("MTU %d format %v batch %d", a.MTU(), a.Format(), a.BatchSize())
	}
	if a.HardwareAddr().String() != h.A.MAC.String() {
		t.Fatalf("HardwareAddr %v, want %v", a.HardwareAddr(), h.A.MAC)
	}
	got := a.Addrs()
	if len(got) < 2 || got[0] != h.A.Addr || got[1] != h.A.Addr6 {
		t.Fatalf("Addrs %v, want [%v %v ...]", got, h.A.Addr, h.A.Addr6)
	}
	if st := a.Stats(); st.HeldPorts != len(got) {
		t.Fatalf("held UDP 4791 on %d of %d addresses", st.HeldPorts, len(got))
	}
	// Config.Addrs restricts.
	e, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, Addrs: []netip.Addr{h.A.Addr6}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if as := e.Addrs(); len(as) != 1 || as[0] != h.A.Addr6 {
		t.Fatalf("restricted Addrs = %v", as)
	}
	// The port is held by a already: a second endpoint leaves it alone.
	if st := e.Stats(); st.HeldPorts != 0 {
		t.Fatalf("second endpoint holds %d ports, want 0 (a holds them)", st.HeldPorts)
	}
}

func TestOpenErrors(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	if err := netcfg.SetDown(h.B.NS, h.B.Ifname); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		is   error
		msg  string
	}{
		{"missing", Config{Interface: "nosuch0", NetNS: h.A.NS}, netcfg.ErrNoInterface,
			`afpacket: interface "nosuch0": no such network interface`},
		{"down", Config{Interface: h.B.Ifname, NetNS: h.B.NS}, ErrInterfaceDown,
			"afpacket: veth-b: interface is down (ip link set veth-b up)"},
		{"address", Config{Interface: h.A.Ifname, NetNS: h.A.NS, Addrs: []netip.Addr{netip.MustParseAddr("10.1.2.3")}},
			ErrAddrNotOnInterface, "afpacket: 10.1.2.3: address is not on the interface veth-a (it has 10.99.0.1"},
		{"empty", Config{NetNS: h.A.NS}, nil, "afpacket: no interface given"},
		{"batch", Config{Interface: h.A.Ifname, NetNS: h.A.NS, BatchSize: 5000}, nil, "afpacket: batch size 5000 over 1024"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Open(tc.cfg)
			if err == nil {
				e.Close()
				t.Fatal("Open succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.HasPrefix(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line starting %q", err, tc.msg)
			}
		})
	}
}

// TestNoICMP checks that the kernel does not answer received RoCEv2 frames
// with ICMP port unreachable while an endpoint holds UDP 4791, and that
// the check can fail: with the endpoint closed, ICMP does come back.
func TestNoICMP(t *testing.T) {
	a, b, h := openPair(t, netcfg.TwoHostsOptions{})
	var icmp int
	h.A.Do(t, func() (err error) {
		icmp, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		return err
	})
	defer unix.Close(icmp)
	unix.SetsockoptTimeval(icmp, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000})
	unreachable := func() bool {
		buf := make([]byte, 1500)
		for {
			n, err := unix.Read(icmp, buf)
			if err != nil {
				return false
			}
			ihl := int(buf[0]&0xF) * 4
			if n >= ihl+2 && buf[ihl] == 3 && buf[ihl+1] == 3 { // destination/port unreachable
				return true
			}
		}
	}
	send := func() {
		f, err := linktest.Frame(a, b, 5, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([][]byte{f}, 0); err != nil {
			t.Fatal(err)
		}
	}
	send()
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	n, err := b.Read(bufs, sizes, 0)
	wd.Stop()
	if err != nil {
		t.Fatal(wd.Err(err, 0, 1))
	}
	if n != 1 {
		t.Fatalf("Read = %d", n)
	}
	if unreachable() {
		t.Fatal("ICMP port unreachable for a RoCEv2 frame while UDP 4791 is held")
	}
	b.Close()
	send()
	if !unreachable() {
		t.Fatal("no ICMP port unreachable with the port free: the check above proves nothing")
	}
}

// TestReadTruncated checks drop-and-count of frames larger than the buffer
// and that later frames in the same batch move up.
func TestReadTruncated(t *testing.T) {
	a, b, _ := openPair(t, netcfg.TwoHostsOptions{})
	var frames [][]byte
	for i, size := range []int{16, 900, 32, 900, 48} {
		f, err := linktest.Frame(a, b, bth.PSN(0x10+i), size)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	if n, err := a.Write(frames, 0); n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	time.Sleep(50 * time.Millisecond) // all five queued: one recvmmsg sees them
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 200)
	}
	sizes := make([]int, 8)
	got := 0
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	for got < 3 {
		n, err := b.Read(bufs[got:], sizes[got:], 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, 3))
		}
		got += n
	}
	for i, want := range [][]byte{frames[0], frames[2], frames[4]} {
		if !linktest.Equivalent(bufs[i][:sizes[i]], want, link.FormatEthernet) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if st := b.Stats(); st.RxTooLarge != 2 || st.RxFrames != 3 {
		t.Fatalf("stats %+v, want 2 too large and 3 delivered", st)
	}
}

// link.Poller (linktest.Poller): what busy polling (hca.Options.BusyPoll)
// reads through.
func TestPoller(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b, _ := openPair(t, netcfg.TwoHostsOptions{})
	needRing(t, b)
	linktest.Poller(t, a, b)
}
