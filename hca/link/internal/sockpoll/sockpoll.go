//go:build linux

// Package sockpoll owns what the socket links (udp, afpacket) share to
// implement link.Poller over a syscall.RawConn: a receive that never waits,
// a wait that consumes nothing, and where the sockets wait: in the Go
// runtime's netpoller, or outside it (Waiter).
//
// Why two ways. The netpoller registers every descriptor edge-triggered for
// reading and writing, and whenever a P is idle the runtime keeps one thread
// blocked in epoll_pwait. Every packet a socket receives, and every sent
// packet the kernel frees (sock_wfree wakes writers), wakes that thread. For
// an HCA that blocks, that wake-up is how its reader goroutine gets the
// packet, and a parked goroutine costs no thread of its own: the netpoller
// is the right place (goroce bench write_bw --loopback: 2550–3100 MB/s with
// it, 1640–2020 with ppoll waits, which block a thread and hand its P over
// per wait). For an HCA that busy-polls (hca.Options.BusyPoll), the poller
// reads the socket itself, so every such wake-up finds nobody waiting: two
// context switches per packet for nothing. goroce bench send_lat between
// two busy-polling processes on loopback (GOMAXPROCS 2): the client made
// 19500–21000 context switches per 30000 messages with its sockets in the
// netpoller and 1500–2000 outside it, and used 40 % less CPU. Outside the
// netpoller a goroutine that must wait blocks in ppoll(2), on the socket and
// on an eventfd that Close signals.
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

// ErrClosed is what Waiter operations return once the Waiter is closed.
var ErrClosed = os.ErrClosed

// Waiter is where an endpoint's sockets wait, and it tracks the operations
// in progress on them (Enter, Exit, Do). In the netpoller (NewWaiter(true))
// a wait parks the goroutine, and closing a File wakes it and waits for
// the callbacks in progress, as os.File does. Outside it (NewWaiter(false))
// a wait is a ppoll(2), and Close wakes every waiter and returns once no
// operation is in progress, so that the endpoint may then close its
// sockets and unmap its rings.
type Waiter struct {
	netpoll  bool
	closed   atomic.Bool
	inflight atomic.Int64
	efd      int // outside the netpoller: eventfd, readable once Close ran
	// extra, when not -1, is another descriptor a read wait also ends
	// on (an AF_XDP socket beside a packet socket); outside the
	// netpoller only.
	extra int32
}

// NewWaiter returns an open Waiter whose sockets wait in the netpoller
// (netpoll) or in ppoll.
func NewWaiter(netpoll bool) (*Waiter, error) {
	w := &Waiter{netpoll: netpoll, efd: -1, extra: -1}
	if !netpoll {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return nil, err
		}
		w.efd = efd
	}
	return w, nil
}

// Netpoll reports whether w's sockets wait in the netpoller.
func (w *Waiter) Netpoll() bool { return w.netpoll }

// File wraps socket fd, non-blocking, in an *os.File for w: registered
// with the netpoller or not. (os.NewFile registers exactly the descriptors
// that are non-blocking when it is called, so for a File outside the
// netpoller fd is made blocking for the call and non-blocking again after
// it.) Outside the netpoller, the File's RawConn cannot wait (Read and
// Write fail on EAGAIN) and its Close does not wait for callbacks in
// progress: w does both.
func (w *Waiter) File(fd int, name string) (*os.File, error) {
	if w.netpoll {
		return os.NewFile(uintptr(fd), name), nil
	}
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

// park runs f through rc's Read (or with write, Write) as one operation of
// w: in the netpoller, f returning false parks the goroutine until the
// socket is ready, and closing the File wakes it.
func (w *Waiter) park(rc syscall.RawConn, write bool, f func(fd uintptr) bool) error {
	if !w.Enter() {
		return ErrClosed
	}
	var err error
	if write {
		err = rc.Write(f)
	} else {
		err = rc.Read(f)
	}
	w.Exit()
	return err
}

// ppoll blocks until socket fd has any of events (an error or hang-up
// counts too) or w is closed, and reports whether w is closed. Only
// outside the netpoller; it runs inside an operation (Do), which keeps fd
// and the eventfd open.
func (w *Waiter) ppoll(fd uintptr, events int16) (closed bool) {
	for !w.closed.Load() {
		fds := [3]unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(w.efd), Events: unix.POLLIN}, {Fd: w.extra, Events: unix.POLLIN}}
		nfds := uintptr(2)
		if w.extra >= 0 && events&unix.POLLIN != 0 {
			nfds = 3
		}
		_, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), nfds, 0, 0, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return w.closed.Load() // cannot wait: let the caller retry its operation
		}
		if fds[0].Revents != 0 || (nfds == 3 && fds[2].Revents != 0) {
			return false
		}
	}
	return true
}

// WaitAlsoOn makes every read wait of w (Poll.Wait, Poll.Recv) end also
// when fd is readable. Only outside the netpoller, and before the first
// wait; fd must stay open until Close has returned.
func (w *Waiter) WaitAlsoOn(fd int) {
	if !w.netpoll {
		w.extra = int32(fd)
	}
}

// Close refuses new operations. Outside the netpoller it also wakes every
// ppoll and returns once no operation is in progress; in it, closing the
// Files does both (call Close first either way). It is idempotent.
func (w *Waiter) Close() {
	if w.closed.Swap(true) || w.netpoll {
		return
	}
	one := [8]byte{1}
	unix.Write(w.efd, one[:])
	// The operations in progress are short (non-blocking system calls,
	// ring reads) or a ppoll the eventfd has just ended.
	for w.inflight.Load() != 0 {
		time.Sleep(20 * time.Microsecond)
	}
	unix.Close(w.efd)
}

// Sender drives one socket's transmit: send writes without blocking and
// returns false on EAGAIN (socket buffer full); Send then waits for
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
			s.closed = s.w.ppoll(fd, unix.POLLOUT)
		}
	}
}

// Send runs send on rc's socket until it reports done.
func (s *Sender) Send(rc syscall.RawConn) error {
	if s.w.netpoll {
		return s.w.park(rc, true, s.send)
	}
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

// Poll drives one socket's non-blocking receive (Try), its wait for
// readability (Wait) and the two together (Recv), as operations of the
// endpoint's Waiter. Its callbacks are bound once (Init), so none
// allocates. Try and Wait may run concurrently with each other, but
// neither with itself.
type Poll struct {
	w      *Waiter
	recv   func(fd uintptr) bool
	ready  func() bool // optional: data is queued, looked at without a system call
	again  bool
	closed bool
	waits  int
	tryFn  func(fd uintptr)
	waitFn func(fd uintptr)      // outside the netpoller
	parkFn func(fd uintptr) bool // in the netpoller
}

// Init binds p to w and to recv, which receives without blocking and
// returns false on EAGAIN. ready, if not nil, reports without a system
// call whether data is queued (a packet ring's next slot); otherwise Wait
// peeks at the socket.
func (p *Poll) Init(w *Waiter, recv func(fd uintptr) bool, ready func() bool) {
	p.w, p.recv, p.ready = w, recv, ready
	p.tryFn = func(fd uintptr) {
		if !p.recv(fd) {
			p.again = true
		}
	}
	p.waitFn = func(fd uintptr) {
		if p.ready == nil || !p.ready() {
			p.closed = p.w.ppoll(fd, unix.POLLIN)
		}
	}
	p.parkFn = func(fd uintptr) bool {
		// RawConn.Read has just reset the netpoller's readiness: a packet
		// that arrived after the caller's last Try would not wake the
		// wait, so look (without consuming) before waiting once.
		p.waits++
		if p.waits > 1 {
			return true
		}
		if p.ready != nil {
			return p.ready()
		}
		return peek(fd)
	}
}

// Try runs recv once on rc's socket; again reports that nothing was queued
// (EAGAIN).
func (p *Poll) Try(rc syscall.RawConn) (again bool, err error) {
	p.again = false
	err = p.w.Do(rc, p.tryFn)
	return p.again, err
}

// Wait blocks until rc's socket may be readable (or the Waiter is closed:
// then ErrClosed, or in the netpoller the closed File's error). It consumes
// nothing, and a packet queued before it began ends it at once.
func (p *Poll) Wait(rc syscall.RawConn) error {
	if p.w.netpoll {
		p.waits = 0
		return p.w.park(rc, false, p.parkFn)
	}
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
	if p.w.netpoll {
		return p.w.park(rc, false, p.recv)
	}
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

// peek reports whether a datagram or frame is queued on fd, without
// consuming it.
func peek(fd uintptr) bool {
	var b [1]byte
	_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	return errno != unix.EAGAIN
}
