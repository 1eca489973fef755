package pcap

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link"
)

// fakeEP is one end of an in-memory link pair: Write hands copies of the
// frames to the peer's queue, Read takes up to a batch from its own.
type fakeEP struct {
	format    link.Format
	in        chan []byte
	peer      *fakeEP
	closed    chan struct{}
	closeOnce sync.Once
}

func fakePair(f link.Format) (*fakeEP, *fakeEP) {
	a := &fakeEP{format: f, in: make(chan []byte, 1024), closed: make(chan struct{})}
	b := &fakeEP{format: f, in: make(chan []byte, 1024), closed: make(chan struct{})}
	a.peer, b.peer = b, a
	return a, b
}

func (e *fakeEP) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var fr []byte
	select {
	case fr = <-e.in:
	case <-e.closed:
		return 0, link.ErrClosed
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n][offset:], fr)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case fr = <-e.in:
		default:
			return n, nil
		}
	}
}

func (e *fakeEP) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		select {
		case e.peer.in <- append([]byte(nil), b[offset:]...):
		case <-e.closed:
			return i, link.ErrClosed
		}
	}
	return len(bufs), nil
}

func (e *fakeEP) BatchSize() int                 { return 8 }
func (e *fakeEP) MTU() int                       { return 1500 }
func (e *fakeEP) Format() link.Format            { return e.format }
func (e *fakeEP) Headroom() int                  { return 0 }
func (e *fakeEP) Addrs() []netip.Addr            { return nil }
func (e *fakeEP) HardwareAddr() net.HardwareAddr { return nil }
func (e *fakeEP) Close() error {
	e.closeOnce.Do(func() { close(e.closed) })
	return nil
}

func makeFrames(n, size int, offset int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, offset+size+i)
		for j := range bufs[i][offset:] {
			bufs[i][offset+j] = byte(i*31 + j)
		}
	}
	return bufs
}

func readCapture(t *testing.T, b []byte) (LinkType, []Frame) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []Frame
	for {
		var f Frame
		err := r.Next(&f)
		if err == io.EOF {
			return r.LinkType(), out
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Data = append([]byte(nil), f.Data...)
		out = append(out, f)
	}
}

func TestTapRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		format link.Format
		lt     LinkType
	}{
		{link.FormatEthernet, LinkTypeEthernet},
		{link.FormatIP, LinkTypeRaw},
		{link.FormatIB, LinkTypeERF},
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			a, b := fakePair(tc.format)
			var file bytes.Buffer
			tap, err := NewTap(a, &file)
			if err != nil {
				t.Fatal(err)
			}
			const off = 16
			out := makeFrames(5, 60, off)
			if n, err := tap.Write(out, off); n != 5 || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			// The peer echoes them back reversed; the tap reads them.
			rbufs := make([][]byte, 8)
			for i := range rbufs {
				rbufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, 8)
			got := 0
			for got < 5 {
				n, err := b.Read(rbufs[got:], sizes[got:], 0)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
			echo := make([][]byte, 5)
			for i := range echo {
				echo[i] = rbufs[4-i][:sizes[4-i]]
			}
			if _, err := b.Write(echo, 0); err != nil {
				t.Fatal(err)
			}
			for got = 0; got < 5; {
				n, err := tap.Read(rbufs[got:], sizes[got:], 4)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
			if err := tap.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := tap.Read(rbufs, sizes, 0); !errors.Is(err, link.ErrClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
			lt, frames := readCapture(t, file.Bytes())
			if lt != tc.lt || len(frames) != 10 {
				t.Fatalf("link type %v, %d frames", lt, len(frames))
			}
			for i := 0; i < 5; i++ {
				if !bytes.Equal(frames[i].Data, out[i][off:]) {
					t.Fatalf("written frame %d differs", i)
				}
				if !bytes.Equal(frames[5+i].Data, out[4-i][off:]) {
					t.Fatalf("read frame %d differs", i)
				}
			}
			if s := tap.Stats(); s != (TapStats{Captured: 10}) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// gateWriter accepts its first write (the file header) and then blocks
// every write until released.
type gateWriter struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
	buf     bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	g.n++
	first := g.n == 1
	g.mu.Unlock()
	if !first {
		<-g.release
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// A stalled capture file must not stall the datapath: frames that find the
// queue full are dropped and counted, and Write keeps returning.
func TestTapDropsWhenFull(t *testing.T) {
	a, b := fakePair(link.FormatEthernet)
	defer b.Close()
	gw := &gateWriter{release: make(chan struct{})}
	tap, err := NewTap(a, gw, WithQueueLen(2))
	if err != nil {
		t.Fatal(err)
	}
	frames := makeFrames(10, 64, 0)
	if n, err := tap.Write(frames, 0); n != 10 || err != nil {
		t.Fatal(n, err)
	}
	if s := tap.Stats(); s.Dropped != 8 {
		t.Fatalf("first batch: %+v, want 8 dropped", s)
	}
	// The writer is (or soon will be) stuck in the file; more batches
	// still go through at once.
	for i := 0; i < 20; i++ {
		if n, err := tap.Write(frames, 0); n != 10 || err != nil {
			t.Fatal(n, err)
		}
	}
	close(gw.release)
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	s := tap.Stats()
	if s.Captured+s.Dropped != 210 || s.Captured < 2 || s.WriteErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	if _, frames := readCapture(t, gw.buf.Bytes()); uint64(len(frames)) != s.Captured {
		t.Fatalf("%d frames in file, %d captured", len(frames), s.Captured)
	}
}

func TestTapSnapLength(t *testing.T) {
	a, b := fakePair(link.FormatIB)
	defer b.Close()
	var file bytes.Buffer
	tap, err := NewTap(a, &file, WithSnapLen(20))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tap.Write(makeFrames(1, 60, 0), 0); err != nil {
		t.Fatal(err)
	}
	tap.Flush()
	if file.Len() == 24 {
		t.Fatal("Flush returned before the frame reached the file")
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	_, frames := readCapture(t, file.Bytes())
	if len(frames) != 1 || len(frames[0].Data) != 20 || frames[0].WireLen != 60 || !frames[0].Truncated() {
		t.Fatalf("frames %+v", frames)
	}
	if s := tap.Stats(); s.Truncated != 1 || s.Captured != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTapErrors(t *testing.T) {
	if _, err := NewTap(nil, io.Discard); err == nil {
		t.Fatal("nil endpoint accepted")
	}
	a, _ := fakePair(link.Format(0))
	if _, err := NewTap(a, io.Discard); err == nil {
		t.Fatal("unknown format accepted")
	}
	a, _ = fakePair(link.FormatIP)
	if _, err := NewTap(a, io.Discard, WithQueueLen(0)); err == nil {
		t.Fatal("queue length 0 accepted")
	}
	a, _ = fakePair(link.FormatIP)
	if _, err := NewTap(a, failWriter{}); err == nil {
		t.Fatal("header write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// discardEP accepts every write and never allocates.
type discardEP struct{ fakeEP }

func (*discardEP) Write(bufs [][]byte, _ int) (int, error) { return len(bufs), nil }
func (*discardEP) Close() error                            { return nil }

func TestTapWriteAllocs(t *testing.T) {
	ep := &discardEP{fakeEP{format: link.FormatEthernet}}
	tap, err := NewTap(ep, io.Discard, WithQueueLen(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	bufs := makeFrames(8, 1000, 32)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := tap.Write(bufs, 32); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}

// BenchmarkTapWrite measures a 64-frame batch of 1082-byte frames (a full
// PMTU-1024 RoCEv2 packet) through a Tap. "datapath" is what Write costs the
// caller while the writer goroutine runs free (frames it cannot keep up with
// are dropped: see drop-ratio); "captured" waits for every batch to reach the
// file, so it is the cost of capturing everything.
func BenchmarkTapWrite(b *testing.B) {
	for _, flush := range []bool{false, true} {
		name := "datapath"
		if flush {
			name = "captured"
		}
		b.Run(name, func(b *testing.B) {
			ep := &discardEP{fakeEP{format: link.FormatEthernet}}
			tap, err := NewTap(ep, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			defer tap.Close()
			bufs := makeFrames(link.IdealBatchSize, 1082, 0)
			for i := range bufs {
				bufs[i] = bufs[i][:1082]
			}
			b.SetBytes(int64(len(bufs) * 1082))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tap.Write(bufs, 0); err != nil {
					b.Fatal(err)
				}
				if flush {
					tap.Flush()
				}
			}
			b.StopTimer()
			s := tap.Stats()
			b.ReportMetric(float64(s.Dropped)/float64(s.Dropped+s.Captured), "drop-ratio")
		})
	}
}

// In lossless mode a full queue makes Write wait for the file instead of
// dropping: every frame ends up in the capture, in order.
func TestTapLossless(t *testing.T) {
	a, b := fakePair(link.FormatEthernet)
	defer b.Close()
	gw := &gateWriter{release: make(chan struct{})}
	tap, err := NewTap(a, gw, WithQueueLen(2), WithLossless())
	if err != nil {
		t.Fatal(err)
	}
	frames := makeFrames(10, 64, 0)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 0; i < 5; i++ {
			if n, err := tap.Write(frames, 0); n != 10 || err != nil {
				t.Error(n, err)
				return
			}
		}
	}()
	select {
	case <-wrote:
		t.Fatal("50 frames went through a 2-slot lossless queue while the file was stalled")
	case <-time.After(100 * time.Millisecond):
	}
	close(gw.release)
	<-wrote
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	if s := tap.Stats(); s.Captured != 50 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want 50 captured, 0 dropped", s)
	}
	if _, got := readCapture(t, gw.buf.Bytes()); len(got) != 50 {
		t.Fatalf("%d frames in the file, want 50", len(got))
	}
}

// quotaWriter takes its first n bytes and fails every write after them, a
// file system filling up after the file header.
type quotaWriter struct {
	mu   sync.Mutex
	left int
}

func (w *quotaWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("quota exceeded")
	}
	w.left -= len(p)
	return len(p), nil
}

// A write error on the capture file after its header is not lost: Close
// returns it, in the default and the lossless mode.
func TestTapWriteErrorAfterHeader(t *testing.T) {
	for _, lossless := range []bool{false, true} {
		a, b := fakePair(link.FormatEthernet)
		opts := []TapOption{WithQueueLen(4)}
		if lossless {
			opts = append(opts, WithLossless())
		}
		tap, err := NewTap(a, &quotaWriter{left: 24 + 100}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		frames := makeFrames(4, 200, 0)
		for i := 0; i < 4; i++ {
			if _, err := tap.Write(frames, 0); err != nil {
				t.Fatal(err)
			}
			tap.Flush()
		}
		err = tap.Close()
		if err == nil || !strings.Contains(err.Error(), "quota exceeded") {
			t.Errorf("lossless %v: Close returned %v, want the quota error", lossless, err)
		}
		b.Close()
	}
}

// Close while frames are being read and written from other goroutines
// neither races (run with -race) nor loses count of a frame: every frame
// handed to the tap is captured, dropped or a write error.
func TestTapCloseConcurrent(t *testing.T) {
	for _, lossless := range []bool{false, true} {
		for iter := 0; iter < 20; iter++ {
			a, b := fakePair(link.FormatEthernet)
			opts := []TapOption{WithQueueLen(3)}
			if lossless {
				opts = append(opts, WithLossless())
			}
			tap, err := NewTap(a, io.Discard, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				total uint64
			)
			add := func(n int) {
				mu.Lock()
				total += uint64(n)
				mu.Unlock()
			}
			wg.Add(3)
			go func() { // writes through the tap
				defer wg.Done()
				frames := makeFrames(8, 100, 0)
				for i := 0; i < 100; i++ {
					_, err := tap.Write(frames, 0)
					add(len(frames)) // recorded before the inner Write
					if err != nil {
						return
					}
				}
			}()
			go func() { // the peer answers, read through the tap
				defer wg.Done()
				frames := makeFrames(8, 100, 0)
				for i := 0; i < 100; i++ {
					if _, err := b.Write(frames, 0); err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				bufs := makeFrames(8, 2000, 0)
				sizes := make([]int, 8)
				for {
					n, err := tap.Read(bufs, sizes, 0)
					add(n)
					if err != nil {
						return
					}
				}
			}()
			go func() { // drains what the tap writes to the peer
				bufs := makeFrames(8, 2000, 0)
				sizes := make([]int, 8)
				for {
					if _, err := b.Read(bufs, sizes, 0); err != nil {
						return
					}
				}
			}()
			if iter%2 == 0 {
				tap.Flush()
			}
			if err := tap.Close(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			wg.Wait()
			tap.Flush() // after Close: returns at once
			s := tap.Stats()
			if got := s.Captured + s.Dropped + s.WriteErrors; got != total {
				t.Fatalf("lossless %v: %d frames through the tap, stats %+v account for %d", lossless, total, s, got)
			}
		}
	}
}

// TestTapBadOffset: a Write whose offset lies outside a buffer is the
// inner endpoint's to refuse; the tap used to slice the buffer first and
// panic with its lock held. The frames it can slice are still captured.
func TestTapBadOffset(t *testing.T) {
	ep := &discardEP{fakeEP{format: link.FormatEthernet}}
	tap, err := NewTap(ep, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	good := makeFrames(1, 60, 0)[0]
	for _, off := range []int{-1, 61} {
		if _, err := tap.Write([][]byte{good, good[:10]}, off); err != nil {
			t.Fatal(err) // discardEP takes anything
		}
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	if s := tap.Stats(); s.Captured != 0 {
		t.Fatalf("stats %+v: captured frames no offset lies in", s)
	}
}
