package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// Framing says what the first byte of a frame is. The first three values
// equal the hca/link Format values (FormatEthernet, FormatIP, FormatIB).
type Framing uint8

// Framings.
const (
	// FramingEthernet: Ethernet (+ one 802.1Q tag), then IPv4/IPv6 + UDP
	// 4791 (RoCEv2) or ethertype 0x8915 + GRH (RoCEv1).
	FramingEthernet Framing = iota + 1
	// FramingIP: an IPv4 or IPv6 header first (TUN devices; the UDP socket
	// link hands these up and down).
	FramingIP
	// FramingIB: native InfiniBand, LRH [GRH] BTH ... ICRC VCRC.
	FramingIB
	// FramingBTH: BTH first, through the ICRC: the payload of a plain UDP
	// socket. Decode cannot check the ICRC of such a frame.
	FramingBTH
)

func (f Framing) String() string {
	switch f {
	case FramingEthernet:
		return "ethernet"
	case FramingIP:
		return "ip"
	case FramingIB:
		return "ib"
	case FramingBTH:
		return "bth"
	}
	return "unknown"
}

// Kind is the encapsulation of a packet.
type Kind uint8

// Kinds.
const (
	KindRoCEv2IPv4 Kind = iota + 1 // IPv4 + UDP 4791 + BTH
	KindRoCEv2IPv6                 // IPv6 + UDP 4791 + BTH
	KindRoCEv1                     // Ethernet 0x8915 + GRH + BTH
	KindIB                         // LRH (LNH=2) + BTH
	KindIBGRH                      // LRH (LNH=3) + GRH + BTH
	KindBTH                        // BTH only (UDP socket payload)
)

func (k Kind) String() string {
	switch k {
	case KindRoCEv2IPv4:
		return "roce2-ipv4"
	case KindRoCEv2IPv6:
		return "roce2-ipv6"
	case KindRoCEv1:
		return "roce1"
	case KindIB:
		return "ib"
	case KindIBGRH:
		return "ib-grh"
	case KindBTH:
		return "bth"
	}
	return "unknown"
}

// Packet is a parsed frame: offsets of every header inside Frame and the few
// BTH fields every consumer needs. Decode fills it in place; it is reusable
// and never allocates. Offsets are -1 for absent headers.
type Packet struct {
	Frame   []byte
	Framing Framing
	Kind    Kind

	EthOff, IPOff, UDPOff, LRHOff, GRHOff, BTHOff int

	PayloadOff, PayloadLen, PadCnt int
	ICRCOff, VCRCOff               int // VCRCOff is -1 unless native IB
	// End is the end of the packet inside Frame: after the ICRC (RoCE) or
	// the VCRC (IB). Ethernet minimum-frame padding after it is ignored.
	End int

	VLAN    bool
	VLANTCI uint16

	Opcode bth.Opcode
	PSN    bth.PSN
	DestQP bth.QPN
	Info   *bth.OpInfo

	// ICRCChecked is true when Decode verified the ICRC (every framing but
	// FramingBTH).
	ICRCChecked bool

	// Where and why the last Decode failed; read by Explain. Detail strings
	// are constants, so setting them does not allocate.
	errOff    int
	errDetail string
}

func (p *Packet) fail(err error, off int, detail string) error {
	p.errOff = off
	p.errDetail = detail
	return err
}

// Decode parses frame, of framing f, into p. It validates every length field
// (IPv4 total length, IPv6 payload length, UDP length, GRH PayLen, LRH
// PktLen) and finds the ICRC from them, never from the frame length; checks
// that the opcode is known, that the packet is long enough for the opcode's
// headers and that the pad fits in the payload; then verifies the ICRC (and
// the VCRC for native IB). BTH TVer is reported, not rejected.
//
// Errors are the package sentinels (ErrShort, ErrBadLength, ErrBadPad,
// ErrUnknownOpcode, ErrHeaderMismatch, ErrBadICRC, ErrBadVCRC, ErrNotRoCE),
// returned without allocation. On ErrBadICRC and ErrBadVCRC p is completely
// filled in; on other errors its fields are unspecified.
//
// p.Frame aliases frame; p is valid as long as frame is not modified.
func (p *Packet) Decode(frame []byte, f Framing) error {
	// Cleared in place, then set field by field: a composite literal is
	// built on the stack and copied, and the copy's 16-byte loads of what
	// were just 8- and 1-byte stores cannot be forwarded from the store
	// buffer (perf on a loopback write_bw put most of Decode's own time on
	// that copy).
	*p = Packet{}
	p.Frame, p.Framing = frame, f
	p.EthOff, p.IPOff, p.UDPOff, p.LRHOff, p.GRHOff, p.BTHOff = -1, -1, -1, -1, -1, -1
	p.ICRCOff, p.VCRCOff = -1, -1
	var err error
	switch f {
	case FramingEthernet:
		err = p.decodeEthernet()
	case FramingIP:
		err = p.decodeIP(0)
	case FramingIB:
		err = p.decodeIB()
	case FramingBTH:
		p.Kind = KindBTH
		if len(frame) < bth.HeaderLen+ICRCLen {
			return p.fail(ErrShort, 0, "BTH")
		}
		return p.decodeTransport(0, len(frame), ErrShort)
	default:
		return p.fail(ErrHeaderMismatch, 0, "unknown framing")
	}
	if err != nil {
		return err
	}
	if p.VCRCOff >= 0 {
		// A real port checks the link-level VCRC before anything else.
		if CRC16IB(frame[p.LRHOff:p.VCRCOff]) != p.VCRC() {
			return p.fail(ErrBadVCRC, p.VCRCOff, "VCRC")
		}
	}
	p.ICRCChecked = true
	if ICRC(frame, p) != p.ICRC() {
		return p.fail(ErrBadICRC, p.ICRCOff, "ICRC")
	}
	return nil
}

func (p *Packet) decodeEthernet() error {
	b := p.Frame
	if len(b) < EthernetLen {
		return p.fail(ErrShort, 0, "Ethernet header")
	}
	p.EthOff = 0
	off := EthernetLen
	et := binary.BigEndian.Uint16(b[12:])
	if et == EtherTypeVLAN {
		if len(b) < EthernetLen+VLANLen {
			return p.fail(ErrShort, 14, "802.1Q tag")
		}
		p.VLAN = true
		p.VLANTCI = binary.BigEndian.Uint16(b[14:])
		et = binary.BigEndian.Uint16(b[16:])
		off += VLANLen
	}
	switch et {
	case EtherTypeIPv4:
		if len(b) > off && b[off]>>4 != 4 {
			return p.fail(ErrHeaderMismatch, off, "ethertype IPv4 but IP version is not 4")
		}
		return p.decodeIP(off)
	case EtherTypeIPv6:
		if len(b) > off && b[off]>>4 != 6 {
			return p.fail(ErrHeaderMismatch, off, "ethertype IPv6 but IP version is not 6")
		}
		return p.decodeIP(off)
	case EtherTypeRoCEv1:
		return p.decodeRoCEv1(off)
	}
	return p.fail(ErrNotRoCE, off-2, "ethertype")
}

// decodeIP parses an IPv4 or IPv6 header at off, then UDP and the transport.
func (p *Packet) decodeIP(off int) error {
	b := p.Frame
	if len(b) <= off {
		return p.fail(ErrShort, off, "IP header")
	}
	switch b[off] >> 4 {
	case 4:
		return p.decodeIPv4(off)
	case 6:
		return p.decodeIPv6(off)
	}
	return p.fail(ErrHeaderMismatch, off, "IP version is neither 4 nor 6")
}

func (p *Packet) decodeIPv4(off int) error {
	h := IPv4(p.Frame[off:])
	if len(h) < IPv4Len {
		return p.fail(ErrShort, off, "IPv4 header")
	}
	ihl := h.IHL()
	if ihl < IPv4Len {
		return p.fail(ErrBadLength, off, "IPv4 IHL below 5")
	}
	if len(h) < ihl {
		return p.fail(ErrShort, off, "IPv4 options")
	}
	if h.Protocol() != IPProtoUDP {
		return p.fail(ErrNotRoCE, off+9, "IP protocol is not UDP")
	}
	if h.FragmentOffset() != 0 {
		return p.fail(ErrNotRoCE, off+6, "non-first IPv4 fragment")
	}
	tot := h.TotalLength()
	if tot < ihl+UDPLen {
		return p.fail(ErrBadLength, off+2, "IPv4 total length below IP+UDP headers")
	}
	if tot > len(h) {
		return p.fail(ErrShort, off+2, "frame shorter than IPv4 total length")
	}
	u := UDP(h[ihl:])
	if u.DstPort() != RoCEv2Port {
		return p.fail(ErrNotRoCE, off+ihl+2, "UDP destination port is not 4791")
	}
	if h.MoreFragments() {
		return p.fail(ErrHeaderMismatch, off+6, "fragmented RoCEv2 packet")
	}
	if ihl != IPv4Len {
		// rxe assumes a 20-byte header in its ICRC (rxe_icrc.c); so do we.
		return p.fail(ErrHeaderMismatch, off, "IPv4 options on RoCEv2")
	}
	if u.Length() != tot-ihl {
		return p.fail(ErrBadLength, off+ihl+4, "UDP length disagrees with IPv4 total length")
	}
	p.Kind = KindRoCEv2IPv4
	p.IPOff = off
	p.UDPOff = off + IPv4Len
	return p.decodeTransport(p.UDPOff+UDPLen, off+tot, ErrBadLength)
}

func (p *Packet) decodeIPv6(off int) error {
	h := IPv6(p.Frame[off:])
	if len(h) < IPv6Len {
		return p.fail(ErrShort, off, "IPv6 header")
	}
	if h.NextHeader() != IPProtoUDP {
		return p.fail(ErrNotRoCE, off+6, "IPv6 next header is not UDP")
	}
	plen := h.PayloadLength()
	if plen < UDPLen {
		return p.fail(ErrBadLength, off+4, "IPv6 payload length below UDP header")
	}
	if IPv6Len+plen > len(h) {
		return p.fail(ErrShort, off+4, "frame shorter than IPv6 payload length")
	}
	u := UDP(h[IPv6Len:])
	if u.DstPort() != RoCEv2Port {
		return p.fail(ErrNotRoCE, off+IPv6Len+2, "UDP destination port is not 4791")
	}
	if u.Length() != plen {
		return p.fail(ErrBadLength, off+IPv6Len+4, "UDP length disagrees with IPv6 payload length")
	}
	p.Kind = KindRoCEv2IPv6
	p.IPOff = off
	p.UDPOff = off + IPv6Len
	return p.decodeTransport(p.UDPOff+UDPLen, off+IPv6Len+plen, ErrBadLength)
}

// checkGRH validates a GRH at off whose PayLen must not exceed the frame.
func (p *Packet) checkGRH(off int) error {
	g := GRH(p.Frame[off:])
	if len(g) < GRHLen {
		return p.fail(ErrShort, off, "GRH")
	}
	if g.IPVer() != 6 {
		return p.fail(ErrHeaderMismatch, off, "GRH IPVer is not 6")
	}
	if g.NxtHdr() != NxtHdrIBA {
		return p.fail(ErrHeaderMismatch, off+6, "GRH NxtHdr is not IBA transport (0x1B)")
	}
	return nil
}

func (p *Packet) decodeRoCEv1(off int) error {
	if err := p.checkGRH(off); err != nil {
		return err
	}
	g := GRH(p.Frame[off:])
	n := g.PayLen()
	if GRHLen+n > len(g) {
		return p.fail(ErrShort, off+4, "frame shorter than GRH PayLen")
	}
	p.Kind = KindRoCEv1
	p.GRHOff = off
	return p.decodeTransport(off+GRHLen, off+GRHLen+n, ErrBadLength)
}

func (p *Packet) decodeIB() error {
	b := p.Frame
	if len(b) < LRHLen {
		return p.fail(ErrShort, 0, "LRH")
	}
	l := LRH(b)
	lnh := l.LNH()
	if lnh != LNHIBALocal && lnh != LNHIBAGlobal {
		return p.fail(ErrNotRoCE, 1, "LRH LNH is not IBA transport")
	}
	n := l.PktLen() * 4
	if n < LRHLen {
		return p.fail(ErrBadLength, 4, "LRH PktLen below LRH")
	}
	if n+VCRCLen > len(b) {
		return p.fail(ErrShort, 4, "frame shorter than LRH PktLen + VCRC")
	}
	p.LRHOff = 0
	bthOff := LRHLen
	p.Kind = KindIB
	if lnh == LNHIBAGlobal {
		if n < LRHLen+GRHLen {
			return p.fail(ErrBadLength, 4, "LRH PktLen below LRH+GRH")
		}
		if err := p.checkGRH(LRHLen); err != nil {
			return err
		}
		if GRH(b[LRHLen:]).PayLen() != n-LRHLen-GRHLen {
			return p.fail(ErrBadLength, LRHLen+4, "GRH PayLen disagrees with LRH PktLen")
		}
		p.Kind = KindIBGRH
		p.GRHOff = LRHLen
		bthOff += GRHLen
	}
	if err := p.decodeTransport(bthOff, n, ErrBadLength); err != nil {
		return err
	}
	p.VCRCOff = n
	p.End = n + VCRCLen
	return nil
}

// decodeTransport parses BTH..ICRC occupying Frame[off:end]; short is the
// error for "fewer bytes than the headers need" (ErrBadLength when end
// comes from a length field, ErrShort when it is the frame end).
func (p *Packet) decodeTransport(off, end int, short error) error {
	if end-off < bth.HeaderLen+ICRCLen {
		return p.fail(short, off, "BTH and ICRC")
	}
	h := bth.Header(p.Frame[off:])
	p.BTHOff = off
	p.Opcode = h.Opcode()
	p.PSN = h.PSN()
	p.DestQP = h.DestQP()
	p.PadCnt = h.PadCnt()
	p.ICRCOff = end - ICRCLen
	p.End = end
	info := p.Opcode.Info()
	if !info.Valid() {
		return p.fail(ErrUnknownOpcode, off, "BTH opcode")
	}
	p.Info = info
	p.PayloadOff = off + info.HdrLen
	if p.PayloadOff > p.ICRCOff {
		return p.fail(short, off, "extended transport headers of the opcode")
	}
	p.PayloadLen = p.ICRCOff - p.PayloadOff - p.PadCnt
	if p.PayloadLen < 0 {
		p.PayloadLen = 0
		return p.fail(ErrBadPad, off+1, "BTH PadCnt larger than payload")
	}
	return nil
}

// firstCovered returns the offset of the first header the ICRC covers.
func (p *Packet) firstCovered() int {
	switch p.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		return p.IPOff
	case KindRoCEv1:
		return p.GRHOff
	case KindIB, KindIBGRH:
		return p.LRHOff
	}
	return -1
}

// BTH returns the base transport header.
func (p *Packet) BTH() bth.Header { return bth.Header(p.Frame[p.BTHOff : p.BTHOff+bth.HeaderLen]) }

// ext returns the extended header at offset off from the BTH, n bytes long,
// or nil when the opcode has none (off 0).
func (p *Packet) ext(off, n int) []byte {
	if off == 0 {
		return nil
	}
	o := p.BTHOff + off
	return p.Frame[o : o+n : o+n]
}

func (p *Packet) info() *bth.OpInfo {
	if p.Info == nil {
		return &noInfo
	}
	return p.Info
}

var noInfo bth.OpInfo

// RETH returns the RDMA ETH, or nil if the opcode has none.
func (p *Packet) RETH() bth.RETH { return p.ext(p.info().RETH, bth.RETHLen) }

// AETH returns the ACK ETH, or nil.
func (p *Packet) AETH() bth.AETH { return p.ext(p.info().AETH, bth.AETHLen) }

// DETH returns the datagram ETH, or nil.
func (p *Packet) DETH() bth.DETH { return p.ext(p.info().DETH, bth.DETHLen) }

// AtomicETH returns the atomic ETH, or nil.
func (p *Packet) AtomicETH() bth.AtomicETH { return p.ext(p.info().AtomicETH, bth.AtomicETHLen) }

// AtomicAckETH returns the atomic ACK ETH, or nil.
func (p *Packet) AtomicAckETH() bth.AtomicAckETH {
	return p.ext(p.info().AtomicAckETH, bth.AtomicAckETHLen)
}

// ImmDt returns the immediate data header, or nil.
func (p *Packet) ImmDt() bth.ImmDt { return p.ext(p.info().ImmDt, bth.ImmDtLen) }

// IETH returns the invalidate ETH, or nil.
func (p *Packet) IETH() bth.IETH { return p.ext(p.info().IETH, bth.IETHLen) }

// RDETH returns the reliable datagram ETH, or nil.
func (p *Packet) RDETH() bth.RDETH { return p.ext(p.info().RDETH, bth.RDETHLen) }

// FETH returns the flush ETH, or nil.
func (p *Packet) FETH() bth.FETH { return p.ext(p.info().FETH, bth.FETHLen) }

// Payload returns the payload without pad.
func (p *Packet) Payload() []byte {
	return p.Frame[p.PayloadOff : p.PayloadOff+p.PayloadLen : p.PayloadOff+p.PayloadLen]
}

// Transport returns BTH through pad, ICRC excluded: what the transport
// engines consume, and what Finish takes back.
func (p *Packet) Transport() []byte { return p.Frame[p.BTHOff:p.ICRCOff:p.ICRCOff] }

// ICRC returns the ICRC as stored on the wire (a little-endian read).
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Frame[p.ICRCOff:]) }

// VCRC returns the VCRC as stored on the wire (little-endian), or 0 when the
// packet is not native IB.
func (p *Packet) VCRC() uint16 {
	if p.VCRCOff < 0 {
		return 0
	}
	return binary.LittleEndian.Uint16(p.Frame[p.VCRCOff:])
}

// SrcIP returns the source IP address of a RoCEv2 packet, or for RoCEv1 and
// IB with GRH the SGID as an IPv6 address (IPv4-mapped GIDs stay in their
// 16-byte form). It is the zero Addr otherwise.
func (p *Packet) SrcIP() netip.Addr {
	switch p.Kind {
	case KindRoCEv2IPv4:
		return IPv4(p.Frame[p.IPOff:]).Src()
	case KindRoCEv2IPv6:
		return IPv6(p.Frame[p.IPOff:]).Src()
	case KindRoCEv1, KindIBGRH:
		return netip.AddrFrom16(GRH(p.Frame[p.GRHOff:]).SGID())
	}
	return netip.Addr{}
}

// DstIP is SrcIP's counterpart for the destination.
func (p *Packet) DstIP() netip.Addr {
	switch p.Kind {
	case KindRoCEv2IPv4:
		return IPv4(p.Frame[p.IPOff:]).Dst()
	case KindRoCEv2IPv6:
		return IPv6(p.Frame[p.IPOff:]).Dst()
	case KindRoCEv1, KindIBGRH:
		return netip.AddrFrom16(GRH(p.Frame[p.GRHOff:]).DGID())
	}
	return netip.Addr{}
}

// SGID returns the source GID: the GRH SGID, the IPv6 source address, or
// ::ffff:a.b.c.d for RoCEv2 over IPv4. Zero when there is none.
func (p *Packet) SGID() [16]byte {
	switch p.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		return p.SrcIP().As16()
	case KindRoCEv1, KindIBGRH:
		return GRH(p.Frame[p.GRHOff:]).SGID()
	}
	return [16]byte{}
}

// DGID is SGID's counterpart for the destination.
func (p *Packet) DGID() [16]byte {
	switch p.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		return p.DstIP().As16()
	case KindRoCEv1, KindIBGRH:
		return GRH(p.Frame[p.GRHOff:]).DGID()
	}
	return [16]byte{}
}

// VerbsGRH writes what verbs puts in the first 40 bytes of a UD receive
// buffer (rdma_network_hdr): the IPv6 header or GRH verbatim, or for IPv4 20
// zero bytes followed by the 20-byte IPv4 header. All zero when the packet
// has neither (IB without GRH, FramingBTH).
func (p *Packet) VerbsGRH(dst *[40]byte) {
	*dst = [40]byte{}
	switch p.Kind {
	case KindRoCEv2IPv4:
		copy(dst[20:], p.Frame[p.IPOff:p.IPOff+IPv4Len])
	case KindRoCEv2IPv6:
		copy(dst[:], p.Frame[p.IPOff:p.IPOff+IPv6Len])
	case KindRoCEv1, KindIBGRH:
		copy(dst[:], p.Frame[p.GRHOff:p.GRHOff+GRHLen])
	}
}

// Addr returns the addressing below the BTH, from which Finish rebuilds the
// frame (with UDPChecksum set when the packet carries a non-zero one).
func (p *Packet) Addr() Addr {
	a := Addr{Kind: p.Kind, VLAN: p.VLAN, VLANTCI: p.VLANTCI}
	if p.EthOff >= 0 {
		e := Ethernet(p.Frame[p.EthOff:])
		a.SrcMAC, a.DstMAC = e.Src(), e.Dst()
	}
	switch p.Kind {
	case KindRoCEv2IPv4:
		h := IPv4(p.Frame[p.IPOff:])
		a.SrcIP, a.DstIP = h.Src(), h.Dst()
		a.TrafficClass, a.HopLimit = h.TOS(), h.TTL()
		a.IPID, a.DontFragment = h.ID(), h.DontFragment()
	case KindRoCEv2IPv6:
		h := IPv6(p.Frame[p.IPOff:])
		a.SrcIP, a.DstIP = h.Src(), h.Dst()
		a.TrafficClass, a.FlowLabel, a.HopLimit = h.TrafficClass(), h.FlowLabel(), h.HopLimit()
	}
	switch p.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		u := UDP(p.Frame[p.UDPOff:])
		a.SrcPort = u.SrcPort()
		a.UDPChecksum = u.Checksum() != 0
		a.SGID, a.DGID = a.SrcIP.As16(), a.DstIP.As16()
	case KindRoCEv1, KindIBGRH:
		g := GRH(p.Frame[p.GRHOff:])
		a.SGID, a.DGID = g.SGID(), g.DGID()
		a.TrafficClass, a.FlowLabel, a.HopLimit = g.TClass(), g.FlowLabel(), g.HopLmt()
	}
	if p.LRHOff >= 0 {
		l := LRH(p.Frame[p.LRHOff:])
		a.VL, a.SL, a.LVer = l.VL(), l.SL(), l.LVer()
		a.DLID, a.SLID = l.DLID(), l.SLID()
	}
	return a
}
