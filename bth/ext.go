package bth

import "encoding/binary"

// Extended transport header sizes (IBA 9.3).
const (
	RDETHLen        = 4
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	FETHLen         = 4
	// CNPReservedLen is the size of the zeroed block after a CNP's BTH.
	CNPReservedLen = 16
)

// RDETH is the Reliable Datagram ETH: [0] reserved, [1..3] EE-Context.
type RDETH []byte

// EEContext returns the 24-bit end-to-end context.
func (h RDETH) EEContext() uint32 { return get24(h[1:]) }

// SetEEContext sets the EE context, keeping the reserved byte.
func (h RDETH) SetEEContext(v uint32) { put24(h[1:], v) }

// DETH is the Datagram ETH: [0..3] Q_Key, [4] reserved, [5..7] SrcQP.
type DETH []byte

// QKey returns the Q_Key.
func (h DETH) QKey() QKey { return QKey(binary.BigEndian.Uint32(h)) }

// SetQKey sets the Q_Key.
func (h DETH) SetQKey(k QKey) { binary.BigEndian.PutUint32(h, uint32(k)) }

// SrcQP returns the source QPN.
func (h DETH) SrcQP() QPN { return QPN(get24(h[5:])) }

// SetSrcQP sets the source QPN, keeping the reserved byte.
func (h DETH) SetSrcQP(q QPN) { put24(h[5:], uint32(q)) }

// RETH is the RDMA ETH: [0..7] VA, [8..11] R_Key, [12..15] DMA length.
type RETH []byte

// VA returns the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h) }

// SetVA sets the remote virtual address.
func (h RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h, v) }

// RKey returns the remote key.
func (h RETH) RKey() RKey { return RKey(binary.BigEndian.Uint32(h[8:])) }

// SetRKey sets the remote key.
func (h RETH) SetRKey(k RKey) { binary.BigEndian.PutUint32(h[8:], uint32(k)) }

// DMALen returns the length of the whole RDMA operation.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetDMALen sets the DMA length.
func (h RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(h[12:], n) }

// AtomicETH is the Atomic ETH: [0..7] VA, [8..11] R_Key, [12..19] Swap or Add
// data, [20..27] Compare data. It is packed (not 8-byte aligned on the wire).
type AtomicETH []byte

// VA returns the remote virtual address (must be 8-byte aligned).
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h) }

// SetVA sets the remote virtual address.
func (h AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h, v) }

// RKey returns the remote key.
func (h AtomicETH) RKey() RKey { return RKey(binary.BigEndian.Uint32(h[8:])) }

// SetRKey sets the remote key.
func (h AtomicETH) SetRKey(k RKey) { binary.BigEndian.PutUint32(h[8:], uint32(k)) }

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// SetSwapAdd sets the swap or add data.
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }

// Compare returns the compare value (COMPARE_SWAP only).
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// SetCompare sets the compare data.
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// AETH is the ACK ETH: [0] syndrome, [1..3] MSN.
type AETH []byte

// Syndrome returns the syndrome byte.
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// SetSyndrome sets the syndrome byte.
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }

// MSN returns the 24-bit message sequence number.
func (h AETH) MSN() uint32 { return get24(h[1:]) }

// SetMSN sets the MSN (low 24 bits).
func (h AETH) SetMSN(m uint32) { put24(h[1:], m) }

// AtomicAckETH carries the original remote data of an atomic operation.
type AtomicAckETH []byte

// OrigData returns the value the target held before the atomic operation.
func (h AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigData sets the original data.
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is the immediate data header. The value is opaque: verbs hands it to
// the receiver exactly as it is on the wire (big-endian), so accessors return
// it in network order interpreted as a big-endian number.
type ImmDt []byte

// Imm returns the immediate data.
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// SetImm sets the immediate data.
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is the Invalidate ETH: the R_Key to invalidate.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() RKey { return RKey(binary.BigEndian.Uint32(h)) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(k RKey) { binary.BigEndian.PutUint32(h, uint32(k)) }

// FETH is the FLUSH ETH: bits 3:0 of byte 3 placement type, bits 5:4 selectivity level.
type FETH []byte

// PlacementType returns the placement type (bits 3:0).
func (h FETH) PlacementType() uint8 { return h[3] & 0x0F }

// SelectivityLevel returns the selectivity level (bits 5:4).
func (h FETH) SelectivityLevel() uint8 { return h[3] >> 4 & 0x03 }

// Set sets placement type and selectivity level, keeping the other bits.
func (h FETH) Set(placement, level uint8) {
	h[3] = h[3]&0xC0 | (level&3)<<4 | placement&0x0F
}
