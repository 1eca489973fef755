//go:build !purego

#include "textflag.h"

// Folding constants for the reflected CRC-32/IEEE polynomial, one pair per
// 128-bit lane: low qword x^(D+32) mod P, high qword x^(D-32) mod P, each
// bit-reflected and shifted left by one, where D is the fold distance in
// bits (the convention of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ"; wire/crc_fold_test.go derives them).

// D = 2048: four accumulators of 64 bytes, folded across 256 bytes.
DATA fold256<>+0(SB)/8, $0x11542778a
DATA fold256<>+8(SB)/8, $0x1322d1430
DATA fold256<>+16(SB)/8, $0x11542778a
DATA fold256<>+24(SB)/8, $0x1322d1430
DATA fold256<>+32(SB)/8, $0x11542778a
DATA fold256<>+40(SB)/8, $0x1322d1430
DATA fold256<>+48(SB)/8, $0x11542778a
DATA fold256<>+56(SB)/8, $0x1322d1430
GLOBL fold256<>(SB), RODATA, $64

// D = 512: one accumulator folded across the next 64 bytes.
DATA fold64<>+0(SB)/8, $0x154442bd4
DATA fold64<>+8(SB)/8, $0x1c6e41596
DATA fold64<>+16(SB)/8, $0x154442bd4
DATA fold64<>+24(SB)/8, $0x1c6e41596
DATA fold64<>+32(SB)/8, $0x154442bd4
DATA fold64<>+40(SB)/8, $0x1c6e41596
DATA fold64<>+48(SB)/8, $0x154442bd4
DATA fold64<>+56(SB)/8, $0x1c6e41596
GLOBL fold64<>(SB), RODATA, $64

// Lane i of 0..2 of a 64-byte accumulator folded onto lane 3: D = 384,
// 256, 128; lane 3's pair is 0, so its products vanish.
DATA foldLanes<>+0(SB)/8, $0x3db1ecdc
DATA foldLanes<>+8(SB)/8, $0x174359406
DATA foldLanes<>+16(SB)/8, $0xf1da05aa
DATA foldLanes<>+24(SB)/8, $0x15a546366
DATA foldLanes<>+32(SB)/8, $0x1751997d0
DATA foldLanes<>+40(SB)/8, $0x0ccaa009e
DATA foldLanes<>+48(SB)/8, $0
DATA foldLanes<>+56(SB)/8, $0
GLOBL foldLanes<>(SB), RODATA, $64

// The 128-to-32-bit reduction: x^96 (D = 128's high constant) and x^64
// mod P (same convention), then Barrett's P (reflected, 33 bits) and mu =
// floor(x^64 / P) (reflected, 33 bits).
DATA reduce<>+0(SB)/8, $0x0ccaa009e
DATA reduce<>+8(SB)/8, $0x163cd6124
DATA reduce<>+16(SB)/8, $0x1db710641
DATA reduce<>+24(SB)/8, $0x1f7011641
GLOBL reduce<>(SB), RODATA, $32

// FOLD carries each 128-bit lane of acc forward by Z0's distance and adds
// add: acc = lo(acc)·k_lo ⊕ hi(acc)·k_hi ⊕ add, lane by lane (tmp is
// scratch).
#define FOLD(acc, tmp, add) \
	VPCLMULQDQ $0x11, Z0, acc, tmp \
	VPCLMULQDQ $0x00, Z0, acc, acc \
	VPTERNLOGD $0x96, add, tmp, acc

// func fold512x4(crc uint32, p *byte, n int) uint32
//
// Returns the raw CRC register (no inversions) over the n bytes at p (n >=
// 256, a multiple of 64) from the initial value crc. Four independent accumulators, each folded 256 bytes ahead per turn,
// keep four carry-less multiply chains in flight where hash/crc32's AVX-512
// loop keeps one.
TEXT ·fold512x4(SB), NOSPLIT, $0-28
	MOVL crc+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX

	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVD     AX, X10 // zeroes the rest of Z10
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX

	VMOVDQU64 fold256<>+0(SB), Z0

loop256:
	CMPQ      CX, $256
	JB        merge
	VMOVDQU64 (SI), Z11
	VMOVDQU64 64(SI), Z12
	VMOVDQU64 128(SI), Z13
	VMOVDQU64 192(SI), Z14
	FOLD(Z1, Z5, Z11)
	FOLD(Z2, Z6, Z12)
	FOLD(Z3, Z7, Z13)
	FOLD(Z4, Z8, Z14)
	ADDQ      $256, SI
	SUBQ      $256, CX
	JMP       loop256

merge:
	// Fold each accumulator onto the next: Z1 then stands for all bytes
	// consumed so far.
	VMOVDQU64 fold64<>+0(SB), Z0
	FOLD(Z1, Z5, Z2)
	FOLD(Z1, Z5, Z3)
	FOLD(Z1, Z5, Z4)

loop64:
	CMPQ      CX, $64
	JB        done
	VMOVDQU64 (SI), Z11
	FOLD(Z1, Z5, Z11)
	ADDQ      $64, SI
	SUBQ      $64, CX
	JMP       loop64

done:
	// Fold the four 128-bit lanes onto the last: X1 = lane 3 of Z1
	// xor the three others carried forward.
	VMOVDQU64     foldLanes<>+0(SB), Z0
	VPCLMULQDQ    $0x11, Z0, Z1, Z5
	VPCLMULQDQ    $0x00, Z0, Z1, Z6
	VEXTRACTI32X4 $3, Z1, X7
	VPTERNLOGD    $0x96, Z6, Z5, Z7 // lanes 0-2: the products; lane 3: Z1's
	VEXTRACTI64X4 $1, Z7, Y6
	VPXORQ        Y6, Y7, Y7
	VEXTRACTI128  $1, Y7, X6
	VPXOR         X6, X7, X1
	VZEROUPPER

	// 128 bits to 64: the high qword plus the low one times x^96.
	VMOVDQU    reduce<>+0(SB), X0
	VPCLMULQDQ $0x00, X0, X1, X2 // X1.lo * x^96
	VPSRLDQ    $8, X1, X1
	VPXOR      X2, X1, X1

	// 64 bits to 32: the bits above the low dword plus the low dword
	// times x^64.
	VPCMPEQB   X3, X3, X3
	VPSRLQ     $32, X3, X3 // low dword of each qword
	VPSRLDQ    $4, X1, X2
	VPAND      X3, X1, X1
	VPCLMULQDQ $0x10, X0, X1, X1 // (low dword) * x^64
	VPXOR      X2, X1, X1

	// Barrett reduction modulo P.
	VMOVDQU    reduce<>+16(SB), X0
	VPAND      X3, X1, X2
	VPCLMULQDQ $0x10, X0, X2, X2 // (low dword) * mu
	VPAND      X3, X2, X2
	VPCLMULQDQ $0x00, X0, X2, X2 // * P
	VPXOR      X1, X2, X1
	VPEXTRD    $1, X1, AX
	MOVL       AX, ret+24(FP)
	RET
