package transport

import "fmt"

// CheckRequester reports a violation of the requester's positioning
// invariant, for the lossy tests to assert after every step. The requester
// is described three ways — the WQE it is at (reqIdx), the bytes of that WQE
// already sent (reqOff) and the PSN it sends next (reqPSN) — and the three
// must agree, because a packet's opcode and payload come from the first two
// and its PSN from the third: if they drift apart, packets of one message go
// out under the PSNs of another and the responder either rejects a legal
// sequence (NAK invalid request) or accepts the wrong bytes. Also checked:
// compPSN lies inside the oldest WQE and not ahead of the requester, and a
// timer is armed while anything sent is unacknowledged (else the QP hangs
// when the last response is lost).
func (q *QP) CheckRequester() error {
	if q.cfg.Type != RC || (q.state != StateRTS && q.state != StateSQD) {
		return nil
	}
	if q.sqHead > q.reqIdx || q.reqIdx > q.sqTail || q.hiIdx < q.sqHead || q.hiIdx > q.sqTail {
		return fmt.Errorf("indices head %d req %d hi %d tail %d", q.sqHead, q.reqIdx, q.hiIdx, q.sqTail)
	}
	if q.reqIdx < q.hiIdx {
		w := q.slot(q.reqIdx)
		if q.reqOff%q.pmtu != 0 || (q.reqOff != 0 && q.reqOff >= w.length) {
			return fmt.Errorf("WQE %d (%v, %d bytes, PSN %v..%v): offset %d is not a packet boundary inside it",
				q.reqIdx, w.op, w.length, w.firstPSN, w.lastPSN, q.reqOff)
		}
		if want := w.firstPSN.Add(q.reqOff / q.pmtu); q.reqPSN != want {
			return fmt.Errorf("WQE %d (%v, PSN %v..%v) at offset %d: next PSN %v, want %v",
				q.reqIdx, w.op, w.firstPSN, w.lastPSN, q.reqOff, q.reqPSN, want)
		}
	} else if q.reqOff != 0 || q.reqPSN != q.sentPSN {
		return fmt.Errorf("past the last started WQE %d: offset %d, next PSN %v, want %v", q.reqIdx, q.reqOff, q.reqPSN, q.sentPSN)
	}
	if q.sentPSN.Less(q.reqPSN) || q.sentPSN.Sub(q.compPSN) < 0 {
		return fmt.Errorf("highest PSN sent %v behind the next %v or the oldest unacknowledged %v", q.sentPSN, q.reqPSN, q.compPSN)
	}
	if q.reqPSN != q.compPSN && q.timeout > 0 && !q.timerArmed && !q.rnrWait {
		return fmt.Errorf("packets outstanding (PSN %v..%v) and neither the local ACK timer nor an RNR wait armed", q.compPSN, q.reqPSN)
	}
	if q.reqPSN.Less(q.compPSN) {
		return fmt.Errorf("next PSN %v behind the oldest unacknowledged %v", q.reqPSN, q.compPSN)
	}
	if q.sqHead < q.hiIdx {
		w := q.slot(q.sqHead)
		if q.compPSN.Less(w.firstPSN) || w.lastPSN.Less(q.compPSN) {
			return fmt.Errorf("oldest WQE %d has PSN %v..%v, unacknowledged PSN %v outside it", q.sqHead, w.firstPSN, w.lastPSN, q.compPSN)
		}
	} else if q.compPSN != q.sentPSN {
		return fmt.Errorf("nothing outstanding, unacknowledged PSN %v, next %v", q.compPSN, q.sentPSN)
	}
	return nil
}

// Window is the requester's current unacknowledged-PSN window.
func (q *QP) Window() uint32 { return q.window }

// SetWindow sets the requester's current window as a loss leaves it (the
// slow-start threshold at the window too: it grows by one per
// acknowledgment from there) on a connection that has seen
// acknowledgments, for tests of its growth and of timeouts.
func (q *QP) SetWindow(n uint32) { q.window, q.ssthresh, q.acked = n, n, true }

// SlowStartThreshold is the window below which the window doubles per
// round trip (0: no loss has set it).
func (q *QP) SlowStartThreshold() uint32 { return q.ssthresh }

// Outstanding is the number of PSNs sent and not yet acknowledged.
func (q *QP) Outstanding() int { return int(q.reqPSN.Sub(q.compPSN)) }
