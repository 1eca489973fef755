package vnet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// roce builds a RoCEv2 IP packet (RC SEND_ONLY, payload bytes) with a full
// UDP checksum, IPv4 identification id, by wire.Finish.
func roce(t testing.TB, v6 bool, id uint16, psn bth.PSN, payload int) []byte {
	t.Helper()
	return roceOp(t, bth.OpRCSendOnly, v6, id, psn, payload)
}

// roceOp is roce with opcode op (payload counts the bytes after the BTH,
// e.g. 4 for an ACK's AETH).
func roceOp(t testing.TB, op bth.Opcode, v6 bool, id uint16, psn bth.PSN, payload int) []byte {
	t.Helper()
	a := &wire.Addr{Kind: wire.KindRoCEv2IPv4, SrcIP: netip.MustParseAddr("10.0.0.1"),
		DstIP: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, DontFragment: true,
		SrcPort: 0xC001, IPID: id, UDPChecksum: true}
	if v6 {
		a.Kind, a.SrcIP, a.DstIP = wire.KindRoCEv2IPv6, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	hr := a.Headroom(wire.FramingIP)
	pad := (4 - payload%4) % 4
	n := bth.HeaderLen + payload + pad
	buf := make([]byte, hr+n+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: op, PadCnt: pad, PKey: 0xFFFF, DestQP: 0x11, PSN: psn})
	for i := range payload {
		buf[hr+bth.HeaderLen+i] = byte(int(psn)*7 + i)
	}
	f, err := wire.Finish(buf, hr, n, wire.FramingIP, a)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// superOf concatenates frames into the super-packet a UDP GSO sender
// would hand the kernel: the first frame's headers with the total lengths,
// then every frame's UDP payload.
func superOf(frames [][]byte) []byte {
	hl := 28
	if frames[0][0]>>4 == 6 {
		hl = 48
	}
	s := bytes.Clone(frames[0][:hl])
	for _, f := range frames {
		s = append(s, f[hl:]...)
	}
	binary.BigEndian.PutUint16(s[hl-4:], uint16(len(s)-hl+8))
	if hl == 28 {
		binary.BigEndian.PutUint16(s[2:], uint16(len(s)))
		SetIPv4Checksum(s[:20])
	} else {
		binary.BigEndian.PutUint16(s[4:], uint16(len(s)-40))
	}
	return s
}

func TestHdrRoundTrip(t *testing.T) {
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4 | GSOECN, HdrLen: 28, GSOSize: 1052, CsumStart: 20, CsumOffset: 6}
	var b [HdrLen]byte
	h.Encode(b[:])
	var g Hdr
	g.Decode(b[:])
	if g != h || !g.IsUDPL4() {
		t.Fatalf("round trip: %+v, want %+v (IsUDPL4 %v)", g, h, g.IsUDPL4())
	}
	if (&Hdr{GSOType: GSOTCPv4}).IsUDPL4() {
		t.Fatal("TCPv4 reported as UDP_L4")
	}
}

// TestSegment: splitting a super-packet gives back, byte for byte, the
// packets wire.Finish built with IDs id0+i (IPv4) and full UDP checksums:
// lengths, IDs, IP header checksums, UDP checksums and ICRCs.
func TestSegment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v6       bool
		payloads []int
	}{
		{"v4/equal", false, []int{1024, 1024, 1024, 1024}},
		{"v4/short-last", false, []int{4096, 4096, 100}},
		{"v4/odd", false, []int{33, 33, 33}},
		{"v6/equal", true, []int{1024, 1024, 1024}},
		{"v6/short-last", true, []int{4096, 4096, 4096, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var frames [][]byte
			for i, p := range tc.payloads {
				frames = append(frames, roce(t, tc.v6, 0xFFFE+uint16(i), bth.PSN(i), p)) // the ID wraps
			}
			hl := 28
			if tc.v6 {
				hl = 48
			}
			s := superOf(frames)
			l, err := ParseUDPGSO(s, 0, len(frames[0])-hl)
			if err != nil {
				t.Fatal(err)
			}
			if l.Segs != len(frames) || l.V6 != tc.v6 {
				t.Fatalf("layout %+v", l)
			}
			out := make([]byte, 9000)
			for i, want := range frames {
				n := l.Segment(s, i, out)
				if !bytes.Equal(out[:n], want) {
					t.Fatalf("segment %d:\n got %x\nwant %x", i, out[:n], want)
				}
				var p wire.Packet
				if err := p.Decode(out[:n], wire.FramingIP); err != nil {
					t.Fatalf("segment %d: %v", i, err)
				}
			}
			if n := l.Segment(s, 0, out[:len(frames[0])-1]); n != 0 {
				t.Fatalf("Segment into a short buffer = %d, want 0", n)
			}
		})
	}
}

func TestParseUDPGSORejects(t *testing.T) {
	f := superOf([][]byte{roce(t, false, 0, 0, 64), roce(t, false, 1, 1, 64)})
	mod := func(fn func([]byte)) []byte { g := bytes.Clone(f); fn(g); return g }
	for _, tc := range []struct {
		name string
		f    []byte
		gso  int
	}{
		{"gso 0", f, 0},
		{"short", f[:30], 64},
		{"not UDP", mod(func(g []byte) { g[9] = 6 }), 64},
		{"fragment", mod(func(g []byte) { g[6] |= 0x20 }), 64},
		{"IP length", mod(func(g []byte) { g[3]++ }), 64},
		{"UDP length", mod(func(g []byte) { g[25]++ }), 64},
		{"version 5", mod(func(g []byte) { g[0] = 0x55 }), 64},
		{"truncated", f[:len(f)-1], 64},
	} {
		if _, err := ParseUDPGSO(tc.f, 0, tc.gso); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestIDDelta: correcting the ICRC for a new IPv4 ID by linearity equals
// recomputing it (wire.Decode verifies the ICRC), for IDs that set every
// value of each byte of the ID.
func TestIDDelta(t *testing.T) {
	var c IDCache
	ids := []uint16{1, 2, 0x00FF, 0x8000, 0xFFFF, 0x1234}
	for i := range 256 {
		ids = append(ids, uint16(i)*0x0101^0x5A00, uint16(i)<<8|uint16(255-i))
	}
	for _, payload := range []int{0, 1, 256, 1024, 4096} {
		f := roce(t, false, 0, 5, payload)
		for _, id := range ids {
			g := bytes.Clone(f)
			binary.BigEndian.PutUint16(g[4:], id)
			SetIPv4Checksum(g[:20])
			icrc := binary.LittleEndian.Uint32(g[len(g)-4:]) ^ c.Get(len(g)).Delta(id)
			binary.LittleEndian.PutUint32(g[len(g)-4:], icrc)
			var p wire.Packet
			if err := p.Decode(g, wire.FramingIP); err != nil {
				t.Fatalf("payload %d, ID %#x: %v", payload, id, err)
			}
			want := roce(t, false, id, 5, payload)
			if !bytes.Equal(g[len(g)-4:], want[len(want)-4:]) {
				t.Fatalf("payload %d, ID %#x: ICRC %x, want %x", payload, id, g[len(g)-4:], want[len(want)-4:])
			}
		}
	}
}

// TestFinishChecksum: a CHECKSUM_PARTIAL packet (pseudo-header sum in the
// field) finished in place carries the full checksum.
func TestFinishChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		want := roce(t, v6, 7, 1, 301)
		hl := 28
		if v6 {
			hl = 48
		}
		f := bytes.Clone(want)
		binary.BigEndian.PutUint16(f[hl-2:], Fold(PseudoSum(f, len(f)-hl+8)))
		if !FinishChecksum(f, hl-8, 6, 20) || !bytes.Equal(f, want) {
			t.Fatalf("v6=%v: finished %x, want %x", v6, f[hl-2:hl], want[hl-2:hl])
		}
		if FinishChecksum(f, hl-8, len(f), 20) || FinishChecksum(f, 4, 6, 20) {
			t.Fatalf("v6=%v: offsets outside the frame accepted", v6)
		}
	}
}

func TestSum(t *testing.T) {
	// RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold(Sum(0, b)); got != 0xddf2 {
		t.Fatalf("Fold(Sum) = %#x, want 0xddf2", got)
	}
	// Every length, word-by-word reference.
	long := make([]byte, 200)
	for i := range long {
		long[i] = byte(i*31 + 7)
	}
	for n := range len(long) {
		var ref uint64
		for i := 0; i < n; i += 2 {
			w := uint64(long[i]) << 8
			if i+1 < n {
				w |= uint64(long[i+1])
			}
			ref += w
		}
		if Fold(Sum(0, long[:n])) != Fold(ref) {
			t.Fatalf("length %d: %#x, want %#x", n, Fold(Sum(0, long[:n])), Fold(ref))
		}
	}
	// Carries out of 64 bits: 64 KiB of 0xFF from a near-full accumulator
	// (the 16-bit reference sums 32768 words of 0xFFFF).
	ff := bytes.Repeat([]byte{0xFF}, 65536)
	for _, s0 := range []uint64{0, 1, 0xFFFF, ^uint64(0) - 5} {
		ref := s0%0xFFFF + 32768*0xFFFF
		if got, want := Fold(Sum(s0, ff)), Fold(ref); got != want {
			t.Fatalf("0xFF x 64 KiB from %#x: %#x, want %#x", s0, got, want)
		}
	}
}

// FuzzSegment: any frame and segment size either parse as a super-packet
// whose segments are well-formed UDP packets carrying its payload in order,
// or are refused; never a panic.
func FuzzSegment(f *testing.F) {
	f.Add(superOf([][]byte{roce(f, false, 0, 0, 64), roce(f, false, 1, 1, 64), roce(f, false, 2, 2, 10)}), uint16(64+12+4))
	f.Add(superOf([][]byte{roce(f, true, 0, 0, 100), roce(f, true, 0, 1, 100)}), uint16(100+12+4))
	f.Add([]byte{0x45, 0, 0, 28}, uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, gso uint16) {
		l, err := ParseUDPGSO(b, 0, int(gso))
		if err != nil {
			return
		}
		out := make([]byte, 65536)
		var payload []byte
		for s := range l.Segs {
			n := l.Segment(b, s, out)
			if n == 0 {
				t.Fatalf("segment %d of %d: no room in 64 KiB", s, l.Segs)
			}
			seg := out[:n]
			if int(binary.BigEndian.Uint16(seg[l.UDP+4:])) != n-l.UDP {
				t.Fatalf("segment %d: UDP length %d for %d bytes", s, binary.BigEndian.Uint16(seg[l.UDP+4:]), n-l.UDP)
			}
			if binary.BigEndian.Uint16(seg[l.UDP+6:]) != UDPChecksum(seg) {
				t.Fatalf("segment %d: bad UDP checksum", s)
			}
			if !l.V6 && Fold(Sum(0, seg[:l.UDP])) != 0xFFFF {
				t.Fatalf("segment %d: bad IPv4 header checksum", s)
			}
			payload = append(payload, seg[l.Payload:]...)
		}
		if !bytes.Equal(payload, b[l.Payload:]) {
			t.Fatal("segments do not carry the payload in order")
		}
	})
}

func BenchmarkUDPChecksum(b *testing.B) {
	f := roce(b, false, 0, 1, 4096)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		UDPChecksum(f)
	}
}
