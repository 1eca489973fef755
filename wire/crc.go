package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC is CRC-32/IEEE (zlib.crc32, crc32.ChecksumIEEE) over a masked view
// of the packet from the first covered header through the pad (wire-spec
// §5). RoCE prepends 8 bytes of 0xFF, which stand for the LRH of a
// GRH-bearing IB packet with every LRH field masked; rxe seeds crc32_le with
// 0xDEBB20E3, the raw register after those 8 bytes (rxe_icrc.c).
//
// Only the headers up to and including the BTH are ever masked. They are at
// most 60 bytes (IPv6 40 + UDP 8 + BTH 12, or LRH 8 + GRH 40 + BTH 12), so
// ICRC copies that prefix into a stack array, masks it, runs a table CRC
// over it (crc32.Update would make the array escape to the heap: it calls
// through a function variable), and continues with crc32.Update in place
// over the rest of the packet, which is where the bytes are.

// icrcSeedRoCE is the CRC-32 value of 8 bytes of 0xFF (= ^0xDEBB20E3).
var icrcSeedRoCE = crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// maxMasked is the longest masked prefix: LRH+GRH+BTH or IPv6+UDP+BTH.
const maxMasked = 60

// crc32Slice8 is the slicing-by-8 table set for the reflected IEEE
// polynomial, used for the short masked prefix only.
var crc32Slice8 [8][256]uint32

// crc16Slice8 is the slicing-by-8 table set for the IB VCRC.
var crc16Slice8 [8][256]uint16

func init() {
	t := crc32.IEEETable
	for i := range 256 {
		crc32Slice8[0][i] = t[i]
	}
	for i := range 256 {
		c := crc32Slice8[0][i]
		for k := 1; k < 8; k++ {
			c = crc32Slice8[0][c&0xFF] ^ c>>8
			crc32Slice8[k][i] = c
		}
	}
	// VCRC: polynomial 0x100B reflected = 0xD008 (wire-spec §6, dagcrc).
	for i := range 256 {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xD008
			} else {
				c >>= 1
			}
		}
		crc16Slice8[0][i] = c
	}
	for i := range 256 {
		c := crc16Slice8[0][i]
		for k := 1; k < 8; k++ {
			c = crc16Slice8[0][c&0xFF] ^ c>>8
			crc16Slice8[k][i] = c
		}
	}
}

// crc32Short updates the CRC-32 value crc (not the raw register) with p,
// like crc32.Update(crc, crc32.IEEETable, p), without letting p escape.
func crc32Short(crc uint32, p []byte) uint32 {
	crc = ^crc
	t := &crc32Slice8
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xFF] ^ t[6][crc>>8&0xFF] ^ t[7][crc&0xFF]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// CRC16IB returns the InfiniBand variant CRC of b: CRC-16 with polynomial
// 0x100B, reflected, init 0xFFFF, final XOR 0xFFFF (wire-spec §6). The check
// value CRC16IB([]byte("123456789")) is 0x0A3D. On the wire it is stored
// little-endian after the ICRC and covers LRH through ICRC.
func CRC16IB(b []byte) uint16 {
	c := uint16(0xFFFF)
	t := &crc16Slice8
	for len(b) >= 8 {
		c ^= binary.LittleEndian.Uint16(b)
		c = t[7][c&0xFF] ^ t[6][c>>8] ^ t[5][b[2]] ^ t[4][b[3]] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
		b = b[8:]
	}
	for _, x := range b {
		c = t[0][byte(c)^x] ^ c>>8
	}
	return c ^ 0xFFFF
}

// lowerLen returns how many covered bytes precede the BTH for kind k: the
// bytes icrcCompute expects in lower. -1 for KindBTH and unknown kinds.
func lowerLen(k Kind) int {
	switch k {
	case KindRoCEv2IPv4:
		return IPv4Len + UDPLen
	case KindRoCEv2IPv6:
		return IPv6Len + UDPLen
	case KindRoCEv1:
		return GRHLen
	case KindIB:
		return LRHLen
	case KindIBGRH:
		return LRHLen + GRHLen
	}
	return -1
}

// icrcCompute returns the ICRC of a packet of kind k whose covered headers
// before the BTH are lower (exactly lowerLen(k) bytes: IPv4/IPv6+UDP, GRH,
// LRH or LRH+GRH) and whose BTH through pad is tr (at least 12 bytes). The
// two need not be contiguous, which lets Finish compute the ICRC of a
// BTH-first datagram over the IP/UDP headers the kernel will add.
func icrcCompute(k Kind, lower, tr []byte) uint32 {
	var m [maxMasked]byte
	n := copy(m[:], lower)
	copy(m[n:], tr[:12])
	crc := uint32(0)
	switch k {
	case KindRoCEv2IPv4:
		crc = icrcSeedRoCE
		m[1] = 0xFF               // TOS
		m[8] = 0xFF               // TTL
		m[10], m[11] = 0xFF, 0xFF // header checksum
		m[26], m[27] = 0xFF, 0xFF // UDP checksum
	case KindRoCEv2IPv6:
		crc = icrcSeedRoCE
		maskIPv6(m[:])
		m[46], m[47] = 0xFF, 0xFF // UDP checksum
	case KindRoCEv1:
		crc = icrcSeedRoCE
		maskIPv6(m[:])
	case KindIB:
		m[0] |= 0xF0 // VL only
	case KindIBGRH:
		for i := range LRHLen { // the whole LRH (verified on real frames)
			m[i] = 0xFF
		}
		maskIPv6(m[LRHLen:])
	}
	m[n+4] = 0xFF // BTH resv8a: FECN, BECN, resv6
	crc = crc32Short(crc, m[:n+12])
	return crc32.Update(crc, crc32.IEEETable, tr[12:])
}

// maskIPv6 masks traffic class, flow label and hop limit of an IPv6 header
// or GRH, keeping the version nibble.
func maskIPv6(h []byte) {
	h[0] |= 0x0F
	h[1], h[2], h[3] = 0xFF, 0xFF, 0xFF
	h[7] = 0xFF
}

// ICRC computes (rather than reads) the ICRC of a packet that Decode has
// parsed from frame, without copying the packet. It returns 0 for a
// FramingBTH packet, whose covered IP/UDP headers are unknown, and for a
// descriptor that does not fit frame.
func ICRC(frame []byte, p *Packet) uint32 {
	first := p.firstCovered()
	if first < 0 || p.BTHOff < first || p.ICRCOff < p.BTHOff+12 || p.ICRCOff > len(frame) ||
		p.BTHOff-first != lowerLen(p.Kind) {
		return 0
	}
	return icrcCompute(p.Kind, frame[first:p.BTHOff], frame[p.BTHOff:p.ICRCOff])
}
