package hca

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/transport"
)

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR = transport.RecvWR

// SGE is a scatter/gather element (ibv_sge).
type SGE = transport.SGE

// recvRing is a bounded FIFO of receive WQEs; it implements
// transport.RecvQueue for a QP's own receive queue and for an SRQ. SGE
// lists are copied into per-slot storage so posting does not allocate.
type recvRing struct {
	mu     sync.Mutex
	wrs    []transport.RecvWR
	sges   []SGE // maxSGE per slot
	maxSGE int
	head   int
	n      int
	// SRQ limit event: when armed and n drops below limit, onLimit runs.
	limit   int
	onLimit func()
}

func newRecvRing(depth, maxSGE int) *recvRing {
	return &recvRing{wrs: make([]transport.RecvWR, depth), sges: make([]SGE, depth*maxSGE), maxSGE: maxSGE}
}

func (r *recvRing) push(wr *RecvWR) error {
	if len(wr.SGL) > r.maxSGE {
		return fmt.Errorf("%w: %d SGEs, max_recv_sge is %d", ErrInvalidArg, len(wr.SGL), r.maxSGE)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == len(r.wrs) {
		return fmt.Errorf("%w: receive queue full (%d WRs)", ErrLimit, len(r.wrs))
	}
	i := (r.head + r.n) % len(r.wrs)
	s := r.sges[i*r.maxSGE : i*r.maxSGE+len(wr.SGL)]
	copy(s, wr.SGL)
	r.wrs[i] = transport.RecvWR{ID: wr.ID, SGL: s}
	r.n++
	return nil
}

// Pop implements transport.RecvQueue: the WQE's SGEs are copied into sgl
// under the lock, so the slot can be reused by a concurrent post at once.
func (r *recvRing) Pop(sgl []SGE) (transport.RecvWR, bool) {
	r.mu.Lock()
	if r.n == 0 {
		r.mu.Unlock()
		return transport.RecvWR{}, false
	}
	slot := &r.wrs[r.head]
	k := copy(sgl, slot.SGL)
	wr := transport.RecvWR{ID: slot.ID, SGL: sgl[:k:k]}
	*slot = transport.RecvWR{}
	r.head = (r.head + 1) % len(r.wrs)
	r.n--
	var fire func()
	if r.limit > 0 && r.n < r.limit && r.onLimit != nil {
		fire = r.onLimit
		r.limit = 0 // the limit event is one-shot; re-arm with Modify
	}
	r.mu.Unlock()
	if fire != nil {
		fire()
	}
	return wr, true
}

func (r *recvRing) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *recvRing) clear() {
	r.mu.Lock()
	r.head, r.n = 0, 0
	r.mu.Unlock()
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd   *PD
	ring *recvRing
	mu   sync.Mutex
	refs int
	dead bool
	// shard is the index of the runtime shard every QP of this SRQ
	// belongs to (QPN mod shards), set at its first QP; -1 before. Under
	// the device's mu.
	shard int
}

// SRQAttr are ibv_srq_attr.
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms the limit event: when fewer than Limit WQEs remain, an
	// EventSRQLimitReached is delivered on Device.Events and the limit is
	// disarmed (set to 0).
	Limit int
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	d := pd.dev
	if attr.MaxWR < 1 || attr.MaxWR > d.attr.MaxSRQWR {
		return nil, fmt.Errorf("%w: SRQ max_wr %d (1..%d)", ErrInvalidArg, attr.MaxWR, d.attr.MaxSRQWR)
	}
	if attr.MaxSGE < 1 || attr.MaxSGE > d.attr.MaxSRQSGE {
		return nil, fmt.Errorf("%w: SRQ max_sge %d (1..%d)", ErrInvalidArg, attr.MaxSGE, d.attr.MaxSRQSGE)
	}
	if attr.Limit < 0 || attr.Limit > attr.MaxWR {
		return nil, fmt.Errorf("%w: SRQ limit %d > max_wr %d", ErrInvalidArg, attr.Limit, attr.MaxWR)
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	s := &SRQ{pd: pd, ring: newRecvRing(attr.MaxWR, attr.MaxSGE), shard: -1}
	s.ring.onLimit = func() { d.raise(AsyncEvent{Type: EventSRQLimitReached, SRQ: s}) }
	s.ring.limit = attr.Limit
	d.mu.Lock()
	err := d.checkOpen()
	if err == nil && len(d.srqs) >= d.attr.MaxSRQ {
		err = fmt.Errorf("%w: max_srq %d", ErrLimit, d.attr.MaxSRQ)
	}
	if err != nil {
		d.mu.Unlock()
		pd.unref()
		return nil, err
	}
	d.srqs[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

// PostRecv posts a receive WR to the SRQ (ibv_post_srq_recv). On a
// destroyed SRQ it returns ErrDestroyed, whatever wr is (as QP.PostRecv
// does).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return ErrDestroyed
	}
	if wr == nil {
		return fmt.Errorf("%w: nil receive WR", ErrInvalidArg)
	}
	return s.ring.push(wr)
}

// Modify re-arms the limit (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) Modify(limit int) error {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return ErrDestroyed
	}
	if limit < 0 || limit > len(s.ring.wrs) {
		return fmt.Errorf("%w: SRQ limit %d > max_wr %d", ErrInvalidArg, limit, len(s.ring.wrs))
	}
	s.ring.mu.Lock()
	s.ring.limit = limit
	s.ring.mu.Unlock()
	return nil
}

// Query returns the SRQ attributes (limit 0 when disarmed; a destroyed
// SRQ's limit is disarmed).
func (s *SRQ) Query() SRQAttr {
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	return SRQAttr{MaxWR: len(s.ring.wrs), MaxSGE: s.ring.maxSGE, Limit: s.ring.limit}
}

// Len returns the number of posted WQEs not yet consumed: 0 once the SRQ
// is destroyed, which drops them.
func (s *SRQ) Len() int { return s.ring.len() }

// Destroy destroys the SRQ; it fails while QPs use it. The WQEs still
// posted are dropped, as verbs specifies, and the limit is disarmed.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return ErrDestroyed
	}
	if s.refs > 0 {
		return fmt.Errorf("%w: SRQ used by %d QPs", ErrInUse, s.refs)
	}
	s.kill()
	s.pd.unref()
	s.pd.dev.mu.Lock()
	delete(s.pd.dev.srqs, s)
	s.pd.dev.mu.Unlock()
	return nil
}

// kill marks the SRQ destroyed, drops its WQEs and disarms its limit;
// s.mu must be held. Nothing pops from the ring any more: Destroy runs with
// no QP attached, and Device.Close after the runtime has stopped.
func (s *SRQ) kill() {
	s.dead = true
	s.ring.clear()
	s.ring.mu.Lock()
	s.ring.limit = 0
	s.ring.mu.Unlock()
}
