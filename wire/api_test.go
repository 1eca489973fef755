package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

func TestKindFramingStrings(t *testing.T) {
	want := map[wire.Kind]string{wire.KindRoCEv2IPv4: "roce2-ipv4", wire.KindRoCEv2IPv6: "roce2-ipv6",
		wire.KindRoCEv1: "roce1", wire.KindIB: "ib", wire.KindIBGRH: "ib-grh", wire.KindBTH: "bth"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("%d: %q, want %q", k, k.String(), s)
		}
	}
	// Framing values equal hca/link Format values (FormatEthernet=1, IP=2, IB=3).
	if wire.FramingEthernet != 1 || wire.FramingIP != 2 || wire.FramingIB != 3 || wire.FramingBTH != 4 {
		t.Error("Framing values moved")
	}
}

func TestHeadroom(t *testing.T) {
	tests := []struct {
		k    wire.Kind
		f    wire.Framing
		want int
	}{
		{wire.KindRoCEv2IPv4, wire.FramingEthernet, 42},
		{wire.KindRoCEv2IPv6, wire.FramingEthernet, 62},
		{wire.KindRoCEv1, wire.FramingEthernet, 54},
		{wire.KindRoCEv2IPv4, wire.FramingIP, 28},
		{wire.KindRoCEv2IPv6, wire.FramingIP, 48},
		{wire.KindIB, wire.FramingIB, 8},
		{wire.KindIBGRH, wire.FramingIB, 48},
		{wire.KindRoCEv2IPv4, wire.FramingBTH, 0},
		{wire.KindBTH, wire.FramingBTH, 0},
		{wire.KindRoCEv1, wire.FramingIP, -1},
		{wire.KindIB, wire.FramingEthernet, -1},
		{wire.KindRoCEv2IPv4, wire.FramingIB, -1},
	}
	for _, tc := range tests {
		if got := wire.Headroom(tc.k, tc.f); got != tc.want {
			t.Errorf("Headroom(%v, %v) = %d, want %d", tc.k, tc.f, got, tc.want)
		}
	}
	a := wire.Addr{Kind: wire.KindRoCEv2IPv6, VLAN: true}
	if a.Headroom(wire.FramingEthernet) != 66 || a.Headroom(wire.FramingIP) != 48 || wire.MaxHeadroom != 66 {
		t.Error("VLAN headroom")
	}
}

// rxe sets the UDP source port of a connected QP to rdma_get_udp_sport(0,
// lqpn, rqpn). In every RC/UC capture each packet's source port must equal
// UDPSourcePort(sender QPN, DestQP) where the sender QPN is the DestQP of
// the packets flowing the other way.
func TestUDPSourcePortMatchesRxe(t *testing.T) {
	checked := 0
	for _, name := range []string{"rc_pingpong", "uc_pingpong", "write_bw", "read_bw", "rc_pingpong_ipv6"} {
		frames, err := readCapture("testdata/captures/" + name + ".pcap")
		if err != nil {
			t.Fatal(err)
		}
		qpOf := map[netip.Addr]bth.QPN{} // destination IP -> QPN it receives on
		var pkts []wire.Packet
		for _, f := range frames {
			var p wire.Packet
			if p.Decode(f.data, wire.FramingEthernet) == nil && p.Opcode.Transport() != bth.TransportUD {
				qpOf[p.DstIP()] = p.DestQP
				pkts = append(pkts, p)
			}
		}
		for _, p := range pkts {
			lqpn, ok := qpOf[p.SrcIP()]
			if !ok {
				continue
			}
			if got, want := p.Addr().SrcPort, wire.UDPSourcePort(lqpn, p.DestQP); got != want {
				t.Errorf("%s: QP %v->%v sport %#x, UDPSourcePort %#x", name, lqpn, p.DestQP, got, want)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
	if wire.UDPSourcePort(0x11, 0x22) != wire.UDPSourcePort(0x22, 0x11) {
		t.Error("not symmetric")
	}
	for q := bth.QPN(0); q < 5000; q += 7 {
		if p := wire.UDPSourcePort(q, q*3+1); p < 0xC000 {
			t.Fatalf("port %#x below 0xC000", p)
		}
	}
}

func TestGIDHelpers(t *testing.T) {
	v4 := netip.MustParseAddr("10.77.0.3")
	g := wire.GIDFromAddr(v4)
	want := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 3}
	if g != want || wire.AddrFromGID(g) != v4 {
		t.Errorf("IPv4 GID %x / %v", g, wire.AddrFromGID(g))
	}
	v6 := netip.MustParseAddr("fd77::2")
	if wire.AddrFromGID(wire.GIDFromAddr(v6)) != v6 {
		t.Error("IPv6 GID round trip")
	}
	if wire.GIDFromAddr(netip.Addr{}) != [16]byte{} {
		t.Error("zero addr")
	}
}

func TestPacketAddressing(t *testing.T) {
	var p wire.Packet
	for _, g := range goldenPackets(t) {
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatal(err)
		}
		var v [40]byte
		p.VerbsGRH(&v)
		switch p.Kind {
		case wire.KindRoCEv2IPv4:
			if v != [40]byte(append(make([]byte, 20), g.frame[p.IPOff:p.IPOff+20]...)) {
				t.Fatalf("%s: VerbsGRH %x", g.name, v)
			}
			if !p.SrcIP().Is4() || p.SGID() != wire.GIDFromAddr(p.SrcIP()) || p.DGID() != wire.GIDFromAddr(p.DstIP()) {
				t.Fatalf("%s: SGID/DGID", g.name)
			}
		case wire.KindRoCEv2IPv6, wire.KindRoCEv1, wire.KindIBGRH:
			off := max(p.IPOff, p.GRHOff)
			if !bytes.Equal(v[:], g.frame[off:off+40]) || p.SGID() != [16]byte(g.frame[off+8:]) ||
				p.DstIP() != netip.AddrFrom16([16]byte(g.frame[off+24:])) {
				t.Fatalf("%s: VerbsGRH/GIDs", g.name)
			}
		case wire.KindIB:
			if v != [40]byte{} || p.SrcIP().IsValid() {
				t.Fatalf("%s: IB without GRH has addresses", g.name)
			}
		}
		if p.Opcode == bth.OpUDSendOnly && (p.DETH() == nil || p.RETH() != nil) {
			t.Fatalf("%s: UD ETHs", g.name)
		}
		if p.Opcode == bth.OpRCRDMAWriteFirst && p.RETH().DMALen() != 8192 {
			t.Fatalf("%s: RETH DMA length %d", g.name, p.RETH().DMALen())
		}
	}
}

func TestFinishErrors(t *testing.T) {
	good := testAddr()
	buf, n := sendOnly(8)
	tests := []struct {
		name   string
		mod    func(a *wire.Addr)
		f      wire.Framing
		bthOff int
		n      int
		want   error
	}{
		{"kind/framing", func(a *wire.Addr) { a.Kind = wire.KindIB }, wire.FramingEthernet, wire.MaxHeadroom, n, wire.ErrHeaderMismatch},
		{"bth kind", func(a *wire.Addr) { a.Kind = wire.KindBTH }, wire.FramingBTH, wire.MaxHeadroom, n, wire.ErrHeaderMismatch},
		{"no headroom", nil, wire.FramingEthernet, 41, n, wire.ErrNoRoom},
		{"no tailroom", nil, wire.FramingEthernet, wire.MaxHeadroom, n + 3, wire.ErrNoRoom},
		{"short transport", nil, wire.FramingEthernet, wire.MaxHeadroom, 11, wire.ErrBadLength},
		{"v6 addr for v4", func(a *wire.Addr) { a.SrcIP = netip.MustParseAddr("fd77::1") }, wire.FramingIP, wire.MaxHeadroom, n, wire.ErrBadAddr},
		{"missing addr", func(a *wire.Addr) { a.DstIP = netip.Addr{} }, wire.FramingIP, wire.MaxHeadroom, n, wire.ErrBadAddr},
		{"v4 addr for v6", func(a *wire.Addr) { a.Kind = wire.KindRoCEv2IPv6 }, wire.FramingIP, wire.MaxHeadroom, n, wire.ErrBadAddr},
		{"ib not words", func(a *wire.Addr) { a.Kind = wire.KindIB }, wire.FramingIB, wire.MaxHeadroom, n - 2, wire.ErrBadLength},
		{"ok", nil, wire.FramingEthernet, wire.MaxHeadroom, n, nil},
	}
	for _, tc := range tests {
		a := good
		if tc.mod != nil {
			tc.mod(&a)
		}
		if _, err := wire.Finish(buf, tc.bthOff, tc.n, tc.f, &a); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	big := make([]byte, 70000)
	if _, err := wire.Finish(big, 64, 65520, wire.FramingIP, &good); err != wire.ErrTooLong {
		t.Errorf("IPv4 too long: %v", err)
	}
	ib := wire.Addr{Kind: wire.KindIB}
	if _, err := wire.Finish(big, 64, 8192, wire.FramingIB, &ib); err != wire.ErrTooLong {
		t.Errorf("IB too long: %v", err)
	}
}

// Finish with every kind and options (VLAN, UDP checksum, IPv6 flow label,
// RoCEv1, IB) produces frames Decode accepts with the same fields, and the
// UDP and IPv4 header checksums verify.
func TestFinishDecodeRoundTrip(t *testing.T) {
	v6src, v6dst := netip.MustParseAddr("fd77::3"), netip.MustParseAddr("fd77::2")
	addrs := []struct {
		a wire.Addr
		f wire.Framing
	}{
		{testAddr(), wire.FramingEthernet},
		{func() wire.Addr {
			a := testAddr()
			a.VLAN, a.VLANTCI, a.UDPChecksum, a.TrafficClass = true, 0x2005, true, 0x1a
			return a
		}(), wire.FramingEthernet},
		{func() wire.Addr { a := testAddr(); a.UDPChecksum = true; return a }(), wire.FramingIP},
		{wire.Addr{Kind: wire.KindRoCEv2IPv6, SrcIP: v6src, DstIP: v6dst, HopLimit: 64, FlowLabel: 0x1FACE, TrafficClass: 226, SrcPort: 0xC123, UDPChecksum: true}, wire.FramingIP},
		{wire.Addr{Kind: wire.KindRoCEv2IPv6, SrcIP: v6src, DstIP: v6dst, HopLimit: 1, SrcPort: 0xC123}, wire.FramingEthernet},
		{wire.Addr{Kind: wire.KindRoCEv1, SGID: wire.GIDFromAddr(v6src), DGID: wire.GIDFromAddr(v6dst), HopLimit: 64, TrafficClass: 2}, wire.FramingEthernet},
		{wire.Addr{Kind: wire.KindIB, VL: 1, SL: 3, DLID: 7, SLID: 9}, wire.FramingIB},
		{wire.Addr{Kind: wire.KindIBGRH, VL: 0, SL: 0, DLID: 0xFFFF, SLID: 1, SGID: wire.GIDFromAddr(v6src), DGID: wire.GIDFromAddr(v6dst), HopLimit: 255}, wire.FramingIB},
	}
	for _, payload := range []int{0, 1, 3, 1024} {
		for i, tc := range addrs {
			buf, n := sendOnly(payload)
			out, err := wire.Finish(buf, wire.MaxHeadroom, n, tc.f, &tc.a)
			if err != nil {
				t.Fatalf("%d: %v", i, err)
			}
			var p wire.Packet
			if err := p.Decode(out, tc.f); err != nil {
				t.Fatalf("%d/%d: %v", i, payload, wire.Explain(out, tc.f))
			}
			if p.Kind != tc.a.Kind || p.PayloadLen != payload || p.PSN != 0xFFFFFF || p.DestQP != 0x27 || p.End != len(out) {
				t.Errorf("%d/%d: decoded %+v", i, payload, pub(&p))
			}
			got := p.Addr()
			if tc.f != wire.FramingEthernet {
				got.SrcMAC, got.DstMAC = tc.a.SrcMAC, tc.a.DstMAC
			}
			if tc.a.Kind == wire.KindRoCEv2IPv4 || tc.a.Kind == wire.KindRoCEv2IPv6 {
				got.SGID, got.DGID = tc.a.SGID, tc.a.DGID
			}
			if got != tc.a {
				t.Errorf("%d/%d: Addr\n got %+v\nwant %+v", i, payload, got, tc.a)
			}
			if p.IPOff >= 0 {
				u := wire.UDP(out[p.UDPOff:p.End])
				if !u.IsChecksumValid(p.SrcIP(), p.DstIP()) || (tc.a.UDPChecksum != (u.Checksum() != 0)) {
					t.Errorf("%d: UDP checksum %#x", i, u.Checksum())
				}
				if p.Kind == wire.KindRoCEv2IPv4 && !wire.IPv4(out[p.IPOff:]).IsChecksumValid() {
					t.Errorf("%d: IPv4 header checksum", i)
				}
			}
		}
	}
}

// IPv4.Encode sums its checksum from the fields: it must be the header's
// own RFC 1071 checksum, the CNP's known one included, and every field must
// read back.
func TestIPv4Encode(t *testing.T) {
	cnp := wire.IPv4Fields{TOS: 0xc2, TotalLength: 0x3c, ID: 0x718c, DontFragment: true, TTL: 0x40,
		Protocol: 0x11, Src: [4]byte{10, 0, 0x11, 1}, Dst: [4]byte{10, 0, 0x12, 1}}
	h := make(wire.IPv4, wire.IPv4Len)
	h.Encode(&cnp)
	if want := unhex(t, "45c2003c 718c4000 4011 9161 0a001101 0a001201"); !bytes.Equal(h, want) {
		t.Errorf("CNP header % x, want % x", []byte(h), want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		f := wire.IPv4Fields{TOS: uint8(rng.Uint32()), TotalLength: uint16(rng.Uint32()), ID: uint16(rng.Uint32()),
			DontFragment: rng.IntN(2) == 0, TTL: uint8(rng.Uint32()), Protocol: uint8(rng.Uint32())}
		binary.BigEndian.PutUint32(f.Src[:], rng.Uint32())
		binary.BigEndian.PutUint32(f.Dst[:], rng.Uint32())
		h.Encode(&f)
		if h.Version() != 4 || h.IHL() != wire.IPv4Len || h.TOS() != f.TOS || h.TotalLength() != int(f.TotalLength) ||
			h.ID() != f.ID || h.DontFragment() != f.DontFragment || h.MoreFragments() || h.FragmentOffset() != 0 ||
			h.TTL() != f.TTL || h.Protocol() != f.Protocol || h.Src() != netip.AddrFrom4(f.Src) || h.Dst() != netip.AddrFrom4(f.Dst) {
			t.Fatalf("fields %+v read back from % x", f, []byte(h))
		}
		if !h.IsChecksumValid() || h.CalculateChecksum() != binary.BigEndian.Uint16(h[10:]) {
			t.Fatalf("fields %+v: checksum %#04x, the header's own %#04x", f, binary.BigEndian.Uint16(h[10:]), h.CalculateChecksum())
		}
	}
}

// Known checksums: the CNP of wire-spec §5.3 has IPv4 header checksum
// 0x9161; a UDP datagram checked against an independent RFC 1071 sum.
func TestChecksums(t *testing.T) {
	cnp := unhex(t, "45c2003c 718c4000 4011 9161 0a001101 0a001201")
	h := wire.IPv4(cnp)
	if h.CalculateChecksum() != 0x9161 || !h.IsChecksumValid() {
		t.Errorf("IPv4 checksum %#x", h.CalculateChecksum())
	}
	if got := h.ChecksumFor(0x003c, 0x718c); got != 0x9161 {
		t.Errorf("ChecksumFor(the header's own length and ID) = %#x, want 0x9161", got)
	}
	// ChecksumFor of other lengths and IDs matches a header rewritten
	// with them and summed in full, whatever the stored checksum says.
	for _, v := range [][2]uint16{{0, 0}, {0xFFFF, 0xFFFF}, {1044, 1}, {4140, 0x718d}, {28, 0xFFFE}} {
		r := append(wire.IPv4(nil), h...)
		binary.BigEndian.PutUint16(r[2:], v[0])
		binary.BigEndian.PutUint16(r[4:], v[1])
		r.SetChecksum(0xDEAD)
		want := r.CalculateChecksum()
		if got := h.ChecksumFor(v[0], v[1]); got != want {
			t.Errorf("ChecksumFor(%d, %#x) = %#x, want %#x", v[0], v[1], got, want)
		}
	}
	src, dst := netip.MustParseAddr("10.0.17.1"), netip.MustParseAddr("10.0.18.1")
	u := wire.UDP(unhex(t, "c000 12b7 000d 0000 0102030405"))
	// RFC 1071 by hand: pseudo-header + header + data (odd length padded).
	words := []uint32{0x0a00, 0x1101, 0x0a00, 0x1201, 17, 13, 0xc000, 0x12b7, 0x000d, 0x0102, 0x0304, 0x0500}
	var s uint32
	for _, w := range words {
		s += w
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	if got := u.CalculateChecksum(src, dst); got != ^uint16(s) {
		t.Errorf("UDP checksum %#x, want %#x", got, ^uint16(s))
	}
	u.SetChecksum(u.CalculateChecksum(src, dst))
	if !u.IsChecksumValid(src, dst) {
		t.Error("UDP checksum does not verify")
	}
	u[8] ^= 1
	if u.IsChecksumValid(src, dst) {
		t.Error("corrupt UDP datagram verifies")
	}
}

func TestHeaderSetters(t *testing.T) {
	b := make([]byte, 40)
	v6 := wire.IPv6(b)
	v6.Encode(&wire.IPv6Fields{TrafficClass: 0xAB, FlowLabel: 0xFFFFF, HopLimit: 9})
	v6.SetTrafficClass(0x12)
	if v6.Version() != 6 || v6.TrafficClass() != 0x12 || v6.FlowLabel() != 0xFFFFF {
		t.Errorf("SetTrafficClass disturbed neighbours: %x", b[:4])
	}
	v6.SetFlowLabel(0x12345678)
	if v6.FlowLabel() != 0x45678 || v6.TrafficClass() != 0x12 || v6.Version() != 6 {
		t.Errorf("SetFlowLabel: %x", b[:4])
	}
	l := wire.LRH(b)
	l.Encode(&wire.LRHFields{VL: 15, LVer: 1, SL: 2, LNH: 3, DLID: 0xC001, SLID: 5, PktLen: 0x7FF})
	l.SetVL(3)
	l.SetPktLen(0x801)
	if l.VL() != 3 || l.LVer() != 1 || l.SL() != 2 || l.LNH() != 3 || l.PktLen() != 1 || l.DLID() != 0xC001 || l.SLID() != 5 {
		t.Errorf("LRH %x", b[:8])
	}
	e := wire.Ethernet(b)
	e.Encode(&wire.EthernetFields{Dst: [6]byte{1}, Src: [6]byte{2}, VLAN: true, TCI: 0x0064, EtherType: wire.EtherTypeIPv6})
	if !e.IsValid() || !e.Tagged() || e.TCI() != 0x64 || e.EtherType() != wire.EtherTypeIPv6 || e.HeaderLen() != 18 || e.Src()[0] != 2 {
		t.Errorf("Ethernet %x", b[:18])
	}
	if wire.Ethernet(b[:16]).IsValid() || wire.IPv4(b[:19]).IsValid() || wire.UDP(b[:7]).IsValid() {
		t.Error("IsValid accepts short views")
	}
}
