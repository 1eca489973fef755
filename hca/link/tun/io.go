//go:build linux

package tun

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// scratchLen is the overflow buffer of every read: the largest frame a TAP
// can hold (64 KiB IP packet plus a tagged Ethernet header). A frame that
// spills into it did not fit the caller's buffer.
const scratchLen = 65536 + wire.EthernetLen + wire.VLANLen

// rxState is the receive side; the single reader owns it. The callbacks
// handed to RawConn.Read are method values made once in init, so a Read
// allocates nothing.
type rxState struct {
	e       *Endpoint
	iov     [2]unix.Iovec
	scratch []byte

	// State of one Read.
	bufs   [][]byte
	sizes  []int
	offset int
	n      int
	errno  unix.Errno

	fn func(fd uintptr) bool // drain the device into bufs
}

func (r *rxState) init(e *Endpoint) {
	r.e = e
	r.scratch = make([]byte, scratchLen)
	r.fn = r.drain
}

// Read implements link.Endpoint. It waits for the first frame, then takes
// whatever else is queued, up to the batch size. Frames larger than their
// buffer (RxTooLarge) and frames that are not RoCE (RxNotRoCE) are dropped.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	bufs = bufs[:min(len(bufs), len(sizes), e.cfg.BatchSize)]
	if len(bufs) == 0 {
		return 0, nil
	}
	if offset < 0 {
		return 0, fmt.Errorf("tun: negative offset %d", offset)
	}
	r := &e.rx
	r.bufs, r.sizes, r.offset, r.n, r.errno = bufs, sizes, offset, 0, 0
	defer r.reset()
	if err := e.rc.Read(r.fn); err != nil {
		return 0, e.closedErr(err)
	}
	return r.result()
}

func (r *rxState) result() (int, error) {
	if r.n > 0 {
		raceAcquire()
		r.e.st.rxFrames.Add(uint64(r.n))
		return r.n, nil // an error after some frames shows again on the next Read
	}
	if r.errno != 0 {
		return 0, r.e.closedErr(fmt.Errorf("tun: read: %w", r.errno))
	}
	return 0, nil
}

// reset drops the references to the caller's buffers.
func (r *rxState) reset() {
	r.bufs, r.sizes = nil, nil
	r.iov[0] = unix.Iovec{}
}

// drain reads frames until the batch is full or the device queue is
// empty. It returns false (wait in the netpoller) when nothing was read.
func (r *rxState) drain(fd uintptr) bool {
	e := r.e
	r.iov[1].Base = &r.scratch[0]
	r.iov[1].SetLen(len(r.scratch))
	for r.n < len(r.bufs) {
		var dst []byte
		if b := r.bufs[r.n]; len(b) > r.offset {
			dst = b[r.offset:]
			r.iov[0].Base = &dst[0]
		} else {
			r.iov[0].Base = nil
		}
		r.iov[0].SetLen(len(dst))
		m, _, errno := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), 2)
		switch errno {
		case 0:
		case unix.EAGAIN:
			return r.n > 0
		case unix.EINTR:
			continue
		case unix.EFAULT:
			// The frame outgrew buffer and scratch together; the kernel
			// consumed it (tun_do_read frees the skb on error).
			e.st.rxTooLarge.Add(1)
			continue
		default:
			e.st.rxErrors.Add(1)
			r.errno = errno
			return true
		}
		size := int(m)
		if size > len(dst) {
			e.st.rxTooLarge.Add(1)
			continue
		}
		if !isRoCE(dst[:size], e.format) {
			e.st.rxNotRoCE.Add(1)
			continue
		}
		r.sizes[r.n] = size
		r.n++
	}
	return true
}

// isRoCE reports whether frame is RoCEv2 (UDP to port 4791, not a
// fragment) or, on Ethernet, RoCEv1 (ethertype 0x8915). It is a cheap
// filter for what the kernel sends into the device by itself; the HCA
// decodes and verifies the rest.
func isRoCE(f []byte, format link.Format) bool {
	if format == link.FormatEthernet {
		e := wire.Ethernet(f)
		if !e.IsValid() {
			return false
		}
		switch e.EtherType() {
		case wire.EtherTypeRoCEv1:
			return true
		case wire.EtherTypeIPv4, wire.EtherTypeIPv6:
			f = f[e.HeaderLen():]
		default:
			return false
		}
	}
	if len(f) == 0 {
		return false
	}
	switch f[0] >> 4 {
	case 4:
		if len(f) < wire.IPv4Len {
			return false
		}
		ihl := int(f[0]&0x0F) * 4
		if ihl < wire.IPv4Len || len(f) < ihl+wire.UDPLen || f[9] != wire.IPProtoUDP {
			return false
		}
		if binary.BigEndian.Uint16(f[6:])&0x3FFF != 0 { // MF or a fragment offset
			return false
		}
		return binary.BigEndian.Uint16(f[ihl+2:]) == wire.RoCEv2Port
	case 6:
		return len(f) >= wire.IPv6Len+wire.UDPLen && f[6] == wire.IPProtoUDP &&
			binary.BigEndian.Uint16(f[wire.IPv6Len+2:]) == wire.RoCEv2Port
	}
	return false
}

// txState is the send side; the single writer owns it.
type txState struct {
	e      *Endpoint
	frames [][]byte
	offset int
	n      int
	errno  unix.Errno
	fn     func(fd uintptr) bool
}

func (t *txState) init(e *Endpoint) {
	t.e = e
	t.fn = t.send
}

// Write implements link.Endpoint: one write(2) per frame, all in one
// netpoller round. Frames are checked first; the frames before a bad one
// are sent and the bad one's error returned (ErrBadFrame,
// link.ErrFrameTooLarge).
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	if len(bufs) > e.cfg.BatchSize {
		return 0, fmt.Errorf("tun: batch of %d frames over the batch size %d", len(bufs), e.cfg.BatchSize)
	}
	k := len(bufs)
	var bad error
	for i, b := range bufs {
		if err := e.check(b, offset); err != nil {
			k, bad = i, err
			e.st.txRejected.Add(1)
			break
		}
	}
	if k == 0 {
		return 0, bad
	}
	t := &e.tx
	t.frames, t.offset, t.n, t.errno = bufs[:k], offset, 0, 0
	raceRelease()
	err := e.rc.Write(t.fn)
	n := t.n
	t.frames = nil
	e.st.txFrames.Add(uint64(n))
	switch {
	case err != nil:
		return n, e.closedErr(err)
	case t.errno != 0:
		e.st.txErrors.Add(1)
		return n, e.closedErr(fmt.Errorf("tun: write: %w", t.errno))
	}
	return n, bad
}

// check validates one frame for Write.
func (e *Endpoint) check(b []byte, offset int) error {
	if offset < 0 || offset > len(b) {
		return fmt.Errorf("%w: offset %d outside a %d-byte buffer", ErrBadFrame, offset, len(b))
	}
	f := b[offset:]
	ip := len(f)
	if e.format == link.FormatEthernet {
		eth := wire.Ethernet(f)
		if !eth.IsValid() {
			return fmt.Errorf("%w: %d bytes is no Ethernet frame", ErrBadFrame, len(f))
		}
		ip -= eth.HeaderLen()
	} else if len(f) < wire.IPv4Len || (f[0]>>4 != 4 && f[0]>>4 != 6) {
		// The kernel refuses these with EINVAL (tun_get_user).
		return fmt.Errorf("%w: %d bytes is no IPv4/IPv6 packet", ErrBadFrame, len(f))
	}
	if ip > e.mtu {
		return fmt.Errorf("%w: %d bytes for MTU %d", link.ErrFrameTooLarge, ip, e.mtu)
	}
	return nil
}

func (t *txState) send(fd uintptr) bool {
	for t.n < len(t.frames) {
		f := t.frames[t.n][t.offset:]
		_, _, errno := unix.Syscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&f[0])), uintptr(len(f)))
		switch errno {
		case 0:
			t.n++
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			t.errno = errno
			return true
		}
	}
	return true
}
