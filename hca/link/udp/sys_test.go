//go:build linux

package udp

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mmsgNow runs outside the Go scheduler's knowledge (RawSyscall6), so it
// must never sleep in the kernel: on a blocking socket with nothing queued
// recvmmsg returns EAGAIN at once, and sendmmsg into a full send buffer
// returns EAGAIN rather than waiting for room.
func TestMmsgNowNeverBlocks(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0) // blocking
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	var iov unix.Iovec
	iov.Base, iov.Len = &buf[0], uint64(len(buf))
	msgs := make([]unix.Mmsghdr, 8)
	for i := range msgs {
		msgs[i].Hdr.Iov = &iov
		msgs[i].Hdr.SetIovlen(1)
	}
	type result struct {
		n     int
		errno unix.Errno
	}
	call := func(what string, trap uintptr, fd int) result {
		t.Helper()
		done := make(chan result, 1)
		go func() {
			n, errno := mmsgNow(trap, uintptr(fd), msgs)
			done <- result{n, errno}
		}()
		select {
		case r := <-done:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s on a blocking socket did not return in 10 s: mmsgNow blocks", what)
		}
		return result{}
	}
	if r := call("recvmmsg with nothing queued", unix.SYS_RECVMMSG, fds[1]); r.errno != unix.EAGAIN {
		t.Fatalf("recvmmsg with nothing queued: n %d errno %v, want EAGAIN", r.n, r.errno)
	}
	// Fill the peer's receive queue (nobody reads it) until the send
	// side refuses.
	full := false
	for range 10000 {
		r := call("sendmmsg into a full socket", unix.SYS_SENDMMSG, fds[0])
		if r.errno == unix.EAGAIN {
			full = true
			break
		}
		if r.errno != 0 {
			t.Fatalf("sendmmsg: %v", r.errno)
		}
	}
	if !full {
		t.Fatal("sendmmsg never reported a full socket")
	}
}
