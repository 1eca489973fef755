package wire_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// sample picks one golden packet per (source, opcode, kind): enough to cover
// every header layout without flipping every byte of 1800 packets.
func sample(t testing.TB) []golden {
	var out []golden
	seen := map[string]bool{}
	var p wire.Packet
	for _, g := range goldenPackets(t) {
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		src := g.name[:len(g.name)-len(itoa(0))]
		for i := len(g.name) - 1; i >= 0; i-- {
			if g.name[i] == '#' {
				src = g.name[:i]
				break
			}
		}
		key := src + "/" + p.Opcode.String() + "/" + p.Kind.String()
		if !seen[key] {
			seen[key] = true
			out = append(out, g)
		}
	}
	return out
}

// maskedBits returns, for byte i of a decoded packet, the bits the ICRC
// masks (wire-spec §5.2); 0 for fully covered bytes. Offsets are relative
// to the packet's headers.
func maskedBits(p *wire.Packet, i int) byte {
	if i == p.BTHOff+4 {
		return 0xFF // BTH resv8a
	}
	switch p.Kind {
	case wire.KindRoCEv2IPv4:
		switch i - p.IPOff {
		case 1, 8, 10, 11, 20 + 6, 20 + 7:
			return 0xFF
		}
	case wire.KindRoCEv2IPv6:
		switch i - p.IPOff {
		case 0:
			return 0x0F
		case 1, 2, 3, 7, 40 + 6, 40 + 7:
			return 0xFF
		}
	case wire.KindRoCEv1:
		switch i - p.GRHOff {
		case 0:
			return 0x0F
		case 1, 2, 3, 7:
			return 0xFF
		}
	}
	return 0
}

// Flipping any single covered byte outside the masked fields makes Decode
// fail; flipping a masked field does not (RoCE: TOS, TTL, IP checksum, UDP
// checksum, BTH byte 4, IPv6/GRH TC, FL, hop limit). MACs are not covered
// by any CRC and may change freely; Ethernet padding after End is ignored.
func TestFlipBytes(t *testing.T) {
	var p, q wire.Packet
	for _, g := range sample(t) {
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatal(err)
		}
		f := append([]byte(nil), g.frame...)
		for i := range f {
			m := maskedBits(&p, i)
			unmasked := ^m
			if p.Kind == wire.KindIB || p.Kind == wire.KindIBGRH {
				unmasked = 0xFF // the VCRC covers everything
			}
			macs := p.EthOff >= 0 && i < p.EthOff+12
			if unmasked != 0 {
				f[i] ^= unmasked
				err := q.Decode(f, g.framing)
				f[i] ^= unmasked
				switch {
				case macs || i >= p.End:
					if err != nil {
						t.Errorf("%s: flipping uncovered byte %d: %v", g.name, i, err)
					}
				case err == nil:
					t.Errorf("%s: flipping covered byte %d (%#x) went unnoticed", g.name, i, unmasked)
				case i >= p.BTHOff && p.Kind != wire.KindIB && p.Kind != wire.KindIBGRH &&
					!errors.Is(err, wire.ErrBadICRC) && !errors.Is(err, wire.ErrUnknownOpcode) &&
					!errors.Is(err, wire.ErrBadPad) && !errors.Is(err, wire.ErrBadLength):
					t.Errorf("%s: flipping BTH..ICRC byte %d: unexpected %v", g.name, i, err)
				}
			}
			if m != 0 && p.VCRCOff < 0 { // IB: see TestIBVariantFields
				f[i] ^= m
				if err := q.Decode(f, g.framing); err != nil {
					t.Errorf("%s: flipping masked byte %d (%#x): %v", g.name, i, m, err)
				}
				f[i] ^= m
			}
		}
	}
}

// Native IB: VL, and for LNH=3 the whole LRH, are masked in the ICRC; with
// the VCRC recomputed (as every switch hop does) the packet stays valid.
func TestIBVariantFields(t *testing.T) {
	n := 0
	var p wire.Packet
	for _, g := range sample(t) {
		if g.framing != wire.FramingIB {
			continue
		}
		n++
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatal(err)
		}
		f := append([]byte(nil), g.frame...)
		resign := func() {
			v := wire.CRC16IB(f[:p.VCRCOff])
			f[p.VCRCOff], f[p.VCRCOff+1] = byte(v), byte(v>>8)
		}
		f[0] ^= 0xF0 // VL
		resign()
		if err := p.Decode(f, g.framing); err != nil {
			t.Errorf("%s: VL change: %v", g.name, err)
		}
		f[0] ^= 0xF0
		f[p.BTHOff+4] ^= 0xC0 // FECN, BECN
		resign()
		if err := p.Decode(f, g.framing); err != nil {
			t.Errorf("%s: FECN/BECN change: %v", g.name, err)
		}
		f[p.BTHOff+4] ^= 0xC0
		f[2] ^= 0x01 // DLID: covered unless LNH=3
		resign()
		err := p.Decode(f, g.framing)
		if p.Kind == wire.KindIBGRH && err != nil {
			t.Errorf("%s: DLID change with GRH: %v", g.name, err)
		}
		if p.Kind == wire.KindIB && err != wire.ErrBadICRC {
			t.Errorf("%s: DLID change without GRH: %v, want ErrBadICRC", g.name, err)
		}
	}
	if n == 0 {
		t.Skip("no native IB vectors present (../shared/vectors)")
	}
}

// Every prefix of every golden packet is an error, never a panic.
func TestTruncation(t *testing.T) {
	var p wire.Packet
	for _, g := range sample(t) {
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatal(err)
		}
		end := p.End
		for i := range end {
			if err := p.Decode(g.frame[:i], g.framing); err == nil {
				t.Errorf("%s: prefix of %d bytes (End %d) decoded", g.name, i, end)
			}
		}
		if p.Decode(g.frame, g.framing); p.IPOff >= 0 {
			ip := g.frame[p.IPOff:p.End]
			for i := range ip {
				if err := p.Decode(ip[:i], wire.FramingIP); err == nil {
					t.Errorf("%s: IP prefix of %d bytes decoded", g.name, i)
				}
			}
		}
		// BTH-first framing has no length field: only "no panic".
		if p.Decode(g.frame, g.framing); p.BTHOff >= 0 {
			tr := g.frame[p.BTHOff:p.End]
			for i := range tr {
				_ = p.Decode(tr[:i], wire.FramingBTH)
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	cnp := "e41d2dab2bc2 7cfe90643b32 0800 45c2003c 718c4000 4011 9161 0a001101 0a001201 0000 12b7 0028 0000 81 00 ffff 40000118 00000000 00000000000000000000000000000000 82fd002a"
	tests := []struct {
		name    string
		framing wire.Framing
		frame   string
		edit    func(b []byte)
		want    error
	}{
		{"ok", wire.FramingEthernet, cnp, nil, nil},
		{"empty", wire.FramingEthernet, "", nil, wire.ErrShort},
		{"arp", wire.FramingEthernet, cnp, func(b []byte) { b[12], b[13] = 0x08, 0x06 }, wire.ErrNotRoCE},
		{"tcp", wire.FramingEthernet, cnp, func(b []byte) { b[23] = 6 }, wire.ErrNotRoCE},
		{"udp other port", wire.FramingEthernet, cnp, func(b []byte) { b[37] = 0xb8 }, wire.ErrNotRoCE},
		{"ip version", wire.FramingEthernet, cnp, func(b []byte) { b[14] = 0x65 }, wire.ErrHeaderMismatch},
		{"ihl 4", wire.FramingEthernet, cnp, func(b []byte) { b[14] = 0x44 }, wire.ErrBadLength},
		{"ip options", wire.FramingEthernet, "e41d2dab2bc2 7cfe90643b32 0800 46c20040 718c4000 4011 9161 0a001101 0a001201 01010101 0000 12b7 0028 0000 81 00 ffff 40000118 00000000 00000000000000000000000000000000 82fd002a", nil, wire.ErrHeaderMismatch},
		{"more fragments", wire.FramingEthernet, cnp, func(b []byte) { b[20] = 0x20 }, wire.ErrHeaderMismatch},
		{"later fragment", wire.FramingEthernet, cnp, func(b []byte) { b[21] = 0x01 }, wire.ErrNotRoCE},
		{"total length long", wire.FramingEthernet, cnp, func(b []byte) { b[17] = 0x3d }, wire.ErrShort},
		{"total length tiny", wire.FramingEthernet, cnp, func(b []byte) { b[16], b[17] = 0, 27 }, wire.ErrBadLength},
		{"udp length", wire.FramingEthernet, cnp, func(b []byte) { b[39] = 0x24 }, wire.ErrBadLength},
		{"lengths too small for BTH", wire.FramingEthernet, cnp, func(b []byte) { b[17], b[39] = 0x2b, 0x17 }, wire.ErrBadLength},
		{"unknown opcode", wire.FramingEthernet, cnp, func(b []byte) { b[42] = 0x15 }, wire.ErrUnknownOpcode},
		{"headers beyond length", wire.FramingEthernet, cnp, func(b []byte) { b[42] = 0x13 }, wire.ErrBadLength},
		{"pad beyond payload", wire.FramingEthernet, cnp, func(b []byte) { b[43] = 0x30 }, wire.ErrBadPad},
		{"icrc", wire.FramingEthernet, cnp, func(b []byte) { b[70] ^= 1 }, wire.ErrBadICRC},
		{"padding after End ignored", wire.FramingEthernet, cnp + " 0000", nil, nil},
		{"tver reported, not rejected", wire.FramingBTH, "0401ffff 00000011 80000001 00000000", nil, nil},
		{"bth short", wire.FramingBTH, "0400ffff 00000011 80000001", nil, wire.ErrShort},
		{"bth eth beyond", wire.FramingBTH, "0c00ffff 00000011 80000001 00000000", nil, wire.ErrShort},
		{"ip framing bad version", wire.FramingIP, "55", nil, wire.ErrHeaderMismatch},
		{"unknown framing", wire.Framing(9), "00", nil, wire.ErrHeaderMismatch},
		{"ib raw lnh", wire.FramingIB, "00 00 0004 0007 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081", nil, wire.ErrNotRoCE},
		{"ib pktlen long", wire.FramingIB, "00 02 0004 0008 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081", nil, wire.ErrShort},
		{"ib pktlen short", wire.FramingIB, "00 02 0004 0003 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081", nil, wire.ErrBadLength},
		{"ib vcrc", wire.FramingIB, "00 02 0004 0007 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3082", nil, wire.ErrBadVCRC},
		{"ib grh nxthdr", wire.FramingIB, "00 03 0004 0010 0001" + " 60000000 0010 1a40" + " 00000000000000000000000000000000 00000000000000000000000000000000" + " 11 40 ffff 00870408 00d40a55 00000000 0000", nil, wire.ErrHeaderMismatch},
		{"roce1 nxthdr", wire.FramingEthernet, "7cfe90753cd8 7cfe90753cd8 8915 60200000 0014 1c40 00000000000000000000ffff0f000002 00000000000000000000ffff0f000002 1140ffff 00000109 00a788c0 00000005 25f0c038", nil, wire.ErrHeaderMismatch},
		{"roce1 paylen", wire.FramingEthernet, "7cfe90753cd8 7cfe90753cd8 8915 60200000 0018 1b40 00000000000000000000ffff0f000002 00000000000000000000ffff0f000002 1140ffff 00000109 00a788c0 00000005 25f0c038", nil, wire.ErrShort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := unhex(t, tc.frame)
			if tc.edit != nil {
				tc.edit(b)
			}
			var p wire.Packet
			err := p.Decode(b, tc.framing)
			if err != tc.want {
				t.Fatalf("Decode = %v, want %v (%v)", err, tc.want, wire.Explain(b, tc.framing))
			}
			xe := wire.Explain(b, tc.framing)
			if (xe == nil) != (tc.want == nil) || (xe != nil && !errors.Is(xe, tc.want)) {
				t.Errorf("Explain = %v, want it to wrap %v", xe, tc.want)
			}
			var de *wire.DecodeError
			if xe != nil && (!errors.As(xe, &de) || de.Off < 0 || de.Off > len(b) || de.Detail == "") {
				t.Errorf("Explain = %#v: want a *DecodeError with offset and detail", xe)
			}
		})
	}
}

// On ErrBadICRC the descriptor is completely filled in.
func TestBadICRCFillsPacket(t *testing.T) {
	var good, bad wire.Packet
	for _, g := range sample(t) {
		good.Decode(g.frame, g.framing)
		f := append([]byte(nil), g.frame...)
		f[good.ICRCOff] ^= 0x80
		if good.VCRCOff >= 0 {
			v := wire.CRC16IB(f[:good.VCRCOff])
			f[good.VCRCOff], f[good.VCRCOff+1] = byte(v), byte(v>>8)
		}
		if err := bad.Decode(f, g.framing); err != wire.ErrBadICRC {
			t.Fatalf("%s: %v, want ErrBadICRC", g.name, err)
		}
		if pub(&bad) != pub(&good) {
			t.Errorf("%s: descriptor differs on ErrBadICRC:\n got %+v\nwant %+v", g.name, pub(&bad), pub(&good))
		}
	}
}

type pubPacket struct {
	Framing                                               wire.Framing
	Kind                                                  wire.Kind
	EthOff, IPOff, UDPOff, LRHOff, GRHOff, BTHOff         int
	PayloadOff, PayloadLen, PadCnt, ICRCOff, VCRCOff, End int
	VLAN                                                  bool
	VLANTCI                                               uint16
	Opcode                                                bth.Opcode
	PSN                                                   bth.PSN
	DestQP                                                bth.QPN
	Info                                                  *bth.OpInfo
	ICRCChecked                                           bool
}

// pub returns the exported fields of p except Frame, as a comparable value.
func pub(p *wire.Packet) pubPacket {
	return pubPacket{p.Framing, p.Kind, p.EthOff, p.IPOff, p.UDPOff, p.LRHOff, p.GRHOff, p.BTHOff,
		p.PayloadOff, p.PayloadLen, p.PadCnt, p.ICRCOff, p.VCRCOff, p.End, p.VLAN, p.VLANTCI,
		p.Opcode, p.PSN, p.DestQP, p.Info, p.ICRCChecked}
}
