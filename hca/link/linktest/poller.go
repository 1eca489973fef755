package linktest

import (
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
)

// Poller checks b's link.Poller: TryRead never waits, WaitRead returns for
// a frame that arrived between a TryRead that found nothing and the
// WaitRead (a netpoller's readiness is reset when a RawConn read begins, so
// WaitRead must look before it waits), TryRead then has the frame intact,
// and Close ends a WaitRead with link.ErrClosed. It closes b.
func Poller(t *testing.T, a, b link.Endpoint) {
	t.Helper()
	p, ok := b.(link.Poller)
	if !ok {
		t.Fatalf("%T is not a link.Poller", b)
	}
	bufs := [][]byte{make([]byte, b.MTU()+256)}
	sizes := make([]int, 1)
	if n, err := p.TryRead(bufs, sizes, 0); n != 0 || err != nil {
		t.Fatalf("TryRead on an empty link: %d, %v", n, err)
	}
	f, err := Frame(a, b, bth.PSN(7), 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([][]byte{f}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the frame is queued before WaitRead starts
	done := make(chan error, 1)
	go func() { done <- p.WaitRead() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRead slept through a queued frame")
	}
	if n, err := p.TryRead(bufs, sizes, 0); n != 1 || err != nil {
		t.Fatalf("TryRead after WaitRead: %d, %v", n, err)
	}
	if !Equivalent(bufs[0][:sizes[0]], f, b.Format()) {
		t.Fatal("TryRead's frame differs from the one written")
	}
	go func() { done <- p.WaitRead() }()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("WaitRead after Close: %v, want link.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end WaitRead")
	}
}
