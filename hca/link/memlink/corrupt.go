package memlink

import (
	"math/rand/v2"

	"github.com/goroce/goroce/hca/link"
)

// transportOffset returns where the BTH starts in frame f of the given
// format, or 0 when the frame is not recognisably RoCE/IB (then any byte may
// be flipped).
func transportOffset(f []byte, format link.Format) int {
	off := 0
	switch format {
	case link.FormatEthernet:
		if len(f) < ethHeaderLen {
			return 0
		}
		et := uint16(f[12])<<8 | uint16(f[13])
		off = ethHeaderLen
		if et == 0x8100 {
			if len(f) < ethHeaderLen+4 {
				return 0
			}
			et = uint16(f[16])<<8 | uint16(f[17])
			off += 4
		}
		switch et {
		case 0x0800, 0x86DD:
			o := ipTransportOffset(f[off:])
			if o == 0 {
				return 0
			}
			off += o
		case 0x8915: // RoCEv1: GRH
			off += 40
		default:
			return 0
		}
	case link.FormatIP:
		off = ipTransportOffset(f)
	case link.FormatIB:
		if len(f) < 8 {
			return 0
		}
		off = 8
		if f[1]&3 == 3 { // LNH: GRH present
			off += 40
		}
	}
	if off+12 > len(f) {
		return 0
	}
	return off
}

// ipTransportOffset returns the offset of the UDP payload of an IPv4/IPv6
// packet, or 0.
func ipTransportOffset(f []byte) int {
	if len(f) < 1 {
		return 0
	}
	switch f[0] >> 4 {
	case 4:
		return int(f[0]&0x0F)*4 + 8
	case 6:
		return 40 + 8
	}
	return 0
}

// corrupt flips one ICRC-covered byte of f.
func corrupt(f []byte, format link.Format, rng *rand.Rand) {
	start := transportOffset(f, format)
	for {
		i := start + rng.IntN(len(f)-start)
		if start > 0 && i == start+4 && len(f)-start > 1 {
			continue // BTH byte 4 (FECN, BECN, resv6) is masked in the ICRC
		}
		f[i] ^= byte(1 + rng.IntN(255))
		return
	}
}
