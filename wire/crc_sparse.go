package wire

import "encoding/binary"

// sparseUpdate is crc32.Update(crc, crc32.IEEETable, p) without tables or
// carry-less multiplies: the Chorba method (Sam Russell, 2024,
// arXiv:2412.16398). A CRC with the register cleared is the message
// polynomial times x^32 modulo P, the IEEE polynomial, so the message may
// first be reduced modulo any multiple of P. The multiple used here,
//
//	M(x) = x^300 + x^155 + x^117 + x^89 + 1   (= P(x)·Q(x), TestSparseMultiple)
//
// is sparse: clearing one leading bit of the message XORs it into just four
// later bits, 145, 183, 211 and 300 bit positions on. So a 64-bit word is
// cleared with eight shifts and a handful of XORs into the words two to five
// ahead, carried in registers. Only the last five to six words, which have no
// room ahead of them, go through the tables.
//
// Why it exists: under qemu TCG, where the interop and bench-vs-rxe guests
// run, every guest load pays a software TLB lookup and a carry-less
// multiply is a helper call, so slicing-by-8's eight table loads per word
// dominate the ICRC, while shifts and XORs translate to one host instruction
// each. The data are read once, 8 bytes per load.
//
// Bits are in the reflected order of CRC-32/IEEE: stream bit k is bit k%64
// of the little-endian word k/64, so "later in the message" is a left shift
// within a word and a right shift for the part that spills into the next.
func sparseUpdate(crc uint32, p []byte) uint32 {
	if len(p) < sparseMin {
		return slice8Update(crc, p)
	}
	// The register's initial value is the same as XOR-ing it into the first
	// 32 message bits and starting from zero.
	c0 := uint64(^crc) // pending XOR into the current word
	var c1, c2, c3, c4 uint64
	// Four words a turn while at least five words lie ahead of the last.
	for len(p) >= 72 {
		w := binary.LittleEndian.Uint64(p) ^ c0
		c0, c1, c2, c3, c4 = c1, c2^w<<17^w<<55, c3^w>>47^w>>9^w<<19, c4^w>>45^w<<44, w>>20
		w = binary.LittleEndian.Uint64(p[8:]) ^ c0
		c0, c1, c2, c3, c4 = c1, c2^w<<17^w<<55, c3^w>>47^w>>9^w<<19, c4^w>>45^w<<44, w>>20
		w = binary.LittleEndian.Uint64(p[16:]) ^ c0
		c0, c1, c2, c3, c4 = c1, c2^w<<17^w<<55, c3^w>>47^w>>9^w<<19, c4^w>>45^w<<44, w>>20
		w = binary.LittleEndian.Uint64(p[24:]) ^ c0
		c0, c1, c2, c3, c4 = c1, c2^w<<17^w<<55, c3^w>>47^w>>9^w<<19, c4^w>>45^w<<44, w>>20
		p = p[32:]
	}
	for len(p) >= 48 {
		w := binary.LittleEndian.Uint64(p) ^ c0
		c0, c1, c2, c3, c4 = c1, c2^w<<17^w<<55, c3^w>>47^w>>9^w<<19, c4^w>>45^w<<44, w>>20
		p = p[8:]
	}
	// 40 to 47 bytes are left: five words, each with its pending XOR, and
	// up to 7 bytes. Their CRC from a cleared register is the answer.
	var tail [47]byte
	n := copy(tail[:], p)
	binary.LittleEndian.PutUint64(tail[0:], binary.LittleEndian.Uint64(tail[0:])^c0)
	binary.LittleEndian.PutUint64(tail[8:], binary.LittleEndian.Uint64(tail[8:])^c1)
	binary.LittleEndian.PutUint64(tail[16:], binary.LittleEndian.Uint64(tail[16:])^c2)
	binary.LittleEndian.PutUint64(tail[24:], binary.LittleEndian.Uint64(tail[24:])^c3)
	binary.LittleEndian.PutUint64(tail[32:], binary.LittleEndian.Uint64(tail[32:])^c4)
	return slice8Update(0xFFFFFFFF, tail[:n])
}

// sparseMin is the shortest input sparseUpdate reduces: below it the few
// words it could clear do not pay for the tail's copy.
const sparseMin = 128
