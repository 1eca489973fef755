package bth

import (
	"fmt"
	"time"
)

// Syndrome is the AETH syndrome byte: bit 7 reserved, bits 6:5 type, bits 4:0
// value (IBA 9.7.5.1; rxe_hdr.h enum aeth_syndrome).
type Syndrome uint8

// AckType is the kind of an AETH syndrome.
type AckType uint8

// Syndrome types.
const (
	AckTypeACK      AckType = 0 // positive acknowledgement with credit count
	AckTypeRNRNAK   AckType = 1 // receiver not ready, with timer code
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3 // negative acknowledgement with NAK code
)

func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR_NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "RESERVED"
}

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError  NAKCode = 0
	NAKInvalidRequest    NAKCode = 1
	NAKRemoteAccessError NAKCode = 2
	NAKRemoteOperational NAKCode = 3
	NAKInvalidRDRequest  NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN_SEQ_ERR"
	case NAKInvalidRequest:
		return "INVALID_REQUEST"
	case NAKRemoteAccessError:
		return "REMOTE_ACCESS_ERR"
	case NAKRemoteOperational:
		return "REMOTE_OP_ERR"
	case NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return fmt.Sprintf("NAK_CODE(%d)", uint8(c))
}

// CreditsUnlimited is the ACK credit code meaning "credits not tracked"; rxe
// always sends it (AETH_ACK_UNLIMITED).
const CreditsUnlimited = 0x1F

// SyndromeACKUnlimited is an ACK syndrome with invalid credits (0x1F).
const SyndromeACKUnlimited Syndrome = CreditsUnlimited

// ACKSyndrome returns an ACK syndrome with credit code c (0..31).
func ACKSyndrome(c uint8) Syndrome { return Syndrome(c & 0x1F) }

// RNRNAKSyndrome returns an RNR NAK syndrome carrying timer code t.
func RNRNAKSyndrome(t RNRTimer) Syndrome { return Syndrome(0x20 | uint8(t)&0x1F) }

// NAKSyndrome returns a NAK syndrome with code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1F) }

// Type returns the syndrome type (bits 6:5).
func (s Syndrome) Type() AckType { return AckType(s >> 5 & 3) }

// Value returns bits 4:0: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// Reserved returns bit 7 (must be zero).
func (s Syndrome) Reserved() bool { return s&0x80 != 0 }

// IsACK reports a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Type() == AckTypeACK }

// NAKCode returns the NAK code; meaningful when Type is AckTypeNAK.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// RNRTimer returns the RNR timer code; meaningful when Type is AckTypeRNRNAK.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s.Value()) }

// Credits returns the number of receive WQEs an ACK advertises and whether
// credits are tracked at all (code 31 means they are not).
func (s Syndrome) Credits() (n int, tracked bool) {
	c := s.Value()
	if c == CreditsUnlimited {
		return 0, false
	}
	return creditTable[c], true
}

// creditTable maps an ACK credit code to a WQE count (IBA table 44).
var creditTable = [31]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// CreditCode returns the largest credit code whose count is at most n.
func CreditCode(n int) uint8 {
	var c uint8
	for i, v := range creditTable {
		if v <= n {
			c = uint8(i)
		}
	}
	return c
}

func (s Syndrome) String() string {
	switch s.Type() {
	case AckTypeACK:
		return fmt.Sprintf("ACK(credits=%d)", s.Value())
	case AckTypeRNRNAK:
		return fmt.Sprintf("RNR_NAK(timer=%d)", s.Value())
	case AckTypeNAK:
		return "NAK(" + s.NAKCode().String() + ")"
	}
	return fmt.Sprintf("Syndrome(0x%02x)", uint8(s))
}

// RNRTimer is the 5-bit RNR NAK timer code (min_rnr_timer).
type RNRTimer uint8

// rnrTable is the IBA RNR NAK timer table in microseconds. Code 0 is the
// longest (655.36 ms). rxe's rnrnak_usec has 61410 for code 25; the spec and
// this table say 61440.
var rnrTable = [32]uint32{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640,
	960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520}

// Duration returns how long a requester waits after an RNR NAK with code t.
func (t RNRTimer) Duration() time.Duration {
	return time.Duration(rnrTable[t&0x1F]) * time.Microsecond
}

// LocalACKTimeout returns the local ACK timeout for the 5-bit timeout
// attribute: 4.096 µs × 2^t. Zero means infinite and returns 0.
func LocalACKTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(uint64(4096) << (t & 0x1F))
}
