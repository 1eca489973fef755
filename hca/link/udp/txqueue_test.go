package udp

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// Transmit queues (link.TxQueuer) send from several goroutines at once
// through duplicates of the socket: every frame of every writer arrives
// with a valid ICRC (IPv4 GSO segments included: each queue patches its own
// segments' ICRCs), and Close ends the queues with the endpoint.
func TestTxQueues(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() { a, b = openPair0(t, "127.0.0.1", "127.0.0.2", nil) })
	defer b.Close()
	q1, err := a.NewTxQueue()
	if err != nil {
		t.Fatal(err)
	}
	q2, err := a.NewTxQueue()
	if err != nil {
		t.Fatal(err)
	}
	const writers, rounds, perRound = 3, 40, 16
	ws := []link.Writer{a, q1, q2}
	batches := make([][][]byte, writers)
	for w := range writers {
		// Consecutive PSNs of one QP: GSO runs on IPv4.
		batches[w] = mustFrames(t, a, b, w*100000, perRound, 1024)
	}
	want := writers * rounds * perRound
	got := make(chan int, 1)
	go func() {
		bufs := make([][]byte, a.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, len(bufs))
		var p wire.Packet
		n := 0
		for n < want {
			k, err := b.Read(bufs, sizes, 0)
			if err != nil {
				break
			}
			for i := range k {
				if err := p.Decode(bufs[i][:sizes[i]], wire.FramingIP); err != nil {
					t.Errorf("frame %d: %v", n+i, err)
				}
			}
			n += k
		}
		got <- n
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if _, err := ws[w].Write(batches[w], 0); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case n := <-got:
		if n != want {
			t.Fatalf("received %d frames, want %d", n, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out; %+v", b.Stats())
	}
	if s := a.Stats(); a.GSO() && s.TxICRCPatched == 0 {
		t.Errorf("no GSO segment was patched: %+v", s)
	}
	a.Close()
	if _, err := q1.Write(batches[1], 0); !errors.Is(err, link.ErrClosed) {
		t.Errorf("queue Write after Close: %v, want link.ErrClosed", err)
	}
	if _, err := a.NewTxQueue(); !errors.Is(err, link.ErrClosed) {
		t.Errorf("NewTxQueue after Close: %v, want link.ErrClosed", err)
	}
}
