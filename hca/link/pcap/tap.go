package pcap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/hca/link"
)

// Tap is a link.Endpoint decorator that records every frame read from and
// written to the inner endpoint into a capture file (like gVisor's sniffer
// endpoint). The file's link type follows the inner Format: Ethernet → 1,
// IP → 101, IB → ERF (197).
//
// Capturing never back-pressures the datapath:
//
//  1. Read and Write pass the batch to the inner endpoint unchanged.
//  2. Under one mutex acquisition per batch, the frames they moved are
//     copied into free slots of a fixed ring (allocated once); a frame that
//     finds the ring full is dropped and counted.
//  3. One non-blocking send on a 1-buffered channel wakes the writer
//     goroutine, which writes the filled slots through pcapgo and a
//     bufio.Writer without holding the mutex.
//  4. Close closes the inner endpoint, lets the writer drain the ring, and
//     flushes.
//
// There is one clock read per batch, no allocation per frame, and no
// per-frame lock or channel operation. Optional capability interfaces of the
// inner endpoint (GSO and the like) are not passed through.
type Tap struct {
	inner link.Endpoint
	bw    *bufio.Writer
	w     *Writer
	snap  int

	mu       sync.Mutex // protects slots contents beyond head+n, head, n and closed
	space    *sync.Cond // signalled (with mu) when the writer frees slots; lossless mode
	lossless bool
	slots    []tapSlot
	head     int
	n        int
	closed   bool

	notify   chan struct{}
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}

	captured  atomic.Uint64
	dropped   atomic.Uint64
	truncated atomic.Uint64
	writeErrs atomic.Uint64

	closeOnce sync.Once
	closeErr  error
	writeErr  error // first write error; owned by the writer goroutine until done
}

type tapSlot struct {
	buf     []byte // len == snap, allocated once
	n       int    // bytes captured
	wireLen int
	ts      int64 // UnixNano
}

// TapStats counts what a Tap did.
type TapStats struct {
	Captured    uint64 // frames written to the file
	Dropped     uint64 // frames not captured because the queue was full or the tap closed
	Truncated   uint64 // frames cut to the snap length
	WriteErrors uint64 // frames the file writer failed on
}

// TapOption configures NewTap.
type TapOption func(*tapConfig)

type tapConfig struct {
	queue    int
	snap     int
	lossless bool
}

// WithLossless makes the tap wait for the file writer instead of dropping
// when its queue is full: every frame is captured, at the price of slowing
// the datapath to the speed of the file. For tools such as `goroce demo`
// whose capture must be complete; a datapath that must not be
// back-pressured keeps the default.
func WithLossless() TapOption { return func(c *tapConfig) { c.lossless = true } }

// WithQueueLen sets how many frames may wait for the writer goroutine
// (default 1024).
func WithQueueLen(n int) TapOption { return func(c *tapConfig) { c.queue = n } }

// WithSnapLen sets how many bytes of each frame are kept (default: the
// inner MTU plus 64 bytes for the link headers, at most Snaplen).
func WithSnapLen(n int) TapOption { return func(c *tapConfig) { c.snap = n } }

var _ link.Endpoint = (*Tap)(nil)

// NewTap wraps inner and writes a capture of everything it reads and writes
// to w. The pcap file header is written before NewTap returns. w is not
// closed by the Tap.
func NewTap(inner link.Endpoint, w io.Writer, opts ...TapOption) (*Tap, error) {
	if inner == nil {
		return nil, errors.New("pcap: NewTap with nil endpoint")
	}
	lt, err := LinkTypeFor(inner.Format())
	if err != nil {
		return nil, err
	}
	cfg := tapConfig{queue: 1024, snap: inner.MTU() + 64}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.queue < 1 {
		return nil, fmt.Errorf("pcap: tap queue length %d, want ≥ 1", cfg.queue)
	}
	if cfg.snap > Snaplen-ERFHeaderLen {
		cfg.snap = Snaplen - ERFHeaderLen
	}
	if cfg.snap < 1 {
		return nil, fmt.Errorf("pcap: tap snap length %d, want ≥ 1", cfg.snap)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	pw, err := NewWriter(bw, lt)
	if err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("pcap: writing file header: %w", err)
	}
	t := &Tap{
		inner:    inner,
		bw:       bw,
		w:        pw,
		snap:     cfg.snap,
		slots:    make([]tapSlot, cfg.queue),
		lossless: cfg.lossless,
		notify:   make(chan struct{}, 1),
		flushReq: make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	t.space = sync.NewCond(&t.mu)
	backing := make([]byte, cfg.queue*cfg.snap)
	for i := range t.slots {
		t.slots[i].buf = backing[i*cfg.snap : (i+1)*cfg.snap : (i+1)*cfg.snap]
	}
	go t.routineWriter()
	return t, nil
}

// Stats returns the tap's counters.
func (t *Tap) Stats() TapStats {
	return TapStats{
		Captured:    t.captured.Load(),
		Dropped:     t.dropped.Load(),
		Truncated:   t.truncated.Load(),
		WriteErrors: t.writeErrs.Load(),
	}
}

// Read implements link.Endpoint; every frame received is captured.
func (t *Tap) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := t.inner.Read(bufs, sizes, offset)
	if n > 0 {
		t.record(bufs[:n], sizes, offset)
	}
	return n, err
}

// Write implements link.Endpoint; every frame handed to it is captured,
// before the inner endpoint sees it (so a frame it then refuses is in the
// capture too), except a buffer offset does not lie in: the inner
// endpoint's error reports that misuse.
func (t *Tap) Write(bufs [][]byte, offset int) (int, error) {
	// Record before writing, as tcpdump sees a frame at dev_queue_xmit
	// before the driver: recorded after the write, a fast peer's answer,
	// read and recorded by the reader goroutine, could precede the request
	// that caused it in the capture.
	t.record(bufs, nil, offset)
	return t.inner.Write(bufs, offset)
}

// record copies frames into the ring. sizes is nil for writes (the frame is
// the whole buffer after offset).
func (t *Tap) record(bufs [][]byte, sizes []int, offset int) {
	now := time.Now().UnixNano()
	var dropped, truncated uint64
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.dropped.Add(uint64(len(bufs)))
		return
	}
	for i, b := range bufs {
		for t.lossless && t.n == len(t.slots) && !t.closed {
			select {
			case t.notify <- struct{}{}:
			default:
			}
			t.space.Wait()
		}
		if t.n == len(t.slots) || t.closed {
			dropped = uint64(len(bufs) - i)
			break
		}
		if offset < 0 || offset > len(b) {
			continue // API misuse, not a frame: the inner Write refuses it
		}
		frame := b[offset:]
		if sizes != nil {
			frame = frame[:sizes[i]]
		}
		s := &t.slots[(t.head+t.n)%len(t.slots)]
		s.n = copy(s.buf, frame)
		s.wireLen = len(frame)
		s.ts = now
		if s.n < s.wireLen {
			truncated++
		}
		t.n++
	}
	t.mu.Unlock()
	if dropped != 0 {
		t.dropped.Add(dropped)
	}
	if truncated != 0 {
		t.truncated.Add(truncated)
	}
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// routineWriter drains the ring into the file until Close.
func (t *Tap) routineWriter() {
	defer close(t.done)
	for {
		select {
		case <-t.notify:
			t.drain()
		case ack := <-t.flushReq:
			t.drain()
			if err := t.bw.Flush(); err != nil && t.writeErr == nil {
				t.writeErr = err
			}
			close(ack)
		case <-t.stop:
			t.drain()
			return
		}
	}
}

// drain writes every slot filled so far. Producers only fill slots past
// head+n, so the slots read here are stable without the mutex.
func (t *Tap) drain() {
	t.mu.Lock()
	head, n := t.head, t.n
	t.mu.Unlock()
	for i := 0; i < n; i++ {
		s := &t.slots[(head+i)%len(t.slots)]
		err := t.w.WriteFrameLen(time.Unix(0, s.ts), s.buf[:s.n], s.wireLen)
		if err != nil {
			t.writeErrs.Add(1)
			if t.writeErr == nil {
				t.writeErr = err
			}
			continue
		}
		t.captured.Add(1)
	}
	t.mu.Lock()
	t.head = (t.head + n) % len(t.slots)
	t.n -= n
	idle := t.n == 0
	t.space.Broadcast()
	t.mu.Unlock()
	if n > 0 && idle {
		// Flush when the queue runs dry so a reader of the file sees
		// frames promptly; under load the bufio buffer batches writes.
		if err := t.bw.Flush(); err != nil && t.writeErr == nil {
			t.writeErr = err
		}
	}
}

// Flush blocks until every frame captured so far is in the io.Writer. It is
// for tests and tools; the datapath never calls it. After Close it returns
// at once (Close has flushed).
func (t *Tap) Flush() {
	ack := make(chan struct{})
	select {
	case t.flushReq <- ack:
		<-ack
	case <-t.done:
	}
}

// Close closes the inner endpoint, writes every queued frame and flushes the
// file. It returns the inner Close error joined with the first capture write
// error, if any. It is safe to call more than once.
func (t *Tap) Close() error {
	t.closeOnce.Do(func() {
		innerErr := t.inner.Close()
		t.mu.Lock()
		t.closed = true
		t.space.Broadcast()
		t.mu.Unlock()
		close(t.stop)
		<-t.done
		if err := t.bw.Flush(); err != nil && t.writeErr == nil {
			t.writeErr = err
		}
		if t.writeErr != nil {
			t.writeErr = fmt.Errorf("pcap: tap capture: %w", t.writeErr)
		}
		t.closeErr = errors.Join(innerErr, t.writeErr)
	})
	return t.closeErr
}

// BatchSize implements link.Endpoint.
func (t *Tap) BatchSize() int { return t.inner.BatchSize() }

// MTU implements link.Endpoint.
func (t *Tap) MTU() int { return t.inner.MTU() }

// Format implements link.Endpoint.
func (t *Tap) Format() link.Format { return t.inner.Format() }

// Headroom implements link.Endpoint.
func (t *Tap) Headroom() int { return t.inner.Headroom() }

// Addrs implements link.Endpoint.
func (t *Tap) Addrs() []netip.Addr { return t.inner.Addrs() }

// HardwareAddr implements link.Endpoint.
func (t *Tap) HardwareAddr() net.HardwareAddr { return t.inner.HardwareAddr() }

// Prepare forwards link.Preparer to the inner endpoint, so that a tapped
// udp link still opens its connected sockets ahead of the first frame.
func (t *Tap) Prepare(dst netip.AddrPort) {
	if p, ok := t.inner.(link.Preparer); ok {
		p.Prepare(dst)
	}
}

// SourcePort forwards link.SourcePorter of the inner endpoint, so an HCA
// on a tapped kernel-socket link still builds its headers (and ICRC) with
// the source port the kernel will write. It returns 0, meaning "no fixed
// port", when the inner endpoint has none.
func (t *Tap) SourcePort() uint16 {
	if sp, ok := t.inner.(link.SourcePorter); ok {
		return sp.SourcePort()
	}
	return 0
}
