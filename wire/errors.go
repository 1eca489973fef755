package wire

import (
	"errors"
	"fmt"
)

// Decode errors. Decode returns exactly these values (never wrapped), so
// comparing with == works as well as errors.Is; returning them allocates
// nothing.
var (
	// ErrShort: the frame ends before a header, or before the end its length
	// fields announce.
	ErrShort = errors.New("wire: frame too short")
	// ErrBadLength: a length field is impossible (too small for the headers
	// it must cover) or disagrees with another one (IP vs UDP length, GRH
	// PayLen vs LRH PktLen).
	ErrBadLength = errors.New("wire: inconsistent length field")
	// ErrBadPad: BTH PadCnt is larger than the payload.
	ErrBadPad = errors.New("wire: pad count larger than payload")
	// ErrUnknownOpcode: the BTH opcode is not in the opcode table.
	ErrUnknownOpcode = errors.New("wire: unknown BTH opcode")
	// ErrHeaderMismatch: a header says something other than what must
	// follow (GRH NxtHdr not 0x1B, IP version nibble wrong, IPv4 options or
	// fragments on UDP 4791, LRH LNH not IBA transport, Kind/Framing
	// mismatch in Finish).
	ErrHeaderMismatch = errors.New("wire: header mismatch")
	// ErrBadICRC: the invariant CRC does not verify. The Packet is still
	// completely filled in.
	ErrBadICRC = errors.New("wire: bad ICRC")
	// ErrBadVCRC: the variant CRC of a native IB packet does not verify. The
	// Packet is still completely filled in.
	ErrBadVCRC = errors.New("wire: bad VCRC")
	// ErrNotRoCE: a well-formed frame that is simply not RoCE or IBA
	// transport: ARP, TCP, UDP to another port, ICMPv6, raw IB packets.
	ErrNotRoCE = errors.New("wire: not a RoCE/IB transport packet")
)

// Finish errors.
var (
	// ErrNoRoom: the buffer lacks headroom before the BTH or tailroom after
	// the pad.
	ErrNoRoom = errors.New("wire: no room in buffer")
	// ErrBadAddr: Addr lacks what the Kind needs (IP addresses of the wrong
	// family or missing), or a value is out of range.
	ErrBadAddr = errors.New("wire: bad address")
	// ErrTooLong: the packet does not fit the length fields of its
	// encapsulation (IP 65535 bytes, LRH PktLen 2047 words).
	ErrTooLong = errors.New("wire: packet too long for its encapsulation")
)

// DecodeError is what Explain returns: the sentinel Decode would return, the
// offset in the frame of the field at fault, and a human-readable detail.
type DecodeError struct {
	Err    error // one of the Err* sentinels
	Off    int   // offset of the offending field in the frame
	Detail string
}

func (e *DecodeError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%v (at offset %d)", e.Err, e.Off)
	}
	return fmt.Sprintf("%v at offset %d: %s", e.Err, e.Off, e.Detail)
}

// Unwrap returns the sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// Explain decodes frame like Packet.Decode and, if it fails, returns a
// *DecodeError saying where and why. It allocates and is meant for tools and
// CLI messages, not for the data path. It returns nil for a good packet.
func Explain(frame []byte, f Framing) error {
	var p Packet
	err := p.Decode(frame, f)
	if err == nil {
		return nil
	}
	e := &DecodeError{Err: err, Off: p.errOff, Detail: p.errDetail}
	switch err {
	case ErrBadICRC:
		e.Detail = fmt.Sprintf("%s: computed %08x, wire %08x", p.Kind, ICRC(frame, &p), p.ICRC())
	case ErrBadVCRC:
		e.Detail = fmt.Sprintf("computed %04x, wire %04x", CRC16IB(frame[p.LRHOff:p.VCRCOff]), p.VCRC())
	case ErrUnknownOpcode:
		e.Detail = fmt.Sprintf("opcode 0x%02x", uint8(p.Opcode))
	}
	return e
}
