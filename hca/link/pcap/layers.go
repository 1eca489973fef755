package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

// ErrMalformed is wrapped by every layer decoding error of this package.
var ErrMalformed = errors.New("pcap: malformed header")

// Well-known numbers the layers are registered under.
const (
	// RoCEv2Port is the UDP destination port of RoCEv2 (IANA "roce").
	RoCEv2Port = 4791
	// EtherTypeRoCEv1 is the ethertype of RoCEv1 (IBoE): a GRH follows.
	EtherTypeRoCEv1 = 0x8915
	// GRHNextHeaderIBA is the GRH NxtHdr value meaning "a BTH follows".
	GRHNextHeaderIBA = 0x1B
	// ERFTypeInfiniBand is the ERF record type of a native IB packet.
	ERFTypeInfiniBand = 0x15
	// ERFTypeEthernet is the ERF record type of an Ethernet frame.
	ERFTypeEthernet = 0x02
)

// LRH link next header values (IBA 7.7.5, ib_pack.h IB_LNH_*).
const (
	LNHRaw      = 0
	LNHIP       = 1
	LNHIBALocal = 2 // BTH follows the LRH
	LNHIBAGlobl = 3 // GRH follows the LRH
)

// Layer types. gopacket reserves 0-999 for itself; 1000-1999 are the fast
// application range.
var (
	LayerTypeLRH = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{
		Name: "InfiniBand LRH", Decoder: gopacket.DecodeFunc(decodeLRH)})
	LayerTypeGRH = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{
		Name: "InfiniBand GRH", Decoder: gopacket.DecodeFunc(decodeGRH)})
	LayerTypeBTH = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{
		Name: "InfiniBand BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeERF = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{
		Name: "ERF", Decoder: gopacket.DecodeFunc(decodeERF)})
)

func init() {
	// Hook the layers into gopacket's dispatch tables. These are the
	// documented extension points of gopacket/layers; nothing else in the
	// process registers RoCE, so a slot already in use is left alone.
	layers.RegisterUDPPortLayerType(RoCEv2Port, LayerTypeBTH)
	if layers.EthernetTypeMetadata[EtherTypeRoCEv1].LayerType == 0 {
		layers.EthernetTypeMetadata[EtherTypeRoCEv1] = layers.EnumMetadata{
			DecodeWith: LayerTypeGRH, Name: "RoCEv1", LayerType: LayerTypeGRH}
	}
	if layers.LinkTypeMetadata[LinkTypeInfiniBand].LayerType == 0 {
		layers.LinkTypeMetadata[LinkTypeInfiniBand] = layers.EnumMetadata{
			DecodeWith: LayerTypeLRH, Name: "InfiniBand", LayerType: LayerTypeLRH}
	}
	if layers.LinkTypeMetadata[LinkTypeERF].LayerType == 0 {
		layers.LinkTypeMetadata[LinkTypeERF] = layers.EnumMetadata{
			DecodeWith: LayerTypeERF, Name: "ERF", LayerType: LayerTypeERF}
	}
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// LRH is the InfiniBand Local Route Header (IBA 7.7, 8 bytes) of a native IB
// packet. Its payload is everything after the LRH up to and including the
// ICRC (PktLen words in all); the VCRC that follows is kept in VCRC.
type LRH struct {
	layers.BaseLayer
	VL, LVer, SL, LNH uint8
	DLID, SLID        uint16
	PktLen            uint16 // 4-byte words from the LRH through the ICRC
	VCRC              uint16 // as on the wire (stored little-endian)
	HasVCRC           bool
}

// LRHLen is the size of an LRH.
const LRHLen = 8

// LayerType implements gopacket.Layer.
func (l *LRH) LayerType() gopacket.LayerType { return LayerTypeLRH }

// CanDecode implements gopacket.DecodingLayer.
func (l *LRH) CanDecode() gopacket.LayerClass { return LayerTypeLRH }

// NextLayerType implements gopacket.DecodingLayer.
func (l *LRH) NextLayerType() gopacket.LayerType {
	switch l.LNH {
	case LNHIBALocal:
		return LayerTypeBTH
	case LNHIBAGlobl:
		return LayerTypeGRH
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes implements gopacket.DecodingLayer.
func (l *LRH) DecodeFromBytes(data []byte, _ gopacket.DecodeFeedback) error {
	if len(data) < LRHLen {
		return malformed("LRH needs %d bytes, have %d", LRHLen, len(data))
	}
	l.VL = data[0] >> 4
	l.LVer = data[0] & 0x0F
	l.SL = data[1] >> 4
	l.LNH = data[1] & 0x03
	l.DLID = binary.BigEndian.Uint16(data[2:])
	l.PktLen = binary.BigEndian.Uint16(data[4:]) & 0x07FF
	l.SLID = binary.BigEndian.Uint16(data[6:])
	end := int(l.PktLen) * 4
	if end < LRHLen || end > len(data) {
		return malformed("LRH PktLen %d words does not fit %d bytes", l.PktLen, len(data))
	}
	l.HasVCRC = len(data) >= end+2
	l.VCRC = 0
	if l.HasVCRC {
		l.VCRC = binary.LittleEndian.Uint16(data[end:])
	}
	l.Contents = data[:LRHLen]
	l.Payload = data[LRHLen:end]
	return nil
}

// GRH is the InfiniBand Global Route Header (IBA 8.3, 40 bytes, IPv6-shaped).
// It is the network header of RoCEv1 and of native IB packets with LNH=3.
// Its payload runs PayLen bytes: the BTH through the ICRC.
type GRH struct {
	layers.BaseLayer
	IPVer        uint8
	TrafficClass uint8
	FlowLabel    uint32
	PayLen       uint16
	NextHeader   uint8
	HopLimit     uint8
	SGID, DGID   net.IP // 16 bytes each, views into the packet
}

// GRHLen is the size of a GRH.
const GRHLen = 40

// LayerType implements gopacket.Layer.
func (g *GRH) LayerType() gopacket.LayerType { return LayerTypeGRH }

// CanDecode implements gopacket.DecodingLayer.
func (g *GRH) CanDecode() gopacket.LayerClass { return LayerTypeGRH }

// NextLayerType implements gopacket.DecodingLayer.
func (g *GRH) NextLayerType() gopacket.LayerType {
	if g.NextHeader == GRHNextHeaderIBA {
		return LayerTypeBTH
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes implements gopacket.DecodingLayer.
func (g *GRH) DecodeFromBytes(data []byte, _ gopacket.DecodeFeedback) error {
	if len(data) < GRHLen {
		return malformed("GRH needs %d bytes, have %d", GRHLen, len(data))
	}
	g.IPVer = data[0] >> 4
	if g.IPVer != 6 {
		return malformed("GRH IPVer %d, want 6", g.IPVer)
	}
	g.TrafficClass = data[0]<<4 | data[1]>>4
	g.FlowLabel = binary.BigEndian.Uint32(data[0:]) & 0xFFFFF
	g.PayLen = binary.BigEndian.Uint16(data[4:])
	g.NextHeader = data[6]
	g.HopLimit = data[7]
	g.SGID = net.IP(data[8:24])
	g.DGID = net.IP(data[24:40])
	end := GRHLen + int(g.PayLen)
	if end > len(data) {
		return malformed("GRH PayLen %d exceeds the %d bytes that follow", g.PayLen, len(data)-GRHLen)
	}
	g.Contents = data[:GRHLen]
	g.Payload = data[GRHLen:end]
	return nil
}

// BTH is the InfiniBand Base Transport Header together with every extended
// transport header its opcode calls for, the pad and the ICRC. It decodes
// BTH..payload..pad..ICRC (what UDP:4791, a GRH or an LRH carries): Contents
// are the BTH and ETHs, Payload the message bytes without pad and ICRC.
//
// Only the ETH fields whose flag is set in Info are meaningful.
type BTH struct {
	layers.BaseLayer
	bth.Fields
	Info *bth.OpInfo

	EEContext   uint32 // RDETH
	QKey        bth.QKey
	SrcQP       bth.QPN // DETH
	VA          uint64  // RETH or AtomicETH
	RKey        bth.RKey
	DMALen      uint32 // RETH
	SwapAdd     uint64 // AtomicETH
	Compare     uint64 // AtomicETH
	Syndrome    bth.Syndrome
	MSN         uint32 // AETH
	OrigData    uint64 // AtomicAckETH
	Imm         uint32 // ImmDt
	InvRKey     bth.RKey
	Placement   uint8 // FETH
	Selectivity uint8 // FETH
	Pad         []byte
	ICRC        uint32 // the CRC value; on the wire it is stored little-endian
	ICRCBytes   [4]byte
}

// LayerType implements gopacket.Layer.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode implements gopacket.DecodingLayer.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType implements gopacket.DecodingLayer.
func (b *BTH) NextLayerType() gopacket.LayerType {
	if len(b.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes implements gopacket.DecodingLayer. It checks the structure
// (known opcode, room for every ETH, pad and ICRC) but not the ICRC itself;
// that needs the lower headers, which is wire.Packet's job.
func (b *BTH) DecodeFromBytes(data []byte, _ gopacket.DecodeFeedback) error {
	if len(data) < bth.HeaderLen {
		return malformed("BTH needs %d bytes, have %d", bth.HeaderLen, len(data))
	}
	h := bth.Header(data)
	b.Fields = h.Fields()
	b.Info = b.Opcode.Info()
	if !b.Info.Valid() {
		return malformed("unknown BTH opcode 0x%02x", uint8(b.Opcode))
	}
	info := b.Info
	need := info.HdrLen + b.PadCnt + 4
	if len(data) < need {
		return malformed("%v needs %d bytes (headers, pad %d, ICRC), have %d",
			b.Opcode, need, b.PadCnt, len(data))
	}
	if info.RDETH != 0 {
		b.EEContext = bth.RDETH(data[info.RDETH:]).EEContext()
	}
	if info.DETH != 0 {
		d := bth.DETH(data[info.DETH:])
		b.QKey, b.SrcQP = d.QKey(), d.SrcQP()
	}
	if info.RETH != 0 {
		r := bth.RETH(data[info.RETH:])
		b.VA, b.RKey, b.DMALen = r.VA(), r.RKey(), r.DMALen()
	}
	if info.AtomicETH != 0 {
		a := bth.AtomicETH(data[info.AtomicETH:])
		b.VA, b.RKey, b.SwapAdd, b.Compare = a.VA(), a.RKey(), a.SwapAdd(), a.Compare()
	}
	if info.AETH != 0 {
		a := bth.AETH(data[info.AETH:])
		b.Syndrome, b.MSN = a.Syndrome(), a.MSN()
	}
	if info.AtomicAckETH != 0 {
		b.OrigData = bth.AtomicAckETH(data[info.AtomicAckETH:]).OrigData()
	}
	if info.ImmDt != 0 {
		b.Imm = bth.ImmDt(data[info.ImmDt:]).Imm()
	}
	if info.IETH != 0 {
		b.InvRKey = bth.IETH(data[info.IETH:]).RKey()
	}
	if info.FETH != 0 {
		f := bth.FETH(data[info.FETH:])
		b.Placement, b.Selectivity = f.PlacementType(), f.SelectivityLevel()
	}
	icrcOff := len(data) - 4
	payEnd := icrcOff - b.PadCnt
	if payEnd > info.HdrLen && !info.Has(bth.FlagPayload) {
		return malformed("%v carries %d payload bytes but takes none", b.Opcode, payEnd-info.HdrLen)
	}
	copy(b.ICRCBytes[:], data[icrcOff:])
	b.ICRC = binary.LittleEndian.Uint32(data[icrcOff:])
	b.Pad = data[payEnd:icrcOff]
	b.Contents = data[:info.HdrLen]
	b.Payload = data[info.HdrLen:payEnd]
	return nil
}

// ERF is the header of one Endace ERF record, as carried by LINKTYPE_ERF
// (197): 8-byte little-endian fixed-point timestamp, type, flags, rlen, lctr,
// wlen, then extension headers while the type's top bit (and then each
// extension header's top bit) says another follows. Its payload is the
// captured frame (wlen bytes at most).
type ERF struct {
	layers.BaseLayer
	Timestamp  time.Time
	Type       uint8 // record type without the extension bit
	Flags      uint8
	RLen       uint16
	LCtr       uint16
	WLen       uint16
	Extensions [][]byte // raw 8-byte extension headers
}

// ERFHeaderLen is the size of the fixed ERF record header.
const ERFHeaderLen = 16

// LayerType implements gopacket.Layer.
func (e *ERF) LayerType() gopacket.LayerType { return LayerTypeERF }

// CanDecode implements gopacket.DecodingLayer.
func (e *ERF) CanDecode() gopacket.LayerClass { return LayerTypeERF }

// NextLayerType implements gopacket.DecodingLayer.
func (e *ERF) NextLayerType() gopacket.LayerType {
	switch e.Type {
	case ERFTypeInfiniBand:
		return LayerTypeLRH
	case ERFTypeEthernet:
		return layers.LayerTypeEthernet
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes implements gopacket.DecodingLayer.
func (e *ERF) DecodeFromBytes(data []byte, _ gopacket.DecodeFeedback) error {
	hdr, err := parseERF(data)
	if err != nil {
		return err
	}
	e.Timestamp = hdr.ts
	e.Type = hdr.typ
	e.Flags = hdr.flags
	e.RLen, e.LCtr, e.WLen = hdr.rlen, hdr.lctr, hdr.wlen
	e.Extensions = e.Extensions[:0]
	for off := ERFHeaderLen; off < hdr.hdrLen; off += 8 {
		e.Extensions = append(e.Extensions, data[off:off+8])
	}
	e.Contents = data[:hdr.hdrLen]
	e.Payload = data[hdr.hdrLen : hdr.hdrLen+hdr.payLen]
	return nil
}

// erfHeader is a parsed ERF record header.
type erfHeader struct {
	ts               time.Time
	typ, flags       uint8
	rlen, lctr, wlen uint16
	hdrLen, payLen   int
}

// parseERF parses the ERF record header at the start of data. The frame is
// data[hdrLen:hdrLen+payLen]; payLen is wlen unless the capture was cut short.
// Mirrors Wireshark's erf.c: timestamp little-endian, the rest big-endian.
func parseERF(data []byte) (erfHeader, error) {
	var h erfHeader
	if len(data) < ERFHeaderLen {
		return h, malformed("ERF record needs %d bytes, have %d", ERFHeaderLen, len(data))
	}
	ts := binary.LittleEndian.Uint64(data)
	sec := int64(ts >> 32)
	nsec := int64(((ts&0xFFFFFFFF)*1e9 + 1<<31) >> 32) // rounded to the nearest ns
	h.ts = time.Unix(sec, nsec).UTC()
	h.typ = data[8] & 0x7F
	h.flags = data[9]
	h.rlen = binary.BigEndian.Uint16(data[10:])
	h.lctr = binary.BigEndian.Uint16(data[12:])
	h.wlen = binary.BigEndian.Uint16(data[14:])
	h.hdrLen = ERFHeaderLen
	more := data[8]&0x80 != 0
	for more {
		if len(data) < h.hdrLen+8 {
			return h, malformed("ERF extension header cut short at %d of %d bytes", len(data), h.hdrLen+8)
		}
		more = data[h.hdrLen]&0x80 != 0
		h.hdrLen += 8
	}
	if h.typ == ERFTypeEthernet {
		// Ethernet records carry a 2-byte offset/pad before the frame.
		if len(data) < h.hdrLen+2 {
			return h, malformed("ERF Ethernet record cut short")
		}
		h.hdrLen += 2
	}
	h.payLen = len(data) - h.hdrLen
	if int(h.wlen) < h.payLen {
		h.payLen = int(h.wlen)
	}
	return h, nil
}

func decodeLayer(l gopacket.DecodingLayer, data []byte, p gopacket.PacketBuilder) error {
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l.(gopacket.Layer))
	next := l.NextLayerType()
	if next == gopacket.LayerTypeZero {
		return nil
	}
	return p.NextDecoder(next)
}

func decodeLRH(data []byte, p gopacket.PacketBuilder) error { return decodeLayer(&LRH{}, data, p) }
func decodeGRH(data []byte, p gopacket.PacketBuilder) error { return decodeLayer(&GRH{}, data, p) }
func decodeBTH(data []byte, p gopacket.PacketBuilder) error { return decodeLayer(&BTH{}, data, p) }
func decodeERF(data []byte, p gopacket.PacketBuilder) error { return decodeLayer(&ERF{}, data, p) }
