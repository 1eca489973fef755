//go:build linux

// Package sockpoll owns what the socket links (udp, afpacket) share to
// implement link.Poller over a syscall.RawConn: a receive that never waits,
// a wait that consumes nothing, and the sockets' life outside the Go
// runtime's netpoller (File, Waiter).
//
// Why outside the netpoller: it registers every descriptor edge-triggered
// for reading and writing, and whenever a P is idle the runtime keeps one
// thread blocked in epoll_pwait. Every packet a socket receives, and every
// sent packet the kernel frees (sock_wfree wakes writers), then wakes that
// thread, which finds nobody waiting, because a busy poller reads the
// socket itself and a sender only waits when the socket buffer is full:
// two context switches per packet for nothing. goroce bench send_lat
// between two busy-polling processes on loopback (GOMAXPROCS 2): the client
// made 19500–21000 context switches per 30000 messages with its sockets in
// the netpoller and 1500–2000 outside it, and used 40 % less CPU
// (docs/performance.md). A goroutine that must wait calls Waiter.Wait, which
// blocks in ppoll(2) in its own system call, on the socket and on an
// eventfd that Close signals.
//
// This package imports the standard library and golang.org/x/sys/unix.
package sockpoll

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File wraps socket fd in an *os.File that the netpoller does not watch;
// fd stays non-blocking. (os.NewFile registers only descriptors that are
// non-blocking when it is called, so fd is made blocking for the call.)
// Its RawConn's Control runs callbacks; Read and Write cannot wait on it
// (they fail on EAGAIN): wait with a Waiter instead. Its Close does not
// wait for callbacks in progress: Waiter.Close does.
func File(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.SetNonblock(fd, true); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ErrClosed is what Waiter operations return once the Waiter is closed.
var ErrClosed = os.ErrClosed

// Waiter tracks the operations in progress on an endpoint's sockets
// (Enter, Exit), blocks goroutines until a socket is ready (Wait), and on
// Close wakes every waiter and waits for every operation to finish, so
// that the endpoint may then close its sockets and unmap its rings.
type Waiter struct {
	closed   atomic.Bool
	inflight atomic.Int64
	efd      int // eventfd, readable once Close has run; closed by Close
}

// NewWaiter returns an open Waiter.
func NewWaiter() (*Waiter, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &Waiter{efd: efd}, nil
}

// Enter starts an operation on the endpoint's sockets; false means the
// Waiter is closed (then do not call Exit). Every Enter that returns true
// is paired with an Exit.
func (w *Waiter) Enter() bool {
	w.inflight.Add(1)
	if w.closed.Load() {
		w.inflight.Add(-1)
		return false
	}
	return true
}

// Exit ends an operation started by Enter.
func (w *Waiter) Exit() { w.inflight.Add(-1) }

// Wait blocks until socket fd has any of events (unix.POLLIN, POLLOUT; an
// error or hang-up counts too) or w is closed, and reports whether w is
// closed. It runs between Enter and Exit, inside a RawConn callback that
// keeps fd open.
func (w *Waiter) Wait(fd uintptr, events int16) (closed bool) {
	for !w.closed.Load() {
		fds := [2]unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(w.efd), Events: unix.POLLIN}}
		_, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 2, 0, 0, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return w.closed.Load() // cannot wait; let the caller retry its operation
		}
		if fds[0].Revents != 0 {
			return false
		}
	}
	return true
}

// Close wakes every Wait, refuses new operations and returns once none is
// in progress. It is idempotent.
func (w *Waiter) Close() {
	if w.closed.Swap(true) {
		return
	}
	one := [8]byte{1}
	unix.Write(w.efd, one[:])
	// The operations in progress are short (non-blocking system calls,
	// ring reads) or a Wait the eventfd has just ended.
	for w.inflight.Load() != 0 {
		time.Sleep(20 * time.Microsecond)
	}
	unix.Close(w.efd)
}

// Do runs f with rc's descriptor as one operation of w (Enter, Control,
// Exit): ErrClosed when w is closed.
func (w *Waiter) Do(rc syscall.RawConn, f func(fd uintptr)) error {
	if !w.Enter() {
		return ErrClosed
	}
	err := rc.Control(f)
	w.Exit()
	return err
}

// Sender drives one socket's transmit: send writes without blocking and
// returns false on EAGAIN (socket buffer full), and Send then waits for
// writability and calls it again. Bound once (Init), it does not
// allocate; Send must not run concurrently with itself.
type Sender struct {
	w            *Waiter
	send         func(fd uintptr) bool
	done, closed bool
	fn           func(fd uintptr)
}

// Init binds s to w and send.
func (s *Sender) Init(w *Waiter, send func(fd uintptr) bool) {
	s.w, s.send = w, send
	s.fn = func(fd uintptr) {
		if s.done = s.send(fd); !s.done {
			s.closed = s.w.Wait(fd, unix.POLLOUT)
		}
	}
}

// Send runs send on rc's socket until it reports done.
func (s *Sender) Send(rc syscall.RawConn) error {
	for {
		s.done, s.closed = false, false
		if err := s.w.Do(rc, s.fn); err != nil {
			return err
		}
		if s.done {
			return nil
		}
		if s.closed {
			return ErrClosed
		}
	}
}

// Poll drives one socket's non-blocking receive (Try) and its wait for
// readability (Wait), as operations of the endpoint's Waiter. Its
// callbacks are bound once (Init), so neither allocates. Try and Wait may
// run concurrently with each other, but neither with itself.
type Poll struct {
	w      *Waiter
	recv   func(fd uintptr) bool
	again  bool
	closed bool
	tryFn  func(fd uintptr)
	waitFn func(fd uintptr)
}

// Init binds p to w and to recv, which receives without blocking and
// returns false on EAGAIN.
func (p *Poll) Init(w *Waiter, recv func(fd uintptr) bool) {
	p.w = w
	p.recv = recv
	p.tryFn = func(fd uintptr) {
		if !p.recv(fd) {
			p.again = true
		}
	}
	p.waitFn = func(fd uintptr) { p.closed = p.w.Wait(fd, unix.POLLIN) }
}

// Try runs recv once on rc's socket; again reports that nothing was queued
// (EAGAIN).
func (p *Poll) Try(rc syscall.RawConn) (again bool, err error) {
	p.again = false
	err = p.w.Do(rc, p.tryFn)
	return p.again, err
}

// Wait blocks until rc's socket may be readable (or the Waiter is closed:
// then ErrClosed). ppoll is level-triggered: a packet that arrived after
// the caller's last Try ends the wait at once.
func (p *Poll) Wait(rc syscall.RawConn) error {
	p.closed = false
	if err := p.w.Do(rc, p.waitFn); err != nil {
		return err
	}
	if p.closed {
		return ErrClosed
	}
	return nil
}

// Recv runs recv until it receives, waiting in between (a blocking Read).
func (p *Poll) Recv(rc syscall.RawConn) error {
	for {
		again, err := p.Try(rc)
		if err != nil || !again {
			return err
		}
		if err := p.Wait(rc); err != nil {
			return err
		}
	}
}
