package wire_test

import (
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// testAddr is a typical rxe-like RoCEv2/IPv4 addressing.
func testAddr() wire.Addr {
	return wire.Addr{
		Kind:   wire.KindRoCEv2IPv4,
		SrcMAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 3}, DstMAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 2},
		SrcIP: netip.MustParseAddr("10.77.0.3"), DstIP: netip.MustParseAddr("10.77.0.2"),
		HopLimit: 64, DontFragment: true, IPID: 0x1234,
		SrcPort: wire.UDPSourcePort(0x29, 0x27),
	}
}

// sendOnly returns a buffer with headroom holding an RC SEND ONLY of
// payload bytes at wire.MaxHeadroom, and the transport length.
func sendOnly(payload int) ([]byte, int) {
	pad := (4 - payload%4) % 4
	n := bth.HeaderLen + payload + pad
	buf := make([]byte, wire.MaxHeadroom+n+wire.Tailroom)
	h := bth.Header(buf[wire.MaxHeadroom:])
	h.Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PadCnt: pad, PKey: bth.DefaultPKey, DestQP: 0x27, AckReq: true, PSN: 0xFFFFFF})
	for i := range payload {
		buf[wire.MaxHeadroom+bth.HeaderLen+i] = byte(i)
	}
	return buf, n
}

func TestZeroAllocs(t *testing.T) {
	a := testAddr()
	buf, n := sendOnly(4096)
	frame, err := wire.Finish(buf, wire.MaxHeadroom, n, wire.FramingEthernet, &a)
	if err != nil {
		t.Fatal(err)
	}
	ib := wire.Addr{Kind: wire.KindIBGRH, DLID: 4, SLID: 1}
	v6 := a
	v6.Kind = wire.KindRoCEv2IPv6
	v6.SrcIP, v6.DstIP = netip.MustParseAddr("fd77::3"), netip.MustParseAddr("fd77::2")
	v6.UDPChecksum = true
	finish := func(f wire.Framing, a *wire.Addr) func() {
		b, n := sendOnly(4096) // own buffer: Finish rewrites the headroom
		return func() {
			if _, err := wire.Finish(b, wire.MaxHeadroom, n, f, a); err != nil {
				panic(err)
			}
		}
	}
	var p, bad wire.Packet
	if err := p.Decode(frame, wire.FramingEthernet); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		fn   func()
	}{
		{"Decode", func() {
			var q wire.Packet
			if q.Decode(frame, wire.FramingEthernet) != nil {
				panic("decode")
			}
		}},
		{"DecodeError", func() {
			if bad.Decode(frame[:40], wire.FramingEthernet) != wire.ErrShort {
				panic("decode")
			}
		}},
		{"Finish", finish(wire.FramingEthernet, &a)},
		{"FinishIPv6Checksum", finish(wire.FramingIP, &v6)},
		{"FinishBTH", finish(wire.FramingBTH, &a)},
		{"FinishIBGRH", finish(wire.FramingIB, &ib)},
		{"ICRC", func() { _ = wire.ICRC(frame, &p) }},
		{"Accessors", func() {
			_ = p.Payload()
			_ = p.Transport()
			_ = p.RETH()
			_ = p.Addr()
			_, _ = p.SrcIP(), p.SGID()
			var g [40]byte
			p.VerbsGRH(&g)
		}},
	}
	for _, c := range cases {
		if got := testing.AllocsPerRun(100, c.fn); got != 0 {
			t.Errorf("%s: %v allocs per run, want 0", c.name, got)
		}
	}
}

func benchDecode(b *testing.B, payload int) {
	a := testAddr()
	buf, n := sendOnly(payload)
	frame, err := wire.Finish(buf, wire.MaxHeadroom, n, wire.FramingEthernet, &a)
	if err != nil {
		b.Fatal(err)
	}
	var p wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := p.Decode(frame, wire.FramingEthernet); err != nil {
			b.Fatal(err)
		}
	}
}

func benchFinish(b *testing.B, payload int) {
	a := testAddr()
	buf, n := sendOnly(payload)
	b.ReportAllocs()
	b.SetBytes(int64(wire.Headroom(a.Kind, wire.FramingEthernet) + n + 4))
	for b.Loop() {
		if _, err := wire.Finish(buf, wire.MaxHeadroom, n, wire.FramingEthernet, &a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	b.Run("64", func(b *testing.B) { benchDecode(b, 64) })
	b.Run("4096", func(b *testing.B) { benchDecode(b, 4096) })
}

func BenchmarkFinish(b *testing.B) {
	b.Run("64", func(b *testing.B) { benchFinish(b, 64) })
	b.Run("4096", func(b *testing.B) { benchFinish(b, 4096) })
}

// icrcInputLen is the number of bytes the ICRC of a 4096-byte RoCEv2/IPv4
// SEND ONLY covers: 8 × 0xFF + IPv4 + UDP + BTH + payload.
const icrcInputLen = 8 + wire.IPv4Len + wire.UDPLen + bth.HeaderLen + 4096

// BenchmarkICRC4096 and BenchmarkCRC32IEEE4096 run in the same invocation;
// the ICRC (mask + table CRC of the 40-byte prefix, then crc32 in place)
// should cost at most 1.25× a plain crc32.ChecksumIEEE over as many bytes.
func BenchmarkICRC4096(b *testing.B) {
	a := testAddr()
	buf, n := sendOnly(4096)
	frame, _ := wire.Finish(buf, wire.MaxHeadroom, n, wire.FramingEthernet, &a)
	var p wire.Packet
	if err := p.Decode(frame, wire.FramingEthernet); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(icrcInputLen)
	var sink uint32
	for b.Loop() {
		sink += wire.ICRC(frame, &p)
	}
	_ = sink
}

func BenchmarkCRC32IEEE4096(b *testing.B) {
	data := make([]byte, icrcInputLen)
	b.ReportAllocs()
	b.SetBytes(icrcInputLen)
	var sink uint32
	for b.Loop() {
		sink += crc32.ChecksumIEEE(data)
	}
	_ = sink
}

func BenchmarkCRC16IB4096(b *testing.B) {
	data := make([]byte, 4096+8+12+4)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		_ = wire.CRC16IB(data)
	}
}
