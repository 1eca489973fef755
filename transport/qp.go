package transport

import (
	"fmt"
	"math/bits"

	"github.com/goroce/goroce/bth"
)

// Engine limits (rxe_param.h).
const (
	// MinUnackedPSNs and MaxUnackedPSNs bound how far the requester may
	// run ahead of the oldest unacknowledged PSN; within them the largest
	// window is MaxUnackedBytes of path-MTU packets (maxWindow: 8192 PSNs
	// at IB MTU 256..1024, 4096 at 2048, 2048 at 4096). rxe fixes it at
	// 128 (RXE_MAX_UNACKED_PSNS), which makes a single QP ACK-clocked: at
	// IB MTU 1024 only 128 KiB are in flight. goroce starts at rxe's 128
	// and slow-starts: each acknowledgment adds the PSNs it acknowledges,
	// so the window doubles every round trip up to the largest one. It
	// halves the window (not below 128) on every go-back-N caused by loss
	// (a sequence NAK or a local ACK timeout) or by an RNR NAK (which
	// drops what was sent after it as surely), and from there grows it by
	// one per acknowledgment that makes progress. A timeout before the
	// first acknowledgment is the exception: it resends the first flight
	// and leaves slow start on (Tick). On a clean path a long
	// transfer is not held back by the round trip of its ACKs; on a lossy
	// one the window falls back to rxe's, so that a loss does not cost
	// thousands of retransmitted packets each time; and the first flight
	// does not overrun a short queue on the path. (Starting at the
	// largest window, goroce's first 8192 packets hit the host tap toward
	// the interop guest, which holds 1000: interop write_bw_64k put 47 635
	// packets on the wire for 32 500 and moved 23.8 MB/s; with slow start
	// 35 981 packets and 38.0 MB/s.) The window is the sender's own
	// business: the responder (rxe's too) takes requests in PSN order
	// whatever their number.
	//
	// Measured (docs/performance.md, session 7): 64 KiB write_bw at IB MTU
	// 1024 gained 15-35 % from a window of 512 PSNs to 8192, between two
	// processes on the host and in the TCG guest; at 4096 a window of
	// 512 (2 MiB) already sufficed and larger ones changed nothing.
	//
	// MaxUnackedBytes is also a device's budget: SetWindowLimit lowers a
	// QP's share of it when several QPs send at once (hca divides it
	// among its connected RC QPs), so that the data in flight, which
	// sits in the kernel's socket buffers until the peer reads it, stays
	// small enough to be cached (session 15).
	MinUnackedPSNs  = 128
	MaxUnackedPSNs  = 8192
	MaxUnackedBytes = 8 << 20
	// MaxPktPerAck is the number of packets of one long message after
	// which the requester asks for an ACK (RXE_MAX_PKT_PER_ACK).
	MaxPktPerAck = 64
	// MaxMessageSize is the largest message (2^31 bytes, rxe_param.h
	// RXE_MAX_MSG_SIZE on current kernels).
	MaxMessageSize = 1 << 31
	// MaxRdAtomic caps max_rd_atomic and max_dest_rd_atomic (rxe_qp.c
	// rxe_qp_chk_attr: RXE_MAX_QP_RD_ATOM).
	MaxRdAtomic = 128
	// GRHLen is the room a UD receive buffer keeps for the network header.
	GRHLen = 40
)

// sendWQE is one send work request as the engine keeps it. Its SGL and
// inline storage belong to the ring slot and are reused, so posting does not
// allocate once every slot has been used once.
type sendWQE struct {
	id         uint64
	op         WROpcode
	flags      SendFlags
	imm        uint32
	invRKey    bth.RKey
	remoteAddr uint64
	rkey       bth.RKey
	compareAdd uint64
	swap       uint64
	ah         uint32
	remoteQPN  bth.QPN
	remoteQKey bth.QKey

	sgl      []SGE
	inline   []byte
	isInline bool
	length   uint32

	firstPSN, lastPSN bth.PSN
	// errStatus is a local error found while posting or building a packet
	// (LOC_PROT_ERR); the WQE completes with it when it reaches the head.
	errStatus Status
	// sent is set on UC/UD WQEs once the last packet left (they complete
	// on transmission) and on UD WQEs that complete without sending.
	sent bool
}

func (w *sendWQE) readOrAtomic() bool {
	return w.op == WRRDMARead || w.op == WRAtomicCmpAndSwp || w.op == WRAtomicFetchAndAdd
}

func (w *sendWQE) atomic() bool {
	return w.op == WRAtomicCmpAndSwp || w.op == WRAtomicFetchAndAdd
}

// QP is the protocol engine of one queue pair: requester, completer and
// responder. It is a single-owner state machine: the caller serializes every
// method call (one goroutine drives a QP) and supplies the time.
type QP struct {
	cfg   Config
	state State
	stats Stats

	// Attributes.
	pkey            bth.PKey
	qkey            bth.QKey
	access          Access
	pmtu            uint32
	destQPN         bth.QPN
	maxRdAtomic     int
	maxDestRdAtomic int
	minRNRTimer     bth.RNRTimer
	timeout         Time // local ACK timeout, 0 = infinite
	retryCnt        uint8
	rnrRetry        uint8
	sqdNotify       bool // en_sqd_async_notify
	draining        bool // RTS -> SQD happened; SQ_DRAINED not yet reported

	// Send queue: a ring of cfg.MaxSendWR slots, allocated on first post.
	// Indices are free-running counters: [sqHead, sqTail) are posted and
	// not yet completed, [sqHead, reqIdx) have been sent (all packets of
	// RC requests) and wait for the completer, and WQEs below hiIdx have
	// PSNs assigned.
	sq                     []sendWQE
	sqHead, sqTail, reqIdx uint64
	hiIdx                  uint64

	// Requester.
	reqPSN    bth.PSN // next PSN to send
	reqOff    uint32  // bytes of WQE reqIdx already sent
	window    uint32  // unacknowledged PSNs allowed (MinUnackedPSNs..winMax)
	ssthresh  uint32  // the window a loss left: below it the window doubles per round trip; 0 before any loss
	winMax    uint32  // the largest window: maxWindow(pmtu, winBytes)
	winBytes  uint32  // the window's byte limit (SetWindowLimit; 0: MaxUnackedBytes)
	noackPkts int
	rdAtomic  int     // READ/ATOMIC WQEs in [sqHead, reqIdx)
	sentPSN   bth.PSN // PSN after the highest sent; a READ request counts for its responses' PSNs

	// The last local ACK timeout halved the window from undoWin
	// (threshold undoThresh) when undoPSN was the next PSN to send; while
	// undo, go-back-N has not resent up to undoPSN yet, and an
	// acknowledgment beyond what it has resent proves the timeout
	// spurious and undoes the halving (ackProgress).
	undoWin, undoThresh uint32
	undoPSN             bth.PSN

	// Completer.
	compPSN   bth.PSN // oldest unacknowledged PSN
	retryLeft uint8
	rnrLeft   uint8
	// The flags sit together, ahead of the times: the QP then stays
	// within 760 bytes, the 768-byte size class less the 8-byte header Go
	// puts before an allocation of over 512 bytes with pointers
	// (BenchmarkMemory: 1557 B per connected QP, 1685 one field later).
	timerArmed   bool
	rnrWait      bool
	retryPending bool // a NAK started a retry: ignore further NAKs until progress
	// acked: an acknowledgment has made progress since the window was
	// last reset. Until then a local ACK timeout leaves the window alone
	// (Tick).
	acked bool
	undo  bool // see undoWin
	// probe: a local ACK timeout went back, and until an acknowledgment
	// makes progress the requester keeps one packet outstanding (Tick).
	probe   bool
	timerAt Time
	rnrAt   Time

	resp responder

	// wc is scratch space for completions, so that passing it to the CQ
	// interface does not make a heap allocation per completion.
	wc Completion
}

// NewQP returns an engine in RESET for cfg.
func NewQP(cfg Config) (*QP, error) {
	switch cfg.Type {
	case RC, UC, UD:
	default:
		return nil, fmt.Errorf("%w: QP type %v", ErrBadConfig, cfg.Type)
	}
	if !cfg.QPN.Valid() {
		return nil, fmt.Errorf("%w: QPN %#x exceeds 24 bits", ErrBadConfig, uint32(cfg.QPN))
	}
	if cfg.Memory == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.RQ == nil {
		return nil, fmt.Errorf("%w: Memory, SendCQ, RecvCQ and RQ are required", ErrBadConfig)
	}
	if cfg.MaxSendWR <= 0 || cfg.MaxSendSGE <= 0 || cfg.MaxRecvSGE <= 0 || cfg.MaxInlineData < 0 {
		return nil, fmt.Errorf("%w: MaxSendWR, MaxSendSGE and MaxRecvSGE must be > 0 (got %d, %d, %d; inline %d)",
			ErrBadConfig, cfg.MaxSendWR, cfg.MaxSendSGE, cfg.MaxRecvSGE, cfg.MaxInlineData)
	}
	q := &QP{cfg: cfg}
	q.reset()
	return q, nil
}

// reset puts every piece of state back to what RESET means: queues emptied
// without completions, PSNs and MSN cleared. Buffers are kept for reuse.
func (q *QP) reset() {
	q.state = StateReset
	q.sqdNotify, q.draining = false, false
	q.pkey = bth.DefaultPKey
	q.qkey = 0
	q.access = 0
	q.pmtu = 256
	q.destQPN = 0
	q.maxRdAtomic, q.maxDestRdAtomic = 0, 0
	q.minRNRTimer = 0
	q.timeout = 0
	q.retryCnt, q.rnrRetry = 0, 0
	for i := range q.sq {
		q.sq[i].clear()
	}
	q.sqHead, q.sqTail, q.reqIdx, q.hiIdx = 0, 0, 0, 0
	q.reqPSN, q.reqOff, q.noackPkts, q.rdAtomic, q.sentPSN = 0, 0, 0, 0, 0
	q.compPSN, q.retryLeft, q.rnrLeft = 0, 0, 0
	q.winMax = maxWindow(q.pmtu, q.winBytes)
	q.window, q.ssthresh, q.acked, q.undo, q.probe = MinUnackedPSNs, 0, false, false, false
	q.timerArmed, q.rnrWait, q.retryPending = false, false, false
	q.timerAt, q.rnrAt = 0, 0
	q.resp.reset()
}

// maxWindow is the largest unacknowledged-PSN window at path MTU pmtu:
// limit bytes of packets (MaxUnackedBytes when limit is 0 or larger),
// within [MinUnackedPSNs, MaxUnackedPSNs].
func maxWindow(pmtu, limit uint32) uint32 {
	if limit == 0 || limit > MaxUnackedBytes {
		limit = MaxUnackedBytes
	}
	return min(max(limit/max(pmtu, 1), MinUnackedPSNs), MaxUnackedPSNs)
}

// SameWindow reports whether window limits a and b (SetWindowLimit) give
// the same largest window at every path MTU: then a QP need not be told of
// a change from one to the other (once a device's share is below
// MinUnackedPSNs packets of 256 bytes, it changes nothing).
func SameWindow(a, b uint32) bool {
	for m := bth.MTU256; m <= bth.MTU4096; m++ {
		p := uint32(m.Bytes())
		if maxWindow(p, a) != maxWindow(p, b) {
			return false
		}
	}
	return true
}

// InFlight is the number of packets an RC requester has sent that are not
// yet acknowledged (reqPSN - compPSN): how deep the QP's pipe is. The HCA
// uses it to tell a post that must leave at once (an idle pipe: latency)
// from one that can wait for the next batch (a deep pipe: bandwidth). UC
// and UD have no acknowledgements (compPSN stays where RTS put it): 0.
func (q *QP) InFlight() int32 {
	if q.cfg.Type != RC {
		return 0
	}
	return q.reqPSN.Sub(q.compPSN)
}

// WindowMax is the largest unacknowledged-PSN window the requester may
// reach now: its path MTU's and SetWindowLimit's.
func (q *QP) WindowMax() uint32 { return q.winMax }

// SetWindowLimit caps the requester's unacknowledged window at bytes of
// path-MTU packets (0: MaxUnackedBytes; never below MinUnackedPSNs
// packets). A window above the new cap shrinks at once; one below it
// grows toward it as ACKs make progress. The limit survives a reset: it
// is the device's business, not the connection's.
func (q *QP) SetWindowLimit(bytes uint32) {
	q.winBytes = bytes
	q.winMax = maxWindow(q.pmtu, bytes)
	q.window = min(q.window, q.winMax)
	q.ssthresh = min(q.ssthresh, q.winMax)
}

func (w *sendWQE) clear() {
	sgl, inl := w.sgl[:0], w.inline[:0]
	*w = sendWQE{sgl: sgl, inline: inl}
}

// State returns the QP state.
func (q *QP) State() State { return q.state }

// Stats returns the QP's counters. The pointer stays valid for the life of
// the QP; read it only between calls into the engine.
func (q *QP) Stats() *Stats { return &q.stats }

// QPN returns the QP number.
func (q *QP) QPN() bth.QPN { return q.cfg.QPN }

// Type returns the transport service.
func (q *QP) Type() QPType { return q.cfg.Type }

// roundPow2 rounds n up to a power of two (rxe_qp.c rxe_qp_from_attr uses
// __roundup_pow_of_two for max_rd_atomic and max_dest_rd_atomic); 0 stays 0.
func roundPow2(n int) int {
	if n <= 0 {
		return 0
	}
	return 1 << bits.Len(uint(n-1))
}

// Modify applies attributes. The caller (hca) has already validated the
// transition and the attribute masks (wire-spec §7); Modify checks only
// that values are in range.
func (q *QP) Modify(now Time, attr *Attr, mask AttrMask) error {
	if attr == nil {
		return fmt.Errorf("%w: nil attributes", ErrBadAttr)
	}
	if mask&AttrState != 0 && attr.State > StateErr {
		return fmt.Errorf("%w: state %v", ErrBadAttr, attr.State)
	}
	if mask&AttrPathMTU != 0 && !attr.PathMTU.Valid() {
		return fmt.Errorf("%w: path MTU %v", ErrBadAttr, attr.PathMTU)
	}
	if mask&AttrTimeout != 0 && attr.Timeout > 31 {
		return fmt.Errorf("%w: timeout %d > 31", ErrBadAttr, attr.Timeout)
	}
	if mask&AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return fmt.Errorf("%w: retry_cnt %d > 7", ErrBadAttr, attr.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return fmt.Errorf("%w: rnr_retry %d > 7", ErrBadAttr, attr.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return fmt.Errorf("%w: min_rnr_timer %d > 31", ErrBadAttr, attr.MinRNRTimer)
	}
	if mask&AttrMaxQPRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > MaxRdAtomic) {
		return fmt.Errorf("%w: max_rd_atomic %d", ErrBadAttr, attr.MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > MaxRdAtomic) {
		return fmt.Errorf("%w: max_dest_rd_atomic %d", ErrBadAttr, attr.MaxDestRdAtomic)
	}
	if mask&AttrDestQPN != 0 && !attr.DestQPN.Valid() {
		return fmt.Errorf("%w: dest QPN %#x", ErrBadAttr, uint32(attr.DestQPN))
	}
	if mask&AttrRQPSN != 0 && !attr.RQPSN.Valid() {
		return fmt.Errorf("%w: rq_psn %#x", ErrBadAttr, uint32(attr.RQPSN))
	}
	if mask&AttrSQPSN != 0 && !attr.SQPSN.Valid() {
		return fmt.Errorf("%w: sq_psn %#x", ErrBadAttr, uint32(attr.SQPSN))
	}

	if mask&AttrState != 0 && attr.State == StateReset {
		q.reset()
		return nil
	}
	if mask&AttrPKeyIndex != 0 && attr.PKey != 0 {
		q.pkey = attr.PKey
	}
	if mask&AttrQKey != 0 {
		q.qkey = attr.QKey
	}
	if mask&AttrAccessFlags != 0 {
		q.access = attr.AccessFlags
	}
	if mask&AttrPathMTU != 0 {
		q.pmtu = uint32(attr.PathMTU.Bytes())
		q.winMax = maxWindow(q.pmtu, q.winBytes)
		q.window, q.ssthresh, q.acked, q.undo, q.probe = MinUnackedPSNs, 0, false, false, false
	}
	if mask&AttrDestQPN != 0 {
		q.destQPN = attr.DestQPN
	}
	if mask&AttrRQPSN != 0 {
		q.resp.psn = attr.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		q.reqPSN, q.compPSN, q.sentPSN = attr.SQPSN, attr.SQPSN, attr.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		q.maxRdAtomic = roundPow2(attr.MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		q.maxDestRdAtomic = roundPow2(attr.MaxDestRdAtomic)
		q.resp.resizeResources(q.maxDestRdAtomic)
	}
	if mask&AttrMinRNRTimer != 0 {
		q.minRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		q.timeout = Time(bth.LocalACKTimeout(attr.Timeout))
	}
	if mask&AttrRetryCnt != 0 {
		q.retryCnt = attr.RetryCnt
		q.retryLeft = attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		q.rnrRetry = attr.RNRRetry
		q.rnrLeft = attr.RNRRetry
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		q.sqdNotify = attr.EnSQDAsyncNotify
	}
	if mask&AttrState != 0 {
		if attr.State == StateErr {
			q.enterErr()
		} else {
			if attr.State == StateSQD && q.state == StateRTS {
				q.draining = true
			}
			q.state = attr.State
		}
	}
	return nil
}

// TakeSQDrained reports, once per RTS -> SQD transition that asked for it
// (EnSQDAsyncNotify), that the send queue has drained: every WQE started
// before the transition has all its packets sent and has completed
// (acknowledged, for RC), and SQD starts no new one. The caller raises
// the SQ_DRAINED affiliated asynchronous event. Mirrors rxe_comp.c's
// QP_STATE_DRAIN -> QP_STATE_DRAINED, which waits for comp.psn ==
// req.psn; rxe raises the event whatever en_sqd_async_notify says, goroce
// only when it was set, as ibv_modify_qp(3) specifies.
func (q *QP) TakeSQDrained() bool {
	if !q.draining || q.state != StateSQD {
		return false
	}
	if q.sqHead != q.reqIdx || q.reqIdx < q.hiIdx || q.reqOff != 0 {
		return false
	}
	q.draining = false
	return q.sqdNotify
}

// SQDraining reports that the QP is in SQD and its send queue has not
// drained yet: a WQE started before RTS -> SQD still has packets to send
// or is unacknowledged.
func (q *QP) SQDraining() bool {
	return q.draining && q.state == StateSQD && (q.sqHead != q.reqIdx || q.reqIdx < q.hiIdx || q.reqOff != 0)
}

// PostSend queues a send work request, copying it.
func (q *QP) PostSend(now Time, wr *SendWR) error {
	if wr == nil {
		return fmt.Errorf("%w: nil work request", ErrBadWR)
	}
	switch q.state {
	case StateRTS, StateSQD, StateErr:
	default:
		return fmt.Errorf("%w: post send in %v", ErrBadState, q.state)
	}
	if q.sqTail-q.sqHead >= uint64(q.cfg.MaxSendWR) {
		return ErrQueueFull
	}
	if err := q.checkWR(wr); err != nil {
		return err
	}
	if q.sq == nil {
		// Lazy: an idle QP costs no send-queue memory.
		q.sq = make([]sendWQE, q.cfg.MaxSendWR)
	}
	w := q.slot(q.sqTail)
	w.clear()
	w.id, w.op, w.flags, w.imm, w.invRKey = wr.ID, wr.Opcode, wr.Flags, wr.Imm, wr.InvRKey
	w.remoteAddr, w.rkey, w.compareAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.ah, w.remoteQPN, w.remoteQKey = wr.AH, wr.RemoteQPN, wr.RemoteQKey
	if wr.Flags&SendInline != 0 && len(wr.Inline) > 0 {
		w.isInline = true
		if cap(w.inline) < len(wr.Inline) {
			w.inline = make([]byte, 0, max(len(wr.Inline), q.cfg.MaxInlineData))
		}
		w.inline = append(w.inline[:0], wr.Inline...)
		w.length = uint32(len(wr.Inline))
	} else if wr.Flags&SendInline == 0 {
		if cap(w.sgl) < len(wr.SGL) {
			w.sgl = make([]SGE, 0, q.cfg.MaxSendSGE)
		}
		w.sgl = append(w.sgl[:0], wr.SGL...)
		var n uint64
		for i := range w.sgl {
			n += uint64(w.sgl[i].Length)
		}
		w.length = uint32(n)
		// Check the local keys now, as a hardware HCA does when it fetches
		// the WQE; a fault completes the WQE with LOC_PROT_ERR in order.
		need := Access(0)
		if w.readOrAtomic() {
			need = AccessLocalWrite
		}
		for i := range w.sgl {
			s := &w.sgl[i]
			if s.Length == 0 {
				continue
			}
			if _, err := q.cfg.Memory.Local(q.cfg.PD, s.LKey, s.Addr, s.Length, need); err != nil {
				w.errStatus = StatusLocProtErr
				break
			}
		}
	}
	if q.cfg.Type == UD && q.state != StateErr && w.length > q.pmtu {
		// rxe_req.c: a UD message larger than the path MTU completes
		// successfully without being sent (C10-93.1.1).
		w.sent = true
	}
	q.sqTail++
	if q.state == StateErr {
		q.flushSend()
		return nil
	}
	q.completeUnreliable()
	q.completeHeadLocalErr()
	return nil
}

// checkWR validates a work request against the QP type and limits.
func (q *QP) checkWR(wr *SendWR) error {
	switch q.cfg.Type {
	case RC:
		switch wr.Opcode {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
			WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRSendWithInv:
		default:
			return fmt.Errorf("%w: opcode %v on RC", ErrBadWR, wr.Opcode)
		}
	case UC:
		switch wr.Opcode {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm:
		default:
			return fmt.Errorf("%w: opcode %v on UC", ErrBadWR, wr.Opcode)
		}
	case UD:
		switch wr.Opcode {
		case WRSend, WRSendWithImm:
		default:
			return fmt.Errorf("%w: opcode %v on UD", ErrBadWR, wr.Opcode)
		}
		if !wr.RemoteQPN.Valid() {
			return fmt.Errorf("%w: remote QPN %#x", ErrBadWR, uint32(wr.RemoteQPN))
		}
	}
	isRdAtomic := wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd
	if wr.Flags&SendInline != 0 {
		if isRdAtomic {
			return fmt.Errorf("%w: %v cannot be inline", ErrBadWR, wr.Opcode)
		}
		if len(wr.Inline) > q.cfg.MaxInlineData {
			return ErrInlineTooLarge
		}
	} else {
		if len(wr.SGL) > q.cfg.MaxSendSGE {
			return ErrTooManySGE
		}
		var n uint64
		for i := range wr.SGL {
			n += uint64(wr.SGL[i].Length)
		}
		if n > MaxMessageSize {
			return fmt.Errorf("%w: message of %d bytes exceeds 2^31", ErrBadWR, n)
		}
		if wr.Opcode == WRRDMARead && packets(uint32(n), q.pmtu) >= psnHalf {
			// Its responses would span half the PSN space (requester.go).
			return fmt.Errorf("%w: a READ of %d bytes takes 2^23 PSNs at path MTU %d", ErrBadWR, n, q.pmtu)
		}
		if wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd {
			if n != 8 {
				return fmt.Errorf("%w: atomic needs 8 bytes of local buffer, got %d", ErrBadWR, n)
			}
			if wr.RemoteAddr&7 != 0 {
				return fmt.Errorf("%w: atomic remote address %#x not 8-byte aligned", ErrBadWR, wr.RemoteAddr)
			}
		}
	}
	if isRdAtomic && q.state != StateErr && q.maxRdAtomic == 0 {
		// rxe would stall this WQE forever (rd_atomic credit 0); refuse it.
		return fmt.Errorf("%w: %v with max_rd_atomic 0", ErrBadWR, wr.Opcode)
	}
	return nil
}

func (q *QP) slot(i uint64) *sendWQE { return &q.sq[i%uint64(len(q.sq))] }

// FlushRecv completes every WQE of the QP's own receive queue with
// WR_FLUSH_ERR when the QP is in ERR. No-op otherwise or with an SRQ.
func (q *QP) FlushRecv() {
	if q.state != StateErr || q.cfg.SRQ {
		return
	}
	sgl := q.resp.sglStorage(q.cfg.MaxRecvSGE)
	for {
		wr, ok := q.cfg.RQ.Pop(sgl)
		if !ok {
			return
		}
		q.wc = Completion{WRID: wr.ID, Status: StatusWRFlushErr, Opcode: WCRecv, QPN: q.cfg.QPN}
		q.cfg.RecvCQ.Push(&q.wc)
	}
}

// enterErr moves the QP to ERR: every outstanding send WQE completes with
// WR_FLUSH_ERR (signaled or not), the receive WQE in progress and every WQE
// of the QP's own receive queue too. Responder output already queued is
// dropped unless the responder's own NAK caused the error: then it and what
// was queued before it are still sent (rxe sends the NAK, then errors).
func (q *QP) enterErr() {
	if q.state == StateErr {
		return
	}
	q.state = StateErr
	q.timerArmed, q.rnrWait = false, false
	q.flushSend()
	if q.resp.wqeValid {
		q.resp.wqeValid = false
		q.wc = Completion{WRID: q.resp.wqe.ID, Status: StatusWRFlushErr, Opcode: WCRecv, QPN: q.cfg.QPN}
		q.cfg.RecvCQ.Push(&q.wc)
	}
	if !q.resp.drain {
		q.resp.clearOutput()
	}
	q.FlushRecv()
}

// flushSend completes every send WQE with WR_FLUSH_ERR, in order.
func (q *QP) flushSend() {
	for q.sqHead != q.sqTail {
		w := q.slot(q.sqHead)
		q.wc = Completion{WRID: w.id, Status: StatusWRFlushErr, Opcode: wcOpcode(w.op), QPN: q.cfg.QPN}
		q.cfg.SendCQ.Push(&q.wc)
		q.stats.CompletionErrors++
		w.clear()
		q.sqHead++
	}
	q.reqIdx, q.hiIdx = q.sqHead, q.sqHead
	q.reqOff, q.rdAtomic = 0, 0
}

func wcOpcode(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	}
	return WCSend
}

// completeHead pops the oldest send WQE and completes it with status.
// Successful unsignaled WQEs produce no completion. An error status, or a
// CQ overflow, moves the QP to ERR.
func (q *QP) completeHead(status Status) {
	w := q.slot(q.sqHead)
	if q.sqHead < q.reqIdx {
		if w.readOrAtomic() {
			q.rdAtomic--
		}
	} else {
		q.reqIdx = q.sqHead + 1
		q.reqOff = 0
		if q.cfg.Type == RC && status == StatusSuccess && q.sqHead < q.hiIdx {
			q.reqPSN = w.lastPSN.Add(1)
		}
	}
	if q.hiIdx <= q.sqHead {
		q.hiIdx = q.sqHead + 1
	}
	overflow := false
	if status != StatusSuccess || w.flags&SendSignaled != 0 || q.cfg.SignalAll {
		q.wc = Completion{WRID: w.id, Status: status, Opcode: wcOpcode(w.op), ByteLen: w.length, QPN: q.cfg.QPN}
		overflow = !q.cfg.SendCQ.Push(&q.wc)
	}
	w.clear()
	q.sqHead++
	if status != StatusSuccess {
		q.stats.CompletionErrors++
		q.enterErr()
	} else if overflow {
		q.enterErr()
	}
}

// completeUnreliable completes UC and UD WQEs whose packets have all been
// sent; they need no acknowledgement (rxe completes them on transmission).
func (q *QP) completeUnreliable() {
	if q.cfg.Type == RC {
		return
	}
	for q.sqHead != q.sqTail && q.state != StateErr {
		w := q.slot(q.sqHead)
		switch {
		case w.errStatus != 0 && q.sqHead == q.reqIdx:
			q.completeHead(w.errStatus)
		case w.sent:
			q.completeHead(StatusSuccess)
		default:
			return
		}
	}
}

// completeHeadLocalErr completes the head WQE with its local error once
// every WQE before it has completed, so completions stay in order.
func (q *QP) completeHeadLocalErr() {
	if q.sqHead == q.sqTail || q.state == StateErr {
		return
	}
	w := q.slot(q.sqHead)
	if w.errStatus != 0 && q.sqHead == q.reqIdx {
		q.completeHead(w.errStatus)
	}
}

// Deadline returns the earliest time Tick must be called, or Never.
func (q *QP) Deadline() Time {
	d := Never
	if q.timerArmed {
		d = q.timerAt
	}
	if q.rnrWait && q.rnrAt < d {
		d = q.rnrAt
	}
	return d
}

// Tick fires expired timers: the RNR wait ends and the requester goes back
// to the NAKed PSN; the local ACK timeout retransmits go-back-N from the
// oldest unacknowledged PSN or, with the retry count exhausted, completes
// the oldest WQE with RETRY_EXC_ERR.
func (q *QP) Tick(now Time) {
	if q.state != StateRTS && q.state != StateSQD {
		return
	}
	if q.rnrWait && now >= q.rnrAt {
		q.rnrWait = false
		q.goBack()
	}
	if q.timerArmed && now >= q.timerAt {
		q.timerArmed = false
		if q.sqHead == q.reqIdx && q.reqOff == 0 {
			return // nothing outstanding
		}
		q.stats.RetryTimeouts++
		if q.retryLeft == 0 {
			q.completeHead(StatusRetryExcErr)
			return
		}
		if q.retryCnt != 7 { // rxe: 7 means retry forever
			q.retryLeft--
		}
		q.retryPending = false
		// Before the first acknowledgment the window is still the first
		// flight's, the least it can be, and a timeout says more about a
		// peer that is slow to start than about the path: in the TCG
		// guest of bench-vs-rxe a fresh peer can take ~100 ms to
		// acknowledge its first packets (code run for the first time,
		// pages touched for the first time), longer than perftest's
		// 67 ms timeout. Halving there set ssthresh to the floor and
		// ended slow start, and the window regrew by one PSN per
		// acknowledgment for the rest of the connection: a third of the
		// bandwidth. The first flight is resent all the same, and a
		// sequence NAK still halves.
		if q.acked {
			// A loss, or a stall that the acknowledgments to come may
			// reveal (ackProgress then undoes the halving).
			w, th := q.window, q.ssthresh
			q.shrinkWindow()
			q.undo, q.undoWin, q.undoThresh, q.undoPSN = true, w, th, q.reqPSN
		}
		// Go back one packet at a time (asking for its ACK) until an
		// acknowledgment makes progress, as TCP's retransmission timeout
		// leaves one segment in flight. A timeout says nothing of which
		// packets the peer lacks, and when it is spurious, the
		// acknowledgments late behind a queue longer than the timeout
		// (sixteen QPs of one device with deep windows and a 65 µs
		// timeout; a descheduled vCPU), resending a whole window, as rxe
		// does, lengthens that queue for every QP, and their next
		// timeouts resend more: hca's TestRCPipelinedStorm resent 2845
		// packets per WR, against 12. One packet costs a spurious
		// timeout almost nothing, the late acknowledgments then overtake
		// it (syncReq) and prove the timeout spurious (undo), and a real
		// loss costs one round trip more. The timer keeps the configured
		// period, and so the time to RETRY_EXC_ERR.
		q.probe = true
		q.goBack()
	}
}
