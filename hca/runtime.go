package hca

// The runtime moves packets between the link and the engines.
//
//  1. The reader goroutine receives a batch with one link.Read and, holding
//     the runtime lock, processes it at once: every frame is decoded once
//     (wire.Packet), its ICRC verified, its destination QPN looked up in the
//     lock-free QP table, and the engine fed, holding each QP's lock once
//     per run of packets for it. It then pumps (step 3) before reading again,
//     so ACKs and the packets a newly opened window allows leave without a
//     hand-off to another goroutine.
//  2. PostSend and Modify put the QP on a doorbell list and, if the runtime
//     lock is free, pump in the caller's goroutine (as rxe runs its
//     requester task inline); otherwise they wake the worker.
//  3. Pumping fires due engine timers (a heap of deadlines), then asks every
//     active QP for packets (Transmit) until it has no more or its budget is
//     spent, wraps each in its frame (wire.Finish) and writes them to the
//     link in batches. The runtime lock makes the pumper the link's only
//     writer.
//  4. The worker goroutine sleeps until a deadline or a doorbell that found
//     the lock taken, and pumps then; it keeps pumping while QPs still have
//     packets after their budget.
//
// There is no goroutine per QP and no channel operation per packet.

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

const (
	// frameSize bounds every frame goroce builds or accepts: a 4096-byte
	// path MTU plus the largest header stack and trailer.
	frameSize = 4096 + 256
	// headroom is where the BTH starts inside a transmit buffer.
	headroom = 128
	// txBudget is how many packets one QP may emit per pump round, so
	// that a long message cannot starve ACKs of other QPs.
	txBudget = 64
)

type runtime struct {
	d       *Device
	ep      link.Endpoint
	framing wire.Framing
	lhr     int // the link's own headroom
	batch   int

	bell chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	bellMu    sync.Mutex
	rung      []*QP // protected by bellMu
	rungSpare []*QP // protected by mu: the other half of the double buffer

	events        chan AsyncEvent
	eventsDropped atomic.Uint64

	// Reader-owned receive buffers.
	rxBufs  [][]byte
	rxSizes []int

	// mu is the runtime lock: it protects the pump state below and
	// serializes link writes.
	mu     sync.Mutex
	active []*QP
	timers deadlineHeap
	armed  transport.Time // when the worker's timer fires (Never: not armed)
	pkt    wire.Packet
	info   transport.RxInfo
	txBuf  [][]byte // backing buffers
	txOut  [][]byte // frames of the current batch (views into txBuf)
	ahAddr wire.Addr
}

func newRuntime(d *Device) *runtime {
	ep := d.ep
	b := ep.BatchSize()
	if b < 1 {
		b = 1
	}
	rt := &runtime{
		d: d, ep: ep, framing: wire.Framing(ep.Format()), lhr: ep.Headroom(), batch: b,
		bell: make(chan struct{}, 1), done: make(chan struct{}),
		events: make(chan AsyncEvent, 64), armed: transport.Never,
		rxBufs: make([][]byte, b), rxSizes: make([]int, b),
	}
	for i := range rt.rxBufs {
		rt.rxBufs[i] = make([]byte, rt.lhr+frameSize)
	}
	rt.txBuf = make([][]byte, b)
	for i := range rt.txBuf {
		rt.txBuf[i] = make([]byte, rt.lhr+headroom+frameSize)
	}
	rt.txOut = make([][]byte, 0, b)
	return rt
}

func (rt *runtime) start() {
	rt.wg.Add(2)
	go rt.runReader()
	go rt.runWorker()
}

func (rt *runtime) stop() error {
	close(rt.done)
	err := rt.ep.Close()
	rt.wg.Wait()
	return err
}

// kick puts q on the doorbell list and pumps at once if the runtime lock
// is free, else wakes the worker. The caller must not hold q.mu.
func (rt *runtime) kick(q *QP) {
	if !q.kicked.Swap(true) {
		rt.bellMu.Lock()
		rt.rung = append(rt.rung, q)
		rt.bellMu.Unlock()
	}
	if rt.mu.TryLock() {
		rt.pump(rt.d.now())
		rt.mu.Unlock()
		return
	}
	rt.ring()
}

func (rt *runtime) ring() {
	select {
	case rt.bell <- struct{}{}:
	default:
	}
}

func (rt *runtime) runReader() {
	defer rt.wg.Done()
	for {
		n, err := rt.ep.Read(rt.rxBufs, rt.rxSizes, rt.lhr)
		if err != nil {
			if errors.Is(err, link.ErrClosed) {
				return
			}
			rt.d.log.Error("link read failed", "err", err)
			// Back off so that a persistent error does not spin.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-rt.done:
				return
			}
			continue
		}
		raceAcquireLink()
		rt.mu.Lock()
		now := rt.d.now()
		rt.receive(n, now)
		rt.pump(now)
		rt.mu.Unlock()
	}
}

func (rt *runtime) runWorker() {
	defer rt.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-rt.bell:
		case <-timer.C:
		case <-rt.done:
			return
		}
		rt.mu.Lock()
		now := rt.d.now()
		rt.pump(now)
		wait := rt.arm(now)
		rt.mu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// pump fires due timers and transmits; rt.mu must be held. It wakes the
// worker when work remains or when the earliest deadline moved before the
// worker's timer.
func (rt *runtime) pump(now transport.Time) {
	rt.drainBell()
	rt.fireTimers(now)
	rt.transmit(now)
	if len(rt.active) > 0 {
		rt.ring()
		return
	}
	if t, ok := rt.nextDeadline(); ok && t < rt.armed {
		rt.ring()
	}
}

// arm computes how long the worker sleeps and records when it wakes;
// rt.mu must be held.
func (rt *runtime) arm(now transport.Time) time.Duration {
	if len(rt.active) > 0 {
		rt.armed = now
		return 0
	}
	t, ok := rt.nextDeadline()
	if !ok {
		rt.armed = transport.Never
		return time.Hour
	}
	rt.armed = t
	return max(0, time.Duration(t-now))
}

// nextDeadline drops stale heap entries and returns the earliest live one.
func (rt *runtime) nextDeadline() (transport.Time, bool) {
	for rt.timers.Len() > 0 {
		e := rt.timers[0]
		if e.q.sched == e.at && !e.q.destroyed.Load() {
			return e.at, true
		}
		rt.timers.pop()
	}
	return 0, false
}

// drainBell moves the doorbell list to the active list. The two slices
// swap roles (double buffering), so kick appends to one while the pump
// reads the other; rt.mu must be held.
func (rt *runtime) drainBell() {
	rt.bellMu.Lock()
	rung := rt.rung
	rt.rung = rt.rungSpare[:0]
	rt.bellMu.Unlock()
	for i, q := range rung {
		q.kicked.Store(false)
		rt.activate(q)
		rung[i] = nil
	}
	rt.rungSpare = rung[:0]
}

func (rt *runtime) activate(q *QP) {
	if !q.active {
		q.active = true
		rt.active = append(rt.active, q)
	}
}

func (rt *runtime) receive(n int, now transport.Time) {
	d := rt.d
	var locked *QP
	for i := 0; i < n; i++ {
		frame := rt.rxBufs[i][rt.lhr : rt.lhr+rt.rxSizes[i]]
		d.Counters.RxFrames.Add(1)
		d.Counters.RxBytes.Add(uint64(len(frame)))
		p := &rt.pkt
		if err := p.Decode(frame, rt.framing); err != nil {
			rt.countDecodeError(err)
			continue
		}
		q := d.qps.get(uint32(p.DestQP))
		if q == nil || q.destroyed.Load() {
			d.Counters.RxUnknownQP.Add(1)
			continue
		}
		if locked != q {
			if locked != nil {
				rt.afterEngine(locked)
				locked.mu.Unlock()
			}
			q.mu.Lock()
			locked = q
		}
		if !rt.addressed(q, p) {
			d.Counters.RxWrongAddress.Add(1)
			continue
		}
		if q.typ == UD {
			p.VerbsGRH(&rt.info.GRH)
			rt.info.HasGRH = true
		}
		q.eng.Receive(now, p.Transport(), &rt.info)
	}
	if locked != nil {
		rt.afterEngine(locked)
		locked.mu.Unlock()
	}
}

// addressed mirrors rxe_recv.c: the destination must be one of our GIDs,
// and for RC/UC the packet must come from the QP's peer to the QP's source.
// q.mu must be held.
func (rt *runtime) addressed(q *QP, p *wire.Packet) bool {
	dgid := GID(p.DGID())
	if !rt.d.hasGID(dgid) {
		return false
	}
	if q.typ == UD {
		return true
	}
	return q.pathOK && GID(p.SGID()) == q.path.DGID && dgid == q.path.SGID
}

func (rt *runtime) countDecodeError(err error) {
	c := &rt.d.Counters
	switch {
	case errors.Is(err, wire.ErrBadICRC):
		c.RxICRCErrors.Add(1)
	case errors.Is(err, wire.ErrBadVCRC):
		c.RxVCRCErrors.Add(1)
	case errors.Is(err, wire.ErrNotRoCE):
		c.RxNotRoCE.Add(1)
	default:
		c.RxMalformed.Add(1)
	}
}

// afterEngine runs with q.mu held after an engine call that may have
// produced packets: reschedule the QP's timer and mark it active so the
// pump asks it for packets.
func (rt *runtime) afterEngine(q *QP) {
	rt.schedule(q)
	rt.activate(q)
}

// schedule pushes q's engine deadline into the timer heap when it changed;
// q.mu must be held. Stale heap entries are skipped when they surface.
func (rt *runtime) schedule(q *QP) {
	dl := q.eng.Deadline()
	if dl == transport.Never {
		q.sched = 0
		return
	}
	if dl != q.sched {
		q.sched = dl
		rt.timers.push(timerEntry{at: dl, q: q})
	}
}

func (rt *runtime) fireTimers(now transport.Time) {
	for rt.timers.Len() > 0 && rt.timers[0].at <= now {
		e := rt.timers.pop()
		q := e.q
		if q.sched != e.at || q.destroyed.Load() {
			continue // stale entry
		}
		q.sched = 0
		q.mu.Lock()
		q.eng.Tick(now)
		rt.afterEngine(q)
		q.mu.Unlock()
	}
}

// transmit gives every active QP one round of up to txBudget packets and
// keeps the ones that still have work on the active list.
func (rt *runtime) transmit(now transport.Time) {
	d := rt.d
	act := rt.active
	keep := act[:0]
	for _, q := range act {
		if q.destroyed.Load() {
			q.active = false
			continue
		}
		q.mu.Lock()
		more := false
		for k := 0; k < txBudget; k++ {
			buf := rt.txBuf[len(rt.txOut)]
			bthOff := rt.lhr + headroom
			n, ah, ok := q.eng.Transmit(now, buf[bthOff:])
			if !ok {
				break
			}
			addr := &q.path
			if q.typ == UD {
				if !d.ahs.lookup(ah, &rt.ahAddr) {
					d.Counters.TxNoRoute.Add(1)
					continue
				}
				rt.ahAddr.SrcPort = d.sport
				if rt.ahAddr.SrcPort == 0 {
					rt.ahAddr.SrcPort = wire.UDPSourcePort(q.qpn, 0)
				}
				addr = &rt.ahAddr
			} else if !q.pathOK {
				d.Counters.TxNoRoute.Add(1)
				continue
			}
			rt.queueFrame(buf, bthOff, n, addr)
			if k == txBudget-1 {
				more = true
			}
		}
		rt.schedule(q)
		q.mu.Unlock()
		if more {
			keep = append(keep, q)
		} else {
			q.active = false
		}
	}
	rt.active = keep
	rt.flush()
}

// flushResponses writes every response q has queued; rt.mu and q.mu must
// be held. It is how a destroyed QP still acknowledges what it executed.
func (rt *runtime) flushResponses(q *QP, now transport.Time) {
	if !q.pathOK || q.typ == UD {
		return
	}
	for k := 0; k < 4*txBudget; k++ {
		buf := rt.txBuf[len(rt.txOut)]
		bthOff := rt.lhr + headroom
		n, ok := q.eng.TransmitResponse(now, buf[bthOff:])
		if !ok {
			break
		}
		rt.queueFrame(buf, bthOff, n, &q.path)
	}
	rt.flush()
}

// queueFrame wraps the packet at buf[bthOff:bthOff+n] in its frame and adds
// it to the transmit batch, flushing a full batch; rt.mu must be held.
func (rt *runtime) queueFrame(buf []byte, bthOff, n int, addr *wire.Addr) {
	frame, err := wire.Finish(buf, bthOff, n, rt.framing, addr)
	if err != nil {
		rt.d.Counters.TxErrors.Add(1)
		return
	}
	off := bthOff - addr.Headroom(rt.framing) // index of the frame's first byte in buf
	rt.txOut = append(rt.txOut, buf[off-rt.lhr:off+len(frame)])
	if len(rt.txOut) == cap(rt.txOut) {
		rt.flush()
	}
}

func (rt *runtime) flush() {
	if len(rt.txOut) == 0 {
		return
	}
	d := rt.d
	raceReleaseLink()
	n, err := rt.ep.Write(rt.txOut, rt.lhr)
	d.Counters.TxFrames.Add(uint64(n))
	for _, f := range rt.txOut[:n] {
		d.Counters.TxBytes.Add(uint64(len(f) - rt.lhr))
	}
	if err != nil {
		// The transport retransmits what was lost; count and go on.
		d.Counters.TxErrors.Add(uint64(len(rt.txOut) - n))
	}
	rt.txOut = rt.txOut[:0]
}

type timerEntry struct {
	at transport.Time
	q  *QP
}

// deadlineHeap is a binary min-heap of deadlines. It is typed (not
// container/heap) so pushing does not box an entry per timer change.
type deadlineHeap []timerEntry

func (h deadlineHeap) Len() int { return len(h) }

func (h *deadlineHeap) push(e timerEntry) {
	*h = append(*h, e)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *deadlineHeap) pop() timerEntry {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a[last] = timerEntry{}
	a = a[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].at < a[m].at {
			m = l
		}
		if r < len(a) && a[r].at < a[m].at {
			m = r
		}
		if m == i {
			break
		}
		a[m], a[i] = a[i], a[m]
		i = m
	}
	*h = a
	return top
}
