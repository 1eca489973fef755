package udp

import "hash/crc32"

// ICRC adjustment for a changed IPv4 identification.
//
// The ICRC is a CRC-32 over ff×8 ‖ masked IPv4 header ‖ UDP ‖ BTH ‖ rest,
// and a CRC is affine in its input: crc(X⊕D) = crc(X) ⊕ crc(D) ⊕ crc(0ⁿ)
// for inputs of equal length n. With D zero except for the 16 ID bits,
// the correction L(D) = crc(D) ⊕ crc(0ⁿ) is linear in the ID, so it is the
// XOR of one precomputed value per set ID bit. Those 16 values depend only
// on how many input bytes follow the ID, that is on the frame length; GSO
// runs have one or two lengths, so a small cache makes the adjustment 16
// XORs instead of a CRC over the whole packet.

// idDeltaBasis holds, for one frame length, the CRC register change caused
// by each bit of the IP ID.
type idDeltaBasis [16]uint32

// rawCRC runs the bare CRC-32 register (no pre- or post-inversion) over p
// starting from r. hash/crc32.Update inverts on entry and exit; undoing
// both leaves the linear register map.
func rawCRC(r uint32, p []byte) uint32 { return ^crc32.Update(^r, crc32.IEEETable, p) }

var zeros [maxRoCEPacket + ipv4Hdr + udpHdr]byte

// newIDDeltaBasis computes the basis for an IPv4 frame (IP header through
// ICRC) of frameLen bytes. The ID sits at input offset 8+4; the CRC input
// ends before the 4-byte ICRC, so frameLen-4+8-(12+2) bytes follow the ID.
func newIDDeltaBasis(frameLen int) *idDeltaBasis {
	var b idDeltaBasis
	tail := zeros[:frameLen-10]
	for bit := 0; bit < 16; bit++ {
		v := uint16(1) << bit
		b[bit] = rawCRC(rawCRC(0, []byte{byte(v >> 8), byte(v)}), tail)
	}
	return &b
}

// delta returns the value to XOR into the ICRC when the IP ID changes by
// XOR with x.
func (b *idDeltaBasis) delta(x uint16) uint32 {
	var d uint32
	for bit := 0; x != 0; bit, x = bit+1, x>>1 {
		if x&1 != 0 {
			d ^= b[bit]
		}
	}
	return d
}

// idDeltaCache maps frame lengths to bases. Single owner (the send path).
type idDeltaCache struct {
	m map[int]*idDeltaBasis
}

func (c *idDeltaCache) get(frameLen int) *idDeltaBasis {
	if b, ok := c.m[frameLen]; ok {
		return b
	}
	if c.m == nil {
		c.m = make(map[int]*idDeltaBasis)
	}
	if len(c.m) >= 64 {
		clear(c.m) // bounded: lengths come from a handful of MTUs
	}
	b := newIDDeltaBasis(frameLen)
	c.m[frameLen] = b
	return b
}
