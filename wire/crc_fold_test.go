package wire

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestFold4Constants derives fold512x4's constants (x^(D±32) mod P,
// bit-reflected, shifted left by one) and checks them against the values in
// crc_fold_amd64.s, and D = 512's against hash/crc32's.
func TestFold4Constants(t *testing.T) {
	xpow := func(k int) uint64 { // x^k mod P, P = x^32 + 0x04C11DB7
		r := uint64(1)
		for range k {
			r <<= 1
			if r>>32&1 != 0 {
				r ^= 0x104C11DB7
			}
		}
		return r
	}
	refl := func(v uint64) uint64 { // 32-bit reflection, then << 1
		var out uint64
		for i := range 32 {
			out |= (v >> i & 1) << (31 - i)
		}
		return out << 1
	}
	for _, tc := range []struct {
		d      int
		lo, hi uint64
	}{
		{2048, 0x11542778a, 0x1322d1430},
		{512, 0x154442bd4, 0x1c6e41596},
	} {
		if lo, hi := refl(xpow(tc.d+32)), refl(xpow(tc.d-32)); lo != tc.lo || hi != tc.hi {
			t.Errorf("D=%d: derived %#x %#x, assembly has %#x %#x", tc.d, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestFold4Update checks fold4Update against hash/crc32 over every length
// from fold4Min to a jumbo frame's, at every alignment mod 8, from random
// initial values.
func TestFold4Update(t *testing.T) {
	if !haveFold4 {
		t.Skip("no AVX-512 VPCLMULQDQ on this CPU: fold4Update never runs here")
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9100+8)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := fold4Min; n <= 9100; n++ {
		off := n & 7
		p := buf[off : off+n]
		crc := r.Uint32()
		if got, want := fold4Update(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d off %d crc %#x: fold4Update %#x, crc32.Update %#x", n, off, crc, got, want)
		}
	}
}

// BenchmarkFold4 sets fold4Update against hash/crc32 at the payload sizes
// of the IB MTUs a RoCE link carries.
func BenchmarkFold4(b *testing.B) {
	if !haveFold4 {
		b.Skip("no AVX-512 VPCLMULQDQ on this CPU")
	}
	for _, n := range []int{256, 512, 1024, 2048, 4096} {
		data := make([]byte, n)
		var sink uint32
		b.Run(fmt.Sprintf("hash-crc32/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink += crc32.Update(sink, crc32.IEEETable, data)
			}
		})
		b.Run(fmt.Sprintf("fold4/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink += fold4Update(sink, data)
			}
		})
		_ = sink
	}
}

// FuzzFold4 holds fold4Update to hash/crc32 on arbitrary bytes, initial
// values and offsets.
func FuzzFold4(f *testing.F) {
	if !haveFold4 {
		f.Skip("no AVX-512 VPCLMULQDQ on this CPU: fold4Update never runs here")
	}
	f.Add(uint32(0), uint8(0), make([]byte, 4096))
	f.Add(uint32(0xFFFFFFFF), uint8(3), []byte("RoCEv2 ICRC over a payload long enough to fold four lanes: "+
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"+
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"+
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	f.Fuzz(func(t *testing.T, crc uint32, off uint8, p []byte) {
		p = p[min(int(off&63), len(p)):]
		if len(p) < fold4Min {
			return
		}
		if got, want := fold4Update(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d crc %#x: fold4Update %#x, crc32.Update %#x", len(p), crc, got, want)
		}
	})
}

// TestPickCRCFold4 holds pickCRC to its rule on a CPU that runs fold4: it
// is picked without a timing that a stall could decide, and GOROCE_CRC
// still overrides it.
func TestPickCRCFold4(t *testing.T) {
	if !haveFold4 {
		t.Skip("no AVX-512 VPCLMULQDQ on this CPU: pickCRC times the others here")
	}
	t.Setenv("GOROCE_CRC", "")
	if got := pickCRC(); got != crcFold4 {
		t.Fatalf("picked %s, want fold4", crcNames[got])
	}
	t.Setenv("GOROCE_CRC", "tables")
	if got := pickCRC(); got != crcTables {
		t.Fatalf("GOROCE_CRC=tables: picked %s", crcNames[got])
	}
}
