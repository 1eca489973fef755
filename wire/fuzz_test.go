package wire_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/wire"
)

// checkPacket verifies that a descriptor Decode accepted (or rejected only
// for a CRC) lies inside the frame and that every accessor works.
func checkPacket(t *testing.T, p *wire.Packet, frame []byte) {
	t.Helper()
	in := func(off, n int) bool { return off >= 0 && n >= 0 && off+n <= len(frame) }
	if !in(p.BTHOff, 12) || !in(p.PayloadOff, p.PayloadLen) || !in(p.ICRCOff, 4) || p.End > len(frame) ||
		p.PadCnt < 0 || p.PadCnt > 3 || p.PayloadOff+p.PayloadLen+p.PadCnt != p.ICRCOff || p.Info == nil {
		t.Fatalf("descriptor out of bounds: %+v (frame %d bytes)", pub(p), len(frame))
	}
	if p.VCRCOff >= 0 && (p.VCRCOff != p.ICRCOff+4 || p.End != p.VCRCOff+2) {
		t.Fatalf("VCRC offsets: %+v", pub(p))
	}
	if p.VCRCOff < 0 && p.End != p.ICRCOff+4 {
		t.Fatalf("End %d, ICRCOff %d", p.End, p.ICRCOff)
	}
	_ = p.BTH().PSN()
	for _, h := range [][]byte{p.RETH(), p.AETH(), p.DETH(), p.AtomicETH(), p.AtomicAckETH(),
		p.ImmDt(), p.IETH(), p.RDETH(), p.FETH()} {
		if h != nil && (len(h) == 0 || &h[len(h)-1] == nil) {
			t.Fatal("bad ETH slice")
		}
	}
	if len(p.Transport()) != p.ICRCOff-p.BTHOff || len(p.Payload()) != p.PayloadLen {
		t.Fatal("Transport/Payload lengths")
	}
	var g [40]byte
	p.VerbsGRH(&g)
	_, _, _, _ = p.SrcIP(), p.DstIP(), p.SGID(), p.DGID()
	_ = wire.ICRC(frame, p)
	_ = p.Addr()
}

// canonical reports whether Finish can reproduce the frame's lower headers
// exactly: fields Finish always writes one way (IPv4 header checksum, flags
// other than DF, UDP checksum, LRH reserved bits) hold those values.
func canonical(p *wire.Packet, f []byte) bool {
	switch p.Kind {
	case wire.KindRoCEv2IPv4:
		h := wire.IPv4(f[p.IPOff:])
		if !h.IsChecksumValid() || binary.BigEndian.Uint16(f[p.IPOff+6:])&^0x4000 != 0 {
			return false
		}
		u := wire.UDP(f[p.UDPOff:p.End])
		return u.Checksum() == 0 || u.Checksum() == u.CalculateChecksum(h.Src(), h.Dst())
	case wire.KindRoCEv2IPv6:
		h := wire.IPv6(f[p.IPOff:])
		u := wire.UDP(f[p.UDPOff:p.End])
		return u.Checksum() == 0 || u.Checksum() == u.CalculateChecksum(h.Src(), h.Dst())
	case wire.KindIB, wire.KindIBGRH:
		l := wire.LRH(f[p.LRHOff:])
		return l.Resv2() == 0 && l.Resv5() == 0
	}
	return true
}

func fuzzDecode(f *testing.F, framing wire.Framing) {
	for _, g := range goldenPackets(f) {
		var p wire.Packet
		if err := p.Decode(g.frame, g.framing); err != nil {
			f.Fatal(err)
		}
		switch framing {
		case g.framing:
			f.Add(g.frame)
		case wire.FramingIP:
			if p.IPOff >= 0 {
				f.Add(g.frame[p.IPOff:p.End])
			}
		case wire.FramingBTH:
			f.Add(g.frame[p.BTHOff:p.End])
		}
	}
	if framing == wire.FramingIB { // §5.5, present even without the shared vectors
		f.Add(unhex(f, "00 02 0004 0007 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081"))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p wire.Packet
		err := p.Decode(frame, framing)
		if err == wire.ErrBadICRC || err == wire.ErrBadVCRC {
			checkPacket(t, &p, frame)
			return
		}
		if err != nil {
			return
		}
		checkPacket(t, &p, frame)
		if framing == wire.FramingBTH {
			if p.ICRCChecked {
				t.Fatal("FramingBTH claims a checked ICRC")
			}
			a := p.Addr()
			if _, err := wire.Finish(make([]byte, 64), 0, 12, wire.FramingBTH, &a); err != wire.ErrHeaderMismatch {
				t.Fatalf("Finish(KindBTH) = %v", err)
			}
			return
		}
		start := max(p.EthOff, 0)
		got := rebuild(t, &p, framing)
		if canonical(&p, frame) {
			if !bytes.Equal(got, frame[start:p.End]) {
				t.Fatalf("round trip differs\n got %x\nwant %x", got, frame[start:p.End])
			}
			return
		}
		// Non-canonical lower headers: the rebuilt frame is still valid and
		// carries the same transport bytes and addressing.
		var q wire.Packet
		if err := q.Decode(got, framing); err != nil {
			if err == wire.ErrBadICRC && (p.Kind == wire.KindRoCEv2IPv4 || p.Kind == wire.KindIB) {
				return // a covered non-canonical bit (IPv4 flag, LRH reserved) was normalised
			}
			t.Fatalf("rebuilt frame does not decode: %v", err)
		}
		if !bytes.Equal(q.Transport(), p.Transport()) || q.Addr() != p.Addr() {
			t.Fatal("rebuilt frame carries different transport or addressing")
		}
	})
}

func FuzzDecodeEthernet(f *testing.F) { fuzzDecode(f, wire.FramingEthernet) }
func FuzzDecodeIP(f *testing.F)       { fuzzDecode(f, wire.FramingIP) }
func FuzzDecodeIB(f *testing.F)       { fuzzDecode(f, wire.FramingIB) }
func FuzzDecodeBTH(f *testing.F)      { fuzzDecode(f, wire.FramingBTH) }
