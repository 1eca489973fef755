package memlink

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/hca/link"
)

// Defaults for the zero values of Config.
const (
	DefaultMTU      = 9000 // IP packet bytes (FormatIP, FormatEthernet): a jumbo link carrying 4096-byte RoCE MTU
	DefaultIBMTU    = 4224 // LRH through VCRC: 4096 bytes of payload plus the largest header stack
	DefaultQueueLen = 1024 // frames per direction
)

// ErrEmptyFrame is returned by Write for a zero-length frame, or one too
// short to hold the link header of the Format.
var ErrEmptyFrame = errors.New("memlink: frame shorter than its link header")

// Faults configure the injection on one direction. Rates are probabilities
// in [0, 1] drawn independently per frame, in this order: loss, corruption,
// duplication, reordering.
type Faults struct {
	// Loss drops the frame.
	Loss float64
	// Corrupt flips one byte (XOR with a random non-zero value) at a random
	// position from the start of the transport headers (BTH) to the end of
	// the frame, skipping BTH byte 4, which the ICRC masks; the receiver's
	// ICRC (or VCRC) check is therefore guaranteed to catch it.
	Corrupt float64
	// Duplicate enqueues the frame twice.
	Duplicate float64
	// Reorder holds the frame back and delivers it right after the next
	// frame written in the same direction (a swap of neighbours). A held
	// frame is also released when the receiver would otherwise block, so a
	// reordered last frame is never lost; in that case no swap happens.
	Reorder float64
	// Delay holds every frame for Delay plus a uniformly random extra in
	// [0, Jitter) before the receiver may read it. Frames stay in order
	// (use Reorder for reordering): a frame is readable once it and every
	// frame before it is due.
	Delay  time.Duration
	Jitter time.Duration
}

func (f *Faults) validate() error {
	for _, r := range []float64{f.Loss, f.Corrupt, f.Duplicate, f.Reorder} {
		if !(r >= 0 && r <= 1) { // also rejects NaN
			return fmt.Errorf("memlink: fault rate %v outside [0, 1]", r)
		}
	}
	if f.Delay < 0 || f.Jitter < 0 {
		return errors.New("memlink: negative delay or jitter")
	}
	return nil
}

// Config configures a pair. The zero value is a lossless FormatIP pair.
type Config struct {
	// Format of the frames (default link.FormatIP).
	Format link.Format
	// MTU (default DefaultMTU, or DefaultIBMTU for FormatIB). For
	// FormatEthernet it bounds the IP packet: a frame may be 14 bytes longer
	// (18 with an 802.1Q tag).
	MTU int
	// BatchSize is the largest batch of one Read or Write (default
	// link.IdealBatchSize).
	BatchSize int
	// QueueLen is the capacity of each direction in frames (default
	// DefaultQueueLen). A frame written to a full queue is dropped and
	// counted in Stats.DroppedQueueFull.
	QueueLen int
	// Seed seeds the fault PRNGs.
	Seed uint64
	// AtoB and BtoA are the faults of each direction.
	AtoB, BtoA Faults
	// AddrsA/AddrsB are what Addrs returns (default 192.0.2.1 and
	// 192.0.2.2). HardwareAddrA/B are what HardwareAddr returns (default
	// 02:00:00:00:00:01 and :02 for FormatEthernet, nil otherwise).
	AddrsA, AddrsB               []netip.Addr
	HardwareAddrA, HardwareAddrB net.HardwareAddr
}

// Stats counts the frames of one direction: the frames an endpoint wrote
// and what became of them.
type Stats struct {
	Sent      uint64 // frames accepted by Write
	Delivered uint64 // frames returned by the peer's Read (duplicates included)
	Dropped   uint64 // all drops; the sum of the Dropped* fields below

	DroppedLoss       uint64 // injected loss
	DroppedQueueFull  uint64 // the direction's queue was full
	DroppedTooLarge   uint64 // larger than the reader's buffer
	DroppedPeerClosed uint64 // written after the peer closed, or queued when it closed

	Duplicated uint64 // extra copies enqueued
	Corrupted  uint64 // frames with one byte flipped
	Reordered  uint64 // frames held back behind the next one
}

type counters struct {
	sent, delivered                       atomic.Uint64
	loss, queueFull, tooLarge, peerClosed atomic.Uint64
	duplicated, corrupted, reordered      atomic.Uint64
}

type slot struct {
	buf []byte
	due time.Time
}

// pipe is one direction. mu protects every field except as specified.
type pipe struct {
	mu     sync.Mutex
	q      []slot // ring of len QueueLen
	head   int
	n      int
	free   [][]byte // recycled frame buffers (cap maxFrame)
	held   slot     // a reordered frame waiting for the next one
	isHeld bool
	rng    *rand.Rand
	f      Faults
	closed bool // the receiving endpoint is closed

	notify chan struct{} // cap 1; poked after every enqueue
	st     counters      // atomic, no lock needed
}

// Endpoint is one side of a pair. It implements link.Endpoint.
type Endpoint struct {
	tx, rx   *pipe
	cfg      *Config
	addrs    []netip.Addr
	hw       net.HardwareAddr
	maxFrame int

	closeOnce sync.Once
	closed    chan struct{}

	timer *time.Timer // Read's delay wait; owned by the single reader
}

var (
	_ link.Endpoint = (*Endpoint)(nil)
	_ link.TxQueuer = (*Endpoint)(nil)
)

// NewTxQueue returns a Writer for another goroutine (link.TxQueuer). Every
// Write of a direction already runs under that direction's lock, so a
// queue is the endpoint's own Write: frames of concurrent writers
// interleave batch by batch, as on a switch port.
func (e *Endpoint) NewTxQueue() (link.Writer, error) {
	select {
	case <-e.closed:
		return nil, link.ErrClosed
	default:
	}
	return txQueue{e}, nil
}

type txQueue struct{ e *Endpoint }

func (q txQueue) Write(bufs [][]byte, offset int) (int, error) { return q.e.Write(bufs, offset) }

// NewPair returns two connected endpoints. It is meant for tests, whose
// configurations are constants: it panics on an invalid Config. Use Pair to
// get the error instead.
func NewPair(cfg Config) (a, b *Endpoint) {
	a, b, err := Pair(cfg)
	if err != nil {
		panic(err)
	}
	return a, b
}

// Pair returns two connected endpoints, or an error for an invalid
// configuration (unknown Format, negative sizes, rates outside [0, 1]).
func Pair(cfg Config) (a, b *Endpoint, err error) {
	if cfg.Format == 0 {
		cfg.Format = link.FormatIP
	}
	switch cfg.Format {
	case link.FormatIP, link.FormatEthernet, link.FormatIB:
	default:
		return nil, nil, fmt.Errorf("memlink: unknown format %d", cfg.Format)
	}
	if cfg.MTU < 0 || cfg.BatchSize < 0 || cfg.QueueLen < 0 {
		return nil, nil, errors.New("memlink: negative MTU, BatchSize or QueueLen")
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
		if cfg.Format == link.FormatIB {
			cfg.MTU = DefaultIBMTU
		}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = link.IdealBatchSize
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if err := cfg.AtoB.validate(); err != nil {
		return nil, nil, err
	}
	if err := cfg.BtoA.validate(); err != nil {
		return nil, nil, err
	}
	if cfg.AddrsA == nil {
		cfg.AddrsA = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, 1})}
	}
	if cfg.AddrsB == nil {
		cfg.AddrsB = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, 2})}
	}
	if cfg.Format == link.FormatEthernet {
		if cfg.HardwareAddrA == nil {
			cfg.HardwareAddrA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
		}
		if cfg.HardwareAddrB == nil {
			cfg.HardwareAddrB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
		}
	}
	maxFrame := cfg.MTU
	if cfg.Format == link.FormatEthernet {
		maxFrame += ethHeaderLen + 4
	}
	ab := newPipe(&cfg, cfg.AtoB, 1)
	ba := newPipe(&cfg, cfg.BtoA, 2)
	c := &cfg
	a = &Endpoint{tx: ab, rx: ba, cfg: c, addrs: cfg.AddrsA, hw: cfg.HardwareAddrA, maxFrame: maxFrame, closed: make(chan struct{})}
	b = &Endpoint{tx: ba, rx: ab, cfg: c, addrs: cfg.AddrsB, hw: cfg.HardwareAddrB, maxFrame: maxFrame, closed: make(chan struct{})}
	return a, b, nil
}

func newPipe(cfg *Config, f Faults, stream uint64) *pipe {
	return &pipe{
		q:      make([]slot, cfg.QueueLen),
		rng:    rand.New(rand.NewPCG(cfg.Seed, stream)),
		f:      f,
		notify: make(chan struct{}, 1),
	}
}

const ethHeaderLen = 14

// frameLimit returns the largest allowed length of frame f and the smallest.
func (e *Endpoint) checkLen(f []byte) error {
	min, max := 1, e.cfg.MTU
	switch e.cfg.Format {
	case link.FormatEthernet:
		min, max = ethHeaderLen, e.cfg.MTU+ethHeaderLen
		if len(f) >= ethHeaderLen && f[12] == 0x81 && f[13] == 0x00 {
			min, max = ethHeaderLen+4, max+4
		}
	case link.FormatIB:
		min = 8 // LRH
	}
	if len(f) < min {
		return ErrEmptyFrame
	}
	if len(f) > max {
		return fmt.Errorf("memlink: %d-byte frame, limit %d: %w", len(f), max, link.ErrFrameTooLarge)
	}
	return nil
}

// Write enqueues every frame towards the peer, applying the direction's
// faults. It never blocks: a full queue drops the frame (counted). A frame
// over the MTU, or shorter than the link header, stops the batch with an
// error after the frames before it were sent.
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-e.closed:
		return 0, link.ErrClosed
	default:
	}
	p := e.tx
	p.mu.Lock()
	var now time.Time
	if p.f.Delay > 0 || p.f.Jitter > 0 {
		now = time.Now() // once per batch
	}
	n := 0
	var err error
	for _, b := range bufs {
		if offset < 0 || offset > len(b) {
			err = fmt.Errorf("memlink: offset %d outside a %d-byte buffer", offset, len(b))
			break
		}
		f := b[offset:]
		if err = e.checkLen(f); err != nil {
			break
		}
		n++
		p.st.sent.Add(1)
		if p.closed {
			p.st.peerClosed.Add(1)
			continue
		}
		p.writeOne(f, now, e.cfg.Format)
	}
	p.mu.Unlock()
	if n > 0 {
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
	return n, err
}

// writeOne applies the faults to f and enqueues it. Called with p.mu held.
func (p *pipe) writeOne(f []byte, now time.Time, format link.Format) {
	if p.f.Loss > 0 && p.rng.Float64() < p.f.Loss {
		p.st.loss.Add(1)
		return
	}
	s := slot{buf: p.copyOf(f)}
	if p.f.Delay > 0 || p.f.Jitter > 0 {
		d := p.f.Delay
		if p.f.Jitter > 0 {
			d += time.Duration(p.rng.Int64N(int64(p.f.Jitter)))
		}
		s.due = now.Add(d)
	}
	if p.f.Corrupt > 0 && p.rng.Float64() < p.f.Corrupt {
		corrupt(s.buf, format, p.rng)
		p.st.corrupted.Add(1)
	}
	dup := p.f.Duplicate > 0 && p.rng.Float64() < p.f.Duplicate
	if p.f.Reorder > 0 && !p.isHeld && p.rng.Float64() < p.f.Reorder {
		p.held, p.isHeld = s, true
		p.st.reordered.Add(1)
		if dup {
			p.st.duplicated.Add(1)
			p.enqueue(slot{buf: p.copyOf(s.buf), due: s.due})
		}
		return
	}
	p.enqueue(s)
	if dup {
		p.st.duplicated.Add(1)
		p.enqueue(slot{buf: p.copyOf(s.buf), due: s.due})
	}
	if p.isHeld {
		p.releaseHeld()
	}
}

func (p *pipe) releaseHeld() {
	h := p.held
	p.held, p.isHeld = slot{}, false
	p.enqueue(h)
}

func (p *pipe) copyOf(f []byte) []byte {
	var b []byte
	if k := len(p.free); k > 0 && cap(p.free[k-1]) >= len(f) {
		b = p.free[k-1][:len(f)]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
	} else {
		b = make([]byte, len(f), max(len(f), 2048))
	}
	copy(b, f)
	return b
}

func (p *pipe) recycle(b []byte) {
	if len(p.free) < len(p.q) {
		p.free = append(p.free, b[:0])
	}
}

func (p *pipe) enqueue(s slot) {
	if p.n == len(p.q) {
		p.st.queueFull.Add(1)
		p.recycle(s.buf)
		return
	}
	p.q[(p.head+p.n)%len(p.q)] = s
	p.n++
}

// Read returns the frames that are due, in order, blocking until at least
// one is or the endpoint is closed (link.ErrClosed). A frame larger than its
// buffer is dropped and counted in the writer's Stats.DroppedTooLarge.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	p := e.rx
	// Checked before p.mu is taken: misuse must not panic with it held.
	bufs, err := link.ReadBatch("memlink", bufs, sizes, offset, e.cfg.BatchSize)
	if len(bufs) == 0 {
		return 0, err
	}
	for {
		select {
		case <-e.closed:
			return 0, link.ErrClosed
		default:
		}
		p.mu.Lock()
		var now time.Time
		if p.f.Delay > 0 || p.f.Jitter > 0 {
			now = time.Now()
		}
		if p.n == 0 && p.isHeld {
			// Nothing else will come soon enough to swap with: deliver it.
			p.releaseHeld()
		}
		n := 0
		var wait time.Duration
		for n < len(bufs) && p.n > 0 {
			s := &p.q[p.head]
			if !s.due.IsZero() && s.due.After(now) {
				wait = s.due.Sub(now)
				break
			}
			buf := s.buf
			*s = slot{}
			p.head = (p.head + 1) % len(p.q)
			p.n--
			dst := bufs[n][offset:]
			if len(buf) > len(dst) {
				p.st.tooLarge.Add(1)
			} else {
				sizes[n] = copy(dst, buf)
				n++
				p.st.delivered.Add(1)
			}
			p.recycle(buf)
		}
		p.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		if wait > 0 {
			if e.timer == nil {
				e.timer = time.NewTimer(wait)
			} else {
				e.timer.Reset(wait)
			}
			select {
			case <-e.closed:
				e.timer.Stop()
				return 0, link.ErrClosed
			case <-p.notify:
				e.timer.Stop()
			case <-e.timer.C:
			}
			continue
		}
		select {
		case <-e.closed:
			return 0, link.ErrClosed
		case <-p.notify:
		}
	}
}

// Close closes the endpoint: a blocked Read returns link.ErrClosed, frames
// queued towards it are discarded and counted as DroppedPeerClosed, and
// frames the peer writes later are counted the same way. The peer stays
// open. Close is idempotent.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		close(e.closed)
		p := e.rx
		p.mu.Lock()
		p.closed = true
		dropped := uint64(p.n)
		if p.isHeld {
			dropped++
		}
		p.n, p.head, p.isHeld, p.held = 0, 0, false, slot{}
		clear(p.q)
		p.mu.Unlock()
		p.st.peerClosed.Add(dropped)
	})
	return nil
}

// Stats returns the counters of the direction this endpoint writes to.
func (e *Endpoint) Stats() Stats {
	c := &e.tx.st
	s := Stats{
		Sent:              c.sent.Load(),
		Delivered:         c.delivered.Load(),
		DroppedLoss:       c.loss.Load(),
		DroppedQueueFull:  c.queueFull.Load(),
		DroppedTooLarge:   c.tooLarge.Load(),
		DroppedPeerClosed: c.peerClosed.Load(),
		Duplicated:        c.duplicated.Load(),
		Corrupted:         c.corrupted.Load(),
		Reordered:         c.reordered.Load(),
	}
	s.Dropped = s.DroppedLoss + s.DroppedQueueFull + s.DroppedTooLarge + s.DroppedPeerClosed
	return s
}

// BatchSize implements link.Endpoint.
func (e *Endpoint) BatchSize() int { return e.cfg.BatchSize }

// MTU implements link.Endpoint.
func (e *Endpoint) MTU() int { return e.cfg.MTU }

// Format implements link.Endpoint.
func (e *Endpoint) Format() link.Format { return e.cfg.Format }

// Headroom implements link.Endpoint: memlink needs none.
func (e *Endpoint) Headroom() int { return 0 }

// Addrs implements link.Endpoint.
func (e *Endpoint) Addrs() []netip.Addr { return e.addrs }

// HardwareAddr implements link.Endpoint.
func (e *Endpoint) HardwareAddr() net.HardwareAddr { return e.hw }
