package hca

// The runtime moves packets between the link and the engines.
//
//  1. A reader goroutine receives a batch with one link.Read and processes
//     it at once: every frame is decoded once (wire.Packet), its ICRC
//     verified, its destination QPN looked up in the lock-free QP table, and
//     the engine fed, holding the QP's shard lock and the QP's lock once per
//     run of packets for it. It then pumps the shard it fed last before
//     reading again, so ACKs and the packets a newly opened window allows
//     leave without a hand-off to another goroutine; other shards the batch
//     fed are handed to their workers, which pump them in parallel.
//  2. PostSend and Modify put the QP on its shard's doorbell list and, if
//     the shard lock is free, pump in the caller's goroutine (as rxe runs
//     its requester task inline); otherwise they wake the shard's worker.
//     A post behind a deep pipe (deepPipe unacknowledged packets) always
//     leaves the pump to the worker, or to a busy poller's next round, so
//     that the posts made meanwhile leave in one batch (kickLater).
//  3. Pumping fires due engine timers (a heap of deadlines), then asks every
//     active QP for packets (Transmit) until it has no more or its budget is
//     spent, wraps each in its frame (wire.Finish) and writes them to the
//     link in batches. The shard lock makes the pumper the only user of the
//     shard's link writer.
//  4. Each shard's worker goroutine sleeps until a deadline or a doorbell
//     that found the lock taken, and pumps then; it keeps pumping while QPs
//     still have packets after their budget.
//
// Shards spread QPs over cores: a QP belongs to shard QPN mod S (the QPs
// of one SRQ get QPNs of one shard, so that one reader places their
// receives, which may share buffers), and each
// shard has its own lock, active list, timers, transmit buffers, worker and
// link writer (link.TxQueuer: on the UDP link, its own duplicate of the
// socket). When the link can also sort received packets by DestQP mod S
// (link.RxQueuer: on the UDP link over IPv4, one raw socket per shard with
// a BPF filter), each shard gets its own reader too, and the shards are
// independent end to end; otherwise one reader feeds every shard. With
// one shard (a link without transmit queues, such as the pcap tap, whose
// capture must keep the order of the wire) everything runs under one lock,
// as rxe runs every QP's tasks. Lock order: a shard's lock before
// a QP's lock; nobody holds two shard locks.
//
//  5. When a QP's peer is another device of this process, the goroutine
//     that pumped a batch to it goes on to receive and process that batch
//     from the peer's receive queue (inline.go).
//
// There is no goroutine per QP and no channel operation per packet.

import (
	"errors"
	goruntime "runtime"
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
	// maxAutoShards caps the shard count Options.Shards = 0 picks.
	maxAutoShards = 4
)

type runtime struct {
	d       *Device
	ep      link.Endpoint
	framing wire.Framing
	lhr     int // the link's own headroom
	batch   int

	done chan struct{}
	wg   sync.WaitGroup

	events        chan AsyncEvent
	eventsDropped atomic.Uint64

	shards  []*shard
	readers []*reader
	procs   int // GOMAXPROCS when the runtime started

	// anyDeferred is set when some shard's deferred flag may be set: the
	// busy-poll path checks it with one load. deferredAt is when it was.
	anyDeferred atomic.Bool
	deferredAt  atomic.Int64
	// stopping is set by stop before its last flushDeferred: a busy-poll
	// PostSend racing Close must not leave anyDeferred set on a runtime
	// nobody will flush (deferring.n would stay above zero for good,
	// and every Poll of the process would walk the pollers).
	stopping atomic.Bool
}

// reader is one receive goroutine's state: the link (or one of its
// receive queues, link.RxQueuer) it reads and what it decodes into.
type reader struct {
	rt     *runtime
	r      link.Reader
	poller link.Poller // r, when it can be read without blocking
	viewer link.Viewer // r, when it can pass frames in place (nil once it said it cannot)
	feedFn func([]byte)

	// mu is held while a batch is read and processed, so that the reader
	// goroutine and busy-polling callers take turns and packets are
	// processed in the order the link delivered them.
	mu    sync.Mutex
	bufs  [][]byte
	sizes []int
	pkt   wire.Packet
	info  transport.RxInfo
	fed   []*shard // shards the current batch fed, in order

	// The batch being fed (begin, feed, end).
	now    transport.Time
	locked *QP
	ls     *shard // locked shard
	frames int
	bytes  uint64

	// polled counts busy-poll rounds that read this queue; seen is its
	// value when the reader goroutine last looked (reader goroutine only).
	polled atomic.Uint64
	seen   uint64
	// standing: the reader goroutine's last turn was a stand-aside
	// (reader goroutine only).
	standing bool
	// handoff times the reader goroutine's turns away from a busy poller
	// (reader goroutine only; one timer, not one per turn).
	handoff *time.Timer

	// In-process peers (inline.go): inlined is set once a peer has read
	// this queue inline, from when its goroutine stands aside as for a
	// busy poller; wakeCh ends a stand-aside. inline (under mu) says the
	// batch being processed is a peer's inline receive.
	inlined atomic.Bool
	wakeCh  chan struct{}
	inline  bool
	// pending is set by a peer that found mu taken: whoever holds it
	// reads once more before resting.
	pending atomic.Bool
}

// shard is one transmit context: a lock, the QPs with work, their timers,
// transmit buffers and a link writer.
type shard struct {
	rt *runtime
	w  link.Writer

	bell chan struct{}

	bellMu    sync.Mutex
	rung      []*QP // protected by bellMu
	rungSpare []*QP // protected by mu: the other half of the double buffer

	// mu is the shard lock: it protects the pump state below and
	// serializes the shard's link writes.
	mu     sync.Mutex
	active []*QP
	timers deadlineHeap
	armed  transport.Time // when the worker's timer fires (Never: not armed)
	txBuf  [][]byte       // backing buffers
	txOut  [][]byte       // frames of the current batch (views into txBuf)
	ahAddr wire.Addr

	// deferred is set (under mu) when a busy-poll round fed the shard and
	// left what its QPs now have to send (an ACK, a window's worth of
	// requests) to the poller's next PostSend, Poll or Wait, so that the
	// ACK of a message and the application's answer to it leave in one
	// sendmmsg, after the completion was handed over, as rxe completes a
	// receive before it acknowledges it. Any pump clears it; the reader
	// goroutines flush it when the polling stops, and deferTimer, which
	// fires deferLimit after the latest deferral, wakes the worker if
	// nobody did (an application that stops polling, with every P busy
	// elsewhere, cannot count on the reader goroutines being run).
	deferred   atomic.Bool
	deferTimer *time.Timer
	deferDue   atomic.Int64 // transport.Time at which deferTimer fires

	// inl is the in-process peers' receive queues the pump sent to since
	// the last claimInline (under mu; inline.go); lastInline is when the
	// shard last sent to one (transport.Time).
	inl        []*reader
	lastInline atomic.Int64
}

// shardCount is how many shards a device on ep runs for Options.Shards n.
func shardCount(ep link.Endpoint, n int) int {
	if _, ok := ep.(link.TxQueuer); !ok {
		return 1
	}
	if n <= 0 {
		n = min(goruntime.GOMAXPROCS(0), maxAutoShards)
	}
	return max(n, 1)
}

// PeerShards is the Options.Shards for devices of qps QPs each that talk
// to other devices of this process (goroce bench --loopback): up to twice
// GOMAXPROCS where there are QPs to fill them, at most maxAutoShards, never
// fewer than Options.Shards = 0 picks, and 1 on one P. There the goroutine
// that pumps a batch also receives it from the peer's queue (inline.go),
// so a shard's goroutines carry both halves of its flows, and with only
// one shard per P they fell behind: 16 QPs on two cores (GOMAXPROCS 2)
// left 1.6-3.6 MB queued in the receiving device's raw sockets, against
// 0-0.9 MB with four shards, which cut the CPU time per GB by 13 % (the
// kernel's receive copy by 39 %, the ICRC by 21 %) and raised write_bw
// from 7.4-7.5 to 8.0-8.3 GB/s, send_bw from 7.5-7.7 to 8.3-8.7, read_bw
// from 5.7-5.8 to 6.0-6.4 (session 36). A shard without QPs still costs
// every received packet a clone for its raw socket's filter: one QP on two
// cores with four shards had send_lat 6.37 / 6.60 µs against 5.84 / 6.27
// with two. Between two processes, where nothing is received inline, four
// shards were no better than two (write_bw 16 QPs 3.3-3.5 against 3.4-3.9
// GB/s), so Options.Shards = 0 keeps one per P.
func PeerShards(qps int) int {
	p := goruntime.GOMAXPROCS(0)
	if p <= 1 {
		return 1
	}
	return max(min(p, maxAutoShards), min(2*p, maxAutoShards, qps))
}

func newRuntime(d *Device, nShards int) (*runtime, error) {
	ep := d.ep
	b := ep.BatchSize()
	if b < 1 {
		b = 1
	}
	rt := &runtime{
		d: d, ep: ep, framing: wire.Framing(ep.Format()), lhr: ep.Headroom(), batch: b,
		done: make(chan struct{}), events: make(chan AsyncEvent, 64),
	}
	for i := range nShards {
		var w link.Writer = ep
		if i > 0 {
			var err error
			if w, err = ep.(link.TxQueuer).NewTxQueue(); err != nil {
				return nil, err
			}
		}
		s := &shard{rt: rt, w: w, bell: make(chan struct{}, 1), armed: transport.Never}
		s.deferTimer = time.AfterFunc(time.Hour, s.deferTimeout)
		s.deferTimer.Stop()
		s.txBuf = make([][]byte, b)
		for i := range s.txBuf {
			s.txBuf[i] = make([]byte, rt.lhr+headroom+frameSize)
		}
		s.txOut = make([][]byte, 0, b)
		s.inl = make([]*reader, 0, maxInline)
		// Never sent inline: the device's clock starts at 0, so a zero
		// lastInline would count every shard busy for inlineNow during
		// the device's first inlineRecent.
		s.lastInline.Store(-2 * int64(inlineRecent))
		rt.shards = append(rt.shards, s)
	}
	// With several shards, let the link sort received packets by QP onto
	// one receive queue per shard, so that the shards' packets are also
	// received and processed on different cores (reader i then feeds only
	// shard i: both go by QPN mod nShards). A link that cannot split keeps
	// one reader for every shard.
	links := []link.Reader{ep}
	if q, ok := ep.(link.RxQueuer); ok && nShards > 1 {
		more, err := q.SplitRx(nShards)
		switch {
		case err == nil:
			links = append(links, more...)
		case !errors.Is(err, link.ErrNotSupported):
			return nil, err
		}
	}
	for _, l := range links {
		r := &reader{rt: rt, r: l, bufs: make([][]byte, b), sizes: make([]int, b), fed: make([]*shard, 0, nShards),
			wakeCh: make(chan struct{}, 1)}
		r.poller, _ = l.(link.Poller)
		r.viewer, _ = l.(link.Viewer)
		r.feedFn = r.feed
		for i := range r.bufs {
			r.bufs[i] = make([]byte, rt.lhr+frameSize)
		}
		rt.readers = append(rt.readers, r)
	}
	return rt, nil
}

// shardOf is the shard of QPN qpn.
func (rt *runtime) shardOf(qpn uint32) *shard {
	return rt.shards[rt.shardIndex(qpn)]
}

// shardIndex is the index of QPN qpn's shard.
func (rt *runtime) shardIndex(qpn uint32) int {
	return int(qpn % uint32(len(rt.shards)))
}

func (rt *runtime) start() {
	if rt.d.opts.BusyPoll {
		registerBusyPoller(rt, true)
	}
	rt.procs = goruntime.GOMAXPROCS(0)
	rt.registerInproc(true)
	rt.wg.Add(len(rt.readers) + len(rt.shards))
	for _, r := range rt.readers {
		go r.run()
	}
	for _, s := range rt.shards {
		go s.runWorker()
	}
}

func (rt *runtime) stop() error {
	if rt.d.opts.BusyPoll {
		rt.stopping.Store(true)
		registerBusyPoller(rt, false)
		rt.flushDeferred(false) // keep deferring.n balanced
	}
	rt.registerInproc(false)
	close(rt.done)
	for _, s := range rt.shards {
		s.deferTimer.Stop()
	}
	err := rt.ep.Close()
	rt.wg.Wait()
	return err
}

// kick puts q on its shard's doorbell list and pumps at once if the shard
// lock is free, else wakes the shard's worker. now is the device time the
// caller read just before: a post reads it anyway, and a second read per
// post costs ~200 ns in the TCG guest of bench-vs-rxe (interop/tcgcost).
// The caller must not hold q.mu.
func (rt *runtime) kick(q *QP, now transport.Time) {
	s := q.shard
	s.rungAdd(q)
	if s.mu.TryLock() {
		// With busy polling the caller is (most likely) the poller: what
		// this round leaves over is for its next Poll, not for a worker
		// woken per round.
		s.pump(now, rt.d.opts.BusyPoll)
		s.unlockInline(postInlineRounds)
		return
	}
	s.ring()
}

// unlockInline releases s.mu, then receives inline what the pump sent to
// in-process peers (inline.go), for at most rounds batches.
func (s *shard) unlockInline(rounds int) {
	var c inlineSet
	s.claimInline(&c, false)
	s.mu.Unlock()
	if c.n > 0 {
		runInline(&c, rounds)
	}
}

// deepPipe is the number of unacknowledged packets from which a QP's
// post no longer transmits in the posting goroutine (kickLater). With
// that many packets ahead of it on the wire the new WR cannot leave
// sooner than they take to go (32 full packets: ~45 µs at 3 GB/s on
// loopback, far longer in a TCG guest), which is longer than the worker's
// wake-up; and the posts an application makes meanwhile (perftest posts
// one WR per completion) leave together, in one sendmmsg, instead of one
// message per system call. An idle pipe (every latency test) still sends
// from the post at once.
const deepPipe = 32

// kickLater is kick for a post behind a deep pipe (deepPipe): q goes on
// its shard's doorbell list and the transmission is left to the next pump
// instead of being done now: the shard's worker, or with busy polling the
// poller's next round (shard.deferred, bounded by deferLimit). The caller
// must not hold q.mu.
//
// Measured on loopback (write_bw 64 KiB, 1 QP, docs/performance.md
// session 23): half the sendmmsg and recvmmsg calls, 7-12 % more
// bandwidth; 2.5x for 4 KiB messages.
func (rt *runtime) kickLater(q *QP, now transport.Time) {
	s := q.shard
	s.rungAdd(q)
	if rt.d.opts.BusyPoll {
		s.deferUntil(now)
		rt.markDeferred(now)
		return
	}
	s.ring()
}

// rungAdd puts q on s's doorbell list (once until the next drainBell).
func (s *shard) rungAdd(q *QP) {
	if !q.kicked.Swap(true) {
		s.bellMu.Lock()
		s.rung = append(s.rung, q)
		s.bellMu.Unlock()
	}
}

func (s *shard) ring() {
	select {
	case s.bell <- struct{}{}:
	default:
	}
}

func (r *reader) run() {
	rt := r.rt
	defer rt.wg.Done()
	for {
		var n int
		var err error
		if r.poller != nil {
			// Read and process under r.mu so that a busy-polling CQ
			// (Options.BusyPoll) can take a turn; wait without it. A
			// poller holding r.mu is reading this queue right now: then
			// stand aside at once instead of queueing on the lock, which
			// would hand the poller's next round a wake-up to wait for.
			busy := rt.d.opts.BusyPoll || r.inlined.Load()
			if busy {
				// A poller that polled since the last look is still
				// at it: leave the queue to it without touching the
				// socket (a read here would take packets the poller
				// is spinning for, and answer them from this
				// goroutine instead).
				if r.standing && r.polled.Load() != r.seen && !r.pending.Load() {
					if !r.standAside() {
						return
					}
					continue
				}
				r.standing = false
				if !r.mu.TryLock() {
					if !r.standAside() {
						return
					}
					continue
				}
			} else {
				r.mu.Lock()
			}
			n, err = r.readProcess(false, false)
			again := r.pending.Swap(false)
			r.mu.Unlock()
			if err == nil && again {
				continue // a peer found the queue taken meanwhile (inline.go)
			}
			if err == nil && n == 0 && busy && r.polled.Load() != r.seen {
				if !r.standAside() {
					return
				}
				continue
			}
			if err == nil && n == 0 {
				// Polling stopped (or never started): send what the last
				// rounds left deferred before blocking.
				rt.flushDeferred(false)
				err = r.poller.WaitRead()
			}
		} else {
			n, err = r.readProcess(true, false)
		}
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
		}
	}
}

// standAside is the reader goroutine's turn away from a busy-polling
// application that is receiving from this queue: no wake-up per packet, a
// look again after pollerHandoff, when it may have stopped. It reports
// false when the runtime is closing.
func (r *reader) standAside() bool {
	r.standing = true
	r.seen = r.polled.Load()
	if r.handoff == nil {
		r.handoff = time.NewTimer(pollerHandoff)
	} else {
		r.handoff.Reset(pollerHandoff)
	}
	select {
	case <-r.handoff.C:
		return true
	case <-r.wakeCh:
		// A peer left work in the queue: read it now.
		r.standing = false
		r.handoff.Stop()
		return true
	case <-r.rt.done:
		r.handoff.Stop()
		return false
	}
}

// readProcess reads one batch, waiting for it with wait (Read) or not
// (TryRead, which needs r.poller), and processes it (process). With a
// viewer the frames are fed to their QPs where the link holds them, as it
// passes them, with no copy into r.bufs.
func (r *reader) readProcess(wait, deferred bool) (int, error) {
	if r.viewer != nil {
		r.begin()
		n, err := r.viewer.ViewRead(wait, len(r.bufs), frameSize, r.feedFn)
		last := r.end()
		if n > 0 {
			r.answer(last, r.now, deferred)
		}
		if !errors.Is(err, link.ErrNotSupported) {
			return n, err
		}
		r.viewer = nil // for good: the link said so having read nothing
	}
	var n int
	var err error
	if wait {
		n, err = r.r.Read(r.bufs, r.sizes, r.rt.lhr)
	} else {
		n, err = r.poller.TryRead(r.bufs, r.sizes, r.rt.lhr)
	}
	if n > 0 && err == nil {
		r.process(n, deferred)
	}
	return n, err
}

// process feeds the n frames in r.bufs to their QPs and sends what they
// answer, or with deferred (a busy-poll round) leaves that to the poller
// (shard.deferred).
func (r *reader) process(n int, deferred bool) {
	r.begin()
	for i := range n {
		r.feed(r.bufs[i][r.rt.lhr : r.rt.lhr+r.sizes[i]])
	}
	r.answer(r.end(), r.now, deferred)
}

// answer sends what the batch that fed shard last (still locked; nil if
// none) and the others in r.fed calls for, or with deferred leaves it to
// the poller. It unlocks last.
func (r *reader) answer(last *shard, now transport.Time, deferred bool) {
	rt := r.rt
	var c inlineSet
	if last != nil {
		// Still locked by feed.
		if deferred {
			last.deferUntil(now)
		} else {
			// Answer at once from this goroutine.
			last.pump(now, false)
		}
		// An answer to a peer's inline batch does not nest another: the
		// queues it went to are read by their own goroutines (inline.go).
		last.claimInline(&c, r.inline)
		last.mu.Unlock()
	}
	for i, s := range r.fed {
		if s != last {
			if deferred {
				s.deferUntil(now)
			} else {
				s.ring()
			}
		}
		r.fed[i] = nil
	}
	r.fed = r.fed[:0]
	if deferred && last != nil {
		rt.markDeferred(now)
	}
	if c.n > 0 {
		runInline(&c, inlineRounds)
	}
}

// markDeferred records that some shard of rt was deferred at now.
func (rt *runtime) markDeferred(now transport.Time) {
	if !rt.anyDeferred.Load() && rt.anyDeferred.CompareAndSwap(false, true) {
		rt.deferredAt.Store(int64(now))
		deferring.n.Add(1)
		// Either stop's flushDeferred sees the flag set, or this sees
		// stopping (both atomics): take the mark back, as stop would.
		if rt.stopping.Load() && rt.anyDeferred.CompareAndSwap(true, false) {
			deferring.n.Add(-1)
		}
	}
}

// deferring lists the busy-polling runtimes of the process, so that a Poll
// on any device also sends what polling deferred on the others once it is
// crossFlushAge old: a goroutine that spins on one device's CQ waiting for
// an answer that another device it polled before owes an ACK for would
// otherwise wait for deferLimit. (Younger deferrals are left alone: the
// other device's own poller is probably about to answer.)
var deferring struct {
	n   atomic.Int64 // runtimes with anyDeferred set
	mu  sync.Mutex   // serializes updates of all
	all atomic.Pointer[[]*runtime]
}

func registerBusyPoller(rt *runtime, add bool) {
	deferring.mu.Lock()
	defer deferring.mu.Unlock()
	var next []*runtime
	if p := deferring.all.Load(); p != nil {
		for _, x := range *p {
			if x != rt {
				next = append(next, x)
			}
		}
	}
	if add {
		next = append(next, rt)
	}
	deferring.all.Store(&next)
}

// crossFlushAge is how old a deferral must be, in nanoseconds, before a
// Poll on another device sends it: 50 µs. It is a variable only so that a
// test can take this timing-dependent path out of a count it makes
// (export_test.go); atomic, because goroutines of devices an earlier test
// closed may still read it.
var crossFlushAge atomic.Int64

func init() { crossFlushAge.Store(int64(50 * time.Microsecond)) }

// flushAllDeferred flushes the deferred shards of every busy-polling
// runtime (self nil), or those of self (with withSelf) and of the others
// whose deferral is crossFlushAge old.
func flushAllDeferred(self *runtime, withSelf bool) {
	if deferring.n.Load() <= 0 {
		return
	}
	for _, rt := range *deferring.all.Load() {
		if !rt.anyDeferred.Load() {
			continue
		}
		if self != nil {
			if rt == self && !withSelf {
				continue
			}
			if rt != self && int64(rt.d.now())-rt.deferredAt.Load() < crossFlushAge.Load() {
				continue
			}
		}
		rt.flushDeferred(self != nil)
	}
}

// deferLimit bounds how long a busy-poll round's deferral (shard.deferred)
// lasts when the poller neither posts nor polls again.
const deferLimit = 2 * time.Millisecond

// deferUntil marks s deferred and makes sure deferTimer fires no earlier
// than deferLimit/2 after now: the timer is reset at most once per
// deferLimit/2, not per message.
func (s *shard) deferUntil(now transport.Time) {
	s.deferred.Store(true)
	if due := transport.Time(s.deferDue.Load()); now+transport.Time(deferLimit/2) > due {
		s.deferDue.Store(int64(now + transport.Time(deferLimit)))
		s.deferTimer.Reset(deferLimit)
	}
}

// deferTimeout runs in its own goroutine when deferTimer fires.
func (s *shard) deferTimeout() {
	if s.deferred.Load() {
		s.ring()
	}
}

// pollerHandoff is how long a reader goroutine that found a busy poller
// reading its queue leaves the queue to it before it looks again; it
// takes over at most twice this long after the last Poll.
//
// 4 ms, not less: every look wakes a thread, which on a small machine
// takes a CPU from the spinning application or its peer. In the TCG guest
// of bench-vs-rxe, send_lat's t_avg fell by a quarter from 1 ms to 10 ms.
const pollerHandoff = 4 * time.Millisecond

// allReaders is the reader mask that polls every receive queue.
const allReaders = ^uint64(0)

// readerBit is the bit of reader mask poll reads for a QP on shard s: with
// one receive queue per shard (link.RxQueuer) reader i receives exactly
// shard i's packets, so a CQ needs to poll only its QPs' queues.
func (rt *runtime) readerBit(s *shard) uint64 {
	if len(rt.readers) == 1 {
		return 1
	}
	for i, x := range rt.shards {
		if x == s && i < 64 {
			return 1 << i
		}
	}
	return allReaders
}

// poll is one busy-poll round (Options.BusyPoll): it first sends what
// earlier rounds deferred, then every reader in mask whose link can be read
// without blocking and that no other goroutine is using receives and
// processes what is queued, in the caller's goroutine, deferring the
// answers. It reports whether anything was received.
func (rt *runtime) poll(mask uint64) bool {
	flushAllDeferred(rt, true)
	got := false
	for i, r := range rt.readers {
		if r.poller == nil || (i < 64 && mask&(1<<i) == 0) || !r.mu.TryLock() {
			continue
		}
		r.polled.Add(1)
		n, err := r.readProcess(false, true)
		got = got || n > 0
		r.mu.Unlock()
		_ = err // the reader goroutine reports link errors
	}
	if !got && rt.outnumbered() {
		// More busy-polling devices than Ps: without a yield the P stays
		// with this poller until the scheduler preempts it (10 ms),
		// while another device's poller, perhaps the only one that can
		// answer, waits for it.
		goruntime.Gosched()
	}
	return got
}

// outnumbered reports whether the process has more busy-polling devices
// than Ps (GOMAXPROCS when rt started): then the goroutines spinning on
// them may be more than the Ps too. Two devices of one process polled on
// one P exchanged one message per preemption, ~50 a second, without the
// yield it calls for; one poller per P (goroce bench and pingpong on one
// P, one device each) never yields.
func (rt *runtime) outnumbered() bool {
	p := deferring.all.Load()
	return p != nil && len(*p) > rt.procs
}

// flushDeferred pumps every shard a busy-poll round left deferred (or, if
// its lock is taken, wakes its worker); polled says the caller is a poller
// (see pump).
func (rt *runtime) flushDeferred(polled bool) {
	if !rt.anyDeferred.Load() || !rt.anyDeferred.CompareAndSwap(true, false) {
		return
	}
	deferring.n.Add(-1)
	for _, s := range rt.shards {
		if !s.deferred.Load() {
			continue
		}
		if s.mu.TryLock() {
			s.pump(rt.d.now(), polled)
			s.unlockInline(postInlineRounds)
		} else {
			s.deferred.Store(false)
			s.ring()
		}
	}
}

func (s *shard) runWorker() {
	rt := s.rt
	defer rt.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-s.bell:
		case <-timer.C:
		case <-rt.done:
			return
		}
		s.mu.Lock()
		now := rt.d.now()
		s.pump(now, false)
		wait := s.arm(now)
		s.unlockInline(inlineRounds)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// pump fires due timers and transmits; s.mu must be held. When work
// remains it wakes the worker, or, when the caller is a busy poller
// (polled), leaves it deferred to the poller's next round (shard.deferred),
// which saves a goroutine wake-up per txBudget packets of a long message.
// It also wakes the worker when the earliest deadline moved before the
// worker's timer.
func (s *shard) pump(now transport.Time, polled bool) {
	if s.deferred.Load() {
		s.deferred.Store(false)
	}
	s.drainBell()
	s.fireTimers(now)
	s.transmit(now)
	if len(s.active) > 0 {
		if polled {
			s.deferUntil(now)
			s.rt.markDeferred(now)
		} else {
			s.ring()
		}
		return
	}
	if t, ok := s.nextDeadline(); ok && t < s.armed {
		s.ring()
	}
}

// arm computes how long the worker sleeps and records when it wakes;
// s.mu must be held.
func (s *shard) arm(now transport.Time) time.Duration {
	if len(s.active) > 0 {
		s.armed = now
		return 0
	}
	t, ok := s.nextDeadline()
	if !ok {
		s.armed = transport.Never
		return time.Hour
	}
	s.armed = t
	return max(0, time.Duration(t-now))
}

// nextDeadline drops stale heap entries and returns the earliest live one.
func (s *shard) nextDeadline() (transport.Time, bool) {
	for s.timers.Len() > 0 {
		e := s.timers[0]
		if e.q.sched == e.at && !e.q.destroyed.Load() {
			return e.at, true
		}
		s.timers.pop()
	}
	return 0, false
}

// drainBell moves the doorbell list to the active list. The two slices
// swap roles (double buffering), so kick appends to one while the pump
// reads the other; s.mu must be held.
func (s *shard) drainBell() {
	s.bellMu.Lock()
	rung := s.rung
	s.rung = s.rungSpare[:0]
	s.bellMu.Unlock()
	for i, q := range rung {
		q.kicked.Store(false)
		s.activate(q)
		rung[i] = nil
	}
	s.rungSpare = rung[:0]
}

func (s *shard) activate(q *QP) {
	if !q.active {
		q.active = true
		s.active = append(s.active, q)
	}
}

// begin starts feeding a batch of received frames (feed, then end).
func (r *reader) begin() {
	r.locked, r.ls, r.frames, r.bytes = nil, nil, 0, 0
}

// feed decodes one received frame and feeds it to its QP, under the QP's
// and its shard's locks, which it keeps for the next frame of the same QP.
// It does not keep frame.
func (r *reader) feed(frame []byte) {
	rt := r.rt
	d := rt.d
	if r.frames == 0 {
		raceAcquireLink()
		r.now = d.now()
	}
	r.frames++
	r.bytes += uint64(len(frame))
	p := &r.pkt
	if err := p.Decode(frame, rt.framing); err != nil {
		rt.countDecodeError(err)
		return
	}
	q := d.qps.get(uint32(p.DestQP))
	if q == nil || q.destroyed.Load() {
		d.Counters.RxUnknownQP.Add(1)
		return
	}
	if r.locked != q {
		if r.locked != nil {
			r.ls.afterEngine(r.locked)
			r.locked.mu.Unlock()
		}
		if s := q.shard; s != r.ls {
			if r.ls != nil {
				r.ls.mu.Unlock()
			}
			s.mu.Lock()
			r.ls = s
			r.markFed(s)
		}
		q.mu.Lock()
		r.locked = q
	}
	if !rt.addressed(q, p) {
		d.Counters.RxWrongAddress.Add(1)
		return
	}
	if q.typ == UD {
		p.VerbsGRH(&r.info.GRH)
		r.info.HasGRH = true
	}
	q.eng.Receive(r.now, p.Transport(), &r.info)
}

// end finishes the batch: it counts it and returns the shard it fed last,
// still locked (nil if none).
func (r *reader) end() *shard {
	if r.locked != nil {
		r.ls.afterEngine(r.locked)
		r.locked.mu.Unlock()
		r.locked = nil
	}
	if r.frames > 0 {
		// Once per batch: readers of several shards share these counters.
		r.rt.d.Counters.RxFrames.Add(uint64(r.frames))
		r.rt.d.Counters.RxBytes.Add(r.bytes)
	}
	ls := r.ls
	r.ls = nil
	return ls
}

// markFed records that the current batch fed s.
func (r *reader) markFed(s *shard) {
	for _, f := range r.fed {
		if f == s {
			return
		}
	}
	r.fed = append(r.fed, s)
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

// afterEngine runs with s.mu and q.mu held after an engine call that may
// have produced packets: reschedule the QP's timer and mark it active so
// the pump asks it for packets.
func (s *shard) afterEngine(q *QP) {
	s.schedule(q)
	s.activate(q)
	q.checkDrained()
}

// schedule pushes q's engine deadline into the timer heap when it changed;
// s.mu and q.mu must be held. Stale heap entries are skipped when they
// surface.
func (s *shard) schedule(q *QP) {
	dl := q.eng.Deadline()
	if dl == transport.Never {
		q.sched = 0
		return
	}
	if dl != q.sched {
		q.sched = dl
		s.timers.push(timerEntry{at: dl, q: q})
	}
}

func (s *shard) fireTimers(now transport.Time) {
	for s.timers.Len() > 0 && s.timers[0].at <= now {
		e := s.timers.pop()
		q := e.q
		if q.sched != e.at || q.destroyed.Load() {
			continue // stale entry
		}
		q.sched = 0
		q.mu.Lock()
		q.eng.Tick(now)
		s.afterEngine(q)
		q.mu.Unlock()
	}
}

// transmit gives every active QP one round of up to txBudget packets and
// keeps the ones that still have work on the active list.
func (s *shard) transmit(now transport.Time) {
	rt := s.rt
	d := rt.d
	act := s.active
	keep := act[:0]
	queued := 0
	for i, q := range act {
		if q.destroyed.Load() {
			q.active = false
			continue
		}
		if queued >= cap(s.txOut) && len(s.inl) > 0 {
			// A batch went to an in-process peer: let the caller
			// receive it while it is in the cache (inline.go), and
			// leave the other QPs for the next round.
			for _, x := range act[i:] {
				keep = append(keep, x)
			}
			break
		}
		q.mu.Lock()
		more, sent := false, false
		for k := 0; k < txBudget; k++ {
			buf := s.txBuf[len(s.txOut)]
			bthOff := rt.lhr + headroom
			n, ah, ok := q.eng.Transmit(now, buf[bthOff:])
			if !ok {
				break
			}
			addr := &q.path
			if q.typ == UD {
				if !d.ahs.lookup(ah, &s.ahAddr) {
					d.Counters.TxNoRoute.Add(1)
					continue
				}
				s.ahAddr.SrcPort = d.sport
				if s.ahAddr.SrcPort == 0 {
					s.ahAddr.SrcPort = wire.UDPSourcePort(q.qpn, 0)
				}
				addr = &s.ahAddr
			} else if !q.pathOK {
				d.Counters.TxNoRoute.Add(1)
				continue
			}
			s.queueFrame(buf, bthOff, n, addr)
			sent = true
			queued++
			if k == txBudget-1 {
				more = true
			}
		}
		if sent && q.inlineTo != nil {
			s.addInline(q.inlineTo)
			s.markInline(now)
		}
		s.schedule(q)
		q.checkDrained() // UC and UD complete as they send
		q.mu.Unlock()
		if more {
			keep = append(keep, q)
		} else {
			q.active = false
		}
	}
	s.active = keep
	s.flush()
}

// flushResponses writes every response q has queued; s.mu and q.mu must
// be held. It is how a destroyed QP still acknowledges what it executed.
func (s *shard) flushResponses(q *QP, now transport.Time) {
	if !q.pathOK || q.typ == UD {
		return
	}
	lhr := s.rt.lhr
	for k := 0; k < 4*txBudget; k++ {
		buf := s.txBuf[len(s.txOut)]
		bthOff := lhr + headroom
		n, ok := q.eng.TransmitResponse(now, buf[bthOff:])
		if !ok {
			break
		}
		s.queueFrame(buf, bthOff, n, &q.path)
	}
	s.flush()
}

// queueFrame wraps the packet at buf[bthOff:bthOff+n] in its frame and adds
// it to the transmit batch, flushing a full batch; s.mu must be held.
func (s *shard) queueFrame(buf []byte, bthOff, n int, addr *wire.Addr) {
	rt := s.rt
	frame, err := wire.Finish(buf, bthOff, n, rt.framing, addr)
	if err != nil {
		rt.d.Counters.TxErrors.Add(1)
		return
	}
	off := bthOff - addr.Headroom(rt.framing) // index of the frame's first byte in buf
	s.txOut = append(s.txOut, buf[off-rt.lhr:off+len(frame)])
	if len(s.txOut) == cap(s.txOut) {
		s.flush()
	}
}

func (s *shard) flush() {
	if len(s.txOut) == 0 {
		return
	}
	rt := s.rt
	d := rt.d
	raceReleaseLink()
	n, err := s.w.Write(s.txOut, rt.lhr)
	var bytes int
	for _, f := range s.txOut[:n] {
		bytes += len(f) - rt.lhr
	}
	d.Counters.TxFrames.Add(uint64(n))
	d.Counters.TxBytes.Add(uint64(bytes))
	if err != nil {
		// The transport retransmits what was lost; count and go on.
		d.Counters.TxErrors.Add(uint64(len(s.txOut) - n))
	}
	s.txOut = s.txOut[:0]
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
