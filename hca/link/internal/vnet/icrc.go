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
type IDCache struct{ c lengthCache[IDBasis] }

// Get returns the basis for pktLen, computing it on first use (one
// allocation per new length; at most 64 lengths are kept).
func (c *IDCache) Get(pktLen int) *IDBasis { return c.c.get(pktLen, NewIDBasis) }

// lengthCache maps packet lengths to values made by a constructor.
type lengthCache[T any] struct {
	m       map[int]*T
	lastLen int
	last    *T
}

func (c *lengthCache[T]) get(pktLen int, mk func(int) *T) *T {
	if c.last != nil && c.lastLen == pktLen {
		return c.last
	}
	v, ok := c.m[pktLen]
	if !ok {
		if c.m == nil {
			c.m = make(map[int]*T)
		}
		if len(c.m) >= 64 {
			clear(c.m) // bounded: lengths come from a handful of MTUs
		}
		v = mk(pktLen)
		c.m[pktLen] = v
	}
	c.lastLen, c.last = pktLen, v
	return v
}

// IDSolver inverts IDBasis for one packet length: from the difference
// between a packet's ICRC and the ICRC computed over it with ID 0, it
// finds the ID (and whether DF was clear) that explains it. The udp link
// needs it where it cannot see the IPv4 header of what it receives (a UDP
// socket instead of a raw one): every field the ICRC covers is known but
// the identification and the flags, 17 bits that a 32-bit difference pins
// down, since the map from them to the difference is linear and one to
// one (the bits lie within 24 consecutive bits of the CRC input, fewer
// than the CRC's degree).
type IDSolver struct {
	basis IDBasis
	// Reduced row echelon form of the 16 ID bits' changes: row k changes
	// ICRC bit pivot[k], which no other row changes, and is the change of
	// the IDs in mix[k] XORed together.
	pivot [16]uint8
	mix   [16]uint16
	df    uint32 // the change when the DF flag flips
}

// NewIDSolver computes the solver for IPv4 RoCEv2 packets of pktLen bytes
// (IP header through ICRC, 20-byte IP header).
func NewIDSolver(pktLen int) *IDSolver {
	s := &IDSolver{basis: *NewIDBasis(pktLen)}
	if pktLen < 11 || pktLen-11 > len(zeros) {
		return s
	}
	// DF is bit 0x40 of byte 6, so pktLen-11 bytes follow it in the CRC
	// input (NewIDBasis).
	s.df = rawCRC(rawCRC(0, []byte{0x40}), zeros[:pktLen-11])
	var w [16]uint32
	for i := range 16 {
		w[i] = s.basis.Delta(uint16(1) << i)
		s.mix[i] = uint16(1) << i
		for k := range i {
			if w[i]>>s.pivot[k]&1 != 0 {
				w[i] ^= w[k]
				s.mix[i] ^= s.mix[k]
			}
		}
		if w[i] == 0 {
			return s // cannot happen (see the type's comment); Solve then finds nothing
		}
		p := uint8(0)
		for w[i]>>p&1 == 0 {
			p++
		}
		s.pivot[i] = p
		for k := range i {
			if w[k]>>p&1 != 0 {
				w[k] ^= w[i]
				s.mix[k] ^= s.mix[i]
			}
		}
	}
	return s
}

// Solve returns the ID and DF flag of a packet whose received ICRC differs
// from the one computed with ID 0 and DF set by d, and ok false when no ID
// and flag explain d: the packet is corrupt (or carries IP options or
// fragment bits, which RoCE never sends).
func (s *IDSolver) Solve(d uint32) (id uint16, df, ok bool) {
	if d == 0 {
		return 0, true, true
	}
	if id, ok = s.solve(d); ok {
		return id, true, true
	}
	if s.df != 0 {
		if id, ok = s.solve(d ^ s.df); ok {
			return id, false, true
		}
	}
	return 0, false, false
}

func (s *IDSolver) solve(d uint32) (uint16, bool) {
	var x uint16
	for k := range 16 {
		x ^= s.mix[k] & -uint16(d>>s.pivot[k]&1)
	}
	return x, s.basis.Delta(x) == d
}

// IDSolverCache maps packet lengths to solvers as IDCache maps them to
// bases; single owner.
type IDSolverCache struct{ c lengthCache[IDSolver] }

// Get returns the solver for pktLen, computing it on first use (at most
// 64 lengths are kept).
func (c *IDSolverCache) Get(pktLen int) *IDSolver { return c.c.get(pktLen, NewIDSolver) }
