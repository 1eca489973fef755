package hca

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// Re-exported transport types, so users of the verbs API import hca only.
type (
	QPType   = transport.QPType
	QPState  = transport.State
	SendWR   = transport.SendWR
	AttrMask = transport.AttrMask
	Status   = transport.Status
)

// QP types and states.
const (
	RC = transport.RC
	UC = transport.UC
	UD = transport.UD

	StateReset = transport.StateReset
	StateInit  = transport.StateInit
	StateRTR   = transport.StateRTR
	StateRTS   = transport.StateRTS
	StateSQD   = transport.StateSQD
	StateSQE   = transport.StateSQE
	StateErr   = transport.StateErr
)

// QPCap are the queue capacities (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr are the creation attributes (ibv_qp_init_attr).
type QPInitAttr struct {
	Type      QPType
	SendCQ    *CQ
	RecvCQ    *CQ
	SRQ       *SRQ
	Cap       QPCap
	SignalAll bool
}

// QPAttr are the modify/query attributes (ibv_qp_attr). The AV (AttrAV)
// is AH; Port (AttrPort) must be 1.
type QPAttr struct {
	transport.Attr
	AH   AHAttr
	Port int
}

// QP is a queue pair.
type QP struct {
	dev    *Device
	pd     *PD
	typ    QPType
	qpn    bth.QPN
	init   QPInitAttr
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	rq     *recvRing

	// mu protects eng, attr, path and pathOK. Lock order: the runtime
	// lock (runtime.mu) before any QP's mu; never take runtime.mu holding mu.
	mu   sync.Mutex
	eng  *transport.QP
	attr QPAttr
	// path is the frame addressing of the connected peer (RC/UC), valid
	// from RTR on.
	path   wire.Addr
	pathOK bool
	// lastWQE: EventQPLastWQEReached was raised for this stay in ERR
	// (under mu).
	lastWQE bool
	// inlineTo is the receive queue of the in-process device the path
	// leads to, if any (inline.go; under mu).
	inlineTo *reader

	destroyed atomic.Bool
	fatal     atomic.Bool // EventQPFatal raised since the last RESET (CQ.overrun)
	// Owned by the runtime worker:
	shard  *shard         // the runtime shard of the QPN, fixed at creation
	active bool           // in the shard's active list
	sched  transport.Time // deadline currently in the timer heap (0: none)
	kicked atomic.Bool    // queued on the doorbell list
}

// CreateQP creates a queue pair in RESET (ibv_create_qp).
func (pd *PD) CreateQP(ia QPInitAttr) (*QP, error) {
	d := pd.dev
	switch ia.Type {
	case RC, UC, UD:
	default:
		return nil, fmt.Errorf("%w: QP type %d (RC, UC and UD are supported)", ErrInvalidArg, ia.Type)
	}
	if ia.SendCQ == nil || ia.RecvCQ == nil {
		return nil, fmt.Errorf("%w: send_cq and recv_cq are required", ErrInvalidArg)
	}
	if ia.SendCQ.dev != d || ia.RecvCQ.dev != d {
		return nil, fmt.Errorf("%w: CQ of another device", ErrWrongDevice)
	}
	c := &ia.Cap
	if c.MaxSendWR < 1 || c.MaxSendWR > d.attr.MaxQPWR {
		return nil, fmt.Errorf("%w: max_send_wr %d (1..%d)", ErrInvalidArg, c.MaxSendWR, d.attr.MaxQPWR)
	}
	if c.MaxSendSGE < 1 {
		c.MaxSendSGE = 1
	}
	if c.MaxSendSGE > d.attr.MaxSGE {
		return nil, fmt.Errorf("%w: max_send_sge %d (max %d)", ErrInvalidArg, c.MaxSendSGE, d.attr.MaxSGE)
	}
	if c.MaxInlineData < 0 || c.MaxInlineData > d.attr.MaxInlineData {
		return nil, fmt.Errorf("%w: max_inline_data %d (max %d)", ErrInvalidArg, c.MaxInlineData, d.attr.MaxInlineData)
	}
	if ia.SRQ != nil {
		if ia.SRQ.pd.dev != d {
			return nil, fmt.Errorf("%w: SRQ of another device", ErrWrongDevice)
		}
	} else {
		if c.MaxRecvWR < 1 || c.MaxRecvWR > d.attr.MaxQPWR {
			return nil, fmt.Errorf("%w: max_recv_wr %d (1..%d)", ErrInvalidArg, c.MaxRecvWR, d.attr.MaxQPWR)
		}
		if c.MaxRecvSGE < 1 {
			c.MaxRecvSGE = 1
		}
		if c.MaxRecvSGE > d.attr.MaxSGE {
			return nil, fmt.Errorf("%w: max_recv_sge %d (max %d)", ErrInvalidArg, c.MaxRecvSGE, d.attr.MaxSGE)
		}
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	q := &QP{dev: d, pd: pd, typ: ia.Type, init: ia, sendCQ: ia.SendCQ, recvCQ: ia.RecvCQ, srq: ia.SRQ}
	var rq transport.RecvQueue
	maxRecvSGE := c.MaxRecvSGE
	if ia.SRQ != nil {
		ia.SRQ.mu.Lock()
		if ia.SRQ.dead {
			ia.SRQ.mu.Unlock()
			pd.unref()
			return nil, fmt.Errorf("%w: SRQ", ErrDestroyed)
		}
		ia.SRQ.refs++
		ia.SRQ.mu.Unlock()
		rq = ia.SRQ.ring
		maxRecvSGE = ia.SRQ.ring.maxSGE
	} else {
		q.rq = newRecvRing(c.MaxRecvWR, c.MaxRecvSGE)
		rq = q.rq
	}
	release := func() {
		pd.unref()
		if ia.SRQ != nil {
			ia.SRQ.mu.Lock()
			ia.SRQ.refs--
			ia.SRQ.mu.Unlock()
		}
	}
	if err := ia.SendCQ.ref(); err != nil {
		release()
		return nil, err
	}
	if err := ia.RecvCQ.ref(); err != nil {
		ia.SendCQ.unref()
		release()
		return nil, err
	}
	d.mu.Lock()
	if err := d.checkOpen(); err != nil {
		d.mu.Unlock()
		q.releaseRefs()
		return nil, err
	}
	if d.nQP >= d.attr.MaxQP {
		d.mu.Unlock()
		q.releaseRefs()
		return nil, fmt.Errorf("%w: max_qp %d", ErrLimit, d.attr.MaxQP)
	}
	// The QPs of one SRQ share a shard. Their receives draw on one queue
	// and may land in the same buffers (perftest posts each QP's share of
	// an SRQ with one buffer, and any QP may take any WQE): in one shard
	// they are placed one packet at a time, as by one receive queue,
	// rather than by two readers writing one buffer at once.
	shard := -1
	if ia.SRQ != nil {
		shard = ia.SRQ.shard
	}
	qpn := d.allocQPN(shard)
	q.qpn = bth.QPN(qpn)
	q.shard = d.rt.shardOf(qpn)
	if ia.SRQ != nil && ia.SRQ.shard < 0 {
		ia.SRQ.shard = d.rt.shardIndex(qpn)
	}
	bit := d.rt.readerBit(q.shard)
	ia.SendCQ.readers.Or(bit)
	ia.RecvCQ.readers.Or(bit)
	cfg := transport.Config{
		Type: ia.Type, QPN: q.qpn, PD: pd.id,
		MaxSendWR: c.MaxSendWR, MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: maxRecvSGE,
		MaxInlineData: c.MaxInlineData, SignalAll: ia.SignalAll,
		Memory: &d.mrs, SendCQ: ia.SendCQ, RecvCQ: ia.RecvCQ, RQ: rq, SRQ: ia.SRQ != nil,
	}
	if ia.Type == UD {
		cfg.ValidAH = d.ahs.valid
	}
	eng, err := transport.NewQP(cfg)
	if err != nil {
		d.mu.Unlock()
		q.releaseRefs()
		return nil, fmt.Errorf("%w: %v", ErrInvalidArg, err)
	}
	q.eng = eng
	d.qps.set(qpn, q)
	d.nQP++
	d.mu.Unlock()
	return q, nil
}

// allocQPN returns an unused 24-bit QPN, of shard shard unless it is
// negative; d.mu must be held.
func (d *Device) allocQPN(shard int) uint32 {
	for {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN > 0xFFFFFE {
			d.nextQPN = firstQPN
		}
		if d.qps.get(n) == nil && (shard < 0 || d.rt.shardIndex(n) == shard) {
			return n
		}
	}
}

func (q *QP) releaseRefs() {
	q.sendCQ.unref()
	q.recvCQ.unref()
	q.pd.unref()
	if q.srq != nil {
		q.srq.mu.Lock()
		q.srq.refs--
		q.srq.mu.Unlock()
	}
}

// QPN returns the queue pair number.
func (q *QP) QPN() bth.QPN { return q.qpn }

// Type returns the QP type.
func (q *QP) Type() QPType { return q.typ }

// State returns the current state (it may change under the caller's feet
// when the transport moves the QP to ERR). A destroyed QP, by Destroy or
// by Device.Close, is in RESET: it holds no work and takes none (its
// other calls return ErrDestroyed), whatever state it was in before.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state()
}

// state is State with q.mu held.
func (q *QP) state() QPState {
	if q.destroyed.Load() {
		// Destroy also moves the engine to RESET; Device.Close, which
		// only marks its QPs, leaves the engine as it was.
		return StateReset
	}
	return q.eng.State()
}

// Stats returns a copy of the engine counters. A destroyed QP (Destroy,
// Device.Close) reports them as they were when it was destroyed: they
// count what it did, and it does nothing more.
func (q *QP) Stats() transport.Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return *q.eng.Stats()
}

// Query returns the last attributes applied and the current state (State:
// RESET for a destroyed QP, as after a move to RESET, which keeps the
// attributes too). It has no error to return, so unlike the calls that do
// it does not report ErrDestroyed: the RESET state says it.
func (q *QP) Query() (QPAttr, QPInitAttr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.State = q.state()
	return a, q.init
}

// Modify changes QP attributes and state (ibv_modify_qp). An illegal
// transition returns a *StateError, a bad mask a *MaskError, a bad value
// an error naming the attribute.
func (q *QP) Modify(attr *QPAttr, mask AttrMask) error {
	if q.destroyed.Load() {
		return ErrDestroyed
	}
	if attr == nil {
		return fmt.Errorf("%w: nil QP attributes", ErrInvalidArg)
	}
	sending, dst, err := q.modify(attr, mask)
	if err != nil {
		return err
	}
	q.dev.setSender(q, sending)
	// Outside q.mu too: the link may take milliseconds (a socket and a
	// probe) to be ready for the new destination.
	q.dev.prepare(dst)
	// Outside q.mu: kick may pump, and the runtime takes its lock before
	// QP locks.
	q.dev.rt.kick(q, q.dev.now())
	return nil
}

// setSender adds q to (sending) or removes it from the device's senders
// and, when their number changed, gives each its share of
// transport.MaxUnackedBytes as its window limit.
//
// Why a share: an RC requester runs up to its window ahead of the ACKs,
// and what it has sent waits in the peer's socket buffer (8 MiB by
// default on the udp link) until the peer reads it. One QP may use the
// whole budget (a long path needs it: a one-QP write_bw in the TCG guest
// gained 15-35 % from 512 KiB to 8 MiB, session 7), but sixteen QPs with
// 8 MiB each could put 128 MiB in flight: the peer's buffer overflowed
// and go-back-N retransmitted (write_bw -q 16 on loopback, 3 s: 303
// packets; read_bw, whose responses all come at once: 2776, and it moved
// 0.9 GB/s instead of 2.3), and what fitted missed the caches. Shared,
// nothing is lost and the copies stay warm (session 15,
// docs/performance.md).
func (d *Device) setSender(q *QP, sending bool) {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	// A Modify racing Destroy must not leave a destroyed QP counted.
	sending = sending && !q.destroyed.Load()
	_, was := d.senders[q]
	if was == sending {
		return
	}
	old := senderShare(len(d.senders))
	if sending {
		if d.senders == nil {
			d.senders = make(map[*QP]struct{})
		}
		d.senders[q] = struct{}{}
	} else {
		delete(d.senders, q)
	}
	share := senderShare(len(d.senders))
	limit := uint32(0)
	if sending {
		limit = share
	}
	q.mu.Lock()
	q.eng.SetWindowLimit(limit)
	q.mu.Unlock()
	// The others only when their window changes: past a few hundred
	// senders every share is rxe's 128 PSNs, and a device bringing up
	// thousands of QPs must not visit all of them for each one.
	if transport.SameWindow(old, share) {
		return
	}
	for s := range d.senders {
		if s != q {
			s.mu.Lock()
			s.eng.SetWindowLimit(share)
			s.mu.Unlock()
		}
	}
}

// senderShare is each of n senders' window limit: an equal share of
// transport.MaxUnackedBytes (0, no limit, for none).
func senderShare(n int) uint32 {
	if n == 0 {
		return 0
	}
	return uint32(transport.MaxUnackedBytes / n)
}

// modify applies a modification under q.mu and reports whether q is now a
// sender (see Device.setSender): an RC QP in RTS or SQD, and the RoCEv2
// destination of a path it set (for Device.prepare; invalid otherwise).
func (q *QP) modify(attr *QPAttr, mask AttrMask) (sending bool, dst netip.Addr, err error) {
	d := q.dev
	q.mu.Lock()
	defer q.mu.Unlock()
	cur := q.eng.State()
	to, err := checkTransition(q.typ, cur, &attr.Attr, mask)
	if err != nil {
		return false, dst, err
	}
	if mask&transport.AttrState != 0 && cur == StateSQD && to != StateErr && q.eng.SQDraining() {
		// rxe_qp_chk_attr: while the send queue drains, SQD may only go
		// to ERR; the other moves wait for SQ_DRAINED.
		return false, dst, fmt.Errorf("%w: QP 0x%06x is in SQD and its send queue is still draining (wait for SQ_DRAINED, or go to ERR)",
			ErrQPState, uint32(q.qpn))
	}
	if err := q.checkValues(attr, mask); err != nil {
		return false, dst, err
	}
	var path wire.Addr
	if mask&transport.AttrAV != 0 && q.typ != UD {
		path, err = d.pathAddr(&attr.AH)
		if err != nil {
			return false, dst, err
		}
	}
	ta := attr.Attr
	ta.State = to
	ta.PKey = bth.DefaultPKey
	m := mask | transport.AttrState
	if q.typ == UD && cur == StateReset && to == StateInit {
		// UD has no path MTU attribute: its messages are bounded by the
		// port's active MTU, as in rxe.
		ta.PathMTU = d.port.ActiveMTU
		m |= transport.AttrPathMTU
	}
	if err := q.eng.Modify(d.now(), &ta, m); err != nil {
		return false, dst, fmt.Errorf("hca: QP 0x%06x modify: %w", uint32(q.qpn), err)
	}
	q.mergeAttr(attr, mask)
	if mask&transport.AttrAV != 0 && q.typ != UD {
		q.path = path
		q.pathOK = true
		if path.Kind == wire.KindRoCEv2IPv4 || path.Kind == wire.KindRoCEv2IPv6 {
			dst = path.DstIP
		}
	}
	if q.pathOK && d.sport == 0 && q.attr.DestQPN != 0 {
		q.path.SrcPort = wire.UDPSourcePort(q.qpn, q.attr.DestQPN)
	}
	if q.pathOK && mask&(transport.AttrAV|transport.AttrDestQPN) != 0 {
		q.inlineTo = d.rt.peerQueue(q.attr.AH.DGID, uint32(q.attr.DestQPN))
	}
	if to == StateReset {
		if q.rq != nil {
			q.rq.clear()
		}
		q.pathOK = false
		q.inlineTo = nil
		// A QP reused after RESET reports its next lost completion
		// again (CQ.overrun): QP_FATAL is once per life, not per QP.
		q.fatal.Store(false)
	}
	q.checkDrained() // an empty send queue is drained at once
	return q.typ == RC && (to == StateRTS || to == StateSQD), dst, nil
}

// checkDrained raises SQ_DRAINED when the engine reports the send queue
// drained after RTS -> SQD with en_sqd_async_notify, and LAST_WQE_REACHED
// once when a QP attached to an SRQ is in ERR; q.mu must be held. It runs
// after every engine step and Modify, so it sees ERR however it came.
func (q *QP) checkDrained() {
	if q.eng.TakeSQDrained() {
		q.dev.raise(AsyncEvent{Type: EventSQDrained, QP: q})
	}
	if q.srq == nil {
		return
	}
	switch q.eng.State() {
	case StateErr:
		// The engine takes no SRQ WQE in ERR and has completed the one
		// in progress (WR_FLUSH_ERR): this QP's last WQE is behind it,
		// which is what ib_drain_rq waits for on an SRQ.
		if !q.lastWQE {
			q.lastWQE = true
			q.dev.raise(AsyncEvent{Type: EventQPLastWQEReached, QP: q})
		}
	case StateReset:
		q.lastWQE = false
	}
}

func (q *QP) checkValues(attr *QPAttr, mask AttrMask) error {
	d := q.dev
	bad := func(name string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidArg, name, fmt.Sprintf(format, args...))
	}
	if mask&transport.AttrPort != 0 && attr.Port != 1 {
		return bad("port_num", "%d (the device has port 1 only)", attr.Port)
	}
	if mask&transport.AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return bad("pkey_index", "%d (the P_Key table has 1 entry)", attr.PKeyIndex)
	}
	if mask&transport.AttrAccessFlags != 0 && attr.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return bad("qp_access_flags", "unknown bits 0x%x", uint32(attr.AccessFlags))
	}
	if mask&transport.AttrPathMTU != 0 {
		if !attr.PathMTU.Valid() {
			return bad("path_mtu", "%d is not an IB MTU enum (1..5)", attr.PathMTU)
		}
		if attr.PathMTU > d.port.ActiveMTU {
			return bad("path_mtu", "%s exceeds the port's active MTU %s", attr.PathMTU, d.port.ActiveMTU)
		}
	}
	if mask&transport.AttrDestQPN != 0 && (attr.DestQPN == 0 || !attr.DestQPN.Valid()) {
		return bad("dest_qp_num", "%#x", uint32(attr.DestQPN))
	}
	if mask&transport.AttrRQPSN != 0 && !attr.RQPSN.Valid() {
		return bad("rq_psn", "%#x exceeds 24 bits", uint32(attr.RQPSN))
	}
	if mask&transport.AttrSQPSN != 0 && !attr.SQPSN.Valid() {
		return bad("sq_psn", "%#x exceeds 24 bits", uint32(attr.SQPSN))
	}
	if mask&transport.AttrTimeout != 0 && attr.Timeout > 31 {
		return bad("timeout", "%d (0..31)", attr.Timeout)
	}
	if mask&transport.AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return bad("retry_cnt", "%d (0..7)", attr.RetryCnt)
	}
	if mask&transport.AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return bad("rnr_retry", "%d (0..7)", attr.RNRRetry)
	}
	if mask&transport.AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return bad("min_rnr_timer", "%d (0..31)", attr.MinRNRTimer)
	}
	if mask&transport.AttrMaxQPRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > d.attr.MaxQPRdAtom) {
		return bad("max_rd_atomic", "%d (0..%d)", attr.MaxRdAtomic, d.attr.MaxQPRdAtom)
	}
	if mask&transport.AttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > d.attr.MaxQPRdAtom) {
		return bad("max_dest_rd_atomic", "%d (0..%d)", attr.MaxDestRdAtomic, d.attr.MaxQPRdAtom)
	}
	if mask&transport.AttrAV != 0 {
		if _, err := d.QueryGID(attr.AH.SGIDIndex); err != nil {
			return fmt.Errorf("hca: ah_attr.grh.sgid_index: %w", err)
		}
		if attr.AH.DGID == (GID{}) {
			return bad("ah_attr.grh.dgid", "is zero (RoCE needs a global route: pass the peer's GID, e.g. pingpong -g)")
		}
	}
	return nil
}

func (q *QP) mergeAttr(a *QPAttr, m AttrMask) {
	t := &q.attr
	if m&transport.AttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if m&transport.AttrQKey != 0 {
		t.QKey = a.QKey
	}
	if m&transport.AttrAccessFlags != 0 {
		t.AccessFlags = a.AccessFlags
	}
	if m&transport.AttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
	}
	if m&transport.AttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	if m&transport.AttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if m&transport.AttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if m&transport.AttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&transport.AttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&transport.AttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if m&transport.AttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if m&transport.AttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
	}
	if m&transport.AttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
	}
	if m&transport.AttrAV != 0 {
		q.attr.AH = a.AH
	}
	if m&transport.AttrPort != 0 {
		q.attr.Port = a.Port
	}
}

// PostSend posts one send work request (ibv_post_send). The WR is copied;
// the caller may reuse it at once.
func (q *QP) PostSend(wr *SendWR) error {
	if q.destroyed.Load() {
		return ErrDestroyed
	}
	if wr == nil {
		return fmt.Errorf("%w: nil send WR", ErrInvalidArg)
	}
	if err := q.checkAH(wr); err != nil {
		return err
	}
	q.mu.Lock()
	now := q.dev.now()
	err := q.eng.PostSend(now, wr)
	deep := q.eng.InFlight() >= deepPipe
	q.mu.Unlock()
	if err != nil {
		return q.postSendErr(wr, err)
	}
	if deep {
		q.dev.rt.kickLater(q, now)
	} else {
		q.dev.rt.kick(q, now)
	}
	return nil
}

// checkAH checks a UD send WR's address handle: it must exist and belong
// to the QP's PD (rxe_get_av: "PDs don't match for AH and QP").
func (q *QP) checkAH(wr *SendWR) error {
	if q.typ != UD {
		return nil
	}
	ah := q.dev.ahs.ah(wr.AH)
	if ah == nil {
		return fmt.Errorf("%w: UD send WR %d names no valid AH (%#x)", ErrInvalidArg, wr.ID, wr.AH)
	}
	if ah.pd != q.pd {
		return fmt.Errorf("%w: UD send WR %d: AH %#x belongs to PD %d, the QP to PD %d", ErrInvalidArg, wr.ID, wr.AH, ah.pd.id, q.pd.id)
	}
	return nil
}

// postSendErr wraps an error of the engine's PostSend in the hca sentinel
// the receive side uses for the same case, so errors.Is works alike.
func (q *QP) postSendErr(wr *SendWR, err error) error {
	switch {
	case q.destroyed.Load():
		// A post racing Destroy found the engine already reset.
		return ErrDestroyed
	case errors.Is(err, transport.ErrBadState):
		err = fmt.Errorf("%w: %w", ErrQPState, err)
	case errors.Is(err, transport.ErrQueueFull):
		err = fmt.Errorf("%w: %w", ErrLimit, err)
	}
	return fmt.Errorf("hca: QP 0x%06x post_send WR %d: %w", uint32(q.qpn), wr.ID, err)
}

// PostSendList posts wrs in order as one list (ibv_post_send of a chained
// list): they are queued under one lock and the device is told once. It
// stops at the first WR it refuses and returns how many it posted before
// it, as ibv_post_send's bad_wr says.
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	if q.destroyed.Load() {
		return 0, ErrDestroyed
	}
	var err error
	n := 0
	q.mu.Lock()
	now := q.dev.now()
	for i := range wrs {
		wr := &wrs[i]
		if err = q.checkAH(wr); err != nil {
			break
		}
		if e := q.eng.PostSend(now, wr); e != nil {
			err = q.postSendErr(wr, e)
			break
		}
		n++
	}
	deep := q.eng.InFlight() >= deepPipe
	q.mu.Unlock()
	switch {
	case n > 0 && deep:
		q.dev.rt.kickLater(q, now)
	case n > 0:
		q.dev.rt.kick(q, now)
	}
	return n, err
}

// PostRecv posts one receive work request (ibv_post_recv). A QP with an
// SRQ refuses it. In ERR the WR completes at once with WR_FLUSH_ERR.
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.destroyed.Load() {
		return ErrDestroyed
	}
	if wr == nil {
		return fmt.Errorf("%w: nil receive WR", ErrInvalidArg)
	}
	if q.srq != nil {
		return fmt.Errorf("%w: QP 0x%06x is attached to an SRQ; post to the SRQ", ErrInvalidArg, uint32(q.qpn))
	}
	// The push is under the QP's lock, with the state read: the engine
	// may enter ERR at any step (a NAK, a CQ overflow, retries spent), and
	// a WR pushed just after its flush, by a poster that read the state
	// just before it, would never complete.
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.eng.State()
	if st == StateReset {
		return fmt.Errorf("%w: QP 0x%06x is in RESET", ErrQPState, uint32(q.qpn))
	}
	if err := q.rq.push(wr); err != nil {
		return err
	}
	if st == StateErr {
		q.eng.FlushRecv()
	}
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work is dropped
// without completions, as verbs specifies.
func (q *QP) Destroy() error {
	if q.destroyed.Swap(true) {
		return ErrDestroyed
	}
	d := q.dev
	d.mu.Lock()
	d.qps.set(uint32(q.qpn), nil)
	d.nQP--
	d.mu.Unlock()
	d.setSender(q, false)
	// Send the responses already queued (the ACK of the last message the
	// peer sent, say), then drop everything else without completions.
	s := q.shard
	s.mu.Lock()
	q.mu.Lock()
	s.flushResponses(q, d.now())
	reset := transport.Attr{State: StateReset}
	_ = q.eng.Modify(d.now(), &reset, transport.AttrState)
	q.mu.Unlock()
	s.mu.Unlock()
	q.releaseRefs()
	return nil
}

func (q *QP) markDestroyed() { q.destroyed.Store(true) }

// qpTable maps QPNs to QPs with lock-free reads: the receive path looks up
// every packet's destination QPN. set must be called with the device lock
// held.
type qpTable = idTable[QP]
