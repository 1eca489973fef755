package exchange_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// recordingConn remembers the size of every Write, to check that each
// message leaves in one write (the tools read most messages with a single
// read(2) and fail on a partial one).
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(b))
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// replay runs ours on one end of a net.Pipe while the other end plays the
// captured peer stream and records what ours sends. It returns our bytes,
// our write sizes, and checks that ours consumed the whole peer stream.
func replay(t *testing.T, peer []byte, ours func(conn net.Conn) error) (sent []byte, writes []int) {
	t.Helper()
	a, b := net.Pipe()
	// Hang protection only; nothing here measures time.
	deadline := time.Now().Add(20 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	rc := &recordingConn{Conn: a}

	var wg sync.WaitGroup
	var written int
	var out []byte
	var readErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		written, _ = b.Write(peer)
	}()
	go func() {
		defer wg.Done()
		out, readErr = io.ReadAll(b)
	}()
	err := ours(rc)
	a.Close()
	wg.Wait()
	b.Close()
	if err != nil {
		t.Fatalf("our side failed: %v", err)
	}
	if readErr != nil {
		t.Fatalf("reading our side: %v", readErr)
	}
	if written != len(peer) {
		t.Fatalf("our side consumed %d of the %d bytes the peer sent", written, len(peer))
	}
	return out, rc.writes
}
