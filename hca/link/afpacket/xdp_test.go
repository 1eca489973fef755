package afpacket

import (
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/link/xsk"
	"github.com/goroce/goroce/hca/netcfg"
)

// openXDP opens a pair with cfgA and cfgB (at least one with XDP).
func openXDP(t *testing.T, opts netcfg.TwoHostsOptions, cfgA, cfgB Config) (a, b *Endpoint) {
	t.Helper()
	a, b, _ = openPairCfgs(t, opts, cfgA, cfgB)
	return a, b
}

// skipNoXDP skips t when err says the kernel has no AF_XDP, or refuses
// eBPF to this process.
func skipNoXDP(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, xsk.ErrUnsupported) || errors.Is(err, xsk.ErrNotPermitted) {
		t.Skipf("no AF_XDP here: %v", err)
	}
}

// The conformance and poller suites with both ends on AF_XDP sockets, in
// generic and in native mode.
func TestXDPLinktest(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	for _, native := range []bool{false, true} {
		cfg := Config{XDP: true, XDPNative: native}
		name := map[bool]string{false: "generic", true: "native"}[native]
		t.Run(name+"/linktest", func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				a, b := openXDP(t, netcfg.TwoHostsOptions{}, cfg, cfg)
				return a, b
			})
		})
		t.Run(name+"/poller", func(t *testing.T) {
			a, b := openXDP(t, netcfg.TwoHostsOptions{}, cfg, cfg)
			linktest.Poller(t, a, b)
		})
		t.Run(name+"/stats", func(t *testing.T) {
			a, b := openXDP(t, netcfg.TwoHostsOptions{}, cfg, cfg)
			frames := batch(t, a, b, 10, 100)
			if n, err := a.Write(frames, 0); err != nil || n != len(frames) {
				t.Fatalf("Write = %d, %v", n, err)
			}
			got := readN(t, b, len(frames))
			for i := range frames {
				if !linktest.Equivalent(got[i], frames[i], link.FormatEthernet) {
					t.Fatalf("frame %d differs", i)
				}
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.XDPTxFrames != uint64(len(frames)) || sb.XDPRxFrames != uint64(len(frames)) || sb.RxRingFrames != 0 || sa.TxGSO != 0 {
				t.Fatalf("stats: sender %+v, receiver %+v", sa, sb)
			}
		})
	}
}

// readN reads n frames from e within a second.
func readN(t *testing.T, e *Endpoint, n int) [][]byte {
	t.Helper()
	return readNInto(t, e, n, 9100)
}

// readNInto is readN with buffers of size bytes.
func readNInto(t *testing.T, e *Endpoint, n, size int) [][]byte {
	t.Helper()
	var got [][]byte
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	sizes := make([]int, 64)
	w := linktest.NewWatchdog(2*time.Second, e)
	defer w.Stop()
	for len(got) < n {
		k, err := e.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatalf("Read after %d of %d frames: %v", len(got), n, err)
		}
		for i := range k {
			got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	return got
}

// TestXDPFromGSOPeer: a peer without XDP sends a run as one UDP GSO
// super-frame, which no UMEM chunk holds; the XDP program passes it, and
// the XDP endpoint takes it from its packet socket and splits it, between
// frames it takes from the AF_XDP socket.
func TestXDPFromGSOPeer(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b := openXDP(t, netcfg.TwoHostsOptions{}, Config{}, Config{XDP: true})
	run := batch(t, a, b, 16, 1024)
	single, err := linktest.Frame(a, b, 100, 8)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.Write(run, 0); err != nil || n != len(run) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if a.Stats().TxGSO == 0 {
		t.Skip("the sender's kernel took no GSO super-packet from a packet socket")
	}
	// Read the run before the single frame is sent: the two sockets of
	// the receiver keep no order between them.
	got := readN(t, b, len(run))
	if n, err := a.Write([][]byte{single}, 0); err != nil || n != 1 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got = append(got, readN(t, b, 1)...)
	want := append(run, single)
	for i := range want {
		if !linktest.Equivalent(got[i], want[i], link.FormatEthernet) {
			t.Fatalf("frame %d differs", i)
		}
	}
	st := b.Stats()
	if st.RxGSO != 1 || st.XDPRxFrames != 1 {
		t.Fatalf("receiver: %d GSO frames split, %d from the AF_XDP socket; want 1 and 1", st.RxGSO, st.XDPRxFrames)
	}
}

// TestXDPShortRunFromGSOPeer: a peer without XDP sends short runs as UDP
// GSO super-frames (an ACK-led pair, 4 equal packets, 3 of which go as 2 +
// 1): each fits a UMEM chunk, so generic XDP redirects it whole to the
// AF_XDP socket, without its gso_size, and Read must split it by the shape
// of short runs (vnet). Before, an ACK and the answer it travels with were
// read as one malformed packet: every round trip of a udp-link peer's
// send_lat waited for a retransmission.
func TestXDPShortRunFromGSOPeer(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b := openXDP(t, netcfg.TwoHostsOptions{}, Config{}, Config{XDP: true})
	ack, err := linktest.ACK(a, b, 0x12, 7)
	if err != nil {
		t.Fatal(err)
	}
	send, err := linktest.Frame(a, b, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		frames [][]byte
		supers uint64 // GSO super-frames the sender makes, the receiver splits
	}{
		{"ACK and 2-byte SEND", [][]byte{ack, send}, 1},
		{"4 x 100 bytes", batch(t, a, b, 4, 100), 1},
		{"3 x 100 bytes", batch(t, a, b, 3, 100), 1},
		{"64 x 2 bytes", batch(t, a, b, 64, 2), 1},
	} {
		sa, sb := a.Stats(), b.Stats()
		if n, err := a.Write(tc.frames, 0); err != nil || n != len(tc.frames) {
			t.Fatalf("%s: Write = %d, %v", tc.name, n, err)
		}
		if d := a.Stats().TxGSO - sa.TxGSO; d != tc.supers {
			if d == 0 && i == 0 {
				t.Skip("the sender's kernel took no GSO super-packet from a packet socket")
			}
			t.Fatalf("%s: %d super-frames sent, want %d", tc.name, d, tc.supers)
		}
		got := readN(t, b, len(tc.frames))
		for i := range tc.frames {
			if !linktest.Equivalent(got[i], tc.frames[i], link.FormatEthernet) {
				t.Fatalf("%s: frame %d differs", tc.name, i)
			}
		}
		st := b.Stats()
		if st.RxGSO-sb.RxGSO != tc.supers || st.XDPRxFrames == sb.XDPRxFrames || st.RxMalformed != sb.RxMalformed {
			t.Fatalf("%s: receiver split %d super-frames (want %d), %d frames from the AF_XDP socket, %d malformed",
				tc.name, st.RxGSO-sb.RxGSO, tc.supers, st.XDPRxFrames-sb.XDPRxFrames, st.RxMalformed-sb.RxMalformed)
		}
	}
}

// TestXDPShortRunSmallBuffers: a peer's short run that fits a UMEM chunk
// but not the reader's buffers (64 2-byte SENDs, 1322 bytes, read into
// 100-byte buffers, each of its 62-byte frames fits one) still arrives
// whole on the AF_XDP socket, waits there for a buffer that holds it, and
// is split; a frame too long for the buffers and no super-frame is dropped
// and counted (RxTooLarge), and the frames behind it keep their order.
// Neither allocates the packet socket's 4 MiB of overflow buffers: the
// split uses chunk-sized ones allocated at Open.
func TestXDPShortRunSmallBuffers(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b := openXDP(t, netcfg.TwoHostsOptions{}, Config{}, Config{XDP: true})
	run := batch(t, a, b, 64, 2)
	big, err := linktest.Frame(a, b, 200, 500)
	if err != nil {
		t.Fatal(err)
	}
	after, err := linktest.Frame(a, b, 201, 2)
	if err != nil {
		t.Fatal(err)
	}
	var before, later goruntime.MemStats
	goruntime.ReadMemStats(&before)
	if n, err := a.Write(run, 0); err != nil || n != len(run) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if a.Stats().TxGSO != 1 {
		t.Skip("the sender's kernel took no GSO super-packet from a packet socket")
	}
	got := readNInto(t, b, len(run), 100)
	goruntime.ReadMemStats(&later)
	for i := range run {
		if !linktest.Equivalent(got[i], run[i], link.FormatEthernet) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if grew := later.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("reading the first super-frame allocated %d bytes", grew)
	}
	st := b.Stats()
	if st.RxGSO != 1 || st.XDPRxFrames != 1 || st.RxRingFrames != 0 {
		t.Fatalf("receiver: %d super-frames split, %d from the AF_XDP socket, %d from the ring; want 1, 1, 0", st.RxGSO, st.XDPRxFrames, st.RxRingFrames)
	}
	if n, err := a.Write([][]byte{big, after}, 0); err != nil || n != 2 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got = readNInto(t, b, 1, 100)
	if !linktest.Equivalent(got[0], after, link.FormatEthernet) {
		t.Fatal("the frame behind the one too large is not the next read")
	}
	if st := b.Stats(); st.RxTooLarge != 1 {
		t.Fatalf("RxTooLarge = %d, want 1", st.RxTooLarge)
	}
}

// TestXDPErrors: an MTU over what a chunk holds is refused by name, and
// so is a second XDP endpoint on an interface that has one.
func TestXDPErrors(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{MTU: 9000})
	_, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, XDP: true})
	if err == nil || !strings.Contains(err.Error(), "XDP: MTU 9000 is over") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open at MTU 9000: %v", err)
	}
	if err := netcfg.SetMTU(h.B.NS, h.B.Ifname, 1500); err != nil {
		t.Fatal(err)
	}
	e, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS, XDP: true})
	if err != nil {
		skipNoXDP(t, err)
		t.Fatal(err)
	}
	defer e.Close()
	_, err = Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS, XDP: true})
	if err == nil || !strings.Contains(err.Error(), "XDP") {
		t.Fatalf("second XDP endpoint on one interface: %v", err)
	}
}

// TestXDPZeroAllocs: a batch through the AF_XDP sockets and the Reads
// that take it allocate nothing after a warm-up.
func TestXDPZeroAllocs(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b := openXDP(t, netcfg.TwoHostsOptions{}, Config{XDP: true}, Config{XDP: true})
	allocFree(t, a, b, 256)
	if st := b.Stats(); st.XDPRxFrames != 52*uint64(a.BatchSize()) {
		t.Fatalf("%d frames through the AF_XDP socket, want all %d", st.XDPRxFrames, 52*a.BatchSize())
	}
}

// TestXDPDownCountsDropped: frames the XDP path cannot send because the
// interface is down are counted once, and truthfully. The first Write
// after it went down leaves its frames in the AF_XDP TX ring (the kick
// fails with ENETDOWN; the ring's producer cannot be taken back): they are
// in XDPTxQueued, neither sent nor dropped, and go out when the interface
// is up again, in TxFrames then. A Write while it is still down drops its
// frames without queuing them: TxDropped, and they never arrive.
// sendFrames used to add xsk.Send's whole count, dropped frames included,
// to TxFrames, so they showed up as sent and as dropped; then xsk counted
// the queued frames dropped although they went out later.
func TestXDPDownCountsDropped(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, XDP: true})
	skipNoXDP(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	queued, dropped, fresh := lonely(t, h, 0), lonely(t, h, 1), lonely(t, h, 2)
	if err := netcfg.SetDown(h.A.NS, h.A.Ifname); err != nil {
		t.Fatal(err)
	}
	for _, frames := range [][][]byte{queued, dropped} {
		if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
			t.Fatalf("Write on a down interface = %d, %v; want %d (queued or dropped), nil", w, err, len(frames))
		}
	}
	st := a.Stats()
	if st.TxDropped != uint64(len(dropped)) || st.TxFrames != 0 || st.XDPTxQueued != uint64(len(queued)) {
		t.Fatalf("TxFrames %d, TxDropped %d, XDPTxQueued %d; want 0, %d, %d", st.TxFrames, st.TxDropped, st.XDPTxQueued, len(dropped), len(queued))
	}
	if err := netcfg.SetUp(h.A.NS, h.A.Ifname); err != nil {
		t.Fatal(err)
	}
	if w, err := a.Write(fresh, 0); w != len(fresh) || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	// The queued frames, then the fresh ones: a dropped one would come
	// between them.
	want := append(append([][]byte{}, queued...), fresh...)
	readFrames(t, b, len(want), 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, want[got], link.FormatEthernet) })
	st = a.Stats()
	if st.TxDropped != uint64(len(dropped)) || st.TxFrames != uint64(len(want)) || st.XDPTxQueued != 0 {
		t.Fatalf("then TxFrames %d, TxDropped %d, XDPTxQueued %d; want %d, %d, 0", st.TxFrames, st.TxDropped, st.XDPTxQueued, len(want), len(dropped))
	}
}
