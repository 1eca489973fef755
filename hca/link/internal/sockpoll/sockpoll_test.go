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
// by w.File (with its RawConn), b a plain descriptor closed by the test.
func pair(t *testing.T, w *Waiter) (*os.File, syscall.RawConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.File(fds[0], "a")
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

// fill writes into rc's socket until it refuses (EAGAIN).
func fill(rc syscall.RawConn) {
	for full := false; !full; {
		rc.Control(func(fd uintptr) { _, err := unix.Write(int(fd), make([]byte, 512)); full = err == unix.EAGAIN })
	}
}

func newWaiter(t *testing.T, netpoll bool) *Waiter {
	t.Helper()
	w, err := NewWaiter(netpoll)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// modes runs f for sockets in the netpoller and outside it.
func modes(t *testing.T, f func(t *testing.T, netpoll bool)) {
	for _, np := range []bool{true, false} {
		name := "ppoll"
		if np {
			name = "netpoller"
		}
		t.Run(name, func(t *testing.T) { f(t, np) })
	}
}

// A File outside the netpoller is not registered with it (which is what
// deadlines need), one in it is; the descriptor is non-blocking either way.
func TestFileNetpoller(t *testing.T) { modes(t, testFileNetpoller) }

func testFileNetpoller(t *testing.T, netpoll bool) {
	f, rc, _ := pair(t, newWaiter(t, netpoll))
	err := f.SetReadDeadline(time.Now())
	if netpoll && err != nil {
		t.Errorf("SetReadDeadline in the netpoller: %v", err)
	}
	if !netpoll && !errors.Is(err, os.ErrNoDeadline) {
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
func TestPollTryWaitRecv(t *testing.T) { modes(t, testPollTryWaitRecv) }

func testPollTryWaitRecv(t *testing.T, netpoll bool) {
	_, rc, peer := pair(t, newWaiter(t, netpoll))
	var p Poll
	var r recvOne
	p.Init(newWaiter(t, netpoll), r.recv, nil)
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

// Close (of the Waiter outside the netpoller, of the File in it) wakes a
// blocked Wait and a blocked Send at once; outside the netpoller it returns
// only when neither runs any more. Operations are refused afterwards.
func TestCloseWakesWaiters(t *testing.T) { modes(t, testCloseWakesWaiters) }

func testCloseWakesWaiters(t *testing.T, netpoll bool) {
	w, err := NewWaiter(netpoll)
	if err != nil {
		t.Fatal(err)
	}
	f, rc, _ := pair(t, w)
	var p Poll
	var r recvOne
	p.Init(w, r.recv, nil)
	// Fill the socket so that a send would block.
	var s Sender
	s.Init(w, func(fd uintptr) bool {
		_, err := unix.Write(int(fd), make([]byte, 512))
		return err != unix.EAGAIN
	})
	fill(rc)
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
	if !netpoll {
		if n := w.inflight.Load(); n != 0 {
			t.Errorf("%d operations still in flight after Close", n)
		}
	}
	f.Close()
	for name, c := range map[string]chan error{"Wait": waitErr, "Send": sendErr} {
		select {
		case err := <-c:
			// In the netpoller the closed File's error ("use of closed
			// file"), which the links map to link.ErrClosed.
			if err == nil || !netpoll && !errors.Is(err, ErrClosed) {
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
func TestSenderWaitsForRoom(t *testing.T) { modes(t, testSenderWaitsForRoom) }

func testSenderWaitsForRoom(t *testing.T, netpoll bool) {
	w := newWaiter(t, netpoll)
	_, rc, peer := pair(t, w)
	var s Sender
	calls := 0
	s.Init(w, func(fd uintptr) bool {
		calls++
		_, err := unix.Write(int(fd), make([]byte, 512))
		return err != unix.EAGAIN
	})
	fill(rc)
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
func TestNoAllocs(t *testing.T) { modes(t, testNoAllocs) }

func testNoAllocs(t *testing.T, netpoll bool) {
	w := newWaiter(t, netpoll)
	_, rc, peer := pair(t, w)
	var p Poll
	p.Init(w, func(uintptr) bool { return false }, nil)
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

// WaitAlsoOn: outside the netpoller a read wait also ends when the other
// descriptor becomes readable, and a write wait does not look at it.
func TestWaitAlsoOn(t *testing.T) {
	w := newWaiter(t, false)
	_, rc, _ := pair(t, w)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	w.WaitAlsoOn(efd)
	var p Poll
	var r recvOne
	p.Init(w, r.recv, nil)
	go func() {
		time.Sleep(20 * time.Millisecond)
		unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}()
	done := make(chan error, 1)
	go func() { done <- p.Wait(rc) }()
	select {
	case err := <-done:
		if err != nil || r.got != 0 {
			t.Fatalf("Wait: %v, consumed %d bytes", err, r.got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not end when the other descriptor became readable")
	}
	// The socket itself is still empty.
	if again, err := p.Try(rc); err != nil || !again {
		t.Fatalf("Try: again %v, %v", again, err)
	}
}
