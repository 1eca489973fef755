//go:build linux

package afpacket

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
)

// Receive path, per Read:
//  1. Point one iovec per caller buffer at bufs[i][offset:].
//  2. recvmmsg (MSG_DONTWAIT inside the netpoller's RawConn.Read, which
//     parks the goroutine on EAGAIN and wakes it on data or Close).
//  3. Drop truncated (MSG_TRUNC) and runt frames, counting them, and
//     close up the gaps so frames 0..n-1 are in bufs[0..n-1].
//
// Send path, per Write:
//  1. Check every frame (Ethernet header present, IP part within the MTU);
//     stop the batch at the first bad one.
//  2. sendmmsg the good prefix without addresses (the socket is bound to
//     the interface); on EAGAIN wait for writability; a frame the device
//     refuses (ENOBUFS) is counted in TxDropped and skipped.

const ethHdr = 14

type rxState struct {
	e    *Endpoint
	msgs []unix.Mmsghdr
	iovs []unix.Iovec

	fn    func(fd uintptr) bool
	nmsg  int
	n     int
	errno unix.Errno
}

func (r *rxState) init(e *Endpoint) {
	r.e = e
	r.msgs = make([]unix.Mmsghdr, e.cfg.BatchSize)
	r.iovs = make([]unix.Iovec, e.cfg.BatchSize)
	r.fn = r.recv
}

func setIov(v *unix.Iovec, b []byte) {
	v.Base = unsafe.SliceData(b)
	v.SetLen(len(b))
}

// Read implements link.Endpoint. A frame larger than its buffer is dropped
// and counted in RxTooLarge.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	r := &e.rx
	k := min(len(bufs), len(sizes), e.cfg.BatchSize)
	if k == 0 {
		return 0, nil
	}
	for i := range k {
		if len(bufs[i]) <= offset {
			return 0, io.ErrShortBuffer
		}
	}
	for {
		for i := range k {
			setIov(&r.iovs[i], bufs[i][offset:])
			m := &r.msgs[i]
			*m = unix.Mmsghdr{}
			m.Hdr.Iov = &r.iovs[i]
			m.Hdr.SetIovlen(1)
		}
		r.nmsg, r.n, r.errno = k, 0, 0
		err := e.rc.Read(r.fn)
		clear(r.iovs[:k]) // do not keep the caller's buffers reachable
		if err != nil {
			return 0, e.closedErr(err)
		}
		if r.errno != 0 {
			if e.closed.Load() {
				return 0, link.ErrClosed
			}
			return 0, fmt.Errorf("afpacket: %s: recvmmsg: %w", e.ifname, r.errno)
		}
		n := 0
		for i := range r.n {
			m := &r.msgs[i]
			switch {
			case m.Hdr.Flags&unix.MSG_TRUNC != 0:
				e.st.rxTooLarge.Add(1)
				continue
			case m.Len < ethHdr:
				e.st.rxRunt.Add(1)
				continue
			}
			if n != i {
				copy(bufs[n][offset:], bufs[i][offset:offset+int(m.Len)])
			}
			sizes[n] = int(m.Len)
			n++
		}
		if n > 0 {
			raceAcquire()
			e.st.rxFrames.Add(uint64(n))
			return n, nil
		}
	}
}

// recv is the RawConn.Read callback.
func (r *rxState) recv(fd uintptr) bool {
	for {
		n, errno := mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.nmsg], unix.MSG_DONTWAIT)
		switch errno {
		case 0:
			r.n = n
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR, unix.ENOBUFS:
			// ENOBUFS is a send's device drop left in sk_err (see
			// txState.send) that this receive picked up first.
		default:
			r.errno = errno
			return true
		}
	}
}

type txState struct {
	e    *Endpoint
	msgs []unix.Mmsghdr
	iovs []unix.Iovec

	fn    func(fd uintptr) bool
	nmsg  int
	sent  int // frames past (sent or dropped) in msgs[:nmsg]
	drops int // of which the device dropped
	errno unix.Errno
}

func (t *txState) init(e *Endpoint) {
	t.e = e
	t.msgs = make([]unix.Mmsghdr, e.cfg.BatchSize)
	t.iovs = make([]unix.Iovec, e.cfg.BatchSize)
	t.fn = t.send
}

// frameIPLen is how many bytes of f count against the MTU: all but the
// Ethernet header (and an 802.1Q tag).
func frameIPLen(f []byte) int {
	if len(f) >= ethHdr+4 && binary.BigEndian.Uint16(f[12:]) == 0x8100 {
		return len(f) - ethHdr - 4
	}
	return len(f) - ethHdr
}

// Write implements link.Endpoint. It stops at the first frame it rejects
// (link.ErrFrameTooLarge over the MTU, ErrRunt without an Ethernet
// header) or the kernel refuses, after sending the frames before it.
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	total := 0
	for len(bufs) > 0 {
		k := min(len(bufs), e.cfg.BatchSize)
		n, err := e.tx.write(bufs[:k], offset)
		total += n
		if err != nil {
			return total, err
		}
		bufs = bufs[k:]
	}
	return total, nil
}

// ErrRunt is returned (wrapped) by Write for a frame shorter than an
// Ethernet header.
var ErrRunt = fmt.Errorf("afpacket: frame shorter than an Ethernet header")

func (t *txState) write(bufs [][]byte, offset int) (int, error) {
	e := t.e
	valid := len(bufs)
	var bad error
	for i, b := range bufs {
		f := b[offset:]
		switch {
		case len(f) < ethHdr:
			bad = ErrRunt
		case frameIPLen(f) > e.mtu:
			bad = link.ErrFrameTooLarge
		default:
			setIov(&t.iovs[i], f)
			m := &t.msgs[i]
			*m = unix.Mmsghdr{}
			m.Hdr.Iov = &t.iovs[i]
			m.Hdr.SetIovlen(1)
			continue
		}
		e.st.txRejected.Add(1)
		valid = i
		break
	}
	t.nmsg, t.sent, t.drops = valid, 0, 0
	raceReleaseMerge()
	var err error
	for t.sent < t.nmsg && err == nil {
		t.errno = 0
		if err = e.rc.Write(t.fn); err != nil {
			err = e.closedErr(err)
			break
		}
		if t.errno != 0 {
			err = fmt.Errorf("afpacket: %s: sendmmsg: %w", e.ifname, t.errno)
		}
	}
	clear(t.iovs[:valid])
	e.st.txFrames.Add(uint64(t.sent - t.drops))
	if err != nil {
		return t.sent, err
	}
	if bad != nil {
		return valid, fmt.Errorf("afpacket: %s: frame %d: %w", e.ifname, valid, bad)
	}
	return valid, nil
}

// send is the RawConn.Write callback: it sends until everything is out,
// the socket is full (false: wait) or an error other than a device drop.
//
// sendmmsg reports an error on its first message as errno, but an error
// on a later one only ends the call with a short count: the kernel keeps
// the count and discards the error (measured: resending from the failed
// message re-rolled every netcfg.AddLoss drop in mid-batch, and 2% loss
// came out as 0.8%). After a short count the failed message is therefore
// classified here: a pending socket error (SO_ERROR) wins if there is one;
// otherwise, if the send buffer is full (SIOCOUTQ >= SO_SNDBUF) it was
// EAGAIN and is retried when the socket is writable, and if not, the
// device refused it (ENOBUFS: qdisc or veth backlog full, egress filter
// drop) and it is skipped as lost, the one error packet_snd can meet with
// a frame that passed Write's checks. A message misjudged (the buffer
// drained between the failure and SIOCOUTQ) is lost, which RoCE recovers
// from, rather than duplicated.
func (t *txState) send(fd uintptr) bool {
	for t.sent < t.nmsg {
		n, errno := mmsg(unix.SYS_SENDMMSG, fd, t.msgs[t.sent:t.nmsg], unix.MSG_DONTWAIT)
		switch errno {
		case 0:
			t.sent += n
			if t.sent < t.nmsg {
				if errno = sockError(fd); errno == 0 {
					errno = unix.ENOBUFS
					if q, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil && q >= t.e.sndbuf {
						errno = unix.EAGAIN
					}
				}
			}
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		}
		switch errno {
		case 0:
		case unix.ENOBUFS:
			// The device queue (or a veth peer's backlog, or an egress
			// filter) dropped the frame: it is lost, like a frame
			// dropped on the wire.
			t.e.st.txDropped.Add(1)
			t.sent++
			t.drops++
		case unix.EAGAIN:
			return false
		default:
			t.errno = errno
			return true
		}
	}
	return true
}

// sockError reads and clears the socket's pending error (SO_ERROR).
func sockError(fd uintptr) unix.Errno {
	var v int32
	l := uint32(4)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return unix.Errno(v)
}

// mmsg calls sendmmsg or recvmmsg (trap) on fd without allocating.
func mmsg(trap uintptr, fd uintptr, msgs []unix.Mmsghdr, flags int) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	return int(n), errno
}
