package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// slice8Update is hash/crc32's IEEE update, bit for bit: every length from
// 0 to 100 (the byte tail, the single 8-byte step and the 16-byte loop),
// MTU-sized buffers, and arbitrary starting values.
func TestSlice8Update(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4200)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, n := range append(rangeInts(0, 100), 1024, 1027, 4096, 4200) {
		for _, crc := range []uint32{0, 0xFFFFFFFF, icrcSeedRoCE, r.Uint32()} {
			p := buf[r.IntN(len(buf)-n+1):][:n]
			if got, want := slice8Update(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
				t.Fatalf("len %d from %#x: %#x, want %#x", n, crc, got, want)
			}
		}
	}
}

// Whichever implementation init picked, the ICRC is the same, computed in
// place (icrcContiguous) or over headers apart from the rest (icrcCompute,
// as Finish does): every length from 64 to 400 bytes (fold4's 256-byte
// minimum, whole 64-byte blocks and the tails after them), and path-MTU
// packets.
func TestICRCEitherCRC(t *testing.T) {
	saved := crcImpl
	defer func() { crcImpl = saved }()
	impls := []crcKind{crcTables, crcSparse}
	if haveFold4 {
		impls = append(impls, crcFold4)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for k := KindRoCEv2IPv4; k <= KindIBGRH; k++ {
		lower := lowerLen(k)
		for _, n := range append(rangeInts(maxMasked+4, 400), 1081, 4136, 4152, 4156, 4172) {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			crcImpl = crcLib
			lib := icrcContiguous(k, b)
			if got := icrcCompute(k, b[:lower], b[lower:]); got != lib {
				t.Fatalf("kind %v, %d bytes: icrcCompute %#x, icrcContiguous %#x", k, n, got, lib)
			}
			for _, impl := range impls {
				crcImpl = impl
				if got := icrcContiguous(k, b); got != lib {
					t.Fatalf("kind %v, %d bytes: %s %#x, hash/crc32 %#x", k, n, crcNames[impl], got, lib)
				}
				if got := icrcCompute(k, b[:lower], b[lower:]); got != lib {
					t.Fatalf("kind %v, %d bytes: icrcCompute with %s %#x, hash/crc32 %#x", k, n, crcNames[impl], got, lib)
				}
			}
		}
	}
}

func rangeInts(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// The three CRC-32 implementations crcUpdate chooses between, on one path-MTU
// payload: which wins depends on the machine (pickCRC decides at init).
func BenchmarkCRCUpdate4096(b *testing.B) {
	data := make([]byte, 4096)
	var sink uint32
	b.Run("hash-crc32", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sink += crc32.Update(sink, crc32.IEEETable, data)
		}
	})
	b.Run("slice8", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sink += slice8Update(sink, data)
		}
	})
	b.Run("sparse", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sink += sparseUpdate(sink, data)
		}
	})
	_ = sink
}

// M(x) = x^300 + x^155 + x^117 + x^89 + 1, the polynomial sparseUpdate
// reduces by, is a multiple of the CRC-32/IEEE polynomial: its remainder
// modulo P(x) = x^32 + 0x04C11DB7 is zero. Long division over GF(2), with
// bit i of the big number standing for x^i.
func TestSparseMultiple(t *testing.T) {
	var m [5]uint64 // 320 bits
	for _, e := range []int{300, 155, 117, 89, 0} {
		m[e/64] |= 1 << (e % 64)
	}
	p := uint64(1)<<32 | 0x04C11DB7
	for d := 300; d >= 32; d-- {
		if m[d/64]>>(d%64)&1 == 0 {
			continue
		}
		// XOR P(x)·x^(d-32) into m: P's 33 bits, placed at d-32.
		s := d - 32
		m[s/64] ^= p << (s % 64)
		if s%64 > 31 && s/64+1 < len(m) {
			m[s/64+1] ^= p >> (64 - s%64)
		}
	}
	for i, w := range m {
		if w != 0 {
			t.Fatalf("M mod P: word %d is %#x, want a zero remainder", i, w)
		}
	}
}

// sparseUpdate is hash/crc32's IEEE update, bit for bit, at every length
// from 0 to 400 (the table fallback, both loops and every tail length),
// MTU-sized buffers, and arbitrary starting values and alignments.
func TestSparseUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 9100)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, n := range append(rangeInts(0, 400), 1024, 1028, 1100, 4096, 4100, 4200, 9000) {
		for _, crc := range []uint32{0, 0xFFFFFFFF, icrcSeedRoCE, r.Uint32()} {
			p := buf[r.IntN(len(buf)-n+1):][:n]
			if got, want := sparseUpdate(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
				t.Fatalf("len %d from %#x: %#x, want %#x", n, crc, got, want)
			}
		}
	}
	// All-ones words exercise every shifted bit at once.
	ones := make([]byte, 1000)
	for i := range ones {
		ones[i] = 0xFF
	}
	if got, want := sparseUpdate(0, ones), crc32.ChecksumIEEE(ones); got != want {
		t.Fatalf("1000 × 0xFF: %#x, want %#x", got, want)
	}
}

// Every implementation runs without allocating (TestZeroAllocs covers only
// the one init picked on the machine that runs the tests).
func TestCRCZeroAllocs(t *testing.T) {
	saved := crcImpl
	defer func() { crcImpl = saved }()
	b := make([]byte, 4156)
	for impl := crcLib; impl <= crcSparse; impl++ {
		crcImpl = impl
		if n := testing.AllocsPerRun(100, func() { _ = icrcContiguous(KindRoCEv2IPv4, b) }); n != 0 {
			t.Errorf("%s: %.1f allocations per ICRC, want 0", crcNames[impl], n)
		}
	}
}

// FuzzSparseUpdate: sparseUpdate agrees with hash/crc32 on any input and
// starting value.
func FuzzSparseUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 200))
	f.Add(uint32(0xFFFFFFFF), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := sparseUpdate(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d from %#x: %#x, want %#x", len(p), crc, got, want)
		}
	})
}
