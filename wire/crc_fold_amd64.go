//go:build !purego

package wire

import "golang.org/x/sys/cpu"

// fold4Min is the shortest input fold4Update takes: four 64-byte blocks.
const fold4Min = 256

// haveFold4 reports whether fold512x4 can run: AVX-512 with the 512-bit
// carry-less multiply (VPCLMULQDQ), which the OS saves (x/sys/cpu checks
// XCR0).
var haveFold4 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

//go:noescape
func fold512x4(crc uint32, p *byte, n int) uint32

// fold4Update is crc32.Update(crc, crc32.IEEETable, p) for len(p) >=
// fold4Min on a CPU with haveFold4: fold512x4 takes the whole 64-byte
// blocks, slicing-by-8 the rest.
func fold4Update(crc uint32, p []byte) uint32 {
	n := len(p) &^ 63
	crc = ^fold512x4(^crc, &p[0], n)
	if n == len(p) {
		return crc
	}
	return slice8Update(crc, p[n:])
}
