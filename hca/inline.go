package hca

// Receiving an in-process peer's packets inline.
//
// When both ends of a connection are devices of this process (goroce bench
// --loopback, the demo, tests), the packets a shard sends land in the
// peer's socket during the send system call: Linux's loopback runs the
// receive in the sender's context. Left to the peer's reader goroutine,
// they are read later, often on the other core, after megabytes more have
// been queued behind them: the data has left the cache that the kernel's
// copy just filled, and each skb page is freed far from where it will be
// allocated again. So after a pump that sent to an in-process peer, the
// pumping goroutine receives and processes what the peer's receive queue
// holds at once (a non-blocking read, link.Poller). Every queue is still
// read by one goroutine at a time under its reader lock, in the order the
// link delivered it; nothing else changes.
//
// A shard's QPs that talk to an in-process peer name the peer's receive
// queue for their destination QPN (QP.inlineTo, set at RTR from the DGID);
// transmit collects the queues of the QPs that sent (shard.inl) and ends
// its round once a batch went out, so that the batch is received while it
// is in the cache; the caller that pumped runs the inline receive after it
// released the shard lock (runInline), so no goroutine ever holds two
// shard locks. The peer's answer to an inline batch (its ACKs, its read
// responses) does not start an inline receive of its own, which would
// nest: it wakes the queues it sent to. A queue's reader goroutine stands
// aside while peers read it inline (as it does for a busy poller); a peer
// that finds the queue's lock taken leaves reader.pending, so that the
// holder reads once more before it rests, and wakes the goroutine.
//
// The inline receive runs only while as many shards send to in-process
// peers as there are CPUs for them (inlineNow): one stream on two cores
// keeps the two-core pipeline of sender and reader goroutine.
//
// Measured on loopback (docs/performance.md, session 34): write_bw with
// 16 QPs moved ~1.5x as much on two cores and ~1.6x on one, one stream on
// one core 1.5x; one stream on two cores is unchanged.

import (
	"slices"
	"sync"
	"time"

	"github.com/goroce/goroce/transport"
)

const (
	// maxInline bounds the receive queues one inline receive has pending.
	maxInline = 8
	// inlineRounds bounds the batches one inline receive processes before
	// the queues' own goroutines take over. One started by PostSend gets
	// postInlineRounds: the application's call should return soon.
	inlineRounds     = 32
	postInlineRounds = 4
)

// inproc maps the GIDs of the process's running devices to their
// runtimes, for QPs to find an in-process peer. A GID that several devices
// have (the same address in two network namespaces) names no peer.
var inproc struct {
	mu   sync.Mutex
	gids map[GID][]*runtime
}

func (rt *runtime) registerInproc(add bool) {
	if !rt.inlines() {
		return
	}
	inproc.mu.Lock()
	defer inproc.mu.Unlock()
	if inproc.gids == nil {
		inproc.gids = map[GID][]*runtime{}
	}
	for _, g := range rt.d.gids {
		l := inproc.gids[g.GID]
		if add {
			inproc.gids[g.GID] = append(l, rt)
			continue
		}
		if l = slices.DeleteFunc(l, func(x *runtime) bool { return x == rt }); len(l) == 0 {
			delete(inproc.gids, g.GID)
		} else {
			inproc.gids[g.GID] = l
		}
	}
}

// inlines reports whether rt takes part in inline receives. A busy-polling
// device (Options.BusyPoll) does not: its poller receives, and defers the
// ACK of a message so that it leaves with the application's answer, which
// a peer's inline receive would send at once.
func (rt *runtime) inlines() bool { return !rt.d.opts.NoInlinePeers && !rt.d.opts.BusyPoll }

// peerQueue is the receive queue of the in-process device with GID dgid
// that gets the packets for its QPN destQPN, or nil.
func (rt *runtime) peerQueue(dgid GID, destQPN uint32) *reader {
	if !rt.inlines() {
		return nil
	}
	inproc.mu.Lock()
	var peer *runtime
	if l := inproc.gids[dgid]; len(l) == 1 {
		peer = l[0]
	}
	inproc.mu.Unlock()
	if peer == nil || peer == rt {
		return nil
	}
	r := peer.readers[0]
	if len(peer.readers) > 1 {
		// Reader i receives shard i's QPNs (link.RxQueuer).
		r = peer.readers[peer.shardIndex(destQPN)]
	}
	if r.poller == nil {
		return nil
	}
	return r
}

// addInline records that the pump sent to receive queue r; s.mu held.
func (s *shard) addInline(r *reader) {
	for _, x := range s.inl {
		if x == r {
			return
		}
	}
	if len(s.inl) < maxInline {
		s.inl = append(s.inl, r)
		return
	}
	r.wake() // no room: its own goroutine reads it
}

// inlineSet is the receive queues an inline receive has pending, in order
// (a value on the caller's stack: it allocates nothing).
type inlineSet struct {
	q    [maxInline]*reader
	head int
	n    int
}

// add appends r unless pending; it reports false when the set is full.
func (c *inlineSet) add(r *reader) bool {
	for i := range c.n {
		if c.q[(c.head+i)%maxInline] == r {
			return true
		}
	}
	if c.n == maxInline {
		return false
	}
	c.q[(c.head+c.n)%maxInline] = r
	c.n++
	return true
}

func (c *inlineSet) pop() *reader {
	r := c.q[c.head]
	c.q[c.head] = nil
	c.head = (c.head + 1) % maxInline
	c.n--
	return r
}

// claimInline empties the list of queues s's pump sent to (s.mu held):
// into c, when an inline receive is to run, or else (c nil, or nested: the
// caller processes a peer's inline batch, whose answer must not start
// another, or not inlineNow) by waking their goroutines. Queues that do not
// fit in c are woken too.
func (s *shard) claimInline(c *inlineSet, nested bool) {
	if len(s.inl) == 0 {
		return
	}
	if nested || !s.rt.inlineNow() {
		c = nil
	}
	for i, r := range s.inl {
		if c == nil || !c.add(r) {
			r.wake()
		}
		s.inl[i] = nil
	}
	s.inl = s.inl[:0]
}

// runInline processes, in this goroutine, what the receive queues in c
// hold, for at most rounds batches (then their own goroutines take over).
// The caller must hold no shard or QP lock.
func runInline(c *inlineSet, rounds int) {
	for c.n > 0 {
		r := c.pop()
		if rounds <= 0 {
			r.wake()
			continue
		}
		if !r.mu.TryLock() {
			// Its goroutine or a busy poller is reading it: have that
			// one look again before it rests (reader.pending).
			r.pending.Store(true)
			r.wake()
			continue
		}
		rounds--
		r.inlined.Store(true)
		r.polled.Add(1) // its goroutine stands aside (reader.run)
		r.inline = true
		n, _ := r.readProcess(false, false) // errors: the reader goroutine reports them
		r.inline = false
		if n > 0 {
			r.rt.d.Counters.RxInline.Add(uint64(n))
		}
		again := r.pending.Swap(false)
		r.mu.Unlock()
		if (again || n == len(r.bufs)) && !c.add(r) {
			r.wake() // more may have come (a full batch, or a peer that found the lock taken)
		}
	}
}

// inlineRecent is how long after a shard last sent to an in-process peer
// it counts as busy for inlineNow.
const inlineRecent = transport.Time(time.Millisecond)

// markInline records that s sent to an in-process peer at now (at most one
// store per inlineRecent/8, so that shards reading it rarely miss the
// cache).
func (s *shard) markInline(now transport.Time) {
	if now-transport.Time(s.lastInline.Load()) > inlineRecent/8 {
		s.lastInline.Store(int64(now))
	}
}

// inlineNow reports whether the inline receive pays now: when as many of
// the device's shards send to in-process peers as there are CPUs to run
// them (GOMAXPROCS, at most one per shard). With fewer, the sender and the
// peer's reader goroutine are better off as a pipeline on two cores: the
// inline receive, which would run both halves on one, cost a single
// write_bw stream ~30 % and a single send_bw stream ~20 % on two cores
// (session 34).
func (rt *runtime) inlineNow() bool {
	need := min(rt.procs, len(rt.shards))
	if need <= 1 {
		return true
	}
	now := rt.d.now()
	busy := 0
	for _, s := range rt.shards {
		if now-transport.Time(s.lastInline.Load()) <= inlineRecent {
			if busy++; busy >= need {
				return true
			}
		}
	}
	return false
}

// wake ends the stand-aside of r's goroutine (reader.run), so that it reads
// what is left in its queue.
func (r *reader) wake() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}
