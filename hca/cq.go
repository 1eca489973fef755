package hca

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/transport"
)

// WC is a work completion (ibv_wc).
type WC = transport.Completion

// CQ is a completion queue. Any goroutine may poll it; engines push into it.
type CQ struct {
	dev      *Device
	busyPoll bool          // Options.BusyPoll of dev
	readers  atomic.Uint64 // busy polling reads these receive queues (runtime.readerBit of the CQ's QPs)

	mu       sync.Mutex // protects the ring and notification state
	ring     []WC
	head, n  int
	overflow bool
	armed    bool
	solOnly  bool // armed for solicited or unsuccessful completions only
	dead     bool
	refs     int

	avail  chan struct{} // 1-buffered: a completion arrived (for Wait)
	events chan struct{} // 1-buffered: completion event after ReqNotify
	// gone is closed when the CQ dies: unlike one token on avail, it
	// wakes every goroutine blocked in Wait.
	gone chan struct{}
}

// CreateCQ creates a completion queue with room for at least cqe entries
// (ibv_create_cq).
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe < 1 || cqe > d.attr.MaxCQE {
		return nil, fmt.Errorf("%w: cqe %d (1..%d)", ErrInvalidArg, cqe, d.attr.MaxCQE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if len(d.cqs) >= d.attr.MaxCQ {
		return nil, fmt.Errorf("%w: max_cq %d", ErrLimit, d.attr.MaxCQ)
	}
	cq := &CQ{dev: d, busyPoll: d.opts.BusyPoll, ring: make([]WC, cqe), avail: make(chan struct{}, 1), events: make(chan struct{}, 1),
		gone: make(chan struct{})}
	d.cqs[cq] = struct{}{}
	return cq, nil
}

// Cap returns the number of entries the CQ holds.
func (cq *CQ) Cap() int { return len(cq.ring) }

// Push implements transport.CompletionQueue. It returns false on overrun;
// the completion is lost, the CQ reports ErrCQOverflow from Poll, and the
// device raises EventCQErr and EventQPFatal (overrun).
func (cq *CQ) Push(wc *WC) bool {
	cq.mu.Lock()
	if cq.dead {
		cq.mu.Unlock()
		return false
	}
	if cq.n == len(cq.ring) {
		first := !cq.overflow
		cq.overflow = true
		cq.mu.Unlock()
		cq.overrun(wc, first)
		return false
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	fire := cq.armed && (!cq.solOnly || wc.Solicited || wc.Status != transport.StatusSuccess)
	if fire {
		cq.armed = false
	}
	cq.mu.Unlock()
	select {
	case cq.avail <- struct{}{}:
	default:
	}
	if fire {
		select {
		case cq.events <- struct{}{}:
		default:
		}
	}
	return true
}

// overrun raises the asynchronous events of a lost completion, as verbs
// devices do: CQ_ERR the first time the CQ overruns, and QP_FATAL, once per
// QP between RESETs, for the QP whose completion was lost (its engine moves it to ERR, since
// it can no longer report its work). Without them an application that does
// not poll would never learn why its QP stopped.
func (cq *CQ) overrun(wc *WC, first bool) {
	d := cq.dev
	if first {
		d.raise(AsyncEvent{Type: EventCQErr, CQ: cq})
	}
	if q := d.qps.get(uint32(wc.QPN)); q != nil && q.fatal.CompareAndSwap(false, true) {
		d.raise(AsyncEvent{Type: EventQPFatal, QP: q})
	}
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). After an overrun it returns the completions it holds and
// ErrCQOverflow. A destroyed CQ (Destroy, Device.Close) still hands over
// the completions it held, and returns ErrDestroyed once it holds none:
// a Poll with an empty wcs on a destroyed CQ that still holds some returns
// 0 and no error, as on a live one.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	if cq.busyPoll && len(wcs) > 0 {
		cq.mu.Lock()
		empty := cq.n == 0 && !cq.dead
		cq.mu.Unlock()
		if empty {
			// Options.BusyPoll: receive in this goroutine (not under
			// cq.mu: processing pushes completions into this CQ), from
			// the receive queues of this CQ's QPs.
			cq.dev.rt.poll(cq.readers.Load())
		} else {
			// Not this device's deferrals: the caller is about to react
			// to these completions (perftest's send_lat polls its send
			// completion before it answers), and its answer should
			// carry them.
			flushAllDeferred(cq.dev.rt, false)
		}
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	k := 0
	for k < len(wcs) && cq.n > 0 {
		wcs[k] = cq.ring[cq.head]
		cq.head = (cq.head + 1) % len(cq.ring)
		cq.n--
		k++
	}
	if cq.overflow {
		return k, ErrCQOverflow
	}
	if cq.dead && cq.n == 0 && k == 0 {
		return 0, ErrDestroyed
	}
	return k, nil
}

// PollLink is one busy-poll round that takes no completions
// (Options.BusyPoll; without it PollLink does nothing and reports false): it
// sends what earlier rounds deferred, then receives and processes, in the
// caller's goroutine, what the receive queues of the CQ's QPs hold, and
// reports whether anything arrived. It is for an application that spins on
// memory an RDMA WRITE fills (ib_write_lat's pattern) and so has no
// completion to poll for: without it the data waits for the device's reader
// goroutine, which stands aside for milliseconds while a poller polls.
func (cq *CQ) PollLink() bool {
	if !cq.busyPoll {
		return false
	}
	return cq.dev.rt.poll(cq.readers.Load())
}

// Len returns the number of completions waiting.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Wait blocks until the CQ holds at least one completion, ctx is done, or
// the CQ is destroyed.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq.busyPoll {
		// Whoever waits does not poll: send what polling deferred.
		flushAllDeferred(nil, false)
	}
	for woke := false; ; woke = true {
		cq.mu.Lock()
		n, dead := cq.n, cq.dead
		cq.mu.Unlock()
		if n > 0 {
			if woke {
				// Pass the wake-up on: two Pushes that land before two
				// waiters block leave one token in the 1-slot channel,
				// and the other waiter would sleep on a CQ that holds
				// completions. A spare token costs a later Wait one
				// more look at n.
				select {
				case cq.avail <- struct{}{}:
				default:
				}
			}
			return nil
		}
		if dead {
			return ErrDestroyed
		}
		select {
		case <-cq.avail:
		case <-cq.gone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReqNotify arms the CQ: the next completion sends one event on Events
// (ibv_req_notify_cq). With solicitedOnly, only the next solicited
// completion (a received message whose last packet carried the BTH SE bit,
// IBV_SEND_SOLICITED at the sender) or unsuccessful completion does, as
// ibv_req_notify_cq(3) specifies. Arming again while armed keeps the wider
// of the two requests, as rxe does.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return ErrDestroyed
	}
	if !cq.armed {
		cq.solOnly = solicitedOnly
	} else if !solicitedOnly {
		cq.solOnly = false
	}
	cq.armed = true
	return nil
}

// Events delivers one value per completion event (the completion channel of
// ibv_get_cq_event). Re-arm with ReqNotify after each event. A destroyed
// CQ delivers no more events (ReqNotify returns ErrDestroyed) and the
// channel stays open: wait with Wait, which returns ErrDestroyed, or with
// a context.
func (cq *CQ) Events() <-chan struct{} { return cq.events }

// Destroy destroys the CQ; it fails while QPs use it.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	if cq.dead {
		cq.mu.Unlock()
		return ErrDestroyed
	}
	if refs := cq.refs; refs > 0 {
		cq.mu.Unlock()
		return fmt.Errorf("%w: CQ used by %d QPs", ErrInUse, refs)
	}
	// Dead under the same lock as the check: a CreateQP's ref in between
	// would give a QP a destroyed CQ, and a second Destroy would succeed.
	cq.closeLocked()
	cq.mu.Unlock()
	cq.dev.mu.Lock()
	delete(cq.dev.cqs, cq)
	cq.dev.mu.Unlock()
	return nil
}

func (cq *CQ) close() {
	cq.mu.Lock()
	cq.closeLocked()
	cq.mu.Unlock()
}

// closeLocked marks the CQ dead and wakes its waiters; cq.mu must be held.
func (cq *CQ) closeLocked() {
	if !cq.dead {
		cq.dead = true
		close(cq.gone)
	}
}

func (cq *CQ) ref() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return ErrDestroyed
	}
	cq.refs++
	return nil
}

func (cq *CQ) unref() {
	cq.mu.Lock()
	cq.refs--
	cq.mu.Unlock()
}

var _ transport.CompletionQueue = (*CQ)(nil)
