package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

func mustFrames(t testing.TB, a, b link.Endpoint, psn0, n, payload int) [][]byte {
	t.Helper()
	fs := make([][]byte, n)
	for i := range fs {
		f, err := linktest.Frame(a, b, bth.PSN(psn0+i), payload)
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	return fs
}

// TestKernelIPIDZero checks the premise of the send path (wire-spec §14): an
// unconnected UDP socket with IP_PMTUDISC_DO sends DF and IP ID 0, as seen by
// an independent raw socket.
func TestKernelIPIDZero(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	var raw int
	ns.do(t, func() {
		a, b = openPair0(t, "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoGSO, c.NoConnect = true, true })
		var err error
		raw, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP)
		if err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer b.Close()
	defer unix.Close(raw)
	unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	if _, err := a.Write(mustFrames(t, a, b, 0, 5, 100), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	var p wire.Packet
	for i := 0; i < 5; {
		n, _, err := unix.Recvfrom(raw, buf, 0)
		if err != nil {
			t.Fatalf("raw socket: %v", err)
		}
		h := wire.IPv4(buf[:n])
		if h.Dst() != netip.MustParseAddr("127.0.0.2") {
			continue
		}
		if h.ID() != 0 || !h.DontFragment() {
			t.Errorf("datagram %d: IP ID %d, DF %v; want 0, true", i, h.ID(), h.DontFragment())
		}
		if err := p.Decode(buf[:n], wire.FramingIP); err != nil {
			t.Errorf("datagram %d as received: %v", i, err)
		}
		i++
	}
}

// TestGSOSegmentIPIDs sends a GSO run through a TUN device without offloads,
// so the kernel really segments it, and reads the segments from the TUN fd:
// it measures the IP IDs the kernel gives the segments (0, 1, 2, ... on
// Linux 6.x for UDP_L4 GSO from the unconnected socket; from a connected
// socket, its counter and on) and checks that every segment's ICRC verifies.
// The connected case then sends a datagram and another run, whose IDs must
// follow on (conn.go).
func TestGSOSegmentIPIDs(t *testing.T) {
	for _, connected := range []bool{false, true} {
		name := "unconnected"
		if connected {
			name = "connected"
		}
		t.Run(name, func(t *testing.T) { testGSOSegmentIPIDs(t, connected) })
	}
}

func testGSOSegmentIPIDs(t *testing.T, connected bool) {
	tun, a := tunEndpoint(t, "10.99.0.1", connected)
	// The peer address only needs to exist for linktest.Frame.
	peer := &fakePeer{addr: netip.MustParseAddr("10.99.0.2")}
	const n = 10
	frames := make([][]byte, n)
	for i := range frames {
		size := 1024
		if i == n-1 {
			size = 200
		}
		f, err := linktest.Frame(a, peer, bth.PSN(100+i), size)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	if w, err := a.Write(frames, 0); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	st := a.Stats()
	if st.TxGSOBatches != 1 || st.TxGSOSegments != n {
		t.Fatalf("send stats %+v; want one %d-segment GSO batch", st, n)
	}
	if connected {
		if st.ConnsOpened != 1 || st.TxConnected != n {
			t.Fatalf("send stats %+v (ConnErr %v); want %d frames through 1 connected socket", st, a.ConnErr(), n)
		}
		// A datagram and a second run through the same socket.
		if w, err := a.Write(frames[n-1:], 0); w != 1 || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
		if w, err := a.Write(frames, 0); w != n || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
		frames = append(append(frames, frames[n-1]), frames...)
	} else if st.TxICRCPatched != n-1 {
		t.Fatalf("send stats %+v; want %d ICRCs patched", st, n-1)
	}
	buf := make([]byte, 65536)
	var p wire.Packet
	deadline := time.Now().Add(linktest.Timeout)
	var base uint16
	for i := 0; i < len(frames); {
		f := readTUN(t, tun, buf, false, deadline)
		h := wire.IPv4(f)
		if len(f) != len(frames[i]) {
			t.Fatalf("segment %d: %d bytes, want %d (not segmented?)", i, len(f), len(frames[i]))
		}
		if i == 0 && connected {
			base = h.ID() // the socket's counter: random
		}
		// The kernel advances a connected socket's counter by one per skb,
		// so the datagram after a 10-segment run has the run's second ID.
		want := base + uint16(i)
		if i > n {
			want = base + 2 + uint16(i-n-1) // the second run, after the datagram
		} else if i == n {
			want = base + 1
		}
		if h.ID() != want {
			t.Errorf("segment %d: IP ID %d, want %d", i, h.ID(), want)
		}
		if err := p.Decode(f, wire.FramingIP); err != nil {
			t.Errorf("segment %d (IP ID %d): %v", i, h.ID(), err)
		}
		if !linktest.Equivalent(f, frames[i], link.FormatIP) {
			t.Errorf("segment %d differs from frame %d", i, i)
		}
		i++
	}
}

// tunEndpoint opens an endpoint on addr (10.99.0.1 or fd99::1) of a fresh
// namespace's TUN device rocetun0 (MTU 9000, the rest of the /24 or /64
// routed into it) and returns the TUN's non-blocking fd, from which the
// test reads what the kernel sent. It skips when there is no TUN device
// or no UDP GSO.
func tunEndpoint(t *testing.T, addr string, connected bool) (int, *Endpoint) {
	t.Helper()
	ns := newNetNS(t)
	var tun int
	var a *Endpoint
	ns.do(t, func() {
		var err error
		tun, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Skipf("no TUN device: %v", err)
		}
		var ifr [unix.IFNAMSIZ + 64]byte
		copy(ifr[:], "rocetun0")
		binary.NativeEndian.PutUint16(ifr[unix.IFNAMSIZ:], unix.IFF_TUN|unix.IFF_NO_PI)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(tun), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			t.Fatalf("TUNSETIFF: %v", e)
		}
		l, err := netlink.LinkByName("rocetun0")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetMTU(l, 9000); err != nil {
			t.Fatal(err)
		}
		ip := netip.MustParseAddr(addr)
		bits := 24
		if ip.Is6() {
			bits = 64
		}
		nl := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, ip.BitLen())}}
		if ip.Is6() {
			nl.Flags = unix.IFA_F_NODAD // usable at once
		}
		if err := netlink.AddrAdd(l, nl); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		a, err = Open(Config{Addr: ip, NoConnect: !connected})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { a.Close(); unix.Close(tun) })
	if !a.GSO() {
		t.Skip("kernel has no UDP_SEGMENT")
	}
	return tun, a
}

// readTUN reads the next UDP packet of family v6 the kernel routed into
// tun, failing the test at deadline.
func readTUN(t *testing.T, tun int, buf []byte, v6 bool, deadline time.Time) []byte {
	t.Helper()
	for {
		// The fd is non-blocking: wait for it with a timeout, so a
		// packet that never comes fails the test instead of hanging it.
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %v reading the TUN device", linktest.Timeout)
		}
		pfd := []unix.PollFd{{Fd: int32(tun), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			t.Fatalf("poll: %v", err)
		}
		k, err := unix.Read(tun, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		f := buf[:k]
		switch {
		case !v6 && f[0]>>4 == 4 && f[9] == unix.IPPROTO_UDP:
			return f
		case v6 && f[0]>>4 == 6 && f[6] == unix.IPPROTO_UDP:
			return f
		}
		// router solicitations etc.
	}
}

// TestTrafficClass: the kernel writes the IP header, so the frame's IPv4
// TOS / IPv6 traffic class (perftest -T, DSCP and ECN) must reach it as a
// cmsg; a GSO run carries one class, and a connected socket's IP IDs stay
// what the link predicts (the ICRC of every packet still verifies).
func TestTrafficClass(t *testing.T) {
	for _, tc := range []struct {
		name, addr, peer string
		connected        bool
	}{
		{"ipv4", "10.99.0.1", "10.99.0.2", false},
		{"ipv4-connected", "10.99.0.1", "10.99.0.2", true},
		{"ipv6", "fd99::1", "fd99::2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tun, a := tunEndpoint(t, tc.addr, tc.connected)
			v6 := netip.MustParseAddr(tc.addr).Is6()
			peer := &fakePeer{addr: netip.MustParseAddr(tc.peer)}
			// Five 1024-byte frames of class 0x6a (DSCP 26, ECT(0)), one
			// of 0x02, five of 0 again: the class cuts the runs (of five,
			// since an IPv4 run must be longer than one RoCE packet).
			classes := []uint8{0x6a, 0x6a, 0x6a, 0x6a, 0x6a, 0x02, 0, 0, 0, 0, 0}
			frames := make([][]byte, len(classes))
			for i, c := range classes {
				f, err := linktest.Frame(a, peer, bth.PSN(7+i), 1024)
				if err != nil {
					t.Fatal(err)
				}
				if v6 {
					f[0], f[1] = 0x60|c>>4, c<<4|f[1]&0x0F
				} else {
					f[1] = c
					wire.IPv4(f).SetChecksum(wire.IPv4(f).CalculateChecksum())
				}
				frames[i] = f
			}
			if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			if st := a.Stats(); st.TxGSOBatches != 2 || st.TxGSOSegments != 10 {
				t.Errorf("stats %+v: want the runs 0x6a × 5 and 0 × 5 as GSO batches", st)
			}
			buf := make([]byte, 65536)
			deadline := time.Now().Add(linktest.Timeout)
			var p wire.Packet
			for i, want := range classes {
				f := readTUN(t, tun, buf, v6, deadline)
				got := f[1]
				if v6 {
					got = f[0]<<4 | f[1]>>4
				}
				if got != want {
					t.Errorf("packet %d: traffic class %#02x, want %#02x", i, got, want)
				}
				if err := p.Decode(f, wire.FramingIP); err != nil {
					t.Errorf("packet %d: %v", i, err)
				} else if p.BTH().PSN() != bth.PSN(7+i) {
					t.Errorf("packet %d: PSN %d, want %d", i, p.BTH().PSN(), 7+i)
				}
			}
		})
	}
}

type fakePeer struct {
	link.Endpoint
	addr netip.Addr
}

func (f *fakePeer) Addrs() []netip.Addr { return []netip.Addr{f.addr} }

// TestSuperDatagramSplit checks that a GSO run over loopback (never
// segmented) is sent as one super-datagram and split by the receiver.
func TestSuperDatagramSplit(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name, sa, da, extra := "ipv4", "127.0.0.1", "127.0.0.2", []string(nil)
		if v6 {
			name, sa, da, extra = "ipv6-gro", "fd00::1", "fd00::2", []string{"fd00::1/128", "fd00::2/128"}
		}
		t.Run(name, func(t *testing.T) {
			ns := newNetNS(t, extra...)
			a, b := openPair(t, ns, sa, da, func(c *Config) { c.GRO = true })
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			frames := mustFrames(t, a, b, 0, 40, 1024)
			if _, err := a.Write(frames, 0); err != nil {
				t.Fatal(err)
			}
			readFrames(t, b, len(frames), nil)
			if st := a.Stats(); st.TxGSOBatches != 1 {
				t.Errorf("sender %+v: want 1 GSO batch", st)
			}
			if st := b.Stats(); st.RxAggregates != 1 || st.RxFrames != 40 {
				t.Errorf("receiver %+v: want 1 aggregate, 40 frames", st)
			}
		})
	}
}

// readFrames reads n frames from b, each of which must decode as a RoCEv2
// packet, and hands each to check (if not nil) with its index.
func readFrames(t *testing.T, b *Endpoint, n int, check func(got int, p *wire.Packet)) {
	t.Helper()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, 64)
	var p wire.Packet
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	for got := 0; got < n; {
		k, err := b.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, n))
		}
		for i := range k {
			if err := p.Decode(bufs[i][:sizes[i]], wire.FramingIP); err != nil {
				t.Fatalf("frame %d: %v", got, err)
			}
			if check != nil {
				check(got, &p)
			}
			got++
		}
	}
}

func TestWriteRejects(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	good := mustFrames(t, a, b, 0, 1, 64)[0]
	for _, tc := range []struct {
		name string
		mod  func(f []byte)
		want error
	}{
		{"src-ip", func(f []byte) { f[15] = 9 }, ErrNotOurSource},
		{"src-port", func(f []byte) { f[21]++ }, ErrNotOurSource},
		{"ip-id", func(f []byte) { f[5] = 1 }, ErrBadFrame},
		{"no-df", func(f []byte) { f[6] = 0 }, ErrBadFrame},
		{"ip-options", func(f []byte) { f[0] = 0x46 }, ErrBadFrame},
		{"ip-length", func(f []byte) { f[3]++ }, ErrBadFrame},
		{"udp-length", func(f []byte) { f[25]++ }, ErrBadFrame},
		{"ipv6", func(f []byte) { f[0] = 0x60 }, ErrBadFrame},
		{"short", nil, ErrBadFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats().TxRejected
			f := append([]byte(nil), good...)
			if tc.mod != nil {
				tc.mod(f)
			} else {
				f = f[:30]
			}
			n, err := a.Write([][]byte{good, f, good}, 0)
			if n != 1 || !errors.Is(err, tc.want) {
				t.Fatalf("Write = %d, %v; want 1, %v", n, err, tc.want)
			}
			if a.Stats().TxRejected != before+1 {
				t.Fatal("rejection not counted")
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Addr: netip.IPv4Unspecified()},
		{Addr: netip.MustParseAddr("127.0.0.1"), BatchSize: -1},
		{Addr: netip.MustParseAddr("192.0.2.77")}, // on no interface
	} {
		if e, err := Open(c); err == nil {
			e.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
}

// TestZeroAllocs checks that Write and Read allocate nothing per batch, on
// every path: sendmmsg, GSO with ICRC patching and splitting, connected and
// unconnected sockets (the first cycle opens the connected one), IPv6.
func TestZeroAllocs(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		extra      []string
		mod        func(*Config)
	}{
		{"ipv4-gso", "127.0.0.1", "127.0.0.2", nil, nil},
		{"ipv4-sendmmsg", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.NoGSO = true }},
		{"ipv4-gso-unconnected", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.NoConnect = true }},
		// The RX ring: a GSO super-datagram through the copy path, single
		// frames through the slots.
		{"ipv4-gso-rxring", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.RxRing = true }},
		{"ipv4-sendmmsg-rxring", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.NoGSO = true; c.RxRing = true }},
		// PlainIPv4: GRO aggregates split, and single datagrams; the
		// IDs solved (one solver per packet length, made in the first
		// cycle).
		{"ipv4-plain", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.PlainIPv4 = true }},
		{"ipv4-plain-sendmmsg", "127.0.0.1", "127.0.0.2", nil, func(c *Config) { c.PlainIPv4 = true; c.NoGSO = true }},
		{"ipv6", "fd00::1", "fd00::2", []string{"fd00::1/128", "fd00::2/128"}, nil},
		{"ipv6-gro", "fd00::1", "fd00::2", []string{"fd00::1/128", "fd00::2/128"}, func(c *Config) { c.GRO = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t, tc.extra...)
			a, b := openPair(t, ns, tc.a, tc.b, tc.mod)
			defer a.Close()
			defer b.Close()
			frames := mustFrames(t, a, b, 0, 32, 1024)
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, 64)
			// 51 cycles of 32 frames take milliseconds; a lost frame
			// must fail the test, not hang it.
			wd := linktest.NewWatchdog(linktest.Timeout, b)
			defer wd.Stop()
			cycles := 0
			cycle := func() {
				if _, err := a.Write(frames, 0); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < len(frames); {
					n, err := b.Read(bufs, sizes, 0)
					if err != nil {
						t.Fatalf("cycle %d: %v", cycles, wd.Err(err, got, len(frames)))
					}
					got += n
				}
				cycles++
			}
			cycle()
			if n := testing.AllocsPerRun(50, cycle); n != 0 {
				t.Fatalf("%v allocations per 32-frame Write+Read", n)
			}
			if b.cfg.RxRing != (b.Stats().RxRing > 0) {
				t.Fatalf("Config.RxRing %v, but %d packets came from a ring", b.cfg.RxRing, b.Stats().RxRing)
			}
		})
	}
}

// TestGSOToTapOnBridge answers whether a UDP GSO super-datagram reaches a
// VM behind a bridge and a TAP (the interop setup: qemu's virtio-net on
// tap, rdma_rxe in the guest) intact. A bridge forwards the GSO skb whole;
// the TAP's transmit then segments it in software unless the TAP offers
// UDP segmentation offload, which qemu turns on only with USO (TUN_F_USO4,
// qemu 8.2+ and Linux 6.2+). The test reads the TAP fd the way qemu does
// (IFF_VNET_HDR, TUNSETOFFLOAD):
//
//   - offloads of qemu 7.2 (CSUM, TSO4/6, ECN, UFO; the interop image's
//     qemu): the guest gets n separate frames with IP IDs 0..n-1, each with
//     a valid ICRC, as from a NIC;
//   - plus USO4/USO6: one whole frame with gso_type UDP_L4 and gso_size one
//     segment; a USO-capable guest would hand that skb to rxe's UDP tunnel
//     socket, which does not accept UDP_L4 GSO and segments it
//     (udp_rcv_segment), again IDs id+i.
func TestGSOToTapOnBridge(t *testing.T) {
	const (
		tunFCsum   = 0x01
		tunFTSO4   = 0x02
		tunFTSO6   = 0x04
		tunFTSOECN = 0x08
		tunFUFO    = 0x10
		tunFUSO4   = 0x20
		tunFUSO6   = 0x40 // tun accepts USO4 only together with USO6
	)
	qemu72 := tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUFO
	for _, tc := range []struct {
		name    string
		offload int
		whole   bool
	}{
		{"qemu-7.2-offloads", qemu72, false},
		{"uso", qemu72 | tunFUSO4 | tunFUSO6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t)
			var tap int
			var a *Endpoint
			ns.do(t, func() {
				br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "rocebr0", MTU: 1500}}
				if err := netlink.LinkAdd(br); err != nil {
					t.Fatalf("bridge: %v", err)
				}
				var err error
				tap, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
				if err != nil {
					t.Skipf("no TUN device: %v", err)
				}
				var ifr [unix.IFNAMSIZ + 64]byte
				copy(ifr[:], "rocetap0")
				binary.NativeEndian.PutUint16(ifr[unix.IFNAMSIZ:], unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR)
				if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(tap), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
					t.Fatalf("TUNSETIFF: %v", e)
				}
				if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(tap), unix.TUNSETOFFLOAD, uintptr(tc.offload)); e != 0 {
					if tc.offload&tunFUSO4 != 0 {
						t.Skipf("TUNSETOFFLOAD with USO: %v (Linux 6.2+)", e)
					}
					t.Fatalf("TUNSETOFFLOAD: %v", e)
				}
				l, err := netlink.LinkByName("rocetap0")
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range []func() error{
					func() error { return netlink.LinkSetMaster(l, br) },
					func() error { return netlink.LinkSetUp(l) },
					func() error { return netlink.LinkSetUp(br) },
					func() error {
						_, ipn, _ := net.ParseCIDR("10.98.0.1/24")
						ipn.IP = net.ParseIP("10.98.0.1")
						return netlink.AddrAdd(br, &netlink.Addr{IPNet: ipn})
					},
					func() error { // the "VM": a MAC the bridge floods to the tap
						return netlink.NeighAdd(&netlink.Neigh{LinkIndex: br.Attrs().Index, State: netlink.NUD_PERMANENT,
							IP: net.ParseIP("10.98.0.2"), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 2}})
					},
				} {
					if err := f(); err != nil {
						t.Fatal(err)
					}
				}
				a, err = Open(Config{Addr: netip.MustParseAddr("10.98.0.1")})
				if err != nil {
					t.Fatal(err)
				}
			})
			defer unix.Close(tap)
			defer a.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			peer := &fakePeer{addr: netip.MustParseAddr("10.98.0.2")}
			const n = 8
			frames := mustFramesTo(t, a, peer, 300, n, 1024)
			if w, err := a.Write(frames, 0); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			if st := a.Stats(); st.TxGSOBatches != 1 {
				t.Fatalf("sender %+v: want one GSO batch", st)
			}
			const vnet = 10
			buf := make([]byte, 65536+vnet)
			var p wire.Packet
			deadline := time.Now().Add(linktest.Timeout)
			got, id0 := 0, uint16(0)
			for got < n {
				left := time.Until(deadline)
				if left <= 0 {
					t.Fatalf("timed out after %v reading the TAP: %d of %d RoCE frames", linktest.Timeout, got, n)
				}
				pfd := []unix.PollFd{{Fd: int32(tap), Events: unix.POLLIN}}
				unix.Poll(pfd, int(left/time.Millisecond)+1)
				k, err := unix.Read(tap, buf)
				if err == unix.EAGAIN || err == unix.EINTR {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if k < vnet+14+28 || binary.BigEndian.Uint16(buf[vnet+12:]) != 0x0800 ||
					buf[vnet+14+9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(buf[vnet+14+22:]) != 4791 {
					continue // IPv6 router solicitations, ARP, ...
				}
				gsoType, gsoSize := buf[1], binary.NativeEndian.Uint16(buf[4:])
				f := buf[vnet:k]
				if tc.whole {
					want := 14 + 28 + n*(len(frames[0])-28)
					if gsoType != 5 || int(gsoSize) != len(frames[0])-28 || len(f) != want {
						t.Fatalf("TAP read: gso_type %d, gso_size %d, %d bytes; want one UDP_L4 frame of %d bytes, segments of %d",
							gsoType, gsoSize, len(f), want, len(frames[0])-28)
					}
					t.Logf("one %d-byte frame, gso_type UDP_L4, gso_size %d", len(f), gsoSize)
					return
				}
				if gsoType != 0 || len(f) != 14+len(frames[got]) {
					t.Fatalf("frame %d: gso_type %d, %d bytes; want a single %d-byte segment", got, gsoType, len(f), 14+len(frames[got]))
				}
				// Consecutive IDs from the sending socket's: 0 on the
				// unconnected socket, a random counter on a connected one.
				id := wire.IPv4(f[14:]).ID()
				if got == 0 {
					id0 = id
				}
				if id != id0+uint16(got) {
					t.Errorf("frame %d: IP ID %d, want %d", got, id, id0+uint16(got))
				}
				if err := p.Decode(f, wire.FramingEthernet); err != nil {
					t.Errorf("frame %d: %v", got, err)
				}
				got++
			}
			t.Logf("%d separate frames, IP IDs %d..%d, ICRCs valid", n, id0, id0+n-1)
		})
	}
}

func mustFramesTo(t testing.TB, a *Endpoint, peer link.Endpoint, psn0, n, payload int) [][]byte {
	t.Helper()
	fs := make([][]byte, n)
	for i := range fs {
		f, err := linktest.Frame(a, peer, bth.PSN(psn0+i), payload)
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	return fs
}

// TestTrafficClassReceived: over IPv6 Read rebuilds the IP header, with the
// traffic class the socket reports (IPV6_RECVTCLASS), direct and with GRO;
// over IPv4 the raw socket shows the real TOS.
func TestTrafficClassReceived(t *testing.T) {
	skipUnlessRoot(t)
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	for _, tc := range []struct {
		name string
		ns   *netNS
		a, b string
		mod  func(*Config)
	}{
		{"ipv6", ns, "fd00::1", "fd00::2", nil},
		{"ipv6-gro", ns, "fd00::1", "fd00::2", func(c *Config) { c.GRO = true }},
		{"ipv4", newNetNS(t), "127.0.0.1", "127.0.0.2", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, tc.ns, tc.a, tc.b, tc.mod)
			defer a.Close()
			defer b.Close()
			v6 := netip.MustParseAddr(tc.a).Is6()
			class := uint8(0x6a)
			frames := mustFrames(t, a, b, 40, 3, 1024)
			for _, f := range frames {
				if v6 {
					f[0], f[1] = 0x60|class>>4, class<<4|f[1]&0x0F
				} else {
					f[1] = class
					wire.IPv4(f).SetChecksum(wire.IPv4(f).CalculateChecksum())
				}
			}
			if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			readFrames(t, b, len(frames), func(got int, p *wire.Packet) {
				f := p.Frame[p.IPOff:]
				c := f[1]
				if v6 {
					c = f[0]<<4 | f[1]>>4
				}
				if c != class {
					t.Errorf("frame %d: traffic class %#02x, want %#02x", got, c, class)
				}
			})
		})
	}
}

// The IPv6 and UDP headers Read rebuilds carry a valid UDP checksum (the
// socket does not report the one received; a zero one is an error to
// Wireshark over IPv6), with GRO and without.
func TestIPv6RebuiltChecksum(t *testing.T) {
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	for _, gro := range []bool{false, true} {
		a, b := openPair(t, ns, "fd00::1", "fd00::2", func(c *Config) { c.GRO = gro })
		frames := mustFrames(t, a, b, 0, 20, 1024)
		if _, err := a.Write(frames, 0); err != nil {
			t.Fatal(err)
		}
		for i, f := range readN(t, b, len(frames)) {
			got := binary.BigEndian.Uint16(f[ipv6Hdr+6:])
			if want := vnet.UDPChecksum(f); got != want || got == 0 {
				t.Errorf("GRO %v, frame %d: UDP checksum %#04x, want %#04x", gro, i, got, want)
			}
		}
		a.Close()
		b.Close()
	}
}
