package vnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/bth"
)

// TestFixedRunSegment: only what a sender's fixed-length run can be.
func TestFixedRunSegment(t *testing.T) {
	seg := func(op bth.Opcode, n int) []byte {
		b := make([]byte, n)
		b[0] = byte(op)
		return b
	}
	cat := func(ps ...[]byte) []byte {
		var out []byte
		for _, p := range ps {
			out = append(out, p...)
		}
		return out
	}
	ack := seg(bth.OpRCAcknowledge, 20)
	many := ack
	for range 2*MaxRunSegments - 1 {
		many = cat(many, ack)
	}
	for _, tc := range []struct {
		name string
		p    []byte
		want int
	}{
		{"one ACK", ack, 0},
		{"two ACKs", cat(ack, ack), 20},
		{"ACK and 2-byte SEND_ONLY", cat(ack, seg(bth.OpRCSendOnly, 20)), 20},
		{"ACK and a short last", cat(ack, ack, seg(bth.OpRCSendOnly, 16)), 20},
		{"atomic ACK pair", cat(seg(bth.OpRCAtomicAcknowledge, 28), seg(bth.OpRCAtomicAcknowledge, 28)), 28},
		{"READ request pair", cat(seg(bth.OpRCRDMAReadRequest, 32), seg(bth.OpRCRDMAReadRequest, 32)), 32},
		{"led by a payload opcode", cat(seg(bth.OpRCSendOnly, 20), ack), 0},
		{"unknown opcode in segment 2", cat(ack, seg(0xFF, 20)), 0},
		{"last segment shorter than BTH and ICRC", cat(ack, seg(bth.OpRCSendOnly, 15)), 0},
		{"too short", ack[:10], 0},
		{"unknown leader", cat(seg(0xFF, 20), ack), 0},
		{"128 segments", many, 20},
		{"129 segments", cat(many, ack), 0},
	} {
		if got := FixedRunSegment(tc.p); got != tc.want {
			t.Errorf("%s: FixedRunSegment = %d, want %d", tc.name, got, tc.want)
		}
	}
	// A leader's length is its headers and the ICRC.
	if n := FixedSegment(binary.BigEndian.AppendUint32([]byte{byte(bth.OpRCAcknowledge)}, 0)); n != 20 {
		t.Errorf("FixedSegment(ACK) = %d, want 20", n)
	}
}

// TestMinRunPayload: no UDP payload shorter than MinRunPayload is a run,
// whatever its bytes (the receivers skip the header checks for those), and
// the shortest runs senders build are exactly that long.
func TestMinRunPayload(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ops := []bth.Opcode{bth.OpRCAcknowledge, bth.OpRCSendOnly, bth.OpRCRDMAReadRequest, bth.OpUDSendOnly}
	for n := 0; n < MinRunPayload; n++ {
		for range 200 {
			f := make([]byte, 28+n)
			binary.BigEndian.PutUint16(f[0:], 0x4500)
			for i := 28; i < len(f); i++ {
				f[i] = byte(rng.Uint32())
			}
			if n > 0 && rng.IntN(2) == 0 {
				f[28] = byte(ops[rng.IntN(len(ops))])
			}
			if g := FixedRunSegment(f[28:]); g != 0 {
				t.Fatalf("%d-byte payload % x: FixedRunSegment = %d", n, f[28:], g)
			}
			if g := EqualRunSegment(f, 0, 28); g != 0 {
				t.Fatalf("%d-byte payload % x: EqualRunSegment = %d", n, f[28:], g)
			}
		}
	}
	if f := shortRun(t, false, 0, 2, 0); len(f)-28 != MinRunPayload || EqualRunSegment(f, 0, 28) != MinRunPayload/2 {
		t.Errorf("two empty SENDs: %d bytes of UDP payload, MinRunPayload %d, not found as a run", len(f)-28, MinRunPayload)
	}
}

// TestShortRunLen: the largest power of two of a short run's packets of
// the first one's length.
func TestShortRunLen(t *testing.T) {
	for _, tc := range []struct {
		n         int
		lastShort bool
		want      int
	}{
		{1, false, 1}, {2, false, 2}, {2, true, 1}, {3, false, 2}, {3, true, 2},
		{4, false, 4}, {5, true, 4}, {7, false, 4}, {8, false, 8}, {63, false, 32},
		{64, false, 64}, {65, true, 64}, {100, false, 64},
	} {
		if got := ShortRunLen(tc.n, tc.lastShort); got != tc.want {
			t.Errorf("ShortRunLen(%d, %v) = %d, want %d", tc.n, tc.lastShort, got, tc.want)
		}
	}
}

// shortRun returns the super-packet of k SEND_ONLYs of payload bytes each
// (IPv4 IDs id0+i, as the kernel numbers the segments) with l2 bytes of
// Ethernet header when l2 is 14.
func shortRun(t *testing.T, v6 bool, l2, k, payload int) []byte {
	t.Helper()
	frames := make([][]byte, k)
	for i := range frames {
		frames[i] = roce(t, v6, uint16(40+i), bth.PSN(300+i), payload)
	}
	s := superOf(frames)
	if l2 > 0 {
		s = withEth(s)
	}
	return s
}

// TestEqualRunSegment: super-packets of 2^k packets of one length give
// that length, whatever the family, link header, count and size; single
// packets, other counts and a packet with a BTH planted where a segment
// would start give 0; the frame is left as it was.
func TestEqualRunSegment(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		hl := 28
		if v6 {
			hl = 48
		}
		for _, l2 := range []int{0, 14} {
			for _, k := range []int{1, 2, 3, 4, 6, 8, 16, 64} {
				for _, payload := range []int{0, 2, 32, 64, 200} {
					name := fmt.Sprintf("v6=%v/l2=%d/%dx%d", v6, l2, k, payload)
					g := 12 + payload + (4-payload%4)%4 + 4 // BTH, payload, pad, ICRC
					if (len(shortRun(t, v6, l2, 1, payload))-l2-hl)*k > MaxRoCEPacket {
						continue
					}
					f := shortRun(t, v6, l2, k, payload)
					was := bytes.Clone(f)
					want := 0
					if k&(k-1) == 0 && k >= 2 {
						want = g
					}
					if got := EqualRunSegment(f, l2, hl); got != want {
						t.Errorf("%s: EqualRunSegment = %d, want %d", name, got, want)
					}
					if got := ShortRunSegment(f, l2, hl); got != want {
						t.Errorf("%s: ShortRunSegment = %d, want %d", name, got, want)
					}
					if !bytes.Equal(f, was) {
						t.Errorf("%s: the frame was changed", name)
					}
				}
			}
		}
	}
	// One packet with a BTH of its own flow planted where the second of
	// two segments would start: the first half's ICRC does not verify.
	f := roce(t, false, 7, 9, 108) // 124 bytes of UDP payload: 62 each
	p := f[28:]
	copy(p[62:74], p[:12])
	p[62+11]++ // the next PSN
	if g := EqualRunSegment(f, 0, 28); g != 0 {
		t.Errorf("planted BTH: EqualRunSegment = %d, want 0", g)
	}
	// The receive path's check allocates nothing.
	run := shortRun(t, false, 14, 8, 2)
	if a := testing.AllocsPerRun(100, func() { ShortRunSegment(run, 14, 28) }); a != 0 {
		t.Errorf("ShortRunSegment: %v allocations per call", a)
	}
	// A fixed-length leader wins: an ACK and a SEND of its length.
	ack := roceOp(t, bth.OpRCAcknowledge, false, 5, 5, 4)
	send := roce(t, false, 6, 6, 2)
	if g := ShortRunSegment(superOf([][]byte{ack, send}), 0, 28); g != 20 {
		t.Errorf("ACK, SEND: ShortRunSegment = %d, want 20", g)
	}
	if g := ShortRunSegment(superOf([][]byte{send, ack}), 0, 28); g != 20 {
		t.Errorf("SEND, ACK: ShortRunSegment = %d, want 20 (two of one length)", g)
	}
}

// TestShortRunsRoundTrip: whatever short run Next lets go whole (random
// sizes and counts, IPv4 and IPv6), the receiver's rule finds its segment
// size.
func TestShortRunsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for range 300 {
		v6 := rng.IntN(2) == 1
		hl := 28
		if v6 {
			hl = 48
		}
		size := rng.IntN(300)
		n := 1 + rng.IntN(40)
		frames := make([][]byte, n)
		for i := range frames {
			s := size
			if i == n-1 && rng.IntN(2) == 0 {
				s = rng.IntN(size + 1) // maybe a shorter last
			}
			frames[i] = roce(t, v6, uint16(i), bth.PSN(i), s)
		}
		r := Runs{USO4: true, USO6: true}
		for i := 0; i < n; {
			j, h := r.Next(frames, 0, i)
			run := frames[i:j]
			if j > i+1 {
				if h != hl {
					t.Fatalf("v6 %v: header length %d, want %d", v6, h, hl)
				}
				super := superOf(run)
				if len(super)-hl <= MaxRoCEPacket {
					want := len(run[0]) - hl
					if g := ShortRunSegment(super, 0, hl); g != want {
						t.Fatalf("v6 %v, %d frames of %d (last %d): ShortRunSegment = %d, want %d",
							v6, len(run), len(run[0]), len(run[len(run)-1]), g, want)
					}
					checked++
				}
			}
			i = j
		}
	}
	if checked < 100 {
		t.Fatalf("only %d short runs went whole", checked)
	}
}

// FuzzShortRunSegment: any UDP payload under IPv4 or IPv6 headers that
// describe it: no panic, the frame left as it was, and a segment size
// only where one fits (at least a BTH and an ICRC, at most 2*MaxRunSegments
// segments, dividing the payload unless a fixed-length packet leads).
func FuzzShortRunSegment(f *testing.F) {
	f.Add(superOf([][]byte{roce(f, false, 1, 1, 2), roce(f, false, 2, 2, 2)})[28:], false)
	f.Add(superOf([][]byte{roce(f, true, 0, 1, 100), roce(f, true, 0, 2, 100), roce(f, true, 0, 3, 100), roce(f, true, 0, 4, 100)})[48:], true)
	f.Add(superOf([][]byte{roceOp(f, bth.OpRCAcknowledge, false, 0, 5, 4), roce(f, false, 0, 6, 2)})[28:], false)
	f.Add(make([]byte, 64), false)
	f.Fuzz(func(t *testing.T, p []byte, v6 bool) {
		if len(p) > MaxRoCEPacket {
			return
		}
		head := roce(t, v6, 9, 9, 0)
		hl := 28
		if v6 {
			hl = 48
		}
		fr := superOf([][]byte{append(head[:hl:hl], p...)})
		was := bytes.Clone(fr)
		g := ShortRunSegment(fr, 0, hl)
		if !bytes.Equal(fr, was) {
			t.Fatal("the frame was changed")
		}
		if g == 0 {
			return
		}
		if g < bth.HeaderLen+4 || g >= len(p) || (len(p)+g-1)/g > 2*MaxRunSegments {
			t.Fatalf("segment size %d for %d bytes", g, len(p))
		}
		if FixedRunSegment(p) == 0 && len(p)%g != 0 {
			t.Fatalf("segment size %d does not divide %d bytes", g, len(p))
		}
	})
}
