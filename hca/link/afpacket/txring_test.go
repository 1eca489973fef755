package afpacket

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// needTxRing fails t unless e sends through its transmit ring: the ring is
// the default, and both this host's and the CI guest's kernels take it.
func needTxRing(t testing.TB, e *Endpoint) {
	t.Helper()
	if !e.TxRing() {
		t.Fatalf("%s sends with sendmmsg only: %v", e.Interface(), e.TxRingErr())
	}
}

// writeRead writes frames on a and reads them back, in order and intact,
// on b.
func writeRead(t *testing.T, a, b *Endpoint, frames [][]byte) {
	t.Helper()
	if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readFrames(t, b, len(frames), 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, frames[got], link.FormatEthernet) })
}

// openTxRing opens a on h's host A with cfg, which must give it its
// transmit ring, and a plain b on host B, both closed when t ends.
func openTxRing(t *testing.T, h *netcfg.Hosts, cfg Config) (a, b *Endpoint) {
	t.Helper()
	cfg.Interface, cfg.NetNS = h.A.Ifname, h.A.NS
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	needTxRing(t, a)
	if b, err = Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func TestTxRingGeometry(t *testing.T) {
	tests := []struct {
		mtu, bytes, page int
		gso              bool
		want             unix.TpacketReq
	}{
		// 32 + 10 + 65593 bytes rounded up to 17 pages; 15 per 1 MiB block.
		{1500, DefaultTxRingBytes, 4096, true, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 4, Frame_size: 69632, Frame_nr: 60}},
		{9000, 1 << 20, 4096, true, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 1, Frame_size: 69632, Frame_nr: 15}},
		{1500, 1, 4096, true, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 1, Frame_size: 69632, Frame_nr: 15}},
		// 64 KiB pages: two pages a slot, 8 per block.
		{1500, 4 << 20, 65536, true, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 4, Frame_size: 131072, Frame_nr: 32}},
		// NoGSO: 32 + 10 + 14 + 4 + MTU, 16-byte aligned.
		{1500, 1 << 20, 4096, false, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 1, Frame_size: 1568, Frame_nr: 668}},
		{9000, 2 << 20, 4096, false, unix.TpacketReq{Block_size: 1 << 20, Block_nr: 2, Frame_size: 9072, Frame_nr: 2 * 115}},
	}
	for _, tc := range tests {
		got := txRingGeometry(tc.mtu, tc.bytes, tc.page, tc.gso)
		if got != tc.want {
			t.Errorf("txRingGeometry(%d, %d, %d, %v) = %+v, want %+v", tc.mtu, tc.bytes, tc.page, tc.gso, got, tc.want)
		}
		// A super-packet's fragments (after the header tpacket_fill_skb
		// copies) must fit MAX_SKB_FRAGS (17) pages.
		if tc.gso && int(got.Frame_size) > 17*tc.page && tc.page == 4096 {
			t.Errorf("slot of %d bytes spans more than 17 pages", got.Frame_size)
		}
	}
	if txDataOff != 32 {
		t.Errorf("txDataOff = %d, want 32 (TPACKET2_HDRLEN 52 - sizeof(sockaddr_ll) 20)", txDataOff)
	}
}

func TestTxRingConfigErrors(t *testing.T) {
	for _, n := range []int{-1, maxTxRingBytes + 1} {
		_, err := Open(Config{Interface: "lo", TxRingBytes: n})
		if err == nil || !strings.Contains(err.Error(), "transmit ring of") {
			t.Errorf("TxRingBytes %d: %v", n, err)
		}
	}
}

// TestLinktestTxRing is the conformance suite with both ends sending
// through their transmit rings (and the default receive rings);
// TestLinktestNoTxRing on the sendmmsg path.
func TestLinktestTxRing(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{})
		needTxRing(t, a)
		needTxRing(t, b)
		return a, b
	})
}

func TestLinktestNoTxRing(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoTxRing: true})
		if a.TxRing() || b.TxRing() || a.TxRingErr() != nil {
			t.Fatalf("transmit ring on with NoTxRing (%v)", a.TxRingErr())
		}
		return a, b
	})
}

// checkFrame fails t unless f is want as the far end receives it: the
// same frame (but for the IPv4 ID segmentation assigns and checksums),
// decoding with a valid ICRC.
func checkFrame(t *testing.T, i int, f, want []byte, format link.Format) {
	t.Helper()
	var p wire.Packet
	framing := wire.FramingEthernet
	if format == link.FormatIP {
		framing = wire.FramingIP
	}
	if err := p.Decode(f, framing); err != nil {
		t.Fatalf("frame %d: %v", i, err)
	}
	if !linktest.Equivalent(f, want, format) {
		t.Fatalf("frame %d is not the frame sent:\n got %x\nwant %x", i, f[:min(64, len(f))], want[:min(64, len(want))])
	}
}

// TestTxRingSend sends runs of equal-size frames (super-packets) and lone
// frames through the transmit ring to a packet socket across a veth. The
// first write probes GSO by sendmmsg; the second goes through the ring
// whole. Every frame must arrive as sent with a valid ICRC, IPv4 IDs as
// segmentation numbers them.
func TestTxRingSend(t *testing.T) {
	for _, tc := range gsoSendCases {
		t.Run(tc.name, func(t *testing.T) {
			h, a, b := tc.open(t)
			needTxRing(t, a)
			const run = 40
			frames := gsoBatch(t, h, tc.v6, tc.seqIDs, run, tc.pay)
			n := len(frames)
			per := perRun(len(frames[0]), tc.v6)
			for round := range 2 {
				before := a.Stats()
				gso := a.GSO() // as the write starts
				if w, err := a.Write(frames, 0); w != n || err != nil {
					t.Fatalf("round %d: Write = %d, %v", round, w, err)
				}
				readFrames(t, b, n, 16, tc.mtu+ethHdr, func(got int, f []byte) {
					checkFrame(t, got, f, frames[got], link.FormatEthernet)
					if !tc.v6 {
						checkRunID(t, f, frames, got, run, per, gso && a.GSO())
					}
				})
				st := a.Stats()
				ring := st.TxRingFrames - before.TxRingFrames
				switch {
				case round == 1 && ring != uint64(n):
					t.Errorf("round 1: %d of %d frames through the ring: %+v", ring, n, st)
				case round == 0 && !tc.noGSO && ring != 0:
					// The run comes first: its super-packet probes GSO
					// by sendmmsg, with the rest of the batch.
					t.Errorf("round 0: %d frames through the ring before GSO was probed", ring)
				}
			}
			st, bs := a.Stats(), b.Stats()
			if st.TxFrames != uint64(2*n) || bs.RxFrames != uint64(2*n) || st.TxRingFull != 0 || st.TxDropped != 0 ||
				st.TxRingSkipped != 0 || bs.RxTooLarge+bs.RxMalformed+bs.RxRunt != 0 {
				t.Errorf("sender %+v\nreceiver %+v", st, bs)
			}
			if tc.noGSO {
				if st.TxGSO != 0 || st.TxRingFrames != uint64(2*n) {
					t.Errorf("NoGSO: %+v", st)
				}
				return
			}
			needGSO(t, a)
			runs := uint64((run + per - 1) / per)
			patched := uint64(0)
			if !tc.v6 && !tc.seqIDs {
				patched = run - runs
			}
			if st.TxGSO != 2*runs || st.TxGSOSegments != 2*run || st.TxICRCPatched != 2*patched || bs.RxGSO != 2*runs {
				t.Errorf("sent %d super-packets of %d segments (%d ICRCs patched), receiver split %d; want %d of %d (%d)",
					st.TxGSO, st.TxGSOSegments, st.TxICRCPatched, bs.RxGSO, 2*runs, 2*run, 2*patched)
			}
		})
	}
}

// TestTxRingToUDPLink sends super-packets through the transmit ring to the
// far kernel IP stack, where the udp link receives them (IPv4: its raw
// socket splits them; IPv6: the kernel segments them for its UDP socket).
func TestTxRingToUDPLink(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			h, a, u := openToUDPLink(t, v6)
			needTxRing(t, a)
			frames := gsoBatch(t, h, v6, false, 40, 1024)
			n := len(frames)
			for round := range 2 {
				if w, err := a.Write(frames, 0); w != n || err != nil {
					t.Fatalf("round %d: Write = %d, %v", round, w, err)
				}
				readFrames(t, u, n, 64, 2048, func(got int, f []byte) {
					checkFrame(t, got, f, frames[got][ethHdr:], link.FormatIP)
				})
			}
			st := a.Stats()
			if st.TxRingFrames != uint64(n) || st.TxFrames != uint64(2*n) {
				t.Errorf("want the second write through the ring: %+v", st)
			}
			needGSO(t, a)
			if st.TxGSO != 2 {
				t.Errorf("%d super-packets sent, want 2: %+v", st.TxGSO, st)
			}
		})
	}
}

// TestTxRingWrapAndFull sends many more frames than the ring has slots
// (15 in a 1 MiB ring), in batches of lone frames (each its own slot),
// runs and a mix, and reads each batch back in order. A batch of 64 lone
// frames fills the ring within the write (the 16th message finds the
// first slot still waiting for the kick), so at least 49 of its frames go
// by sendmmsg, after the 15 in the ring.
func TestTxRingWrapAndFull(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, TxRingBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	needTxRing(t, a)
	if st := a.Stats(); st.TxRingSlots != 15 {
		t.Fatalf("%d slots, want 15", st.TxRingSlots)
	}
	b, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// lone returns k frames of distinct sizes (no two form a run).
	psn := 0
	lone := func(k int) [][]byte {
		fs := make([][]byte, k)
		for i := range fs {
			psn++
			fs[i] = roceFrame(t, h.A.MAC, h.B.MAC, h.A.Addr, h.B.Addr, psn, 64+8*i, uint16(psn))
		}
		return fs
	}
	// Probe GSO first, so that runs go through the ring.
	probe := gsoBatch(t, h, false, false, 40, 1024)
	batches := [][][]byte{probe}
	full := 0 // lone frames of 64-frame batches that cannot be in the ring
	for i := range 30 {
		switch i % 3 {
		case 0:
			batches = append(batches, lone(7))
		case 1:
			batches = append(batches, gsoBatch(t, h, false, i%2 == 0, 20+i, 1024))
		case 2:
			batches = append(batches, lone(64))
			full += 64 - 15
		}
	}
	total := 0
	for bi, fs := range batches {
		if w, err := a.Write(fs, 0); w != len(fs) || err != nil {
			t.Fatalf("batch %d: Write = %d, %v", bi, w, err)
		}
		readFrames(t, b, len(fs), 64, 2048, func(got int, f []byte) {
			checkFrame(t, total+got, f, fs[got], link.FormatEthernet)
		})
		total += len(fs)
	}
	st, bs := a.Stats(), b.Stats()
	t.Logf("%d frames: %d through the ring (%d kicks), %d by sendmmsg for want of a slot", total, st.TxRingFrames, st.TxRingKicks, st.TxRingFull)
	if st.TxFrames != uint64(total) || bs.RxFrames != uint64(total) || st.TxDropped+st.TxRingSkipped != 0 {
		t.Errorf("sender %+v\nreceiver %+v", st, bs)
	}
	if st.TxRingFull < uint64(full) || st.TxRingFrames == 0 || st.TxRingFrames+st.TxRingFull > uint64(total) {
		t.Errorf("%d frames through the ring, %d for want of a slot (want at least %d)", st.TxRingFrames, st.TxRingFull, full)
	}
	if st.TxRingKicks < 30 {
		t.Errorf("%d kicks for 31 writes", st.TxRingKicks)
	}
}

// TestTxRingGSORefused: a kernel whose packet sockets refuse UDP_L4 (Linux
// < 6.2, played by refuseGSO on the probing sendmmsg) turns GSO off, and
// the ring then carries every frame alone.
func TestTxRingGSORefused(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	// 120 slots: the second round's frames find fresh ones, not slots
	// whose skbs the receiving side may still hold.
	a, b := openTxRing(t, h, Config{TxRingBytes: 8 << 20})
	refuseGSO = true
	t.Cleanup(func() { refuseGSO = false })
	frames := gsoBatch(t, h, false, false, 40, 1024)
	// Two lone frames first: they go through the ring, the run probes.
	frames = append(frames[40:], frames[:40]...)
	n := len(frames)
	for round := range 2 {
		if w, err := a.Write(frames, 0); w != n || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		readFrames(t, b, n, 64, 2048, func(got int, f []byte) {
			checkFrame(t, got, f, frames[got], link.FormatEthernet)
		})
		if a.GSO() {
			t.Fatal("GSO still on after EINVAL")
		}
	}
	// Round 0: 2 in the ring, the refused run and the rest by sendmmsg
	// then frame by frame through the ring; round 1 all in the ring.
	if st := a.Stats(); st.TxGSO != 0 || st.TxFrames != uint64(2*n) || st.TxRingFrames != uint64(2*n) || st.TxRingFull != 0 {
		t.Fatalf("sender %+v", st)
	}
}

// TestTxRingSkipped: a super-packet the kernel refuses in the ring (a
// virtio_net_hdr gso_type it does not know, testTxBadGSO) is skipped by
// tpacket_snd (PACKET_LOSS) without a trace in its status; the kick's byte
// count says so, GSO turns off, the run is lost and the lone frames of the
// same kick arrive. The next write goes frame by frame through the ring.
func TestTxRingSkipped(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, b := openTxRing(t, h, Config{})
	frames := gsoBatch(t, h, false, false, 40, 1024)
	n := len(frames)
	// Probe: the run by sendmmsg.
	writeRead(t, a, b, frames)
	needGSO(t, a)
	testTxBadGSO = true
	t.Cleanup(func() { testTxBadGSO = false })
	if w, err := a.Write(frames, 0); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readFrames(t, b, 2, 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, frames[40+got], link.FormatEthernet) })
	if a.GSO() {
		t.Fatal("GSO still on after the kernel skipped a super-packet")
	}
	st := a.Stats()
	if st.TxRingSkipped != 1 || st.TxGSO != 1 {
		t.Fatalf("sender %+v: want one kick short of a super-packet, one super-packet sent (the probe)", st)
	}
	writeRead(t, a, b, frames)
	if st2 := a.Stats(); st2.TxRingFrames-st.TxRingFrames != uint64(n) || st2.TxRingSkipped != 1 {
		t.Fatalf("sender %+v", st2)
	}
}

// TestTxRingDeviceDrop: with every RoCE frame dropped on egress
// (netcfg.AddLoss 100%: ENOBUFS from tpacket_snd, which would retry the
// slot), Write loses each frame and counts it, and the ring stays in step
// with the kernel: once the rule is gone every frame arrives.
func TestTxRingDeviceDrop(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, b := openTxRing(t, h, Config{})
	frames := gsoBatch(t, h, false, false, 40, 1024)
	n := len(frames)
	// Probe GSO, so that the run is one slot in the ring below.
	writeRead(t, a, b, frames)
	if err := netcfg.AddLoss(h.A.NS, h.A.Ifname, 100); err != nil {
		if errors.Is(err, netcfg.ErrNoNFT) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	before := a.Stats()
	for range 3 {
		if w, err := a.Write(frames, 0); w != n || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
	}
	st := a.Stats()
	if st.TxDropped-before.TxDropped != uint64(3*n) || st.TxFrames != before.TxFrames || st.TxRingFrames != before.TxRingFrames {
		t.Fatalf("after 3 writes into a 100%% drop: before %+v\nafter %+v", before, st)
	}
	if err := netcfg.RemoveLoss(h.A.NS); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		writeRead(t, a, b, frames)
	}
	if st2 := a.Stats(); st2.TxRingFrames-st.TxRingFrames != uint64(2*n) || st2.TxDropped != st.TxDropped {
		t.Fatalf("sender %+v", st2)
	}
	if bs := b.Stats(); bs.RxFrames != uint64(3*n) {
		t.Fatalf("receiver %+v: want %d frames, none of the dropped ones", bs, 3*n)
	}
}

// TestTxRingFallback: a ring the kernel refuses leaves Write on sendmmsg,
// with the reason; GOROCE_AFPACKET_TXRING=0 turns the ring off as
// Config.NoTxRing does.
func TestTxRingFallback(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	b, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	check := func(a *Endpoint) {
		t.Helper()
		if a.TxRing() {
			t.Fatal("transmit ring on")
		}
		frames := gsoBatch(t, h, false, false, 40, 1024)
		if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
		readFrames(t, b, len(frames), 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, frames[got], link.FormatEthernet) })
		if st := a.Stats(); st.TxRingFrames+st.TxRingKicks != 0 || st.TxRingSlots != 0 || st.TxFrames != uint64(len(frames)) {
			t.Fatalf("sender %+v", st)
		}
	}
	testTxRingBreak = true
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS})
	testTxRingBreak = false
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.TxRingErr(); err == nil || !strings.Contains(err.Error(), "PACKET_TX_RING") || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("TxRingErr = %v, want the kernel's EINVAL for PACKET_TX_RING", err)
	}
	check(a)
	a.Close()

	t.Setenv(txRingEnv, "0")
	a, err = Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.TxRingErr() != nil {
		t.Fatalf("TxRingErr = %v with the ring turned off", a.TxRingErr())
	}
	check(a)
}

// TestTxRingZeroAllocs: Writes through the ring (super-packets with
// patched ICRCs, and lone frames with GSO off) and the Reads that take
// them allocate nothing.
func TestTxRingZeroAllocs(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		t.Run(fmt.Sprintf("nogso=%v", noGSO), func(t *testing.T) {
			// A ring large enough that no slot is used twice: whether
			// the far side has freed a slot's skb is not for this test.
			a, b, _ := openPairCfg(t, netcfg.TwoHostsOptions{}, Config{NoGSO: noGSO, TxRingBytes: 8 << 20})
			needTxRing(t, a)
			frames := batch(t, a, b, a.BatchSize(), 1024)
			bufs := make([][]byte, len(frames))
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, len(bufs))
			wd := linktest.NewWatchdog(linktest.Timeout, b)
			defer wd.Stop()
			roundTrip(t, wd, a, b, frames, bufs, sizes) // warm up (and probe GSO)
			before := a.Stats()
			if n := testing.AllocsPerRun(50, func() { roundTrip(t, wd, a, b, frames, bufs, sizes) }); n != 0 {
				t.Fatalf("%v allocations per batch of %d frames", n, len(frames))
			}
			st := a.Stats()
			if st.TxRingFrames-before.TxRingFrames != 51*uint64(len(frames)) {
				t.Fatalf("not all through the ring: before %+v\nafter %+v", before, st)
			}
			if !noGSO && a.GSO() && st.TxICRCPatched == before.TxICRCPatched {
				t.Fatalf("no ICRC patched in the ring's super-packets: %+v", st)
			}
		})
	}
}

// TestTxRingSmallSendBuf: with a send buffer far smaller than the ring,
// tpacket_snd may stop mid-kick (sock_alloc_send_skb: the bytes so far, or
// EAGAIN) and leave slots SEND_REQUEST; Write then waits for writability
// and kicks again, and returns only once the kernel has every frame.
// Whether the buffer fills depends on how soon the far side frees the
// skbs, so this checks delivery and order, and logs the kicks.
func TestTxRingSmallSendBuf(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, b := openTxRing(t, h, Config{SendBuf: 4096})
	frames := gsoBatch(t, h, false, false, 40, 1024)
	n := len(frames)
	for round := range 20 {
		if w, err := a.Write(frames, 0); w != n || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		readFrames(t, b, n, 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, frames[got], link.FormatEthernet) })
	}
	st := a.Stats()
	t.Logf("%d frames, %d through the ring in %d kicks for 19 ring writes", st.TxFrames, st.TxRingFrames, st.TxRingKicks)
	if st.TxFrames != uint64(20*n) || st.TxDropped+st.TxRingSkipped != 0 || st.TxRingFrames == 0 {
		t.Fatalf("sender %+v", st)
	}
}

// TestTxRingHeldSkbs: a token bucket (tc tbf) on the sender's veth holds
// skbs, so their slots stay the kernel's (TP_STATUS_SENDING) and their
// bytes stay in the small send buffer while the next writes come: the
// kick stops short and Write waits for writability, or finds the ring full
// and sends the rest by sendmmsg. Five writes back to back, then every
// frame must arrive, in order. How much the bucket holds at each write is
// timing, so the paths taken are logged, not asserted.
func TestTxRingHeldSkbs(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	tc, err := exec.LookPath("tc")
	if err != nil {
		t.Skip("tc (iproute2) not installed")
	}
	var out []byte
	h.A.Do(t, func() error {
		out, err = exec.Command(tc, "qdisc", "add", "dev", h.A.Ifname, "root", "tbf",
			"rate", "50mbit", "burst", "70000", "limit", "4000000").CombinedOutput()
		return nil
	})
	if err != nil {
		t.Skipf("no tbf qdisc (sch_tbf): %v: %s", err, out)
	}
	a, b := openTxRing(t, h, Config{SendBuf: 4096, TxRingBytes: 1 << 20})
	frames := gsoBatch(t, h, false, false, 40, 1024)
	n := len(frames)
	// Probe GSO, then five writes before reading.
	writeRead(t, a, b, frames)
	const rounds = 5
	var all [][]byte
	for round := range rounds {
		fs := append(gsoBatch(t, h, false, round%2 == 0, 40, 1024), lonely(t, h, round)...)
		if w, err := a.Write(fs, 0); w != len(fs) || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		all = append(all, fs...)
	}
	readFrames(t, b, len(all), 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, all[got], link.FormatEthernet) })
	st, bs := a.Stats(), b.Stats()
	t.Logf("%d frames: %d through the ring in %d kicks for %d writes, %d by sendmmsg for want of a slot",
		st.TxFrames, st.TxRingFrames, st.TxRingKicks, rounds, st.TxRingFull)
	if st.TxFrames != uint64(n+len(all)) || bs.RxFrames != st.TxFrames || st.TxDropped+st.TxRingSkipped != 0 {
		t.Fatalf("sender %+v\nreceiver %+v", st, bs)
	}
}

// lonely returns 20 frames of distinct sizes: 20 slots.
func lonely(t *testing.T, h *netcfg.Hosts, round int) [][]byte {
	fs := make([][]byte, 20)
	for i := range fs {
		fs[i] = roceFrame(t, h.A.MAC, h.B.MAC, h.A.Addr, h.B.Addr, 3000+100*round+i, 64+8*i, uint16(i))
	}
	return fs
}

// TestTxRingKickError: a kick the kernel fails as a whole (ENETDOWN: the
// interface is down) fails the Write with no frame sent, and the slots it
// had filled are skipped by the next kick rather than sent late.
func TestTxRingKickError(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, b := openTxRing(t, h, Config{})
	stale := lonely(t, h, 0)
	if err := netcfg.SetDown(h.A.NS, h.A.Ifname); err != nil {
		t.Fatal(err)
	}
	w, err := a.Write(stale, 0)
	if w != 0 || !errors.Is(err, unix.ENETDOWN) {
		t.Fatalf("Write on a down interface = %d, %v; want 0, ENETDOWN", w, err)
	}
	if err := netcfg.SetUp(h.A.NS, h.A.Ifname); err != nil {
		t.Fatal(err)
	}
	fresh := lonely(t, h, 1)
	if w, err := a.Write(fresh, 0); w != len(fresh) || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	// Only the fresh frames: a stale one would come first.
	readFrames(t, b, len(fresh), 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, fresh[got], link.FormatEthernet) })
	st := a.Stats()
	if st.TxFrames != uint64(len(fresh)) || st.TxRingFrames != uint64(len(fresh)) || st.TxDropped != 0 {
		t.Fatalf("sender %+v", st)
	}
	// And nothing after them: one more frame is the next to arrive.
	one := lonely(t, h, 2)[:1]
	if w, err := a.Write(one, 0); w != 1 || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readFrames(t, b, 1, 64, 2048, func(got int, f []byte) { checkFrame(t, got, f, one[0], link.FormatEthernet) })
}
