package transport

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/bth"
)

// Time is a point on the caller's monotonic clock, in nanoseconds. Engines
// never read a clock; every call that may start or fire a timer takes now.
type Time int64

// Never is a deadline that never fires.
const Never Time = 1<<63 - 1

// QPType is the transport service of a queue pair.
type QPType uint8

// QP types (values as ibv_qp_type).
const (
	RC QPType = 2
	UC QPType = 3
	UD QPType = 4
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// State is a QP state (values as ibv_qp_state).
type State uint8

// QP states.
const (
	StateReset State = 0
	StateInit  State = 1
	StateRTR   State = 2
	StateRTS   State = 3
	StateSQD   State = 4
	StateSQE   State = 5
	StateErr   State = 6
)

func (s State) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateSQD:
		return "SQD"
	case StateSQE:
		return "SQE"
	case StateErr:
		return "ERR"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Access is a set of memory access rights (values as ibv_access_flags).
type Access uint32

// Access rights.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// Status is a work completion status (values as ibv_wc_status). It is a
// protocol outcome, not a Go error.
type Status uint8

// Work completion statuses.
const (
	StatusSuccess        Status = 0
	StatusLocLenErr      Status = 1
	StatusLocQPOpErr     Status = 2
	StatusLocEECOpErr    Status = 3
	StatusLocProtErr     Status = 4
	StatusWRFlushErr     Status = 5
	StatusMWBindErr      Status = 6
	StatusBadRespErr     Status = 7
	StatusLocAccessErr   Status = 8
	StatusRemInvReqErr   Status = 9
	StatusRemAccessErr   Status = 10
	StatusRemOpErr       Status = 11
	StatusRetryExcErr    Status = 12
	StatusRNRRetryExcErr Status = 13
	StatusLocRDDViolErr  Status = 14
	StatusRemInvRDReqErr Status = 15
	StatusRemAbortErr    Status = 16
	StatusInvEECNErr     Status = 17
	StatusInvEECStateErr Status = 18
	StatusFatalErr       Status = 19
	StatusRespTimeoutErr Status = 20
	StatusGeneralErr     Status = 21
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
	"aborted error", "invalid EE context number", "invalid EE context state", "fatal error",
	"response timeout error", "general error",
}

// String returns the text ibv_wc_status_str gives.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// WROpcode is a send work request opcode (values as ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRSendWithInv       WROpcode = 9
)

func (o WROpcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendWithImm:
		return "SEND_WITH_IMM"
	case WRRDMARead:
		return "RDMA_READ"
	case WRAtomicCmpAndSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WRAtomicFetchAndAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WRSendWithInv:
		return "SEND_WITH_INV"
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// WCOpcode is a work completion opcode (values as ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// SendFlags are ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// WCFlags are ibv_wc_flags.
type WCFlags uint32

// Work completion flags.
const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

// SGE is one scatter/gather element: a range of a registered memory region.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   bth.LKey
}

// SendWR is a send work request. The engine copies what it needs at post
// time (including the SGE list and, for inline sends, the data), so the
// caller may reuse the WR after PostSend returns.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline, when SendInline is set, is the data to send; SGL is ignored.
	Inline []byte
	// Imm is the immediate data (WITH_IMM opcodes), in wire order.
	Imm uint32
	// InvRKey is the R_Key to invalidate (SEND_WITH_INV).
	InvRKey bth.RKey
	// RemoteAddr and RKey address the target of RDMA and atomic operations.
	RemoteAddr uint64
	RKey       bth.RKey
	// CompareAdd is the compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD);
	// Swap is the swap value (CMP_AND_SWP).
	CompareAdd uint64
	Swap       uint64
	// UD only: the address handle (an index the caller assigns and gets
	// back from Transmit), the remote QPN and Q_Key.
	AH         uint32
	RemoteQPN  bth.QPN
	RemoteQKey bth.QKey
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Completion is a work completion (the fields of ibv_wc).
type Completion struct {
	WRID         uint64
	Status       Status
	Opcode       WCOpcode
	VendorErr    uint32
	ByteLen      uint32
	Imm          uint32   // valid with WCWithImm, in wire order
	InvRKey      bth.RKey // valid with WCWithInv
	QPN          bth.QPN
	SrcQP        bth.QPN // UD
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	// Solicited is set on a receive completion whose message carried the
	// solicited event bit (BTH SE): what a CQ armed for solicited
	// completions only waits for. Not a field of ibv_wc; rxe passes the
	// same bit to rxe_cq_post.
	Solicited bool
}

// Memory resolves memory keys for an engine. It is implemented by the
// HCA's memory region table and must be safe for concurrent use.
//
// The returned slice aliases registered memory: the engine reads from it to
// send and writes into it to receive. It is exactly length bytes long.
type Memory interface {
	// Local resolves an SGE: the MR named by lkey must belong to pd, contain
	// [addr, addr+length) and allow need (AccessLocalWrite for receive
	// buffers and READ/atomic results; 0 to read for sending).
	Local(pd uint32, lkey bth.LKey, addr uint64, length uint32, need Access) ([]byte, error)
	// Remote resolves a remote access: the MR (or MW) named by rkey must
	// belong to pd, contain the range and allow need. A failure makes the
	// responder NAK with a remote access error.
	Remote(pd uint32, rkey bth.RKey, addr uint64, length uint32, need Access) ([]byte, error)
	// Invalidate invalidates rkey in pd (SEND_WITH_INV at the responder).
	Invalidate(pd uint32, rkey bth.RKey) error
}

// RecvQueue is the queue of posted receive WQEs a QP consumes: its own
// receive queue or a shared receive queue. Implementations are safe for
// concurrent use (an SRQ serves QPs driven by different goroutines).
type RecvQueue interface {
	// Pop removes the oldest receive WQE and returns it. Its SGEs are
	// copied into sgl (the caller's storage, at least the queue's max SGE
	// long) under the queue's lock, and the returned RecvWR.SGL aliases
	// sgl: the queue's own slot may be reused by a concurrent post as soon
	// as Pop returns, so an engine must never keep a slice the queue owns.
	Pop(sgl []SGE) (RecvWR, bool)
}

// CompletionQueue receives completions. Implementations are safe for
// concurrent use. Push returns false when the queue overflowed; the engine
// then moves the QP to the error state, as rxe does.
type CompletionQueue interface {
	Push(wc *Completion) bool
}

// Attr carries ibv_qp_attr fields the engine uses. Which are valid is
// given by an AttrMask in Modify.
type Attr struct {
	State           State
	PKeyIndex       uint16
	PKey            bth.PKey
	QKey            bth.QKey
	AccessFlags     Access
	PathMTU         bth.MTU
	DestQPN         bth.QPN
	RQPSN           bth.PSN
	SQPSN           bth.PSN
	MaxDestRdAtomic int
	MaxRdAtomic     int
	MinRNRTimer     bth.RNRTimer
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	// EnSQDAsyncNotify asks for the SQ_DRAINED event when the send queue
	// has drained after RTS -> SQD (en_sqd_async_notify; see
	// QP.TakeSQDrained).
	EnSQDAsyncNotify bool
}

// AttrMask selects Attr fields (values as ibv_qp_attr_mask).
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// Errors returned by engine methods for API misuse. Protocol outcomes are
// Status values in completions, never errors.
var (
	ErrQueueFull      = errors.New("transport: send queue full")
	ErrBadState       = errors.New("transport: QP state does not allow this")
	ErrBadWR          = errors.New("transport: invalid work request")
	ErrTooManySGE     = errors.New("transport: too many SGEs")
	ErrInlineTooLarge = errors.New("transport: inline data larger than max_inline_data")
	ErrBadConfig      = errors.New("transport: invalid QP configuration")
	ErrBadAttr        = errors.New("transport: invalid QP attribute")
)

// RxInfo describes where a received packet came from. The caller fills it
// from the decoded frame; the engine uses it for UD completions.
type RxInfo struct {
	// GRH is the 40-byte network header as verbs delivers it at the start
	// of a UD receive buffer: the IPv6 header verbatim, or 20 zero bytes
	// followed by the IPv4 header (rdma_network_hdr.roce4grh).
	GRH [40]byte
	// HasGRH is always true on RoCE.
	HasGRH bool
	// SLID and SL for native IB (0 on RoCE).
	SLID uint16
	SL   uint8
}

// Config is fixed at QP creation.
type Config struct {
	Type QPType
	QPN  bth.QPN
	// PD is the protection domain of the QP; memory lookups are made in it.
	PD uint32
	// Queue capacities and limits, after the caller's rounding.
	MaxSendWR  int
	MaxSendSGE int
	// MaxRecvSGE sizes the engine's storage for RecvQueue.Pop; with an SRQ
	// it must be at least the SRQ's max SGE.
	MaxRecvSGE    int
	MaxInlineData int
	// SignalAll makes every send WR signaled (sq_sig_all).
	SignalAll bool

	Memory Memory
	SendCQ CompletionQueue
	RecvCQ CompletionQueue
	// RQ is the QP's receive queue or the SRQ it is attached to.
	RQ RecvQueue
	// SRQ reports that RQ is a shared receive queue: moving the QP to ERR
	// then leaves its WQEs alone (other QPs still consume them).
	SRQ bool
	// ValidAH, when set, reports whether a UD WR's address handle still
	// exists when its packet is built; one that does not completes the WR
	// with LOC_QP_OP_ERR (rxe_req.c: "Failed no address vector") instead of
	// a success for a packet the owner could not address.
	ValidAH func(ah uint32) bool
}

// Stats are per-QP counters in the spirit of rxe's RXE_CNT_*. The engine
// increments them; the owner may read them between calls.
type Stats struct {
	TxPackets, RxPackets uint64
	// TxRetransmits counts go-back-N restarts (rxe's req_retry: after a
	// local ACK timeout, a sequence or implied NAK, or the end of an RNR
	// wait), not packets: each resends from the oldest unacknowledged PSN,
	// and TxPackets counts what that sends again.
	TxRetransmits            uint64
	RxDuplicateRequests      uint64
	RxOutOfSequence          uint64
	SeqNAKsSent, RNRNAKsSent uint64
	RNRNAKsReceived          uint64
	SeqNAKsReceived          uint64
	RetryTimeouts            uint64
	// SpuriousTimeouts counts local ACK timeouts found spurious
	// afterwards (the peer acknowledged packets sent before the timeout
	// and not resent since), whose halving of the window was undone.
	SpuriousTimeouts uint64
	RxDropped        uint64 // malformed or not acceptable in the current state
	CompletionErrors uint64
	// NAKsSent counts NAKs other than PSN sequence and RNR (invalid
	// request, remote access, remote operational).
	NAKsSent uint64
	// RxQKeyMismatch counts UD packets dropped for a wrong Q_Key.
	RxQKeyMismatch uint64
	// RxNoRecvWQE counts UC/UD messages dropped for want of a receive WQE.
	RxNoRecvWQE uint64
	// ImpliedNAKs counts retries started by a response beyond a READ or
	// ATOMIC WQE (rxe_comp.c check_psn).
	ImpliedNAKs uint64
	// RxDuplicateResponses counts stale or duplicate responses ignored.
	RxDuplicateResponses uint64
}

// Add adds every counter of o to s (a sum over QPs).
func (s *Stats) Add(o *Stats) {
	s.TxPackets += o.TxPackets
	s.RxPackets += o.RxPackets
	s.TxRetransmits += o.TxRetransmits
	s.RxDuplicateRequests += o.RxDuplicateRequests
	s.RxOutOfSequence += o.RxOutOfSequence
	s.SeqNAKsSent += o.SeqNAKsSent
	s.RNRNAKsSent += o.RNRNAKsSent
	s.RNRNAKsReceived += o.RNRNAKsReceived
	s.SeqNAKsReceived += o.SeqNAKsReceived
	s.RetryTimeouts += o.RetryTimeouts
	s.SpuriousTimeouts += o.SpuriousTimeouts
	s.RxDropped += o.RxDropped
	s.CompletionErrors += o.CompletionErrors
	s.NAKsSent += o.NAKsSent
	s.RxQKeyMismatch += o.RxQKeyMismatch
	s.RxNoRecvWQE += o.RxNoRecvWQE
	s.ImpliedNAKs += o.ImpliedNAKs
	s.RxDuplicateResponses += o.RxDuplicateResponses
}
