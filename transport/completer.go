package transport

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// completerRx processes a response (ACK, NAK, RNR NAK, READ response,
// ATOMIC ACK). Mirrors rxe_comp.c rxe_completer: check_psn (implicit ACK
// of earlier SEND/WRITE WQEs, implied NAK for READ/ATOMIC), check_ack, then
// read/atomic data placement and completion, strictly in WQE order.
func (q *QP) completerRx(now Time, h bth.Header, oi *bth.OpInfo, pkt, payload []byte) {
	if q.cfg.Type != RC {
		q.stats.RxDropped++
		return
	}
	psn := h.PSN()
	op := h.Opcode()
	var syn bth.Syndrome
	if oi.AETH != 0 {
		syn = bth.AETH(pkt[oi.AETH:]).Syndrome()
		if syn.Reserved() || syn.Type() == bth.AckTypeReserved {
			q.stats.RxDropped++
			return
		}
	}
	// A response must answer something we sent: PSN before sentPSN and at
	// most 2^23 behind it. (Not merely a PSN assigned: an ACK naming the
	// last PSN of a WQE still being sent would complete it, unsent packets
	// and all.)
	if psn.Compare(q.sentPSN) >= 0 || q.sqHead >= q.hiIdx {
		q.stats.RxDuplicateResponses++
		return
	}
	progress, grow := false, true
	start := q.compPSN // what this response acknowledges: compPSN's advance
	for q.sqHead != q.sqTail && q.sqHead < q.hiIdx {
		w := q.slot(q.sqHead)
		if psn.Compare(w.lastPSN) <= 0 || w.errStatus != 0 {
			break
		}
		if w.readOrAtomic() {
			// The responder answered something after this READ/ATOMIC,
			// so its response was lost: implied NAK, retry.
			if progress {
				q.ackProgress(now, true, q.compPSN.Sub(start))
			}
			q.stats.ImpliedNAKs++
			q.nakRetry()
			return
		}
		// SEND/WRITE: implicitly acknowledged. Progress resets the retry
		// counters and ends a NAK-started retry, whatever kind of
		// response this is (rxe_comp.c check_psn: reset_retry_counters
		// before COMPST_COMP_WQE), so a sequence NAK that acknowledges
		// the head implicitly starts a retry of its own.
		q.compPSN = w.lastPSN.Add(1)
		q.completeHead(StatusSuccess)
		q.resetRetry()
		progress = true
		if q.state != StateRTS && q.state != StateSQD {
			return
		}
	}
	if q.sqHead == q.sqTail || q.sqHead >= q.hiIdx || psn.Less(q.compPSN) {
		if progress {
			q.ackProgress(now, true, q.compPSN.Sub(start))
		} else {
			q.stats.RxDuplicateResponses++
		}
		return
	}
	w := q.slot(q.sqHead)
	switch {
	case op == bth.OpRCAcknowledge:
		switch syn.Type() {
		case bth.AckTypeACK:
			if w.readOrAtomic() {
				// An ACK inside a READ/ATOMIC's PSN range answers an
				// earlier duplicate, not this request.
				q.stats.RxDuplicateResponses++
				break
			}
			q.compPSN = psn.Add(1)
			progress = true
			if psn == w.lastPSN {
				q.completeHead(StatusSuccess)
			}
		case bth.AckTypeRNRNAK:
			q.stats.RNRNAKsReceived++
			if q.compPSN.Less(psn) && w.op != WRRDMARead {
				q.compPSN = psn
				q.syncReq()
			}
			if q.rnrLeft == 0 {
				q.completeHead(StatusRNRRetryExcErr)
				return
			}
			if q.rnrRetry != 7 { // 7 = retry forever
				q.rnrLeft--
			}
			// Wait the time the responder asked for, then go back to the
			// NAKed PSN (Tick). Everything sent after that PSN is lost
			// too: the responder drops what follows a request it could
			// not take. So an RNR NAK halves the window like a loss does,
			// or a receiver short of receives (rxe's behind an SRQ, for
			// one) costs a whole window of resent packets each time.
			q.shrinkWindow()
			q.rnrWait = true
			q.rnrAt = now + Time(syn.RNRTimer().Duration())
			q.timerArmed = false
			return
		case bth.AckTypeNAK:
			switch syn.NAKCode() {
			case bth.NAKPSNSequenceError:
				// Everything before the NAK PSN is implicitly acked; retry
				// from it (counts against retry_cnt). Not inside a READ:
				// what it has of its data came in its responses, which
				// moved compPSN; a NAK naming a later PSN of its range
				// (no correct responder sends one: the READ request is a
				// single packet) would make the retry skip the bytes
				// between, and the READ complete with a hole in its buffer.
				// The same holds for the RNR NAK above.
				q.stats.SeqNAKsReceived++
				if q.compPSN.Less(psn) && w.op != WRRDMARead {
					q.compPSN = psn
					q.retryPending = false
					q.syncReq()
				}
				q.nakRetry()
			case bth.NAKInvalidRequest:
				q.completeHead(StatusRemInvReqErr)
			case bth.NAKRemoteAccessError:
				q.completeHead(StatusRemAccessErr)
			default:
				q.completeHead(StatusRemOpErr)
			}
			return
		}
	case oi.Has(bth.FlagRead):
		if w.op != WRRDMARead || psn != q.compPSN || (oi.AETH != 0 && !syn.IsACK()) {
			q.stats.RxDuplicateResponses++
			break
		}
		off := uint64(psn.Sub(w.firstPSN)) * uint64(q.pmtu)
		if off > uint64(w.length) {
			q.stats.RxDropped++
			break
		}
		rem := uint64(w.length) - off
		n := uint64(len(payload))
		var ok bool
		if oi.Has(bth.FlagLast) {
			ok = n == rem && n <= uint64(q.pmtu)
		} else {
			ok = n == uint64(q.pmtu) && rem > n
		}
		if !ok {
			q.stats.RxDropped++
			break
		}
		if !q.scatter(w.sgl, off, payload) {
			q.completeHead(StatusLocProtErr)
			return
		}
		q.compPSN = psn.Add(1)
		progress = true
		// The window grows by one per acknowledgment, and a READ's
		// acknowledgment is its last response, not each packet of it
		// (which regrew a halved window in one round trip).
		grow = oi.Has(bth.FlagLast)
		if oi.Has(bth.FlagLast) {
			q.completeHead(StatusSuccess)
		}
	case op == bth.OpRCAtomicAcknowledge:
		if !w.atomic() || psn != w.firstPSN || !syn.IsACK() {
			q.stats.RxDuplicateResponses++
			break
		}
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], bth.AtomicAckETH(pkt[oi.AtomicAckETH:]).OrigData())
		if !q.scatter(w.sgl, 0, v[:]) {
			q.completeHead(StatusLocProtErr)
			return
		}
		q.compPSN = psn.Add(1)
		progress = true
		q.completeHead(StatusSuccess)
	default:
		q.stats.RxDropped++
	}
	if progress {
		q.ackProgress(now, grow, q.compPSN.Sub(start))
	}
}

// ackProgress runs after a response acknowledged something: retry counters
// are reset (rxe_comp.c reset_retry_counters), the local ACK timer restarts
// while anything is outstanding, and a requester that is re-sending packets
// the peer has already acknowledged skips ahead. With grow, the window
// grows by one (an acknowledgment: an ACK, or the last packet of a READ
// response).
func (q *QP) ackProgress(now Time, grow bool, acked int32) {
	if q.state != StateRTS && q.state != StateSQD {
		return
	}
	q.resetRetry()
	if q.undo {
		// An acknowledgment since a local ACK timeout, while go-back-N
		// has not yet resent everything sent before it. One beyond what
		// it has resent (reqPSN) acknowledges the first transmission,
		// which the peer had therefore received: the timeout measured a
		// stall (in a TCG guest on a busy host, a vCPU descheduled for
		// longer than the timeout, the ACKs waiting in its socket), not
		// a loss, and the halving is undone, as TCP's F-RTO (RFC 5682)
		// undoes a spurious retransmission timeout. Acknowledgments
		// within the resent range may answer either transmission; once
		// everything is resent, none can tell, and the halving stands.
		switch {
		case q.reqPSN.Less(q.compPSN):
			// Within the largest window as it is now: SetWindowLimit
			// may have lowered it since.
			q.undo = false
			q.window, q.ssthresh = min(q.undoWin, q.winMax), min(q.undoThresh, q.winMax)
			q.stats.SpuriousTimeouts++
		case !q.reqPSN.Less(q.undoPSN):
			q.undo = false
		}
	}
	q.syncReq()
	q.acked, q.probe = true, false
	switch {
	case q.ssthresh == 0 || q.window < q.ssthresh:
		// Slow start: one more PSN per PSN acknowledged, so the window
		// doubles each round trip, up to the largest one (or to what the
		// last loss left). Starting at rxe's 128 rather than the largest
		// window keeps the first flight from overrunning a short queue on
		// the path (a tap's 1000 packets) that a loss would then cost
		// whole windows of resent packets to find.
		limit := q.winMax
		if q.ssthresh != 0 {
			limit = min(limit, q.ssthresh)
		}
		q.window = min(q.window+uint32(max(acked, 0)), limit)
	case grow && q.window < q.winMax:
		q.window++
	}
	if q.compPSN != q.reqPSN && q.timeout > 0 {
		q.timerArmed = true
		q.timerAt = now + q.timeout
	} else {
		q.timerArmed = false
	}
	q.completeHeadLocalErr()
}

// resetRetry mirrors rxe_comp.c reset_retry_counters: retry_cnt and
// rnr_retry start over and a NAK-started retry is over (started_retry = 0).
func (q *QP) resetRetry() {
	q.retryLeft, q.rnrLeft = q.retryCnt, q.rnrRetry
	q.retryPending = false
}

// syncReq moves the requester forward when go-back-N left it behind the
// oldest unacknowledged PSN.
func (q *QP) syncReq() {
	if !q.reqPSN.Less(q.compPSN) {
		return
	}
	q.position()
}

// nakRetry starts a go-back-N retry after a PSN sequence NAK or an implied
// NAK, counting it against retry_cnt. Further NAKs are ignored until the
// responder acknowledges progress or the timer fires (rxe_comp.c
// comp.started_retry), so one loss does not cause a retry storm.
func (q *QP) nakRetry() {
	if q.retryPending {
		return
	}
	if q.retryLeft == 0 {
		q.completeHead(StatusRetryExcErr)
		return
	}
	if q.retryCnt != 7 {
		q.retryLeft--
	}
	q.retryPending = true
	if !q.rnrWait {
		// During an RNR wait the sequence NAK is the responder's answer
		// to what followed the RNR-NAKed request: the same event, and
		// the RNR NAK has already halved the window.
		q.shrinkWindow()
	}
	q.goBack()
}

// shrinkWindow halves the unacknowledged-PSN window after a loss or an RNR
// NAK (not below MinUnackedPSNs).
func (q *QP) shrinkWindow() {
	q.undo = false
	q.window = max(MinUnackedPSNs, q.window/2)
	q.ssthresh = q.window
}
