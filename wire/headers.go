package wire

import (
	"encoding/binary"
	"net/netip"
)

// Well-known numbers of the encapsulations.
const (
	// RoCEv2Port is the UDP destination port of RoCEv2 (ROCE_V2_UDP_DPORT).
	RoCEv2Port = 4791
	// EtherTypeRoCEv1 is the ethertype of RoCEv1 (IBoE): a GRH follows.
	EtherTypeRoCEv1 = 0x8915
	// EtherTypeIPv4 is the IPv4 ethertype.
	EtherTypeIPv4 = 0x0800
	// EtherTypeIPv6 is the IPv6 ethertype.
	EtherTypeIPv6 = 0x86DD
	// EtherTypeVLAN is the 802.1Q tag protocol identifier.
	EtherTypeVLAN = 0x8100
	// IPProtoUDP is the IP protocol number / IPv6 next header of UDP.
	IPProtoUDP = 17
	// NxtHdrIBA is the GRH next-header value announcing an IBA transport
	// header (BTH).
	NxtHdrIBA = 0x1B
)

// Header sizes.
const (
	EthernetLen = 14
	VLANLen     = 4  // an 802.1Q tag inserted after the source MAC
	IPv4Len     = 20 // without options; RoCEv2 (rxe) never sends options
	IPv6Len     = 40
	UDPLen      = 8
	LRHLen      = 8
	GRHLen      = 40
	ICRCLen     = 4
	VCRCLen     = 2
)

// Ethernet is a view of an Ethernet II header, optionally followed by one
// 802.1Q tag. Call IsValid first; accessors do not bounds-check.
//
//	| dst MAC (6) | src MAC (6) | ethertype (2) |
//	| dst MAC (6) | src MAC (6) | 0x8100 | TCI (2) | ethertype (2) |
type Ethernet []byte

// IsValid reports whether the view holds a complete header (with its tag, if
// tagged).
func (e Ethernet) IsValid() bool {
	if len(e) < EthernetLen {
		return false
	}
	return !e.Tagged() || len(e) >= EthernetLen+VLANLen
}

// Dst returns the destination MAC.
func (e Ethernet) Dst() (m [6]byte) { copy(m[:], e[0:6]); return }

// Src returns the source MAC.
func (e Ethernet) Src() (m [6]byte) { copy(m[:], e[6:12]); return }

// SetDst sets the destination MAC.
func (e Ethernet) SetDst(m [6]byte) { copy(e[0:6], m[:]) }

// SetSrc sets the source MAC.
func (e Ethernet) SetSrc(m [6]byte) { copy(e[6:12], m[:]) }

// Tagged reports whether an 802.1Q tag follows the source MAC.
func (e Ethernet) Tagged() bool { return binary.BigEndian.Uint16(e[12:]) == EtherTypeVLAN }

// TCI returns the 802.1Q tag control information (PCP, DEI, VID); call only
// when Tagged.
func (e Ethernet) TCI() uint16 { return binary.BigEndian.Uint16(e[14:]) }

// EtherType returns the ethertype of the payload (after the tag, if any).
func (e Ethernet) EtherType() uint16 {
	if e.Tagged() {
		return binary.BigEndian.Uint16(e[16:])
	}
	return binary.BigEndian.Uint16(e[12:])
}

// HeaderLen returns 14, or 18 when tagged.
func (e Ethernet) HeaderLen() int {
	if e.Tagged() {
		return EthernetLen + VLANLen
	}
	return EthernetLen
}

// EthernetFields holds every field of an Ethernet header for Encode.
type EthernetFields struct {
	Dst, Src  [6]byte
	VLAN      bool
	TCI       uint16
	EtherType uint16
}

// Encode writes f; the view needs 14 bytes, or 18 when f.VLAN.
func (e Ethernet) Encode(f *EthernetFields) {
	copy(e[0:6], f.Dst[:])
	copy(e[6:12], f.Src[:])
	if f.VLAN {
		binary.BigEndian.PutUint16(e[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(e[14:], f.TCI)
		binary.BigEndian.PutUint16(e[16:], f.EtherType)
		return
	}
	binary.BigEndian.PutUint16(e[12:], f.EtherType)
}

// IPv4 is a view of an IPv4 header (RFC 791). Call IsValid first; accessors
// do not bounds-check.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |      TOS      |          Total Length         |
//	|         Identification        |Flags|      Fragment Offset    |
//	|      TTL      |    Protocol   |         Header Checksum       |
//	|                       Source Address                          |
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// In the ICRC, TOS, TTL and the header checksum are masked (wire-spec §5.2).
type IPv4 []byte

// IPv4 flag bits (in the 16-bit flags/fragment-offset word).
const (
	ipv4FlagDF     = 0x4000
	ipv4FlagMF     = 0x2000
	ipv4FragOffset = 0x1FFF
)

// IsValid reports whether the view holds at least the header its IHL claims
// (and at least 20 bytes).
func (h IPv4) IsValid() bool {
	return len(h) >= IPv4Len && h.IHL() >= IPv4Len && len(h) >= h.IHL()
}

// Version returns the version nibble (4).
func (h IPv4) Version() uint8 { return h[0] >> 4 }

// IHL returns the header length in bytes.
func (h IPv4) IHL() int { return int(h[0]&0x0F) * 4 }

// TOS returns the type-of-service byte (DSCP<<2 | ECN).
func (h IPv4) TOS() uint8 { return h[1] }

// SetTOS sets the type-of-service byte.
func (h IPv4) SetTOS(v uint8) { h[1] = v }

// TotalLength returns the total length of the IP packet.
func (h IPv4) TotalLength() int { return int(binary.BigEndian.Uint16(h[2:])) }

// SetTotalLength sets the total length.
func (h IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(h[2:], n) }

// ID returns the identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// SetID sets the identification field.
func (h IPv4) SetID(v uint16) { binary.BigEndian.PutUint16(h[4:], v) }

// DontFragment reports the DF flag.
func (h IPv4) DontFragment() bool { return binary.BigEndian.Uint16(h[6:])&ipv4FlagDF != 0 }

// MoreFragments reports the MF flag.
func (h IPv4) MoreFragments() bool { return binary.BigEndian.Uint16(h[6:])&ipv4FlagMF != 0 }

// FragmentOffset returns the fragment offset in bytes.
func (h IPv4) FragmentOffset() int { return int(binary.BigEndian.Uint16(h[6:])&ipv4FragOffset) * 8 }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[8] }

// SetTTL sets the time to live.
func (h IPv4) SetTTL(v uint8) { h[8] = v }

// Protocol returns the protocol number.
func (h IPv4) Protocol() uint8 { return h[9] }

// Checksum returns the header checksum field.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// SetChecksum sets the header checksum field.
func (h IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[10:], v) }

// CalculateChecksum returns the header checksum of the first IHL bytes,
// computed with the checksum field taken as zero.
func (h IPv4) CalculateChecksum() uint16 {
	n := h.IHL()
	s := checksumAdd(0, h[:10])
	s = checksumAdd(s, h[12:n])
	return ^checksumFold(s)
}

// ChecksumFor returns the header checksum h would have with its Total
// Length and Identification fields set to totalLen and id, reading only
// h's other fields of a 20-byte header (options are not covered). A
// receiver that cuts one packet into several with new lengths and IDs
// computes their checksums from the original header this way, without
// reading back the headers it has just written.
func (h IPv4) ChecksumFor(totalLen, id uint16) uint16 {
	// Words 32-bit wide add up to the same one's-complement sum once
	// folded. h[6:10] is flags/fragment offset, TTL and protocol; the
	// checksum field (h[10:12]) is not read.
	s := uint64(binary.BigEndian.Uint16(h[0:])) + uint64(binary.BigEndian.Uint32(h[6:])) +
		uint64(binary.BigEndian.Uint32(h[12:])) + uint64(binary.BigEndian.Uint32(h[16:])) +
		uint64(totalLen) + uint64(id)
	return ^checksumFold(s)
}

// IsChecksumValid reports whether the header checksum verifies.
func (h IPv4) IsChecksumValid() bool {
	return checksumFold(checksumAdd(0, h[:h.IHL()])) == 0xFFFF
}

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[12:16])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[16:20])) }

// IPv4Fields holds the fields Encode writes. Options are not supported.
type IPv4Fields struct {
	TOS          uint8
	TotalLength  uint16
	ID           uint16
	DontFragment bool
	TTL          uint8
	Protocol     uint8
	Src, Dst     [4]byte
}

// Encode writes a 20-byte header from f, including the header checksum.
// The checksum is summed from the fields (ipv4Words) and the header goes
// out as three stores (8, 8 and 4 bytes): summed back from the header's
// bytes, it was loaded as words just after being stored as bytes and
// half-words, loads the store buffer cannot forward.
func (h IPv4) Encode(f *IPv4Fields) {
	_ = h[IPv4Len-1]
	dst := binary.BigEndian.Uint32(f.Dst[:])
	w0, w1 := ipv4Words(f.TOS, f.TotalLength, f.ID, f.DontFragment, f.TTL, f.Protocol,
		binary.BigEndian.Uint32(f.Src[:]), dst)
	binary.BigEndian.PutUint64(h[0:], w0)
	binary.BigEndian.PutUint64(h[8:], w1)
	binary.BigEndian.PutUint32(h[16:], dst)
}

// ipv4Words returns the first 16 bytes of an IPv4 header without options,
// checksum included, as two big-endian words; bytes 16-19 are dst. It
// takes the fields as arguments, not as an IPv4Fields, for Finish, which
// has them in registers: the compiler read such a struct, built for the
// call, back with a 16-bit load of its byte-stored TTL and protocol, a
// load the store buffer cannot forward, waiting behind the payload copy.
func ipv4Words(tos uint8, totalLength, id uint16, df bool, ttl, proto uint8, src, dst uint32) (w0, w1 uint64) {
	var fl uint16
	if df {
		fl = ipv4FlagDF
	}
	w0 = 0x45<<56 | uint64(tos)<<48 | uint64(totalLength)<<32 | uint64(id)<<16 | uint64(fl)
	ttlProto := uint64(ttl)<<8 | uint64(proto)
	// The one's complement sum of the header's 16-bit words, checksum 0.
	sum := w0>>48 + w0>>32&0xFFFF + w0>>16&0xFFFF + w0&0xFFFF + ttlProto +
		uint64(src>>16) + uint64(src&0xFFFF) + uint64(dst>>16) + uint64(dst&0xFFFF)
	return w0, ttlProto<<48 | uint64(^checksumFold(sum))<<32 | uint64(src)
}

// IPv6 is a view of an IPv6 fixed header (RFC 8200). Call IsValid first.
//
//	|Version| Traffic Class |           Flow Label                  |
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	|                    Source Address (16)                        |
//	|                 Destination Address (16)                      |
//
// In the ICRC, traffic class, flow label and hop limit are masked.
type IPv6 []byte

// IsValid reports whether the view holds the 40-byte fixed header.
func (h IPv6) IsValid() bool { return len(h) >= IPv6Len }

// Version returns the version nibble (6).
func (h IPv6) Version() uint8 { return h[0] >> 4 }

// TrafficClass returns the traffic class.
func (h IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(h[0:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h[0:]) & 0xFFFFF }

// SetTrafficClass sets the traffic class, keeping version and flow label.
func (h IPv6) SetTrafficClass(tc uint8) {
	v := binary.BigEndian.Uint32(h[0:])
	binary.BigEndian.PutUint32(h[0:], v&^0x0FF00000|uint32(tc)<<20)
}

// SetFlowLabel sets the flow label (low 20 bits), keeping the rest.
func (h IPv6) SetFlowLabel(fl uint32) {
	v := binary.BigEndian.Uint32(h[0:])
	binary.BigEndian.PutUint32(h[0:], v&^0xFFFFF|fl&0xFFFFF)
}

// PayloadLength returns the payload length (bytes after the fixed header).
func (h IPv6) PayloadLength() int { return int(binary.BigEndian.Uint16(h[4:])) }

// SetPayloadLength sets the payload length.
func (h IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(h[4:], n) }

// NextHeader returns the next-header field.
func (h IPv6) NextHeader() uint8 { return h[6] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// SetHopLimit sets the hop limit.
func (h IPv6) SetHopLimit(v uint8) { h[7] = v }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[8:24])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[24:40])) }

// IPv6Fields holds the fields Encode writes.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      [16]byte
}

// Encode writes the 40-byte fixed header from f.
func (h IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(h[4:], f.PayloadLength)
	h[6] = f.NextHeader
	h[7] = f.HopLimit
	copy(h[8:24], f.Src[:])
	copy(h[24:40], f.Dst[:])
}

// UDP is a view of a UDP header (RFC 768). Call IsValid first.
//
//	|          Source Port          |       Destination Port        |
//	|            Length             |           Checksum            |
type UDP []byte

// IsValid reports whether the view holds 8 bytes.
func (h UDP) IsValid() bool { return len(h) >= UDPLen }

// SrcPort returns the source port.
func (h UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(h[0:]) }

// DstPort returns the destination port.
func (h UDP) DstPort() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// Length returns the UDP length (header plus data).
func (h UDP) Length() int { return int(binary.BigEndian.Uint16(h[4:])) }

// Checksum returns the checksum field (0 means "not computed" over IPv4;
// rxe sends 0 over IPv6 too).
func (h UDP) Checksum() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// SetSrcPort sets the source port.
func (h UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(h[0:], p) }

// SetDstPort sets the destination port.
func (h UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(h[2:], p) }

// SetLength sets the UDP length.
func (h UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(h[4:], n) }

// SetChecksum sets the checksum field.
func (h UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[6:], v) }

// CalculateChecksum returns the UDP checksum of h (header and data: the view
// must span exactly Length bytes) over the pseudo-header of src and dst,
// which must both be IPv4 or both IPv6. The checksum field is taken as zero.
// A computed 0 is returned as 0xFFFF (RFC 768), so the result can be stored
// as is.
func (h UDP) CalculateChecksum(src, dst netip.Addr) uint16 {
	s := pseudoHeaderSum(src, dst, len(h))
	s = checksumAdd(s, h[:6])
	s = checksumAdd(s, h[8:])
	c := ^checksumFold(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// IsChecksumValid reports whether the stored checksum verifies over the
// pseudo-header. A zero checksum (not computed) is reported valid.
func (h UDP) IsChecksumValid(src, dst netip.Addr) bool {
	if h.Checksum() == 0 {
		return true
	}
	s := pseudoHeaderSum(src, dst, len(h))
	return checksumFold(checksumAdd(s, h)) == 0xFFFF
}

func pseudoHeaderSum(src, dst netip.Addr, n int) uint64 {
	var s uint64
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		s = uint64(binary.BigEndian.Uint32(a[:])) + uint64(binary.BigEndian.Uint32(b[:]))
	} else {
		a, b := src.As16(), dst.As16()
		s = checksumAdd(0, a[:])
		s = checksumAdd(s, b[:])
	}
	return s + IPProtoUDP + uint64(n)
}

// LRH is a view of the InfiniBand Local Route Header (IBA 7.7, 8 bytes).
//
//	|  VL   | LVer  |  SL   |Rsv|LNH|             DLID              |
//	|  Rsv5   |      PktLen (11)    |             SLID              |
//
// PktLen counts 4-byte words from the first LRH byte through the ICRC.
type LRH []byte

// Link next header values (ib_pack.h IB_LNH_*).
const (
	LNHRaw       = 0
	LNHIP        = 1
	LNHIBALocal  = 2 // BTH follows the LRH
	LNHIBAGlobal = 3 // GRH follows the LRH
)

// IsValid reports whether the view holds 8 bytes.
func (h LRH) IsValid() bool { return len(h) >= LRHLen }

// VL returns the virtual lane.
func (h LRH) VL() uint8 { return h[0] >> 4 }

// LVer returns the link version.
func (h LRH) LVer() uint8 { return h[0] & 0x0F }

// SL returns the service level.
func (h LRH) SL() uint8 { return h[1] >> 4 }

// Resv2 returns the two reserved bits of byte 1.
func (h LRH) Resv2() uint8 { return h[1] >> 2 & 3 }

// LNH returns the link next header.
func (h LRH) LNH() uint8 { return h[1] & 3 }

// DLID returns the destination LID.
func (h LRH) DLID() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// Resv5 returns the five reserved bits of byte 4.
func (h LRH) Resv5() uint8 { return h[4] >> 3 }

// PktLen returns the packet length in 4-byte words (LRH through ICRC).
func (h LRH) PktLen() int { return int(binary.BigEndian.Uint16(h[4:]) & 0x7FF) }

// SLID returns the source LID.
func (h LRH) SLID() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// SetVL sets the virtual lane, keeping LVer.
func (h LRH) SetVL(v uint8) { h[0] = h[0]&0x0F | v<<4 }

// SetPktLen sets PktLen (11 bits), keeping the reserved bits.
func (h LRH) SetPktLen(words int) {
	binary.BigEndian.PutUint16(h[4:], binary.BigEndian.Uint16(h[4:])&^0x7FF|uint16(words)&0x7FF)
}

// LRHFields holds the fields Encode writes; reserved bits are written as 0.
type LRHFields struct {
	VL, LVer, SL, LNH uint8
	DLID, SLID        uint16
	PktLen            int
}

// Encode writes the 8-byte LRH.
func (h LRH) Encode(f *LRHFields) {
	h[0] = f.VL<<4 | f.LVer&0x0F
	h[1] = f.SL<<4 | f.LNH&3
	binary.BigEndian.PutUint16(h[2:], f.DLID)
	binary.BigEndian.PutUint16(h[4:], uint16(f.PktLen)&0x7FF)
	binary.BigEndian.PutUint16(h[6:], f.SLID)
}

// GRH is a view of the InfiniBand Global Route Header (IBA 8.3, 40 bytes),
// laid out like an IPv6 header. PayLen counts the bytes after the GRH through
// the ICRC; NxtHdr is 0x1B for an IBA transport header.
type GRH []byte

// IsValid reports whether the view holds 40 bytes.
func (h GRH) IsValid() bool { return len(h) >= GRHLen }

// IPVer returns the IP version nibble (6).
func (h GRH) IPVer() uint8 { return h[0] >> 4 }

// TClass returns the traffic class.
func (h GRH) TClass() uint8 { return IPv6(h).TrafficClass() }

// FlowLabel returns the 20-bit flow label.
func (h GRH) FlowLabel() uint32 { return IPv6(h).FlowLabel() }

// PayLen returns the payload length (after the GRH, through the ICRC).
func (h GRH) PayLen() int { return int(binary.BigEndian.Uint16(h[4:])) }

// SetPayLen sets the payload length.
func (h GRH) SetPayLen(n uint16) { binary.BigEndian.PutUint16(h[4:], n) }

// NxtHdr returns the next header.
func (h GRH) NxtHdr() uint8 { return h[6] }

// HopLmt returns the hop limit.
func (h GRH) HopLmt() uint8 { return h[7] }

// SGID returns the source GID.
func (h GRH) SGID() [16]byte { return [16]byte(h[8:24]) }

// DGID returns the destination GID.
func (h GRH) DGID() [16]byte { return [16]byte(h[24:40]) }

// GRHFields holds the fields Encode writes.
type GRHFields struct {
	TClass     uint8
	FlowLabel  uint32
	PayLen     uint16
	NxtHdr     uint8
	HopLmt     uint8
	SGID, DGID [16]byte
}

// Encode writes the 40-byte GRH with IPVer 6.
func (h GRH) Encode(f *GRHFields) {
	IPv6(h).Encode(&IPv6Fields{TrafficClass: f.TClass, FlowLabel: f.FlowLabel,
		PayloadLength: f.PayLen, NextHeader: f.NxtHdr, HopLimit: f.HopLmt, Src: f.SGID, Dst: f.DGID})
}

// checksumAdd adds b as big-endian 16-bit words to the one's-complement
// accumulator s (not folded). An odd trailing byte is padded with zero.
func checksumAdd(s uint64, b []byte) uint64 {
	for len(b) >= 32 {
		s += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[20:])) +
			uint64(binary.BigEndian.Uint32(b[24:])) + uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	// Under 32 bytes left (an IPv4 header's 20): no loop, for the reason
	// prefixCRC unrolls its words (a loop across a page of code costs a
	// lookup per turn under qemu TCG).
	if len(b) >= 16 {
		s += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:]))
		b = b[16:]
	}
	if len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// checksumFold folds a 64-bit accumulator to 16 bits (end-around carry).
func checksumFold(s uint64) uint16 {
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	s = s>>16 + s&0xFFFF
	s = s>>16 + s&0xFFFF
	s = s>>16 + s&0xFFFF
	return uint16(s)
}
