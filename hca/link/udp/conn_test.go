//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/wire"
)

// TestConnectedSends sends datagrams, GSO runs and ACK-led runs in several
// Writes through a connected socket and checks that the receiver verifies
// every ICRC (the IDs the kernel gave were predicted) and gets every frame
// in order, and that the other endpoint's answers go through its own
// connected socket.
func TestConnectedSends(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	psn := 0
	want := 0
	for round := range 6 {
		n := 1 + round*7 // 1, 8, 15, ...: datagrams and runs
		fs := mustFrames(t, a, b, psn, n, 256+round*100)
		psn += n
		if w, err := a.Write(fs, 0); w != n || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		first := want
		readFrames(t, b, n, func(got int, p *wire.Packet) {
			if int(p.BTH().PSN()) != first+got {
				t.Fatalf("round %d: frame %d has PSN %d, want %d", round, got, p.BTH().PSN(), first+got)
			}
		})
		want += n
	}
	st := a.Stats()
	if st.ConnsOpened != 1 || st.TxConnected != uint64(want) || st.ConnFallbacks != 0 {
		t.Fatalf("stats %+v (ConnErr %v): want %d frames through one connected socket", st, a.ConnErr(), want)
	}
	// The other way, through b's connected socket.
	if w, err := b.Write(mustFrames(t, b, a, 0, 10, 64), 0); w != 10 || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readFrames(t, a, 10, nil)
	if st := b.Stats(); st.ConnsOpened != 1 || st.TxConnected != 10 {
		t.Fatalf("b stats %+v: want 10 frames through one connected socket", st)
	}
}

// TestConnectedPrepare checks that Prepare opens the connected socket to a
// destination before any frame goes there (once, however often it is
// called), that the first Write to it takes that socket instead of opening
// another, and that the IDs the probe learned at Prepare still hold: the
// receiver verifies every ICRC. Destinations the endpoint sends
// unconnected (multicast) and IPv6 ones are not prepared.
func TestConnectedPrepare(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), wire.RoCEv2Port)
	a.Prepare(netip.AddrPortFrom(netip.MustParseAddr("239.1.1.1"), wire.RoCEv2Port))
	a.Prepare(netip.AddrPortFrom(netip.MustParseAddr("::1"), wire.RoCEv2Port))
	if st := a.Stats(); st.ConnsOpened != 0 {
		t.Fatalf("stats %+v: a multicast or IPv6 destination was prepared", st)
	}
	a.Prepare(dst)
	a.Prepare(dst)
	if st := a.Stats(); st.ConnsOpened != 1 || st.TxConnected != 0 {
		t.Fatalf("stats %+v (ConnErr %v): want one connected socket opened by Prepare, no frame sent", st, a.ConnErr())
	}
	psn := 0
	for round := range 3 {
		n := 1 + round*5
		if w, err := a.Write(mustFrames(t, a, b, psn, n, 300), 0); w != n || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		readFrames(t, b, n, nil)
		psn += n
	}
	if st := a.Stats(); st.ConnsOpened != 1 || st.TxConnected != uint64(psn) || st.ConnFallbacks != 0 {
		t.Fatalf("stats %+v (ConnErr %v): want %d frames through the prepared socket", st, a.ConnErr(), psn)
	}
	a.Close()
	a.Prepare(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), wire.RoCEv2Port))
	if st := a.Stats(); st.ConnsOpened != 1 {
		t.Fatalf("stats %+v: Prepare after Close opened a socket", st)
	}
}

// TestConnectedExclusive checks that the connected sockets, bound beside
// the holder, leave the address and port as exclusive as before: another
// endpoint on them still fails to open.
func TestConnectedExclusive(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	if w, err := a.Write(mustFrames(t, a, b, 0, 3, 64), 0); w != 3 || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readFrames(t, b, 3, nil)
	if st := a.Stats(); st.ConnsOpened != 1 {
		t.Fatalf("stats %+v (ConnErr %v): want a connected socket", st, a.ConnErr())
	}
	ns.do(t, func() {
		c, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.1")})
		if err == nil {
			c.Close()
			t.Fatal("a second endpoint on 127.0.0.1:4791 opened")
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			t.Fatalf("second Open: %v, want EADDRINUSE", err)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: DefaultPort}); !errors.Is(err, unix.EADDRINUSE) {
			t.Fatalf("plain bind to 127.0.0.1:4791: %v, want EADDRINUSE", err)
		}
	})
}

// TestConnectedFallback sends to an address where nobody holds port 4791:
// the kernel answers with ICMP port unreachable, which a connected socket
// reports on its next send. That send must not fail or lose frames: the
// socket is set aside (for a while: TestConnectedRevives) and the frames
// go through the unconnected socket, as every frame did before connected
// sockets (a raw socket counts them all).
func TestConnectedFallback(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	var raw int
	ns.do(t, func() {
		a, b = openPair0(t, "127.0.0.1", "127.0.0.2", nil)
		var err error
		if raw, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer b.Close()
	defer unix.Close(raw)
	unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	nobody := &fakePeer{addr: netip.MustParseAddr("127.0.0.3")}
	const n = 4
	for round := range 3 {
		fs := mustFramesTo(t, a, nobody, round*n, n, 64)
		if w, err := a.Write(fs, 0); w != n || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
	}
	st := a.Stats()
	if st.ConnsOpened != 1 || st.ConnFallbacks != 1 || st.TxFrames != 3*n || st.TxErrors != 0 {
		t.Fatalf("stats %+v: want one connected socket abandoned, %d frames sent", st, 3*n)
	}
	buf := make([]byte, 2048)
	var p wire.Packet
	psns := map[uint32]int{}
	for got := 0; got < 3*n; {
		k, _, err := unix.Recvfrom(raw, buf, 0)
		if err != nil {
			t.Fatalf("raw socket after %d of %d frames: %v", got, 3*n, err)
		}
		if h := wire.IPv4(buf[:k]); h.Dst() != nobody.addr {
			continue // ICMP quotes, b's traffic
		}
		for _, f := range splitShortRun(t, buf[:k]) {
			if err := p.Decode(f, wire.FramingIP); err != nil {
				t.Fatalf("frame %d as received: %v", got, err)
			}
			psns[uint32(p.BTH().PSN())]++
			got++
		}
	}
	for psn := range uint32(3 * n) {
		if psns[psn] != 1 {
			t.Errorf("PSN %d seen %d times, want once", psn, psns[psn])
		}
	}
}

// TestConnectedLimit sends to more destinations than maxConns: the first
// maxConns get connected sockets, the rest the unconnected one, and every
// frame verifies at its receiver.
func TestConnectedLimit(t *testing.T) {
	var addrs []string
	for i := range maxConns + 3 {
		addrs = append(addrs, fmt.Sprintf("127.0.1.%d/32", i+1))
	}
	ns := newNetNS(t, addrs...)
	var a *Endpoint
	peers := make([]*Endpoint, len(addrs))
	ns.do(t, func() {
		var err error
		if a, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			t.Fatal(err)
		}
		for i, s := range addrs {
			if peers[i], err = Open(Config{Addr: netip.MustParsePrefix(s).Addr()}); err != nil {
				t.Fatal(err)
			}
		}
	})
	defer a.Close()
	for _, p := range peers {
		defer p.Close()
	}
	for round := range 2 {
		// One batch to every destination, interleaved, so that one Write
		// sends through several sockets.
		var fs [][]byte
		for k := range 3 {
			for _, p := range peers {
				fs = append(fs, mustFrames(t, a, p, round*3+k, 1, 100)...)
			}
		}
		if w, err := a.Write(fs, 0); w != len(fs) || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
		for _, p := range peers {
			readFrames(t, p, 3, nil)
		}
	}
	st := a.Stats()
	if st.ConnsOpened != maxConns || st.TxConnected != 6*maxConns || st.TxFrames != uint64(6*len(peers)) {
		t.Fatalf("stats %+v (ConnErr %v): want %d connected sockets carrying %d of %d frames",
			st, a.ConnErr(), maxConns, 6*maxConns, 6*len(peers))
	}
}

// TestConnectEnv checks that GOROCE_UDP_CONNECT overrides Config.NoConnect
// both ways.
func TestConnectEnv(t *testing.T) {
	for _, tc := range []struct {
		env       string
		noConnect bool
		want      uint64 // connected sockets opened
	}{
		{"0", false, 0},
		{"1", true, 1},
		{"", false, 1},
		{"", true, 0},
	} {
		t.Run(fmt.Sprintf("env=%q,NoConnect=%v", tc.env, tc.noConnect), func(t *testing.T) {
			t.Setenv(connectEnv, tc.env)
			ns := newNetNS(t)
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.NoConnect = tc.noConnect })
			defer a.Close()
			defer b.Close()
			if w, err := a.Write(mustFrames(t, a, b, 0, 2, 64), 0); w != 2 || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			readFrames(t, b, 2, nil)
			if st := a.Stats(); st.ConnsOpened != tc.want {
				t.Fatalf("%d connected sockets opened, want %d", st.ConnsOpened, tc.want)
			}
		})
	}
}

// splitShortRun returns the packets of IPv4 datagram d as a raw socket
// shows it: d itself, or the segments of a short GSO run (vnet: short
// runs) as the kernel would have cut them.
func splitShortRun(t *testing.T, d []byte) [][]byte {
	t.Helper()
	g := vnet.ShortRunSegment(d, 0, ipv4Hdr+udpHdr)
	if g == 0 {
		return [][]byte{d}
	}
	lay, err := vnet.ParseUDPGSO(d, 0, g)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for s := range lay.Segs {
		f := make([]byte, len(d))
		out = append(out, f[:lay.Segment(d, s, f)])
	}
	return out
}
