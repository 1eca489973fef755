package bth

import "encoding/binary"

// Header is a view of a Base Transport Header (IBA 9.2, 12 bytes). Call with at
// least HeaderLen bytes; accessors do not bounds-check.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   resv6   |                    DestQP                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   resv7     |                     PSN                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Byte 4 as a whole (FECN, BECN, resv6) is "resv8a", masked in the ICRC.
type Header []byte

// HeaderLen is the size of a BTH.
const HeaderLen = 12

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthResv8a = 4
	bthDestQP = 4 // 24 bits in bytes 5..7, read as a uint32 at 4
	bthAck    = 8
	bthPSN    = 8 // 24 bits in bytes 9..11

	bitSE     = 0x80
	bitMigReq = 0x40
	maskPad   = 0x30
	maskTVer  = 0x0F
	bitFECN   = 0x80
	bitBECN   = 0x40
	bitAckReq = 0x80
)

// Opcode returns the OpCode field.
func (h Header) Opcode() Opcode { return Opcode(h[bthOpcode]) }

// SetOpcode sets the OpCode field.
func (h Header) SetOpcode(op Opcode) { h[bthOpcode] = byte(op) }

// SE returns the solicited-event bit.
func (h Header) SE() bool { return h[bthFlags]&bitSE != 0 }

// SetSE sets the solicited-event bit.
func (h Header) SetSE(v bool) { setBit(&h[bthFlags], bitSE, v) }

// MigReq returns the migration-request bit.
func (h Header) MigReq() bool { return h[bthFlags]&bitMigReq != 0 }

// SetMigReq sets the migration-request bit.
func (h Header) SetMigReq(v bool) { setBit(&h[bthFlags], bitMigReq, v) }

// PadCnt returns the number of pad bytes (0..3) after the payload.
func (h Header) PadCnt() int { return int(h[bthFlags]&maskPad) >> 4 }

// SetPadCnt sets the pad count; n is taken modulo 4.
func (h Header) SetPadCnt(n int) { h[bthFlags] = h[bthFlags]&^maskPad | byte(n&3)<<4 }

// TVer returns the transport header version (must be 0).
func (h Header) TVer() uint8 { return h[bthFlags] & maskTVer }

// SetTVer sets the transport header version (low 4 bits of v).
func (h Header) SetTVer(v uint8) { h[bthFlags] = h[bthFlags]&^maskTVer | v&maskTVer }

// PKey returns the partition key.
func (h Header) PKey() PKey { return PKey(binary.BigEndian.Uint16(h[bthPKey:])) }

// SetPKey sets the partition key.
func (h Header) SetPKey(k PKey) { binary.BigEndian.PutUint16(h[bthPKey:], uint16(k)) }

// FECN returns the forward explicit congestion notification bit.
func (h Header) FECN() bool { return h[bthResv8a]&bitFECN != 0 }

// SetFECN sets the FECN bit.
func (h Header) SetFECN(v bool) { setBit(&h[bthResv8a], bitFECN, v) }

// BECN returns the backward explicit congestion notification bit.
func (h Header) BECN() bool { return h[bthResv8a]&bitBECN != 0 }

// SetBECN sets the BECN bit.
func (h Header) SetBECN(v bool) { setBit(&h[bthResv8a], bitBECN, v) }

// Resv6 returns the six reserved bits of byte 4.
func (h Header) Resv6() uint8 { return h[bthResv8a] & 0x3F }

// DestQP returns the destination QPN.
func (h Header) DestQP() QPN { return QPN(binary.BigEndian.Uint32(h[bthDestQP:]) & 0xFFFFFF) }

// SetDestQP sets the destination QPN, keeping byte 4.
func (h Header) SetDestQP(q QPN) { put24(h[bthDestQP+1:], uint32(q)) }

// AckReq returns the acknowledge-request bit.
func (h Header) AckReq() bool { return h[bthAck]&bitAckReq != 0 }

// SetAckReq sets the acknowledge-request bit, keeping resv7.
func (h Header) SetAckReq(v bool) { setBit(&h[bthAck], bitAckReq, v) }

// Resv7 returns the seven reserved bits of byte 8.
func (h Header) Resv7() uint8 { return h[bthAck] & 0x7F }

// PSN returns the packet sequence number.
func (h Header) PSN() PSN { return PSN(binary.BigEndian.Uint32(h[bthPSN:]) & PSNMask) }

// SetPSN sets the PSN, keeping byte 8 (AckReq and resv7).
func (h Header) SetPSN(p PSN) { put24(h[bthPSN+1:], uint32(p)) }

// Fields holds every BTH field for encoding. Reserved bits are written as zero.
type Fields struct {
	Opcode Opcode
	SE     bool
	MigReq bool
	PadCnt int
	TVer   uint8
	PKey   PKey
	FECN   bool
	BECN   bool
	DestQP QPN
	AckReq bool
	PSN    PSN
}

// Encode writes f into h, overwriting all 12 bytes. It writes them as one
// 4-byte and one 8-byte store rather than byte by byte: fewer stores (each
// a software TLB lookup under qemu TCG), and the ICRC's 8-byte load of
// bytes 4-11 that follows finds them in one store, which the store buffer
// can forward.
func (h Header) Encode(f *Fields) {
	_ = h[HeaderLen-1]
	b1 := uint32(f.PadCnt&3)<<4 | uint32(f.TVer&maskTVer)
	if f.SE {
		b1 |= bitSE
	}
	if f.MigReq {
		b1 |= bitMigReq
	}
	var b4, b8 uint64
	if f.FECN {
		b4 |= bitFECN
	}
	if f.BECN {
		b4 |= bitBECN
	}
	if f.AckReq {
		b8 |= bitAckReq
	}
	binary.BigEndian.PutUint32(h[0:], uint32(f.Opcode)<<24|b1<<16|uint32(f.PKey))
	binary.BigEndian.PutUint64(h[4:], b4<<56|uint64(uint32(f.DestQP)&0xFFFFFF)<<32|b8<<24|uint64(uint32(f.PSN)&0xFFFFFF))
}

// Fields decodes h into a Fields value.
func (h Header) Fields() Fields {
	return Fields{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), PadCnt: h.PadCnt(),
		TVer: h.TVer(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(),
		DestQP: h.DestQP(), AckReq: h.AckReq(), PSN: h.PSN(),
	}
}

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// put24 writes the low 24 bits of v big-endian into b[0:3].
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
