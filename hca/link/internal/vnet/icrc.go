package vnet

import "hash/crc32"

// ICRC correction for a changed IPv4 identification: the udp link's GSO
// segments and the tun link's super-packets both get IDs from the kernel's
// segmentation that the ICRC their frames were built with did not cover.
//
// The RoCEv2 ICRC is a CRC-32 over ff×8 ‖ masked IPv4 header ‖ UDP ‖ BTH ‖
// rest, and a CRC is affine in its input: crc(X⊕D) = crc(X) ⊕ crc(D) ⊕
// crc(0ⁿ) for inputs of one length n. With D zero but for the 16 ID bits,
// the correction is linear in the ID change, the XOR of one precomputed
// value per changed bit. Those 16 values depend only on how many bytes
// follow the ID, that is on the packet length; a GSO run has one or two
// lengths, so a cache makes a correction two table loads, not a CRC of the
// packet.

// IDBasis holds, for one IPv4 packet length (20-byte header through
// ICRC), the ICRC change caused by each value of each byte of the
// identification: lo[x] for the low byte x, hi[x] for the high one. (A
// loop over the ID's set bits mispredicts a branch per bit: consecutive
// IDs have no pattern a predictor learns.)
type IDBasis struct {
	lo, hi [256]uint32
}

// rawCRC runs the bare CRC-32 register (no pre- or post-inversion) over p
// from r: hash/crc32.Update inverts on entry and exit, undone here.
func rawCRC(r uint32, p []byte) uint32 { return ^crc32.Update(^r, crc32.IEEETable, p) }

var zeros [65536]byte

// NewIDBasis computes the basis for an IPv4 RoCEv2 packet (IP header
// through ICRC) of pktLen bytes with a 20-byte IP header. The CRC input is
// 8 bytes of ones then the packet without its ICRC; the ID is at input
// offset 8+4, so pktLen-4+8-(12+2) = pktLen-10 bytes follow it.
func NewIDBasis(pktLen int) *IDBasis {
	var b IDBasis
	if pktLen < 10 || pktLen-10 > len(zeros) {
		return &b
	}
	tail := zeros[:pktLen-10]
	var bits [16]uint32 // the change for each single bit of the ID
	for bit := range 16 {
		v := uint16(1) << bit
		bits[bit] = rawCRC(rawCRC(0, []byte{byte(v >> 8), byte(v)}), tail)
	}
	// Each entry is an earlier one (its lowest set bit cleared) XOR that
	// bit's change.
	for x := 1; x < 256; x++ {
		low := bits16(x)
		b.lo[x] = b.lo[x&(x-1)] ^ bits[low]
		b.hi[x] = b.hi[x&(x-1)] ^ bits[8+low]
	}
	return &b
}

// bits16 is the index of x's lowest set bit (x != 0).
func bits16(x int) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// Delta returns the value to XOR into the ICRC (as the little-endian word
// at the end of the packet) when the ID changes by XOR with x.
func (b *IDBasis) Delta(x uint16) uint32 { return b.lo[x&0xFF] ^ b.hi[x>>8] }

// IDCache maps packet lengths to bases; single owner. The last length is
// remembered, so a run of equal lengths costs no map lookup.
type IDCache struct {
	m       map[int]*IDBasis
	lastLen int
	last    *IDBasis
}

// Get returns the basis for pktLen, computing it on first use (one
// allocation per new length; at most 64 lengths are kept).
func (c *IDCache) Get(pktLen int) *IDBasis {
	if c.last != nil && c.lastLen == pktLen {
		return c.last
	}
	b, ok := c.m[pktLen]
	if !ok {
		if c.m == nil {
			c.m = make(map[int]*IDBasis)
		}
		if len(c.m) >= 64 {
			clear(c.m) // bounded: lengths come from a handful of MTUs
		}
		b = NewIDBasis(pktLen)
		c.m[pktLen] = b
	}
	c.lastLen, c.last = pktLen, b
	return b
}
