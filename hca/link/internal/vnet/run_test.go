package vnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// withEth puts an untagged Ethernet header before IP packet p.
func withEth(p []byte) []byte {
	f := make([]byte, 14+len(p))
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	et := uint16(0x0800)
	if p[0]>>4 == 6 {
		et = 0x86DD
	}
	binary.BigEndian.PutUint16(f[12:], et)
	copy(f[14:], p)
	return f
}

// TestRunsRoundTrip builds super-packets with Runs (no L2 header as for a
// TUN, an Ethernet header as for a packet socket), lays each out as the
// kernel receives it (header then the iovec pieces), segments it as the
// kernel would and checks that every segment is its frame again with a
// valid ICRC: the ID patch, the header lengths and the virtio_net_hdr
// offsets all agree.
func TestRunsRoundTrip(t *testing.T) {
	for _, l2 := range []int{0, 14} {
		for _, v6 := range []bool{false, true} {
			for _, seq := range []bool{false, true} {
				t.Run(fmt.Sprintf("l2=%d/v6=%v/seqids=%v", l2, v6, seq), func(t *testing.T) {
					testRunsRoundTrip(t, l2, v6, seq)
				})
			}
		}
	}
}

func testRunsRoundTrip(t *testing.T, l2 int, v6, seq bool) {
	const n = 74 // over MaxRunSegments: two runs (the second over one RoCE packet)
	frames := make([][]byte, n+1)
	for i := range frames {
		size := 512 // 64 fit 64 KiB: the segment limit ends the first run
		if i == n-1 {
			size = 200 // a shorter last packet ends the second run
		}
		id := uint16(0)
		if seq {
			id = uint16(7 + i%MaxRunSegments)
		}
		p := roce(t, v6, id, bth.PSN(100+i), size)
		if l2 > 0 {
			p = withEth(p)
		}
		frames[i] = p
	}
	// Frame n has another UDP source port (another flow): alone.
	ip := 20
	if v6 {
		ip = 40
	}
	binary.BigEndian.PutUint16(frames[n][l2+ip:], 5000)
	r := Runs{L2: l2, USO4: true, USO6: true}
	framing := wire.FramingIP
	if l2 > 0 {
		framing = wire.FramingEthernet
	}
	wantRuns := [][2]int{{0, MaxRunSegments}, {MaxRunSegments, n}, {n, n + 1}}
	var p wire.Packet
	for k, i := 0, 0; i < len(frames); k++ {
		j, hl := r.Next(frames, 0, i)
		if k >= len(wantRuns) || i != wantRuns[k][0] || j != wantRuns[k][1] {
			t.Fatalf("message %d: frames [%d,%d), want %v", k, i, j, wantRuns)
		}
		if j == i+1 {
			if hl != 0 {
				t.Fatalf("frame %d alone with header length %d", i, hl)
			}
			i = j
			continue
		}
		run := frames[i:j]
		slot := make([]byte, HeaderRoom(l2))
		hn := r.Header(slot, run, 0, hl)
		var h Hdr
		h.Decode(slot)
		if h.Flags != FlagNeedsCsum || h.GSOType != GSOUDPL4 || int(h.HdrLen) != l2+hl ||
			int(h.CsumStart) != l2+hl-8 || h.CsumOffset != 6 || int(h.GSOSize) != len(run[0])-l2-hl {
			t.Fatalf("virtio_net_hdr %+v for l2 %d hl %d", h, l2, hl)
		}
		super := append([]byte(nil), slot[HdrLen:hn]...)
		for s := range run {
			c := make([]byte, 4)
			pay, patched := r.Payload(run, 0, hl, s, c)
			if patched != (!v6 && !seq && s > 0) {
				t.Fatalf("segment %d: patched %v", s, patched)
			}
			super = append(super, pay...)
			if patched {
				super = append(super, c...)
			}
		}
		// The kernel completes the partial checksum before segmenting;
		// Segment writes a full one anyway, so only the layout matters.
		lay, err := ParseUDPGSO(super, l2, int(h.GSOSize))
		if err != nil {
			t.Fatal(err)
		}
		if lay.Segs != len(run) {
			t.Fatalf("%d segments, want %d", lay.Segs, len(run))
		}
		out := make([]byte, 2048)
		for s := range run {
			m := lay.Segment(super, s, out)
			seg, want := out[:m], run[s]
			if err := p.Decode(seg, framing); err != nil {
				t.Fatalf("run at %d, segment %d: %v", i, s, err)
			}
			// Equal but for the ID, the checksums and (patched) the ICRC.
			g, w := bytes.Clone(seg), bytes.Clone(want)
			for _, b := range [][]byte{g, w} {
				if !v6 {
					clear(b[l2+4 : l2+6])
					clear(b[l2+10 : l2+12])
					clear(b[l2+26 : l2+28])
				} else {
					clear(b[l2+46 : l2+48])
				}
				clear(b[len(b)-4:])
			}
			if !bytes.Equal(g, w) {
				t.Fatalf("run at %d, segment %d differs from its frame", i, s)
			}
		}
		i = j
	}
}

// TestRunsShortRun: a run whose payload fits one RoCE packet goes whole
// only as a power of two of packets of one length (short.go), IPv4 and
// IPv6 alike (an AF_XDP receiver sees both whole); longer runs are
// super-packets as they come.
func TestRunsShortRun(t *testing.T) {
	for _, tc := range []struct {
		v6        bool
		size, n   int
		lastShort bool
		want      int
	}{
		{false, 256, 3, false, 2}, {true, 256, 3, false, 2}, {false, 256, 4, false, 4},
		{false, 256, 4, true, 2}, {true, 256, 2, true, 1}, {false, 2048, 3, false, 3},
		{true, 2048, 3, true, 3}, {false, 2048, 2, false, 2},
	} {
		frames := make([][]byte, tc.n)
		for i := range frames {
			size := tc.size
			if tc.lastShort && i == tc.n-1 {
				size /= 2
			}
			frames[i] = withEth(roce(t, tc.v6, 0, bth.PSN(i), size))
		}
		r := Runs{L2: 14, USO4: true, USO6: true}
		if j, _ := r.Next(frames, 0, 0); j != tc.want {
			t.Errorf("v6 %v, %d x %d (last shorter %v): run of %d, want %d", tc.v6, tc.n, tc.size, tc.lastShort, j, tc.want)
		}
	}
	// Led by an ACK (20 bytes, its only length) a short run takes any
	// packets of that length: the receiver knows the segment size from the
	// opcode. Led by the 2-byte SEND (as long, but it could be longer) it
	// is a power of two of one length, which the receiver confirms by the
	// first segment's ICRC.
	ack := withEth(roceOp(t, bth.OpRCAcknowledge, false, 0, 5, 4))
	send := withEth(roce(t, false, 0, 6, 2))
	if len(ack) != len(send) {
		t.Fatalf("ACK %d bytes, 2-byte SEND %d", len(ack), len(send))
	}
	r := Runs{L2: 14, USO4: true, USO6: true}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   int
	}{
		{"ACK, SEND, SEND", [][]byte{ack, send, send}, 3},
		{"ACK, ACK", [][]byte{ack, ack}, 2},
		{"SEND, ACK", [][]byte{send, ack}, 2},
		{"SEND, ACK, ACK", [][]byte{send, ack, ack}, 2},
	} {
		if j, hl := r.Next(tc.frames, 0, 0); j != tc.want || (j > 1) != (hl > 0) {
			t.Errorf("%s: run of %d (header %d), want %d", tc.name, j, hl, tc.want)
		}
	}
}

// TestRunsNotRoCE: frames that cannot start a super-packet (not RoCEv2,
// VLAN-tagged, RoCEv1 ethertype, a family not offered) go alone.
func TestRunsNotRoCE(t *testing.T) {
	base := withEth(roce(t, false, 0, 1, 1024))
	for _, tc := range []struct {
		name string
		mod  func(f []byte)
		r    Runs
	}{
		{"vlan", func(f []byte) { binary.BigEndian.PutUint16(f[12:], 0x8100) }, Runs{L2: 14, USO4: true}},
		{"rocev1", func(f []byte) { binary.BigEndian.PutUint16(f[12:], 0x8915) }, Runs{L2: 14, USO4: true}},
		{"port", func(f []byte) { binary.BigEndian.PutUint16(f[14+22:], 4792) }, Runs{L2: 14, USO4: true}},
		{"fragment", func(f []byte) { f[14+6] |= 0x20 }, Runs{L2: 14, USO4: true}},
		{"no-uso4", func(f []byte) {}, Runs{L2: 14, USO6: true}},
		{"short", func(f []byte) {}, Runs{L2: 14, USO4: true}},
	} {
		frames := make([][]byte, 4)
		for i := range frames {
			frames[i] = bytes.Clone(base)
			tc.mod(frames[i])
		}
		if tc.name == "short" {
			frames[0] = frames[0][:20]
		}
		if j, hl := tc.r.Next(frames, 0, 0); j != 1 || hl != 0 {
			t.Errorf("%s: run [0,%d) header %d, want a frame alone", tc.name, j, hl)
		}
	}
}

// TestRunsZeroAllocs: grouping, header and payload pieces allocate nothing
// once the ICRC basis of the length is cached.
func TestRunsZeroAllocs(t *testing.T) {
	frames := make([][]byte, 32)
	for i := range frames {
		frames[i] = withEth(roce(t, false, 0, bth.PSN(i), 1024))
	}
	r := Runs{L2: 14, USO4: true, USO6: true}
	slot := make([]byte, HeaderRoom(14))
	c := make([]byte, 4)
	run := func() {
		j, hl := r.Next(frames, 0, 0)
		r.Header(slot, frames[:j], 0, hl)
		for s := range j {
			r.Payload(frames[:j], 0, hl, s, c)
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestRunsTailBalanced: an IPv4 run cut at the 64 KiB cap leaves the rest
// of its flow long enough to be a super-packet too (leaveTail): 64 frames
// of 1024-byte payloads go as 60 + 4, not 62 + 1 + 1.
func TestRunsTailBalanced(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int // run lengths
	}{
		{64, []int{60, 4}},
		{63, []int{59, 4}},
		{40, []int{40}},
	} {
		frames := make([][]byte, tc.n)
		for i := range frames {
			frames[i] = withEth(roce(t, false, 0, bth.PSN(i), 1024))
		}
		r := Runs{L2: 14, USO4: true, USO6: true}
		var got []int
		for i := 0; i < len(frames); {
			j, hl := r.Next(frames, 0, i)
			if (j-i > 1) != (hl > 0) {
				t.Fatalf("%d frames: run [%d,%d) with header length %d", tc.n, i, j, hl)
			}
			got = append(got, j-i)
			i = j
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%d frames: runs %v, want %v", tc.n, got, tc.want)
		}
	}
}
