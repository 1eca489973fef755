//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// isGSO reports whether m carries a UDP_SEGMENT cmsg (its first, as write
// builds them).
func isGSO(m *unix.Mmsghdr) bool {
	if m.Hdr.Control == nil {
		return false
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(m.Hdr.Control))
	return h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT
}

// gsoPair is an unconnected pair in a new namespace, closed at the end of
// the test; it skips where the kernel has no UDP_SEGMENT.
func gsoPair(t *testing.T) (a, b *Endpoint) {
	t.Helper()
	a, b = openPair(t, newNetNS(t), "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoConnect = true })
	t.Cleanup(func() { b.Close() })
	t.Cleanup(func() { a.Close() })
	if !a.GSO() {
		t.Skip("kernel has no UDP_SEGMENT")
	}
	return a, b
}

// TestICRCPatchedCountsSent: TxICRCPatched counts frames that went out
// with a corrected ICRC, not frames whose correction was built for a send
// the kernel then refused, nor twice the frames of a refused GSO run that
// went again as datagrams (which the unconnected socket sends with ID 0,
// uncorrected).
func TestICRCPatchedCountsSent(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		a, b := gsoPair(t)
		refuse := true
		a.sendFault = func(uintptr, []unix.Mmsghdr) unix.Errno {
			if refuse {
				return unix.EPERM
			}
			return 0
		}
		fs := mustFrames(t, a, b, 0, 8, 1000) // one super-datagram: segments 1..7 corrected
		if w, err := a.Write(fs, 0); w != 0 || !errors.Is(err, unix.EPERM) {
			t.Fatalf("Write = %d, %v; want 0, EPERM", w, err)
		}
		if st := a.Stats(); st.TxFrames != 0 || st.TxErrors != 8 || st.TxICRCPatched != 0 || st.TxGSOBatches != 0 || st.TxCalls != 0 {
			t.Fatalf("stats %+v: want nothing sent, 8 frames refused, no ICRC counted as patched, no system call counted for the injected fault", st)
		}
		refuse = false
		if w, err := a.Write(fs, 0); w != 8 || err != nil {
			t.Fatalf("second Write = %d, %v; want 8", w, err)
		}
		readFrames(t, b, 8, func(got int, p *wire.Packet) {
			if int(p.BTH().PSN()) != got {
				t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
			}
		})
		if st := a.Stats(); st.TxFrames != 8 || st.TxGSOBatches != 1 || st.TxICRCPatched != 7 {
			t.Fatalf("stats %+v: want one 8-segment super-datagram sent, 7 ICRCs patched", st)
		}
	})
	t.Run("gso-refused-resent", func(t *testing.T) {
		a, b := gsoPair(t)
		refused := 0
		a.sendFault = func(_ uintptr, msgs []unix.Mmsghdr) unix.Errno {
			if isGSO(&msgs[0]) {
				refused++
				return unix.EIO
			}
			return 0
		}
		if w, err := a.Write(mustFrames(t, a, b, 0, 8, 1000), 0); w != 8 || err != nil {
			t.Fatalf("Write = %d, %v; want 8", w, err)
		}
		readFrames(t, b, 8, func(got int, p *wire.Packet) {
			if int(p.BTH().PSN()) != got {
				t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
			}
		})
		// The 8 went again as datagrams, each with ID 0 from the
		// unconnected socket: none patched.
		if st := a.Stats(); refused != 1 || st.TxFrames != 8 || st.TxGSOBatches != 0 || st.TxErrors != 0 || st.TxICRCPatched != 0 {
			t.Fatalf("%d super-datagrams refused, stats %+v: want 1, 8 frames sent as datagrams, none patched", refused, st)
		}
	})
}

// inOrder returns a readFrames check that frame i has PSN psn0+i.
func inOrder(t *testing.T, psn0 int) func(int, *wire.Packet) {
	return func(got int, p *wire.Packet) {
		if int(p.BTH().PSN()) != psn0+got {
			t.Fatalf("frame %d has PSN %d, want %d", got, p.BTH().PSN(), psn0+got)
		}
	}
}

// TestGSORefusedPerDestination: the kernel refuses UDP_SEGMENT per route
// (EIO for a device without checksum offload or through xfrm), so a
// super-datagram refused to one destination turns GSO off for that
// destination only: its frames go again as datagrams, once and in order,
// later runs to it go as datagrams without another refused attempt, and
// runs to another destination still go as super-datagrams.
func TestGSORefusedPerDestination(t *testing.T) {
	ns := newNetNS(t)
	var a, b, c *Endpoint
	ns.do(t, func() {
		a, b = openPair0(t, "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoConnect = true })
		var err error
		if c, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.3")}); err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer b.Close()
	defer c.Close()
	if !a.GSO() {
		t.Skip("kernel has no UDP_SEGMENT")
	}
	refused := 0
	a.sendFault = func(_ uintptr, msgs []unix.Mmsghdr) unix.Errno {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(msgs[0].Hdr.Name))
		if isGSO(&msgs[0]) && sa.Addr == [4]byte{127, 0, 0, 2} {
			refused++
			return unix.EIO
		}
		return 0
	}
	for round := range 2 {
		// A run to b (refused), then a run to c, in one Write.
		fs := append(mustFrames(t, a, b, 8*round, 8, 1000), mustFrames(t, a, c, 8*round, 8, 1000)...)
		if w, err := a.Write(fs, 0); w != 16 || err != nil {
			t.Fatalf("round %d: Write = %d, %v; want 16", round, w, err)
		}
		readFrames(t, b, 8, inOrder(t, 8*round))
		readFrames(t, c, 8, inOrder(t, 8*round))
		st := a.Stats()
		if refused != 1 || !a.GSO() || st.GSODisabled != 0 || st.GSORefused != 1 ||
			st.TxGSOBatches != uint64(round+1) || st.TxGSOSegments != uint64(8*(round+1)) ||
			st.TxFrames != uint64(16*(round+1)) || st.TxErrors != 0 {
			t.Fatalf("round %d: %d super-datagrams to b refused, GSO %v, stats %+v: want 1 refused, GSO off for b only, "+
				"%d super-datagrams to c", round, refused, a.GSO(), st, round+1)
		}
	}
}

// TestGSORefusedEverywhere: a socket that refuses GSO to every destination
// (no UDP checksums: EINVAL) costs one refused super-datagram per
// destination, up to maxGSOOff of them; the next refusal turns GSO off
// for the link. Every frame still goes out once (a raw socket counts
// them, the destinations having no listener).
func TestGSORefusedEverywhere(t *testing.T) {
	ns := newNetNS(t)
	var a *Endpoint
	var raw int
	ns.do(t, func() {
		var err error
		if a, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.1"), NoConnect: true}); err != nil {
			t.Fatal(err)
		}
		if raw, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer unix.Close(raw)
	if !a.GSO() {
		t.Skip("kernel has no UDP_SEGMENT")
	}
	var err error
	if cerr := a.udpRC.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	const run = 8
	buf := make([]byte, 2048)
	var p wire.Packet
	for d := range maxGSOOff + 2 {
		peer := &fakePeer{addr: netip.MustParseAddr(fmt.Sprintf("127.0.2.%d", d+1))}
		if w, err := a.Write(mustFramesTo(t, a, peer, 0, run, 1000), 0); w != run || err != nil {
			t.Fatalf("destination %d: Write = %d, %v; want %d", d, w, err, run)
		}
		st := a.Stats()
		wantRefused, wantGSO := uint64(min(d+1, maxGSOOff)), d < maxGSOOff
		if st.GSORefused != wantRefused || a.GSO() != wantGSO || (st.GSODisabled == 1) == wantGSO ||
			st.TxFrames != uint64(run*(d+1)) || st.TxGSOBatches != 0 || st.TxErrors != 0 {
			t.Fatalf("after destination %d: GSO %v, stats %+v: want %d destinations refused, GSO on for the link %v, %d frames sent",
				d, a.GSO(), st, wantRefused, wantGSO, run*(d+1))
		}
		for got := 0; got < run; {
			k, _, err := unix.Recvfrom(raw, buf, 0)
			if err != nil {
				t.Fatalf("destination %d: raw socket after %d of %d frames: %v", d, got, run, err)
			}
			if h := wire.IPv4(buf[:k]); h.Dst() != peer.addr {
				continue // ICMP errors
			}
			if err := p.Decode(buf[:k], wire.FramingIP); err != nil {
				t.Fatalf("destination %d: frame %d: %v", d, got, err)
			} else if int(p.BTH().PSN()) != got {
				t.Fatalf("destination %d: frame %d has PSN %d", d, got, p.BTH().PSN())
			}
			got++
		}
	}
}

// TestConnectedRevives: a send error on a connected socket (here an
// injected ECONNREFUSED, as a peer not yet listening gives) sets the socket
// aside, its frames resent unconnected, but not for good: after
// connRetryMin messages to the destination the socket is re-probed and
// carries frames again. The injected error first makes the socket take an
// IP ID (a datagram to a sink), so the frames after the revival verify at
// the receiver only if the re-probe relearned the counter. A socket that
// fails again before it carried as many messages as it waited waits twice
// as long; once it has, a failure costs the shortest wait again.
func TestConnectedRevives(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	var sink int
	ns.do(t, func() {
		a, b = openPair0(t, "127.0.0.1", "127.0.0.2", nil)
		var err error
		if sink, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			t.Fatal(err)
		}
		if err = unix.Bind(sink, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer b.Close()
	defer unix.Close(sink)
	sa, err := unix.Getsockname(sink)
	if err != nil {
		t.Fatal(err)
	}
	psn := 0
	send := func(n int) {
		t.Helper()
		if w, err := a.Write(mustFrames(t, a, b, psn, n, 200), 0); w != n || err != nil {
			t.Fatalf("PSN %d: Write = %d, %v; want %d", psn, w, err, n)
		}
		readFrames(t, b, n, inOrder(t, psn))
		psn += n
	}
	send(2)
	a.qmu.Lock()
	if len(a.connFDs) != 1 {
		a.qmu.Unlock()
		t.Fatalf("%d connected sockets (ConnErr %v), want 1", len(a.connFDs), a.ConnErr())
	}
	connFD := uintptr(a.connFDs[0])
	a.qmu.Unlock()
	fail := 0
	a.sendFault = func(fd uintptr, _ []unix.Mmsghdr) unix.Errno {
		if fd != connFD || fail == 0 {
			return 0
		}
		fail--
		if err := unix.Sendto(int(fd), []byte{0}, 0, sa); err != nil {
			t.Errorf("datagram to the sink: %v", err)
		}
		return unix.ECONNREFUSED
	}
	check := func(what string, connected, fallbacks, revived uint64) {
		t.Helper()
		if st := a.Stats(); st.TxConnected != connected || st.ConnFallbacks != fallbacks || st.ConnsRevived != revived ||
			st.ConnReprobesFailed != 0 || st.ConnsOpened != 1 || st.TxFrames != uint64(psn) || st.TxErrors != 0 {
			t.Fatalf("%s: stats %+v: want %d of %d frames connected, %d fallbacks, %d revivals",
				what, st, connected, psn, fallbacks, revived)
		}
	}
	fail = 1
	send(4) // refused on the connected socket, resent unconnected
	check("after the error", 2, 1, 0)
	for range connRetryMin {
		send(1)
	}
	check("while set aside", 2, 1, 0)
	send(1) // re-probed, connected again
	check("revived", 3, 1, 1)

	// Fails again at once: set aside for twice as long.
	fail = 1
	send(1)
	check("second error", 3, 2, 1)
	for range 2 * connRetryMin {
		send(1)
	}
	check("set aside again", 3, 2, 1)
	send(1)
	check("revived again", 4, 2, 2)

	// Carries as many messages as it waited: the next error costs the
	// shortest wait again.
	for range 2*connRetryMin - 1 {
		send(1)
	}
	check("proved", 4+2*connRetryMin-1, 2, 2)
	fail = 1
	send(1)
	for range connRetryMin {
		send(1)
	}
	check("third error", 4+2*connRetryMin-1, 3, 2)
	send(1)
	check("revived a third time", 4+2*connRetryMin, 3, 3)
}
