package bth

import "fmt"

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparison uses the 2^23 window of rxe's psn_compare.
type PSN uint32

// PSNMask keeps the low 24 bits.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns the wrapped distance p-q as a signed number in [-2^23, 2^23).
func (p PSN) Sub(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Compare returns -1, 0 or +1 as p is before, equal to or after q within the
// 2^23 window. Mirrors rxe.h psn_compare.
func (p PSN) Compare(q PSN) int {
	d := int32((uint32(p) - uint32(q)) << 8)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Less reports whether p is before q.
func (p PSN) Less(q PSN) bool { return p.Compare(q) < 0 }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

func (p PSN) String() string { return fmt.Sprintf("0x%06x", uint32(p)) }
