package bth

import "fmt"

// QPN is a 24-bit queue pair number.
type QPN uint32

// MulticastQPN is the destination QPN of multicast packets.
const MulticastQPN QPN = 0xFFFFFF

// Valid reports whether q fits in 24 bits.
func (q QPN) Valid() bool { return q <= 0xFFFFFF }

func (q QPN) String() string { return fmt.Sprintf("0x%06x", uint32(q)) }

// PKey is a partition key. DefaultPKey is what RoCE always sends.
type PKey uint16

// DefaultPKey is the full-member default partition key (IB_DEFAULT_PKEY_FULL).
const DefaultPKey PKey = 0xFFFF

// QKey is a UD queue key.
type QKey uint32

// GSIQKey is the well-known Q_Key of QP1.
const GSIQKey QKey = 0x80010000

// RKey is a remote memory key, carried in RETH, AtomicETH and IETH.
type RKey uint32

// LKey is a local memory key; it never appears on the wire.
type LKey uint32

// MTU is the IB path MTU enumeration (ibv_mtu): payload bytes per packet.
type MTU uint8

// Path MTU enumeration values, as in verbs.h.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of m, or 0 if m is not a valid enum value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprintf("%d", m.Bytes())
}

// MTUFromBytes returns the enum for an exact IB MTU byte count, or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// LargestMTU returns the largest IB MTU whose payload fits in n bytes, or 0 if
// none does. rxe uses it with n = netdev MTU - 80 (RXE_MAX_HDR_LENGTH).
func LargestMTU(n int) MTU {
	var best MTU
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() <= n {
			best = m
		}
	}
	return best
}
