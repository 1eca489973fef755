package afpacket

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// openPairCfg is openPair with cfg for both ends (Interface and NetNS are
// filled in).
func openPairCfg(t testing.TB, opts netcfg.TwoHostsOptions, cfg Config) (a, b *Endpoint, h *netcfg.Hosts) {
	t.Helper()
	return openPairCfgs(t, opts, cfg, cfg)
}

// openPairCfgs is openPair with cfgA for A and cfgB for B. It skips, saying
// why, when an XDP endpoint meets a kernel without AF_XDP or a root
// without eBPF.
func openPairCfgs(t testing.TB, opts netcfg.TwoHostsOptions, cfgA, cfgB Config) (a, b *Endpoint, h *netcfg.Hosts) {
	t.Helper()
	h = netcfg.TwoHosts(t, opts)
	cfgA.Interface, cfgA.NetNS = h.A.Ifname, h.A.NS
	cfgB.Interface, cfgB.NetNS = h.B.Ifname, h.B.NS
	var err error
	if a, err = Open(cfgA); err != nil {
		skipNoXDP(t, err)
		t.Fatal(err)
	}
	if b, err = Open(cfgB); err != nil {
		a.Close()
		skipNoXDP(t, err)
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, h
}

// needRing fails t unless e receives from its ring: the ring is the
// default, and both this host's and the CI guest's kernels take it.
func needRing(t testing.TB, e *Endpoint) {
	t.Helper()
	if !e.Ring() {
		t.Fatalf("%s receives with recvmmsg: %v", e.Interface(), e.RingErr())
	}
}

func TestRingGeometry(t *testing.T) {
	tests := []struct {
		mtu, bytes int
		want       unix.TpacketReq
	}{
		// 76 bytes of slot header + virtio_net_hdr, 14 + 4 of Ethernet
		// and tag, the IP packet; 16-byte aligned; 64 KiB blocks.
		{1500, DefaultRingBytes, unix.TpacketReq{Block_size: 65536, Block_nr: 32, Frame_size: 1600, Frame_nr: 32 * 40}},
		{9000, DefaultRingBytes, unix.TpacketReq{Block_size: 65536, Block_nr: 32, Frame_size: 4320, Frame_nr: 32 * 15}},
		{65536, DefaultRingBytes, unix.TpacketReq{Block_size: 65536, Block_nr: 32, Frame_size: 4320, Frame_nr: 32 * 15}},
		{1280, 1, unix.TpacketReq{Block_size: 65536, Block_nr: 1, Frame_size: 1376, Frame_nr: 47}},
		{1500, 200 << 10, unix.TpacketReq{Block_size: 65536, Block_nr: 3, Frame_size: 1600, Frame_nr: 120}},
	}
	for _, tc := range tests {
		if got := ringGeometry(tc.mtu, tc.bytes); got != tc.want {
			t.Errorf("ringGeometry(%d, %d) = %+v, want %+v", tc.mtu, tc.bytes, got, tc.want)
		}
	}
	if ringMacOff != 76 {
		t.Errorf("ringMacOff = %d, want 76 (TPACKET_ALIGN(52+16) + 10 - 14)", ringMacOff)
	}
}

func TestRingConfigErrors(t *testing.T) {
	for _, n := range []int{-1, maxRingBytes + 1} {
		if _, err := Open(Config{Interface: "lo", RingBytes: n}); err == nil {
			t.Errorf("RingBytes %d accepted", n)
		}
	}
}

// TestLinktestNoRing is the conformance suite on the recvmmsg receive
// path (TestLinktest runs it on the ring).
func TestLinktestNoRing(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoRing: true})
		if a.Ring() || b.Ring() || a.Stats().RingFrames != 0 {
			t.Fatal("NoRing endpoint has a ring")
		}
		return a, b
	})
}

func TestPollerNoRing(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoRing: true})
	linktest.Poller(t, a, b)
}

// With Config.BusyPoll the sockets are outside the netpoller (ppoll waits,
// Close through the Waiter): the conformance suite and the poller suite,
// on the rings and on recvmmsg.
func TestBusyPollSockets(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	for _, noRing := range []bool{false, true} {
		cfg := Config{BusyPoll: true, NoRing: noRing, NoTxRing: noRing}
		name := map[bool]string{false: "rings", true: "mmsg"}[noRing]
		t.Run(name+"/linktest", func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, cfg)
				if !noRing {
					needRing(t, a)
					needRing(t, b)
				}
				return a, b
			})
		})
		t.Run(name+"/poller", func(t *testing.T) {
			a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, cfg)
			linktest.Poller(t, a, b)
		})
	}
}

// TestRingStats checks what an endpoint reports about its ring.
func TestRingStats(t *testing.T) {
	a, _, _ := openPairCfg(t, netcfg.TwoHostsOptions{MTU: 9000}, Config{})
	needRing(t, a)
	st := a.Stats()
	if st.RingFrames != 480 || st.RingFrameSize != 4320 || st.RingBytes != DefaultRingBytes || a.RingErr() != nil {
		t.Fatalf("ring %d x %d bytes in %d, error %v", st.RingFrames, st.RingFrameSize, st.RingBytes, a.RingErr())
	}
}

// TestRingEmptyTryReadNoSyscall: an empty TryRead on the ring is a memory
// read. The link counts its receive system calls; across 1000 empty
// TryReads the count stays 0 with the ring, and grows by exactly 1000
// without it (the control that shows the counter counts). No frames are
// sent, so every TryRead must find nothing.
func TestRingEmptyTryReadNoSyscall(t *testing.T) {
	for _, noRing := range []bool{false, true} {
		_, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoRing: noRing})
		if !noRing {
			needRing(t, b)
		}
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		before := b.Stats().RxSyscalls
		for range 1000 {
			if n, err := b.TryRead(bufs, sizes, 0); n != 0 || err != nil {
				t.Fatalf("noRing=%v: TryRead on an empty link = %d, %v", noRing, n, err)
			}
		}
		got := b.Stats().RxSyscalls - before
		want := uint64(1000)
		if !noRing {
			want = 0
		}
		if got != want {
			t.Errorf("noRing=%v: %d receive system calls in 1000 empty TryReads, want %d", noRing, got, want)
		}
	}
}

// TestRingWrap sends 60 batches of 30 frames through a one-block ring of
// 40 slots, so the ring wraps 45 times, reading each batch before the
// next is sent (the ring never overflows), and checks every frame in
// order. All 1800 come from the ring without one receive system call.
func TestRingWrap(t *testing.T) {
	a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{RingBytes: ringBlock, NoGSO: true})
	needRing(t, b)
	if st := b.Stats(); st.RingFrames != 40 {
		t.Fatalf("%d slots, want 40", st.RingFrames)
	}
	const batches, per = 60, 30
	bufs := make([][]byte, 7) // not a divisor of per: Reads straddle batches' ends
	for i := range bufs {
		bufs[i] = make([]byte, 1600)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	psn := 0
	for range batches {
		frames := make([][]byte, per)
		for i := range frames {
			// Sizes vary so that a stale slot cannot pass for a new one.
			f, err := linktest.Frame(a, b, bth.PSN(psn+i), (psn+i)*37%1400)
			if err != nil {
				t.Fatal(err)
			}
			frames[i] = f
		}
		if n, err := a.Write(frames, 0); n != per || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		for got := 0; got < per; {
			n, err := b.Read(bufs[:min(len(bufs), per-got)], sizes, 0)
			if err != nil {
				t.Fatal(wd.Err(err, psn+got, batches*per))
			}
			for j := range n {
				if !linktest.Equivalent(bufs[j][:sizes[j]], frames[got+j], link.FormatEthernet) {
					t.Fatalf("frame %d differs", psn+got+j)
				}
			}
			got += n
		}
		psn += per
	}
	st := b.Stats()
	if st.RxFrames != batches*per || st.RxRingFrames != batches*per || st.RxSyscalls != 0 || st.RxKernelDrop != 0 {
		t.Fatalf("stats %+v: want %d frames, all from the ring, no receive system call, no drop", st, batches*per)
	}
}

// TestRingOverflow sends 256 frames at a 40-slot ring before reading:
// the kernel drops what does not fit (counted in RxKernelDrop from
// PACKET_STATISTICS) and the frames read are the first ones, in order.
// Write returns once the veth has queued every frame on the far side's
// backlog, not once the far side's tpacket_rcv ran, so the test reads
// until Stats accounts for all 256 (received + dropped).
func TestRingOverflow(t *testing.T) {
	// NoGSO: one skb, so one slot, per frame.
	a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{RingBytes: ringBlock, NoGSO: true})
	needRing(t, b)
	frames := batch(t, a, b, 256, 100)
	if n, err := a.Write(frames, 0); n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	bufs := make([][]byte, len(frames))
	for i := range bufs {
		bufs[i] = make([]byte, 1600)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	got := 0
	var drops uint64
	for got+int(drops) < len(frames) {
		n, err := b.Read(bufs[got:], sizes[got:], 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, len(frames)))
		}
		got += n
		drops = b.Stats().RxKernelDrop
	}
	if got+int(drops) != len(frames) || got < 40 {
		t.Fatalf("%d frames read and %d dropped of %d, with 40 slots", got, drops, len(frames))
	}
	// The first 40 fill the empty ring; after that a frame lands if the
	// reader has freed a slot by then. What is read is in sending order.
	j := 0
	for i := range got {
		for j < len(frames) && !linktest.Equivalent(bufs[i][:sizes[i]], frames[j], link.FormatEthernet) {
			j++
		}
		if j == len(frames) || (i < 40 && j != i) {
			t.Fatalf("frame %d read is not frame %d sent or a later one", i, i)
		}
		j++
	}
	t.Logf("%d read, %d dropped by the kernel", got, drops)
}

// TestRingGSOInSlot: a UDP GSO super-frame small enough for a slot (4
// segments of 216 bytes from the udp link: a short run goes in powers of
// two, vnet's short runs) comes through the ring itself, no copy, and is
// split like one read from the socket.
func TestRingGSOInSlot(t *testing.T) {
	u, b, h := udpToPacket(t, netcfg.TwoHostsOptions{IPv6: true}, true, false)
	needRing(t, b)
	peer := &ipPeer{addr: h.B.Addr6}
	frames := make([][]byte, 4)
	for i := range frames {
		f, err := linktest.Frame(u, peer, bth.PSN(100+i), 200)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	if n, err := u.Write(frames, 0); n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	readFrames(t, b, len(frames), 2, 1600, func(i int, f []byte) {
		checkSegment(t, i, f, frames[i], true, 0)
		var p wire.Packet
		if err := p.Decode(f, wire.FramingEthernet); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	})
	if us, st := u.Stats(), b.Stats(); us.TxGSOBatches != 1 || st.RxGSO != 1 || st.RxGSOSegments != 4 ||
		st.RxRingFrames != 1 || st.RxCopies != 0 || st.RxSyscalls != 0 {
		t.Fatalf("sent %d GSO batches; receiver %+v: want 1 super-frame from one slot split in 4, no copy", us.TxGSOBatches, st)
	}
}

// TestRingFallback breaks the ring setup in two ways the kernel itself
// refuses (a tpacket_req whose tp_frame_nr is not blocks x frames per
// block: EINVAL from packet_set_ring; an mmap longer than the ring: EINVAL
// from packet_mmap) and checks that Open falls back to recvmmsg, says why,
// and the endpoint receives (a ring left behind would take every frame).
func TestRingFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		brk  ringBreak
	}{
		{"req", ringBreakReq},
		{"mmap", ringBreakMmap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testRingBreak = tc.brk
			a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{})
			testRingBreak = 0
			if b.Ring() || !errors.Is(b.RingErr(), unix.EINVAL) || b.Stats().RingFrames != 0 {
				t.Fatalf("Ring() %v, RingErr %v", b.Ring(), b.RingErr())
			}
			t.Logf("fallback: %v", b.RingErr())
			frames := batch(t, a, b, 32, 300)
			bufs := make([][]byte, 32)
			for i := range bufs {
				bufs[i] = make([]byte, 1600)
			}
			sizes := make([]int, len(bufs))
			wd := linktest.NewWatchdog(linktest.Timeout, b)
			defer wd.Stop()
			roundTrip(t, wd, a, b, frames, bufs, sizes)
			for i := range frames {
				if !linktest.Equivalent(bufs[i][:sizes[i]], frames[i], link.FormatEthernet) {
					t.Fatalf("frame %d differs", i)
				}
			}
			if st := b.Stats(); st.RxSyscalls == 0 || st.RxRingFrames != 0 {
				t.Fatalf("stats %+v: want frames by recvmmsg", st)
			}
			linktest.Poller(t, a, b)
		})
	}
}

// TestRingCloseWhileTryReading closes endpoints while another goroutine
// spins in TryRead on their ring with frames arriving: every TryRead must
// end with link.ErrClosed, none may touch the ring after Close unmapped
// it (that would crash the test binary).
func TestRingCloseWhileTryReading(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 20 {
		b, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
		if err != nil {
			t.Fatal(err)
		}
		needRing(t, b)
		frames := batch(t, a, b, 8, 64)
		done := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			bufs := [][]byte{make([]byte, 1600), make([]byte, 1600)}
			sizes := make([]int, 2)
			close(started)
			for {
				if _, err := b.TryRead(bufs, sizes, 0); err != nil {
					done <- err
					return
				}
			}
		}()
		<-started
		if _, err := a.Write(frames, 0); err != nil {
			t.Fatal(err)
		}
		// Close once the spinner has taken at least one frame, so that
		// it is in the loop over the ring, not before it.
		wd := linktest.NewWatchdog(linktest.Timeout, b)
		for b.Stats().RxRingFrames == 0 && !wd.Fired() {
		}
		wd.Stop()
		if wd.Fired() {
			t.Fatalf("round %d: no frame taken from the ring in %v", i, linktest.Timeout)
		}
		b.Close()
		if err := <-done; !errors.Is(err, link.ErrClosed) {
			t.Fatalf("round %d: TryRead after Close: %v, want link.ErrClosed", i, err)
		}
	}
}

// TestRingZeroAllocsNoRing is TestZeroAllocs on the recvmmsg path
// (TestZeroAllocs runs on the ring).
func TestRingZeroAllocsNoRing(t *testing.T) {
	a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoRing: true})
	allocFree(t, a, b, 256)
}
