//go:build linux

// Package sockpoll owns what the socket links (udp, afpacket) share to
// implement link.Poller over a syscall.RawConn: a receive that never waits
// and a wait that consumes nothing.
//
// This package imports the standard library and golang.org/x/sys/unix.
package sockpoll

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poll drives one socket's non-blocking receive (Try) and its wait for
// readability (Wait). Its callbacks are bound once (Init), so neither
// allocates. Try and Wait may run concurrently with each other, but
// neither with itself.
type Poll struct {
	recv   func(fd uintptr) bool
	again  bool
	waits  int
	tryFn  func(fd uintptr)
	waitFn func(fd uintptr) bool
}

// Init binds p to recv, the link's RawConn.Read callback: it receives
// without blocking and returns false on EAGAIN.
func (p *Poll) Init(recv func(fd uintptr) bool) {
	p.recv = recv
	p.tryFn = func(fd uintptr) {
		if !p.recv(fd) {
			p.again = true
		}
	}
	p.waitFn = func(fd uintptr) bool {
		// RawConn.Read has just reset the netpoller's readiness: a packet
		// that arrived after the caller's last Try would not wake the wait,
		// so look (without consuming) before waiting once.
		p.waits++
		return p.waits > 1 || Peek(fd)
	}
}

// Try runs recv once on rc's socket; again reports that nothing was queued
// (EAGAIN).
func (p *Poll) Try(rc syscall.RawConn) (again bool, err error) {
	p.again = false
	err = rc.Control(p.tryFn)
	return p.again, err
}

// Wait blocks in the netpoller until rc's socket may be readable (or rc is
// closed: then its error).
func (p *Poll) Wait(rc syscall.RawConn) error {
	p.waits = 0
	return rc.Read(p.waitFn)
}

// Peek reports whether a datagram or frame is queued on fd, without
// consuming it.
func Peek(fd uintptr) bool {
	var b [1]byte
	_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	return errno != unix.EAGAIN
}
