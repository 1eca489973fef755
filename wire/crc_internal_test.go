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

// Whichever implementation init picked, the ICRC is the same.
func TestICRCEitherCRC(t *testing.T) {
	saved := crcSlice8
	defer func() { crcSlice8 = saved }()
	r := rand.New(rand.NewPCG(3, 4))
	for k := KindRoCEv2IPv4; k <= KindIBGRH; k++ {
		for _, n := range []int{maxMasked + 4, 100, 1081, 4156} {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			crcSlice8 = false
			lib := icrcContiguous(k, b)
			crcSlice8 = true
			if tab := icrcContiguous(k, b); tab != lib {
				t.Fatalf("kind %v, %d bytes: tables %#x, hash/crc32 %#x", k, n, tab, lib)
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

// The two CRC-32 implementations crcUpdate chooses between, on one path-MTU
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
	_ = sink
}
