package udp

import (
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link"
)

// link.Poller: TryRead never waits, and WaitRead returns for a packet that
// arrived between a TryRead that found nothing and the WaitRead (the
// netpoller's readiness is reset when a RawConn read begins, so WaitRead
// must look before it waits), and with ErrClosed after Close.
func TestPoller(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() { a, b = openPair0(t, "127.0.0.1", "127.0.0.2", nil) })
	defer a.Close()
	bufs := [][]byte{make([]byte, 2048)}
	sizes := make([]int, 1)
	if n, err := b.TryRead(bufs, sizes, 0); n != 0 || err != nil {
		t.Fatalf("TryRead on an empty socket: %d, %v", n, err)
	}
	if _, err := a.Write(mustFrames(t, a, b, 0, 1, 64), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the packet is queued before WaitRead starts
	done := make(chan error, 1)
	go func() { done <- b.WaitRead() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRead slept through a queued packet")
	}
	if n, err := b.TryRead(bufs, sizes, 0); n != 1 || err != nil {
		t.Fatalf("TryRead after WaitRead: %d, %v", n, err)
	}
	go func() { done <- b.WaitRead() }()
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
