package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"time"

	"github.com/goroce/goroce/bth"
)

// The ICRC is CRC-32/IEEE (zlib.crc32, crc32.ChecksumIEEE) over a masked view
// of the packet from the first covered header through the pad (wire-spec
// §5). RoCE prepends 8 bytes of 0xFF, which stand for the LRH of a
// GRH-bearing IB packet with every LRH field masked; rxe seeds crc32_le with
// 0xDEBB20E3, the raw register after those 8 bytes (rxe_icrc.c).
//
// Only the headers up to and including the BTH are ever masked: at most 60
// bytes (IPv6 40 + UDP 8 + BTH 12, or LRH 8 + GRH 40 + BTH 12). ICRC runs a
// slicing-by-8 table CRC over that prefix in place, OR-ing the mask into
// each 64-bit word as it is loaded (no masked copy; a stack copy passed to
// crc32.Update would escape to the heap, because crc32 calls through a
// function variable), then continues with crcUpdate (hash/crc32's
// PCLMULQDQ folding, or, where they are faster, the same tables or the
// table-free sparseUpdate) in place over the rest of the packet.

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
	crcImpl = pickCRC()
}

// crcImpl records which CRC-32 implementation crcUpdate runs; it is set
// once, by init.
var crcImpl crcKind

type crcKind uint8

const (
	crcLib    crcKind = iota // hash/crc32: carry-less multiply folding on amd64 and arm64
	crcTables                // slice8Update
	crcSparse                // sparseUpdate
	crcFold4                 // fold4Update (amd64 with AVX-512 VPCLMULQDQ)
)

var crcNames = [...]string{crcLib: "clmul", crcTables: "tables", crcSparse: "sparse", crcFold4: "fold4"}

// CRCImplementation names the CRC-32 implementation this process's ICRCs
// run: "clmul" (hash/crc32), "tables" (slicing-by-8), "sparse" (shifts
// and XORs, no tables) or "fold4" (four 512-bit carry-less multiply
// chains). It is for reports such as interop/tcgcost.
func CRCImplementation() string { return crcNames[crcImpl] }

// crcUpdate continues the CRC-32/IEEE value crc over p (crc32.Update with
// crc32.IEEETable) with whichever of four implementations pickCRC chose
// when the package was initialized: hash/crc32's (carry-less
// multiply folding on amd64 and arm64, ~40x the tables' speed on hardware),
// fold4Update's (the same folding with four 512-bit chains in flight where
// hash/crc32's AVX-512 loop keeps one: 1.8x its speed on 4 KiB on a Zen 4,
// 1.5x on 1 KiB), the slicing-by-8 tables above, or sparseUpdate's
// table-free reduction.
// Under emulation such as qemu TCG, where the interop and bench-vs-rxe
// guests run, a carry-less multiply is a call into the emulator's helpers
// and each table load a software TLB lookup, and sparseUpdate wins.
func crcUpdate(crc uint32, p []byte) uint32 {
	switch crcImpl {
	case crcLib:
		return crc32.Update(crc, crc32.IEEETable, p)
	case crcFold4:
		if len(p) >= fold4Min {
			return fold4Update(crc, p)
		}
		return crc32.Update(crc, crc32.IEEETable, p)
	case crcSparse:
		if len(p) >= sparseMin {
			return sparseUpdate(crc, p)
		}
	}
	return slice8Update(crc, p)
}

// slice8Update is crc32.Update(crc, crc32.IEEETable, p) with the
// slicing-by-8 tables. Each 8 bytes are one 64-bit load, and the loop takes
// 16 bytes per turn: under TCG every guest load and loop instruction pays
// for its emulation. 6.1 guest, 63 packets of 1040 bytes: 104-105 µs
// against 124 µs for two 32-bit loads per 8 bytes and one word per turn.
func slice8Update(crc uint32, p []byte) uint32 {
	t := &crc32Slice8
	crc = ^crc
	for len(p) >= 16 {
		v := binary.LittleEndian.Uint64(p) ^ uint64(crc)
		crc = t[0][v>>56] ^ t[1][v>>48&0xFF] ^ t[2][v>>40&0xFF] ^ t[3][v>>32&0xFF] ^
			t[4][v>>24&0xFF] ^ t[5][v>>16&0xFF] ^ t[6][v>>8&0xFF] ^ t[7][v&0xFF]
		v = binary.LittleEndian.Uint64(p[8:]) ^ uint64(crc)
		crc = t[0][v>>56] ^ t[1][v>>48&0xFF] ^ t[2][v>>40&0xFF] ^ t[3][v>>32&0xFF] ^
			t[4][v>>24&0xFF] ^ t[5][v>>16&0xFF] ^ t[6][v>>8&0xFF] ^ t[7][v&0xFF]
		p = p[16:]
	}
	if len(p) >= 8 {
		v := binary.LittleEndian.Uint64(p) ^ uint64(crc)
		crc = t[0][v>>56] ^ t[1][v>>48&0xFF] ^ t[2][v>>40&0xFF] ^ t[3][v>>32&0xFF] ^
			t[4][v>>24&0xFF] ^ t[5][v>>16&0xFF] ^ t[6][v>>8&0xFF] ^ t[7][v&0xFF]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// pickCRC returns fold4 on a CPU that runs it, and otherwise times the
// other implementations over a path-MTU payload (best of five rounds
// each, interleaved, so that one preemption does not decide; each timed
// pass right after an untimed one, so that each is timed warm, as it runs
// in use) and returns the fastest. GOROCE_CRC=clmul, =tables, =sparse or
// (where it runs) =fold4 forces a choice.
//
// fold4 is not timed: it is hash/crc32's folding with four 512-bit chains
// in flight instead of one, so wherever the CPU has AVX-512 VPCLMULQDQ it
// is the faster of the two on anything this long (1.8x on 4 KiB on a
// Zen 4, 2.6x on an Intel Xeon), and the emulators the tables and sparse
// paths are for (qemu TCG: a carry-less multiply there is a helper call)
// do not offer AVX-512. Timed, it could lose: a loopback bench run under
// perf record -g on the Xeon host started with clmul (its JSON's
// icrc_implementation), spent 19 % of its samples in hash/crc32 against
// 12-13 % for fold4 in the runs beside it, and moved 5797 against 6907
// MB/s, although fold4 was allowed to lose only by more than 25 %; a
// plain send_bw run of the same build, without a profiler, started with
// another CRC too.
func pickCRC() crcKind {
	for k, name := range crcNames {
		if os.Getenv("GOROCE_CRC") == name && (crcKind(k) != crcFold4 || haveFold4) {
			return crcKind(k)
		}
	}
	if haveFold4 {
		return crcFold4
	}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var sink uint32
	run := [...]func(){
		crcLib: func() {
			for range 4 {
				sink += crc32.Update(sink, crc32.IEEETable, buf)
			}
		},
		crcTables: func() {
			for range 4 {
				sink += slice8Update(sink, buf)
			}
		},
		crcSparse: func() {
			for range 4 {
				sink += sparseUpdate(sink, buf)
			}
		},
	}
	var best [len(run)]time.Duration
	for i := range best {
		best[i] = time.Duration(math.MaxInt64)
	}
	for range 5 {
		for k, f := range run {
			// One untimed pass first, so that each is timed warm (a CPU
			// that powers its vector units down while scalar code runs
			// starts the next vector loop slower).
			f()
			t0 := time.Now()
			f()
			best[k] = min(best[k], time.Since(t0))
		}
	}
	pick := crcLib
	for k := range best {
		if best[k] < best[pick] {
			pick = crcKind(k)
		}
	}
	return pick
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

// icrcMask describes the masked prefix of one kind: n bytes (covered
// headers before the BTH, plus the 12-byte BTH) and, as little-endian
// 64-bit words, the bits set to one before the CRC. Masking is an OR with
// these words, so no masked copy of the packet is ever made.
type icrcMask struct {
	n     int
	words [(maxMasked + 7) / 8]uint64
	roce  bool // seeded with the 8 × 0xFF prefix
}

var icrcMasks [KindBTH + 1]icrcMask

func init() {
	for k := KindRoCEv2IPv4; k <= KindIBGRH; k++ {
		var m [maxMasked + 4]byte
		lower := lowerLen(k)
		ipv6 := func(o int) { // TClass + FlowLabel (version kept), HopLmt
			m[o] |= 0x0F
			m[o+1], m[o+2], m[o+3], m[o+7] = 0xFF, 0xFF, 0xFF, 0xFF
		}
		roce := true
		switch k {
		case KindRoCEv2IPv4:
			m[1] = 0xFF               // TOS
			m[8] = 0xFF               // TTL
			m[10], m[11] = 0xFF, 0xFF // header checksum
			m[26], m[27] = 0xFF, 0xFF // UDP checksum
		case KindRoCEv2IPv6:
			ipv6(0)
			m[46], m[47] = 0xFF, 0xFF // UDP checksum
		case KindRoCEv1:
			ipv6(0)
		case KindIB:
			m[0] = 0xF0 // VL only
			roce = false
		case KindIBGRH:
			for i := range LRHLen { // the whole LRH (verified on real frames)
				m[i] = 0xFF
			}
			ipv6(LRHLen)
			roce = false
		}
		m[lower+4] = 0xFF // BTH resv8a: FECN, BECN, resv6
		im := &icrcMasks[k]
		im.n, im.roce = lower+bth.HeaderLen, roce
		for i := range im.words {
			im.words[i] = binary.LittleEndian.Uint64(m[i*8:])
		}
	}
}

// prefixCRC updates the CRC-32 value crc with the first m.n bytes of b,
// masked by m: slicing-by-8 over whole words, slicing-by-4 for the last
// 4 bytes (every prefix length is a multiple of 4).
//
// The words are unrolled, not looped: under qemu TCG (the interop and
// bench-vs-rxe guests) a loop whose body lands across a 4 KiB page of
// code pays a translation-block lookup on every turn, and where the
// linker happened to put this function across one, Finish and Decode of
// a 2-byte SEND took twice as long in the guest (interop/tcgcost: 820-950
// against 440 ns and 1.4-1.6 against 0.75 µs; the same binary linked with
// -funcalign=512 was back at 440 ns). Forward branches cost nothing of
// the kind, and a call per word (crcWord is over the inlining budget)
// would cost one lookup each.
func prefixCRC(crc uint32, b []byte, m *icrcMask) uint32 {
	const _ = uint(7 - maxMasked/8) // the unrolled words below cover every prefix
	t := &crc32Slice8
	nw := m.n / 8
	b = b[:m.n]
	crc = ^crc
	if nw > 0 {
		v := binary.LittleEndian.Uint64(b[0:]) | m.words[0]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 1 {
		v := binary.LittleEndian.Uint64(b[8:]) | m.words[1]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 2 {
		v := binary.LittleEndian.Uint64(b[16:]) | m.words[2]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 3 {
		v := binary.LittleEndian.Uint64(b[24:]) | m.words[3]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 4 {
		v := binary.LittleEndian.Uint64(b[32:]) | m.words[4]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 5 {
		v := binary.LittleEndian.Uint64(b[40:]) | m.words[5]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if nw > 6 {
		v := binary.LittleEndian.Uint64(b[48:]) | m.words[6]
		lo, hi := uint32(v)^crc, uint32(v>>32)
		crc = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^ t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
	}
	if m.n&7 != 0 {
		crc ^= binary.LittleEndian.Uint32(b[nw*8:]) | uint32(m.words[nw&7])
		crc = t[0][crc>>24] ^ t[1][crc>>16&0xFF] ^ t[2][crc>>8&0xFF] ^ t[3][crc&0xFF]
	}
	return ^crc
}

// icrcContiguous returns the ICRC of a packet of kind k whose first covered
// header starts at b[0] and whose pad ends at b[len(b)].
func icrcContiguous(k Kind, b []byte) uint32 {
	m := &icrcMasks[k]
	crc := uint32(0)
	if m.roce {
		crc = icrcSeedRoCE
	}
	crc = prefixCRC(crc, b, m)
	return crcUpdate(crc, b[m.n:])
}

// icrcCompute returns the ICRC of a packet of kind k whose covered headers
// before the BTH are lower (exactly lowerLen(k) bytes: IPv4/IPv6+UDP, GRH,
// LRH or LRH+GRH) and whose BTH through pad is tr (at least 12 bytes). The
// two need not be contiguous, which lets Finish compute the ICRC of a
// BTH-first datagram over the IP/UDP headers the kernel will add.
func icrcCompute(k Kind, lower, tr []byte) uint32 {
	var tmp [maxMasked]byte
	n := copy(tmp[:], lower)
	copy(tmp[n:], tr[:bth.HeaderLen])
	m := &icrcMasks[k]
	crc := uint32(0)
	if m.roce {
		crc = icrcSeedRoCE
	}
	crc = prefixCRC(crc, tmp[:], m)
	return crcUpdate(crc, tr[bth.HeaderLen:])
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
	return icrcContiguous(p.Kind, frame[first:p.ICRCOff])
}
