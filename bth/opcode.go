package bth

import "fmt"

// Opcode is the BTH OpCode: transport prefix (bits 7:5) | operation (bits 4:0).
type Opcode uint8

// Transport prefixes (IBA 9.2.1, ib_pack.h).
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
	TransportXRC Opcode = 0xA0
)

// Transport returns the transport prefix of op.
func (op Opcode) Transport() Opcode { return op & 0xE0 }

// Every opcode the table knows. RC opcodes are the base values; UC, RD and UD
// add their prefix.
const (
	OpRCSendFirst                  Opcode = 0x00
	OpRCSendMiddle                 Opcode = 0x01
	OpRCSendLast                   Opcode = 0x02
	OpRCSendLastWithImmediate      Opcode = 0x03
	OpRCSendOnly                   Opcode = 0x04
	OpRCSendOnlyWithImmediate      Opcode = 0x05
	OpRCRDMAWriteFirst             Opcode = 0x06
	OpRCRDMAWriteMiddle            Opcode = 0x07
	OpRCRDMAWriteLast              Opcode = 0x08
	OpRCRDMAWriteLastWithImmediate Opcode = 0x09
	OpRCRDMAWriteOnly              Opcode = 0x0A
	OpRCRDMAWriteOnlyWithImmediate Opcode = 0x0B
	OpRCRDMAReadRequest            Opcode = 0x0C
	OpRCRDMAReadResponseFirst      Opcode = 0x0D
	OpRCRDMAReadResponseMiddle     Opcode = 0x0E
	OpRCRDMAReadResponseLast       Opcode = 0x0F
	OpRCRDMAReadResponseOnly       Opcode = 0x10
	OpRCAcknowledge                Opcode = 0x11
	OpRCAtomicAcknowledge          Opcode = 0x12
	OpRCCompareSwap                Opcode = 0x13
	OpRCFetchAdd                   Opcode = 0x14
	OpRCSendLastWithInvalidate     Opcode = 0x16
	OpRCSendOnlyWithInvalidate     Opcode = 0x17
	OpRCFlush                      Opcode = 0x1C
	OpRCAtomicWrite                Opcode = 0x1D

	OpUCSendFirst                  Opcode = 0x20
	OpUCSendMiddle                 Opcode = 0x21
	OpUCSendLast                   Opcode = 0x22
	OpUCSendLastWithImmediate      Opcode = 0x23
	OpUCSendOnly                   Opcode = 0x24
	OpUCSendOnlyWithImmediate      Opcode = 0x25
	OpUCRDMAWriteFirst             Opcode = 0x26
	OpUCRDMAWriteMiddle            Opcode = 0x27
	OpUCRDMAWriteLast              Opcode = 0x28
	OpUCRDMAWriteLastWithImmediate Opcode = 0x29
	OpUCRDMAWriteOnly              Opcode = 0x2A
	OpUCRDMAWriteOnlyWithImmediate Opcode = 0x2B

	OpUDSendOnly              Opcode = 0x64
	OpUDSendOnlyWithImmediate Opcode = 0x65

	OpCNP Opcode = 0x81
)

// Flags describe an opcode: which headers follow the BTH, what the packet
// does and where it sits in a message. Mirrors rxe_opcode.c's masks.
type Flags uint32

// Opcode flags.
const (
	FlagRDETH Flags = 1 << iota
	FlagDETH
	FlagRETH
	FlagAtomicETH
	FlagAETH
	FlagAtomicAckETH
	FlagImmDt
	FlagIETH
	FlagFETH
	FlagCNPReserved // 16 reserved bytes follow the BTH (CNP)

	FlagPayload // payload bytes are allowed
	FlagReq     // sent by a requester
	FlagResp    // sent by a responder (ACK, read response, atomic ACK)
	FlagSend
	FlagWrite
	FlagRead // read request or read response
	FlagAtomic
	FlagAtomicWrite
	FlagFlush
	FlagFirst   // first packet of a multi-packet message
	FlagMiddle  // middle packet
	FlagLast    // last packet (FlagFirst|FlagLast = ONLY)
	FlagRecvWQE // consumes a receive WQE at the responder
	FlagComp    // completes a receive WQE (last packet of a SEND or WRITE_WITH_IMM)
	FlagCNP

	// FlagOnly marks a single-packet message.
	FlagOnly = FlagFirst | FlagLast
)

// Header flags, in the order their headers appear after the BTH.
var headerOrder = [...]struct {
	flag Flags
	size int
}{
	{FlagRDETH, RDETHLen},
	{FlagDETH, DETHLen},
	{FlagFETH, FETHLen},
	{FlagRETH, RETHLen},
	{FlagAtomicETH, AtomicETHLen},
	{FlagAETH, AETHLen},
	{FlagAtomicAckETH, AtomicAckETHLen},
	{FlagImmDt, ImmDtLen},
	{FlagIETH, IETHLen},
	{FlagCNPReserved, CNPReservedLen},
}

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name  string
	Flags Flags
	// HdrLen is the length of BTH plus every extended header of the opcode.
	HdrLen int
	// Offsets of each extended header from the start of the BTH, 0 if absent.
	RDETH, DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH int
}

// Valid reports whether the row describes a known opcode.
func (o *OpInfo) Valid() bool { return o.HdrLen != 0 }

// Has reports whether every flag in f is set.
func (o *OpInfo) Has(f Flags) bool { return o.Flags&f == f }

// Any reports whether any flag in f is set.
func (o *OpInfo) Any(f Flags) bool { return o.Flags&f != 0 }

var opTable [256]OpInfo

// Info returns the table row of op. An unknown opcode has a zero row
// (Valid reports false).
func (op Opcode) Info() *OpInfo { return &opTable[op] }

// Valid reports whether op is a known opcode.
func (op Opcode) Valid() bool { return opTable[op].HdrLen != 0 }

// FixedHdrLen returns the header length (BTH and extended headers) of an
// opcode whose packets carry no payload (ACK, atomic ACK, RDMA READ
// request, atomic request, CNP): with the ICRC, the one length such a
// packet can have. It returns 0 for an opcode with payload or an unknown
// one.
func (op Opcode) FixedHdrLen() int {
	if i := &opTable[op]; i.HdrLen != 0 && i.Flags&FlagPayload == 0 {
		return i.HdrLen
	}
	return 0
}

func (op Opcode) String() string {
	if opTable[op].Name != "" {
		return opTable[op].Name
	}
	return fmt.Sprintf("Opcode(0x%02x)", uint8(op))
}

// Opcodes returns every known opcode in ascending order.
func Opcodes() []Opcode {
	var out []Opcode
	for i := range opTable {
		if opTable[i].HdrLen != 0 {
			out = append(out, Opcode(i))
		}
	}
	return out
}

type opDef struct {
	op    Opcode
	name  string
	flags Flags
}

// The operations common to RC, UC and RD, with their flags (headers other
// than RDETH/DETH, which RD adds).
var baseOps = []opDef{
	{0x00, "SEND_FIRST", FlagReq | FlagSend | FlagFirst | FlagPayload | FlagRecvWQE},
	{0x01, "SEND_MIDDLE", FlagReq | FlagSend | FlagMiddle | FlagPayload | FlagRecvWQE},
	{0x02, "SEND_LAST", FlagReq | FlagSend | FlagLast | FlagPayload | FlagRecvWQE | FlagComp},
	{0x03, "SEND_LAST_WITH_IMMEDIATE", FlagReq | FlagSend | FlagLast | FlagPayload | FlagImmDt | FlagRecvWQE | FlagComp},
	{0x04, "SEND_ONLY", FlagReq | FlagSend | FlagOnly | FlagPayload | FlagRecvWQE | FlagComp},
	{0x05, "SEND_ONLY_WITH_IMMEDIATE", FlagReq | FlagSend | FlagOnly | FlagPayload | FlagImmDt | FlagRecvWQE | FlagComp},
	{0x06, "RDMA_WRITE_FIRST", FlagReq | FlagWrite | FlagFirst | FlagPayload | FlagRETH},
	{0x07, "RDMA_WRITE_MIDDLE", FlagReq | FlagWrite | FlagMiddle | FlagPayload},
	{0x08, "RDMA_WRITE_LAST", FlagReq | FlagWrite | FlagLast | FlagPayload},
	{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", FlagReq | FlagWrite | FlagLast | FlagPayload | FlagImmDt | FlagRecvWQE | FlagComp},
	{0x0A, "RDMA_WRITE_ONLY", FlagReq | FlagWrite | FlagOnly | FlagPayload | FlagRETH},
	{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", FlagReq | FlagWrite | FlagOnly | FlagPayload | FlagRETH | FlagImmDt | FlagRecvWQE | FlagComp},
}

var rcRdOps = []opDef{
	{0x0C, "RDMA_READ_REQUEST", FlagReq | FlagRead | FlagOnly | FlagRETH},
	{0x0D, "RDMA_READ_RESPONSE_FIRST", FlagResp | FlagRead | FlagFirst | FlagPayload | FlagAETH},
	{0x0E, "RDMA_READ_RESPONSE_MIDDLE", FlagResp | FlagRead | FlagMiddle | FlagPayload},
	{0x0F, "RDMA_READ_RESPONSE_LAST", FlagResp | FlagRead | FlagLast | FlagPayload | FlagAETH},
	{0x10, "RDMA_READ_RESPONSE_ONLY", FlagResp | FlagRead | FlagOnly | FlagPayload | FlagAETH},
	{0x11, "ACKNOWLEDGE", FlagResp | FlagOnly | FlagAETH},
	{0x12, "ATOMIC_ACKNOWLEDGE", FlagResp | FlagAtomic | FlagOnly | FlagAETH | FlagAtomicAckETH},
	{0x13, "COMPARE_SWAP", FlagReq | FlagAtomic | FlagOnly | FlagAtomicETH},
	{0x14, "FETCH_ADD", FlagReq | FlagAtomic | FlagOnly | FlagAtomicETH},
}

var rcOnlyOps = []opDef{
	{0x16, "SEND_LAST_WITH_INVALIDATE", FlagReq | FlagSend | FlagLast | FlagPayload | FlagIETH | FlagRecvWQE | FlagComp},
	{0x17, "SEND_ONLY_WITH_INVALIDATE", FlagReq | FlagSend | FlagOnly | FlagPayload | FlagIETH | FlagRecvWQE | FlagComp},
	{0x1C, "FLUSH", FlagReq | FlagFlush | FlagOnly | FlagFETH | FlagRETH},
	{0x1D, "ATOMIC_WRITE", FlagReq | FlagAtomicWrite | FlagOnly | FlagPayload | FlagRETH},
}

func init() {
	add := func(prefix Opcode, tname string, extra Flags, defs []opDef) {
		for _, d := range defs {
			f := d.flags | extra
			if prefix == TransportRD && f&FlagResp != 0 {
				f &^= FlagDETH // RD responses carry RDETH only
			}
			define(prefix|d.op, tname+"_"+d.name, f)
		}
	}
	add(TransportRC, "RC", 0, baseOps)
	add(TransportRC, "RC", 0, rcRdOps)
	add(TransportRC, "RC", 0, rcOnlyOps)
	add(TransportUC, "UC", 0, baseOps)
	add(TransportRD, "RD", FlagRDETH|FlagDETH, baseOps)
	add(TransportRD, "RD", FlagRDETH|FlagDETH, rcRdOps)
	define(OpUDSendOnly, "UD_SEND_ONLY", FlagReq|FlagSend|FlagOnly|FlagPayload|FlagDETH|FlagRecvWQE|FlagComp)
	define(OpUDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", FlagReq|FlagSend|FlagOnly|FlagPayload|FlagDETH|FlagImmDt|FlagRecvWQE|FlagComp)
	define(OpCNP, "CNP", FlagCNP|FlagCNPReserved)
}

func define(op Opcode, name string, f Flags) {
	info := OpInfo{Name: name, Flags: f}
	off := HeaderLen
	for _, h := range headerOrder {
		if f&h.flag == 0 {
			continue
		}
		switch h.flag {
		case FlagRDETH:
			info.RDETH = off
		case FlagDETH:
			info.DETH = off
		case FlagFETH:
			info.FETH = off
		case FlagRETH:
			info.RETH = off
		case FlagAtomicETH:
			info.AtomicETH = off
		case FlagAETH:
			info.AETH = off
		case FlagAtomicAckETH:
			info.AtomicAckETH = off
		case FlagImmDt:
			info.ImmDt = off
		case FlagIETH:
			info.IETH = off
		}
		off += h.size
	}
	info.HdrLen = off
	opTable[op] = info
}
