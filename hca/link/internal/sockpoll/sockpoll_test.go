//go:build linux

package sockpoll

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns the two ends of an AF_UNIX datagram socket pair: a wrapped
// by File (with its RawConn), b a plain descriptor closed by the test.
func pair(t *testing.T) (*os.File, syscall.RawConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := File(fds[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); unix.Close(fds[1]) })
	return f, rc, fds[1]
}

func newWaiter(t *testing.T) *Waiter {
	t.Helper()
	w, err := NewWaiter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// A File is not in the netpoller (which is what deadlines need), and its
// descriptor is non-blocking.
func TestFileOutsideNetpoller(t *testing.T) {
	f, rc, _ := pair(t)
	if err := f.SetReadDeadline(time.Now()); !errors.Is(err, os.ErrNoDeadline) {
		t.Errorf("SetReadDeadline: %v, want os.ErrNoDeadline (a file outside the netpoller)", err)
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil || flags&unix.O_NONBLOCK == 0 {
		t.Errorf("descriptor flags %#x (%v, %v): want O_NONBLOCK", flags, err, ferr)
	}
}

// recvOne is a Poll callback: one datagram, false on EAGAIN.
type recvOne struct{ got int }

func (r *recvOne) recv(fd uintptr) bool {
	var b [64]byte
	n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return false
	}
	if err == nil {
		r.got += n
	}
	return true
}

// Try does not wait; Wait returns once a datagram is queued, including one
// that was queued before it began (ppoll is level-triggered), and consumes
// nothing; Recv waits and receives.
func TestPollTryWaitRecv(t *testing.T) {
	_, rc, peer := pair(t)
	var p Poll
	var r recvOne
	p.Init(newWaiter(t), r.recv)
	if again, err := p.Try(rc); err != nil || !again {
		t.Fatalf("Try on an empty socket: again %v, %v", again, err)
	}
	unix.Write(peer, []byte("queued"))
	if err := p.Wait(rc); err != nil {
		t.Fatalf("Wait with a datagram queued: %v", err)
	}
	if err := p.Wait(rc); err != nil || r.got != 0 {
		t.Fatalf("Wait again: %v, consumed %d bytes", err, r.got)
	}
	if again, err := p.Try(rc); err != nil || again || r.got != 6 {
		t.Fatalf("Try: again %v, %v, got %d bytes", again, err, r.got)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		unix.Write(peer, []byte("later"))
	}()
	if err := p.Recv(rc); err != nil || r.got != 11 {
		t.Fatalf("Recv: %v, got %d bytes", err, r.got)
	}
}

// Close wakes a blocked Wait and a blocked Send at once, returns only when
// neither runs any more, and refuses operations afterwards.
func TestCloseWakesWaiters(t *testing.T) {
	_, rc, _ := pair(t)
	w, err := NewWaiter()
	if err != nil {
		t.Fatal(err)
	}
	var p Poll
	var r recvOne
	p.Init(w, r.recv)
	// Fill the socket so that a send would block.
	var s Sender
	s.Init(w, func(fd uintptr) bool {
		_, err := unix.Write(int(fd), make([]byte, 512))
		return err != unix.EAGAIN
	})
	for {
		var full bool
		rc.Control(func(fd uintptr) { _, err := unix.Write(int(fd), make([]byte, 512)); full = err == unix.EAGAIN })
		if full {
			break
		}
	}
	waitErr, sendErr := make(chan error, 1), make(chan error, 1)
	go func() { waitErr <- p.Wait(rc) }()
	go func() { sendErr <- s.Send(rc) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-waitErr:
		t.Fatalf("Wait returned %v before Close", err)
	case err := <-sendErr:
		t.Fatalf("Send returned %v before Close", err)
	default:
	}
	t0 := time.Now()
	w.Close()
	if n := w.inflight.Load(); n != 0 {
		t.Errorf("%d operations still in flight after Close", n)
	}
	for name, c := range map[string]chan error{"Wait": waitErr, "Send": sendErr} {
		select {
		case err := <-c:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Close did not wake %s", name)
		}
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if _, err := p.Try(rc); !errors.Is(err, ErrClosed) {
		t.Errorf("Try after Close: %v, want ErrClosed", err)
	}
	w.Close() // idempotent
}

// Sender retries after the socket drains: a full socket blocks Send, a
// read on the other end lets it finish.
func TestSenderWaitsForRoom(t *testing.T) {
	_, rc, peer := pair(t)
	var s Sender
	calls := 0
	s.Init(newWaiter(t), func(fd uintptr) bool {
		calls++
		_, err := unix.Write(int(fd), make([]byte, 512))
		return err != unix.EAGAIN
	})
	for {
		var full bool
		rc.Control(func(fd uintptr) { _, err := unix.Write(int(fd), make([]byte, 512)); full = err == unix.EAGAIN })
		if full {
			break
		}
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		var b [512]byte
		for {
			if _, err := unix.Read(peer, b[:]); err != nil {
				return
			}
		}
	}()
	if err := s.Send(rc); err != nil {
		t.Fatal(err)
	}
	if calls < 2 {
		t.Errorf("send ran %d times; want a refusal, a wait and a retry", calls)
	}
}

// The busy-poll path allocates nothing: an empty Try, a Wait that finds
// data queued, a Send that goes through.
func TestNoAllocs(t *testing.T) {
	_, rc, peer := pair(t)
	w := newWaiter(t)
	var p Poll
	p.Init(w, func(uintptr) bool { return false })
	var s Sender
	s.Init(w, func(uintptr) bool { return true })
	unix.Write(peer, []byte("x"))
	if n := testing.AllocsPerRun(100, func() {
		p.Try(rc)
		p.Wait(rc)
		s.Send(rc)
	}); n != 0 {
		t.Errorf("%v allocations per Try+Wait+Send", n)
	}
}
