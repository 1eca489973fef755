//go:build linux

package udp

import (
	"encoding/binary"
	"fmt"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/sockpoll"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/wire"
)

// Receive path, per Read:
//  1. Deliver what an earlier Read left over (the rest of a split
//     aggregate, or datagrams beyond the caller's batch).
//  2. recvmmsg, waiting when nothing is queued (doc.go): IPv4 into the
//     endpoint's own 64 KiB buffers from the raw socket (the packet may be a GSO
//     super-datagram to split); IPv6 without GRO straight into the
//     caller's buffers after 48 bytes of room for the rebuilt headers;
//     IPv6 with GRO into the endpoint's buffers.
//  3. Check and deliver: every drop is counted.

const (
	maxDatagram = 65536
	oobSize     = 128 // IPV6_PKTINFO + IPV6_HOPLIMIT + IPV6_TCLASS + UDP_GRO cmsgs
	// maxSplitTries bounds the ICRC checks spent finding the segment size
	// of one super-datagram.
	maxSplitTries = 8
)

type rxState struct {
	e      *Endpoint
	rc     syscall.RawConn // the socket this state receives from
	ring   *rxRing         // its RX ring (Config.RxRing), read instead of recvmmsg
	direct bool            // IPv6 without GRO, or PlainIPv4: receive into the caller's buffers
	named  bool            // recvmmsg reports source addresses and control messages (IPv6, PlainIPv4)
	hl     int             // IP and UDP header bytes a direct receive leaves room for
	msgs   []unix.Mmsghdr
	iovs   []unix.Iovec
	sa6    []unix.RawSockaddrInet6
	oob    []byte
	own    [][]byte // the endpoint's receive buffers (not direct)

	// Datagrams received into own and not yet fully delivered.
	got, cur int
	seg      int // next segment of datagram cur
	segSize  int // its segment size (0: not yet determined)
	// hdr is datagram cur's IPv4 and UDP headers, which ViewRead writes
	// in front of each segment in turn.
	hdr [ipv4Hdr + udpHdr]byte

	pkt wire.Packet
	ids vnet.IDSolverCache // PlainIPv4: the IDs of received packets, from their ICRCs

	poll  sockpoll.Poll // TryRead, Read and WaitRead
	nmsg  int
	n     int
	errno unix.Errno

	// msgs[:ready] are set up (iovec, name and control pointers); msgs
	// [:lensOK] had their name and control lengths set (IPv6), and the
	// kernel has rewritten those of msgs[:dirty] since. A busy poll's empty
	// TryRead then costs no loop over the batch before its system call.
	ready, lensOK, dirty int
}

func (r *rxState) init(e *Endpoint, rc syscall.RawConn, ring *rxRing) {
	r.e, r.rc, r.ring = e, rc, ring
	n := e.cfg.BatchSize
	r.direct = e.is6 && !e.cfg.GRO || e.plain4 && !e.gro4
	r.named = e.is6 || e.plain4
	r.hl = ipv6Hdr + udpHdr
	if e.plain4 {
		r.hl = ipv4Hdr + udpHdr
	}
	r.msgs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	if r.named {
		r.sa6 = make([]unix.RawSockaddrInet6, n)
		r.oob = make([]byte, n*oobSize)
	}
	if ring != nil {
		r.poll.Init(e.w, r.ringRecv, ring.ready)
	} else {
		r.poll.Init(e.w, r.recv, nil)
	}
}

// Read receives up to len(bufs) IP packets (see link.Endpoint). A packet
// longer than its buffer is dropped and counted in RxTooLarge.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.rx.Read(bufs, sizes, offset)
}

// TryRead is Read that never waits (link.Poller): (0, nil) when nothing
// is queued.
func (e *Endpoint) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.rx.TryRead(bufs, sizes, offset)
}

// WaitRead blocks until the socket may hold a packet (link.Poller).
func (e *Endpoint) WaitRead() error { return e.rx.WaitRead() }

// ViewRead passes received frames to fn in the endpoint's own buffers
// (link.Viewer; IPv4 only).
func (e *Endpoint) ViewRead(wait bool, max, maxFrame int, fn func(frame []byte)) (int, error) {
	return e.rx.ViewRead(wait, max, maxFrame, fn)
}

// Read receives through r (see Endpoint.Read).
func (r *rxState) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return r.read(bufs, sizes, offset, true)
}

// TryRead receives through r without waiting (see Endpoint.TryRead).
func (r *rxState) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return r.read(bufs, sizes, offset, false)
}

// WaitRead waits (doc.go) until r's socket may be readable. It
// consumes nothing, so it may run while another goroutine calls TryRead
// (the HCA serializes TryRead calls, not WaitRead).
func (r *rxState) WaitRead() error {
	e := r.e
	if e.closed.Load() {
		return link.ErrClosed
	}
	if err := r.poll.Wait(r.rc); err != nil {
		return e.closedErr(err)
	}
	return nil
}

func (r *rxState) read(bufs [][]byte, sizes []int, offset int, wait bool) (int, error) {
	e := r.e
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	bufs, err := link.ReadBatch("udp", bufs, sizes, offset, e.cfg.BatchSize)
	if len(bufs) == 0 {
		return 0, err
	}
	for {
		if !r.direct {
			if n := r.deliver(bufs, sizes, offset); n > 0 {
				e.st.rxFrames.Add(uint64(n))
				return n, nil
			}
			r.ownBuffers()
		} else {
			k := 0
			for k < len(bufs) && len(bufs[k]) > offset+r.hl {
				setIov(&r.iovs[k], bufs[k][offset+r.hl:])
				k++
			}
			if k == 0 {
				return 0, io.ErrShortBuffer
			}
			r.nmsg = k
		}
		again, err := r.recvBatch(wait)
		if r.direct {
			clear(r.iovs[:r.nmsg])
		}
		if err != nil || again {
			return 0, err // again: TryRead found nothing queued
		}
		if r.direct {
			if n := r.deliverDirect(bufs, sizes, offset); n > 0 {
				e.st.rxFrames.Add(uint64(n))
				return n, nil
			}
			continue
		}
		r.got, r.cur, r.seg, r.segSize = r.n, 0, 0, 0
	}
}

// ownBuffers readies the endpoint's own receive buffers (once) as the
// next batch's targets.
func (r *rxState) ownBuffers() {
	if r.own == nil {
		r.own = make([][]byte, r.e.cfg.BatchSize)
		for i := range r.own {
			r.own[i] = make([]byte, maxDatagram)
			setIov(&r.iovs[i], r.own[i]) // for good
		}
	}
	r.nmsg = len(r.own)
}

// recvBatch runs one recvmmsg of r.msgs[:r.nmsg], waiting for a packet
// when wait is set; again reports that a non-waiting call found nothing.
func (r *rxState) recvBatch(wait bool) (again bool, err error) {
	e := r.e
	r.prepareMsgs()
	r.n, r.errno = 0, 0
	if wait {
		err = r.poll.Recv(r.rc)
	} else {
		again, err = r.poll.Try(r.rc)
	}
	if err != nil {
		return false, e.closedErr(err)
	}
	if again {
		return true, nil
	}
	r.dirty = r.n
	if r.errno != 0 {
		if e.closed.Load() {
			return false, link.ErrClosed
		}
		return false, r.errno
	}
	return false, nil
}

// ViewRead is Read (wait) or TryRead (!wait) without the copy
// (link.Viewer): IPv4 only; IPv6 returns ErrNotSupported.
func (r *rxState) ViewRead(wait bool, max, maxFrame int, fn func(frame []byte)) (int, error) {
	e := r.e
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	if e.is6 {
		return 0, fmt.Errorf("udp: frame views of IPv6: %w", link.ErrNotSupported)
	}
	if e.plain4 {
		return 0, fmt.Errorf("udp: frame views without a raw socket (PlainIPv4): %w", link.ErrNotSupported)
	}
	if max < 1 {
		return 0, nil
	}
	for {
		if n := r.view(max, maxFrame, fn); n > 0 {
			e.st.rxFrames.Add(uint64(n))
			return n, nil
		}
		r.ownBuffers()
		if again, err := r.recvBatch(wait); err != nil || again {
			return 0, err
		}
		r.got, r.cur, r.seg, r.segSize = r.n, 0, 0, 0
	}
}

// view passes up to max pending frames to fn in place (see ViewRead).
func (r *rxState) view(max, maxFrame int, fn func([]byte)) int {
	n := 0
	for n < max && r.cur < r.got {
		m := &r.msgs[r.cur]
		d := r.own[r.cur][:m.Len]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			r.e.st.rxTooLarge.Add(1)
			r.next()
			continue
		}
		n += r.view4(d, max-n, maxFrame, fn)
	}
	return n
}

// view4 is deliver4 in place: segment i of a super-datagram gets its IPv4
// and UDP headers written over the last bytes of segment i-1, which fn
// has done with, and is passed to fn where it lies.
func (r *rxState) view4(d []byte, max, maxFrame int, fn func([]byte)) int {
	const h = ipv4Hdr + udpHdr
	if r.segSize == 0 {
		g, whole := r.segment4(d)
		if whole {
			if len(d) > maxFrame {
				r.e.st.rxTooLarge.Add(1)
				return 0
			}
			fn(d)
			return 1
		}
		if g == 0 {
			return 0
		}
		copy(r.hdr[:], d[:h]) // segment 0 on, the headers' source
	}
	g := r.segSize
	p := len(d) - h
	hdr := wire.IPv4(r.hdr[:])
	id0 := binary.BigEndian.Uint16(r.hdr[4:])
	n := 0
	for n < max {
		start := r.seg * g
		if start >= p {
			r.next()
			break
		}
		size := min(g, p-start)
		id := id0 + uint16(r.seg)
		r.seg++
		if h+size > maxFrame {
			r.e.st.rxTooLarge.Add(1)
			continue
		}
		out := d[start : start+h+size]
		if size >= 4 {
			// The headers as the four 8-byte words the ICRC's prefix
			// loads next (the last with the segment's first 4 BTH
			// bytes, already in place): written as a copy and patched
			// half-words, each of those loads spanned several recent
			// stores, which the store buffer cannot forward.
			t0, t1 := binary.BigEndian.Uint64(r.hdr[0:]), binary.BigEndian.Uint64(r.hdr[8:])
			sum := hdr.ChecksumFor(uint16(h+size), id)
			bth0 := binary.BigEndian.Uint32(out[h:])
			binary.BigEndian.PutUint64(out[0:], t0&^0x0000_FFFF_FFFF_0000|uint64(h+size)<<32|uint64(id)<<16)
			binary.BigEndian.PutUint64(out[8:], t1&^0x0000_FFFF_0000_0000|uint64(sum)<<32)
			binary.BigEndian.PutUint64(out[16:], binary.BigEndian.Uint64(r.hdr[16:]))
			binary.BigEndian.PutUint64(out[24:], uint64(udpHdr+size)<<48|uint64(bth0)) // no UDP checksum (masked in the ICRC)
		} else {
			copy(out, r.hdr[:])
			binary.BigEndian.PutUint16(out[2:], uint16(h+size))
			binary.BigEndian.PutUint16(out[4:], id)
			binary.BigEndian.PutUint16(out[24:], uint16(udpHdr+size))
			binary.BigEndian.PutUint16(out[26:], 0)
			wire.IPv4(out).SetChecksum(hdr.ChecksumFor(uint16(h+size), id))
		}
		fn(out)
		n++
	}
	return n
}

// prepareMsgs readies r.msgs[:r.nmsg] for recvmmsg. Each message's iovec
// (r.iovs[i]: set by the caller), name and control pointers never change,
// so they are set once; of the fields the kernel writes, only the name and
// control lengths are also inputs, and only in the messages it filled.
func (r *rxState) prepareMsgs() {
	named := r.named
	for i := r.ready; i < r.nmsg; i++ {
		m := &r.msgs[i]
		*m = unix.Mmsghdr{}
		m.Hdr.Iov = &r.iovs[i]
		m.Hdr.SetIovlen(1)
		if named {
			m.Hdr.Name = (*byte)(unsafe.Pointer(&r.sa6[i]))
			m.Hdr.Control = &r.oob[i*oobSize]
		}
	}
	r.ready = max(r.ready, r.nmsg)
	if named {
		setLens := func(from, to int) {
			for i := from; i < to; i++ {
				m := &r.msgs[i]
				m.Hdr.Namelen = unix.SizeofSockaddrInet6
				m.Hdr.SetControllen(oobSize)
			}
		}
		setLens(0, min(r.dirty, r.nmsg))
		if r.dirty > r.nmsg {
			r.lensOK = r.nmsg // msgs[nmsg:dirty] are stale
		}
		setLens(r.lensOK, r.nmsg)
		r.lensOK = max(r.lensOK, r.nmsg)
	}
	r.dirty = 0
}

// recv is the RawConn.Read callback.
func (r *rxState) recv(fd uintptr) bool {
	for {
		n, errno := mmsgNow(unix.SYS_RECVMMSG, fd, r.msgs[:r.nmsg])
		switch errno {
		case 0:
			r.n = n
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			r.errno = errno
			return true
		}
	}
}

// deliver copies pending datagrams (splitting aggregates) into bufs.
func (r *rxState) deliver(bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	n := 0
	for n < len(bufs) && r.cur < r.got {
		m := &r.msgs[r.cur]
		d := r.own[r.cur][:m.Len]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			e.st.rxTooLarge.Add(1)
			r.next()
			continue
		}
		if e.is6 {
			n += r.deliver6(m, d, bufs[n:], sizes[n:], offset)
		} else if e.plain4 {
			n += r.deliverPlain(m, d, bufs[n:], sizes[n:], offset)
		} else {
			n += r.deliver4(d, bufs[n:], sizes[n:], offset)
		}
	}
	return n
}

func (r *rxState) next() { r.cur, r.seg, r.segSize = r.cur+1, 0, 0 }

// deliver4 delivers frames from IPv4 datagram d (from the raw socket) and
// advances to the next datagram when d is done.
func (r *rxState) deliver4(d []byte, bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	if r.segSize == 0 {
		g, whole := r.segment4(d)
		if whole {
			if len(d) > len(bufs[0])-offset {
				e.st.rxTooLarge.Add(1)
				return 0
			}
			sizes[0] = copy(bufs[0][offset:], d)
			return 1
		}
		if g == 0 {
			return 0
		}
	}
	// Split the super-datagram the way the kernel's GSO segmentation would.
	g := r.segSize
	p := len(d) - ipv4Hdr - udpHdr
	id0 := binary.BigEndian.Uint16(d[4:])
	n := 0
	for n < len(bufs) {
		start := r.seg * g
		if start >= p {
			r.next()
			break
		}
		size := min(g, p-start)
		out := bufs[n][offset:]
		if ipv4Hdr+udpHdr+size > len(out) {
			e.st.rxTooLarge.Add(1)
			r.seg++
			continue
		}
		copy(out, d[:ipv4Hdr+udpHdr])
		copy(out[ipv4Hdr+udpHdr:], d[ipv4Hdr+udpHdr+start:ipv4Hdr+udpHdr+start+size])
		binary.BigEndian.PutUint16(out[2:], uint16(ipv4Hdr+udpHdr+size))
		binary.BigEndian.PutUint16(out[4:], id0+uint16(r.seg))
		binary.BigEndian.PutUint16(out[24:], uint16(udpHdr+size))
		binary.BigEndian.PutUint16(out[26:], 0) // no UDP checksum (masked in the ICRC)
		// From d's header: reading back out's, just written, waits for
		// those stores.
		wire.IPv4(out).SetChecksum(wire.IPv4(d).ChecksumFor(uint16(ipv4Hdr+udpHdr+size), id0+uint16(r.seg)))
		sizes[n] = ipv4Hdr + udpHdr + size
		n++
		r.seg++
	}
	return n
}

// segment4 checks the first look at IPv4 datagram d. whole: d is one
// frame, to deliver as it is (r has moved past it). Otherwise it returns
// d's segment size, also set in r.segSize, or 0 when d was dropped and
// counted (r has moved past it).
func (r *rxState) segment4(d []byte) (g int, whole bool) {
	e := r.e
	if len(d) < ipv4Hdr+udpHdr || d[0] != 0x45 ||
		int(binary.BigEndian.Uint16(d[2:])) != len(d) || d[9] != unix.IPPROTO_UDP ||
		int(binary.BigEndian.Uint16(d[24:])) != len(d)-ipv4Hdr {
		e.st.rxMalformed.Add(1)
		r.next()
		return 0, false
	}
	if r.ring != nil && !wire.IPv4(d).IsChecksumValid() {
		// The IP layer, which checks it for the raw socket, has not
		// seen a packet from the ring yet.
		e.st.rxMalformed.Add(1)
		r.next()
		return 0, false
	}
	if [4]byte(d[16:20]) != e.cfg.Addr.As4() || binary.BigEndian.Uint16(d[22:]) != e.cfg.Port {
		e.st.rxWrongAddress.Add(1)
		r.next()
		return 0, false
	}
	p := len(d) - ipv4Hdr - udpHdr
	g = vnet.FixedRunSegment(d[ipv4Hdr+udpHdr:])
	if g == 0 && p <= maxRoCEPacket {
		// One packet, or a short run in one of the shapes senders give
		// them (vnet: short runs).
		if g = vnet.EqualRunSegment(d, 0, ipv4Hdr+udpHdr); g == 0 {
			r.next()
			return 0, true
		}
	}
	if g == 0 {
		g = r.findSegment(d)
	}
	if g == 0 {
		// Not a GSO run of RoCE packets: an ordinary (over-long)
		// datagram, delivered whole.
		g = p
	} else {
		e.st.rxAggregates.Add(1)
	}
	r.segSize = g
	return g, false
}

// findSegment returns the GSO segment size of IPv4 super-datagram d, or 0.
// Candidates are offsets where a BTH of the same P_Key and destination QP
// with the next PSN starts (Write aggregates such runs); failing those,
// offsets where any BTH of the same P_Key starts (the afpacket and tun
// links aggregate equal-size packets of any QP to one destination). A
// candidate is confirmed by the ICRC of the first segment computed over
// the IP and UDP headers that segment would carry.
func (r *rxState) findSegment(d []byte) int {
	if g := r.findSegmentBy(d, true); g > 0 {
		return g
	}
	return r.findSegmentBy(d, false)
}

// findSegmentBy is one pass of findSegment: with sameFlow, candidates must
// continue the first segment's flow.
func (r *rxState) findSegmentBy(d []byte, sameFlow bool) int {
	const h = ipv4Hdr + udpHdr
	p := len(d) - h
	b0 := d[h:]
	psn1 := (binary.BigEndian.Uint32(b0[8:]) + 1) & 0xFFFFFF
	tries := 0
	// try reports whether g is the segment size: a BTH (with sameFlow, of
	// the same flow with the next PSN) sits at g, and the first segment's
	// ICRC verifies.
	try := func(g int) (ok, stop bool) {
		if g+bth12+4 > p {
			return false, false
		}
		c := d[h+g:]
		if c[2] != b0[2] || c[3] != b0[3] {
			return false, false
		}
		if sameFlow {
			if c[5] != b0[5] || c[6] != b0[6] || c[7] != b0[7] ||
				binary.BigEndian.Uint32(c[8:])&0xFFFFFF != psn1 {
				return false, false
			}
		} else if !bth.Opcode(c[0]).Valid() || c[1]&0x0F != 0 { // known opcode, TVer 0
			return false, false
		}
		if (p+g-1)/g > 2*maxGSOSegments {
			return false, false
		}
		if tries++; tries > maxSplitTries {
			return false, true
		}
		return vnet.FirstSegmentVerifies(d, 0, h, g), false
	}
	// Segments of a multi-packet message carry exactly one path MTU of
	// payload (FIRST/MIDDLE, no pad): try those sizes before scanning.
	if info := bth.Opcode(b0[0]).Info(); info.Valid() {
		for m := 256; m <= 4096; m <<= 1 {
			if ok, stop := try(info.HdrLen + m + 4); ok {
				return info.HdrLen + m + 4
			} else if stop {
				return 0
			}
		}
	}
	for g := bth12 + 4; g <= maxRoCEPacket; g += 4 {
		ok, stop := try(g)
		if ok {
			return g
		}
		if stop {
			return 0
		}
	}
	return 0
}

// ipv6Info extracts the destination address, hop limit, traffic class and
// GRO segment size from the control messages of m.
func (r *rxState) ipv6Info(m *unix.Mmsghdr, i int) (dst [16]byte, hop, tc uint8, gro int, ok bool) {
	hop = 64
	it := cmsgIter{r.oob[i*oobSize : i*oobSize+int(m.Hdr.Controllen)]}
	for level, typ, data, more := it.next(); more; level, typ, data, more = it.next() {
		switch {
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= 16:
			dst, ok = [16]byte(data[:16]), true
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_HOPLIMIT && len(data) >= 4:
			hop = uint8(binary.NativeEndian.Uint32(data))
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			tc = uint8(binary.NativeEndian.Uint32(data))
		case level == unix.IPPROTO_UDP && typ == unix.UDP_GRO:
			gro = groValue(data)
		}
	}
	return
}

// cmsgIter walks the control messages recvmmsg wrote into oob.
type cmsgIter struct{ oob []byte }

// next returns the next message's level, type and data; more is false at
// the end, or at a message whose length does not fit.
func (c *cmsgIter) next() (level, typ int32, data []byte, more bool) {
	if len(c.oob) < unix.SizeofCmsghdr {
		return 0, 0, nil, false
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c.oob[0]))
	l := int(h.Len)
	if l < unix.SizeofCmsghdr || l > len(c.oob) {
		c.oob = nil
		return 0, 0, nil, false
	}
	level, typ, data = h.Level, h.Type, c.oob[unix.CmsgLen(0):l]
	if adv := unix.CmsgSpace(l - unix.CmsgLen(0)); adv <= len(c.oob) {
		c.oob = c.oob[adv:]
	} else {
		c.oob = nil
	}
	return level, typ, data, true
}

// groValue reads a UDP_GRO control message's segment size (an int; two
// bytes from some kernels).
func groValue(data []byte) int {
	switch {
	case len(data) >= 4:
		return int(binary.NativeEndian.Uint32(data))
	case len(data) >= 2:
		return int(binary.NativeEndian.Uint16(data))
	}
	return 0
}

// putIPv6 writes the IPv6 and UDP headers of the size-byte UDP payload
// that follows them in out, from sa to dst (flow label 0: the socket does
// not report it). The UDP checksum is computed: the socket does not report
// the one received either, the ICRC masks it, and a zero one, which rxe
// sends, is illegal over IPv6 outside tunnels, so a capture of the frame
// would show it as an error.
func (r *rxState) putIPv6(out []byte, sa *unix.RawSockaddrInet6, dst *[16]byte, hop, tc uint8, size int) {
	out[0], out[1], out[2], out[3] = 0x60|tc>>4, tc<<4, 0, 0
	binary.BigEndian.PutUint16(out[4:], uint16(udpHdr+size))
	out[6] = unix.IPPROTO_UDP
	out[7] = hop
	copy(out[8:24], sa.Addr[:])
	copy(out[24:40], dst[:])
	copy(out[40:42], (*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	binary.BigEndian.PutUint16(out[42:], r.e.cfg.Port)
	binary.BigEndian.PutUint16(out[44:], uint16(udpHdr+size))
	out[46], out[47] = 0, 0
	binary.BigEndian.PutUint16(out[46:], vnet.UDPChecksum(out[:ipv6Hdr+udpHdr+size]))
}

// deliverDirect finishes the datagrams recvmmsg put into the caller's
// buffers, compacting over the dropped ones.
func (r *rxState) deliverDirect(bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	n := 0
	for i := range r.n {
		m := &r.msgs[i]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			e.st.rxTooLarge.Add(1)
			continue
		}
		if n != i && offset+r.hl+int(m.Len) > len(bufs[n]) {
			// Compacting over a dropped datagram moves this one into an
			// earlier buffer, which the caller may have made smaller.
			e.st.rxTooLarge.Add(1)
			continue
		}
		if e.plain4 {
			if r.direct4(m, i, bufs[n][offset:], bufs[i][offset:]) {
				sizes[n] = ipv4Hdr + udpHdr + int(m.Len)
				n++
			}
			continue
		}
		dst, hop, tc, _, ok := r.ipv6Info(m, i)
		if !ok || dst != e.cfg.Addr.As16() {
			e.st.rxWrongAddress.Add(1)
			continue
		}
		size := int(m.Len)
		if n != i {
			copy(bufs[n][offset+ipv6Hdr+udpHdr:], bufs[i][offset+ipv6Hdr+udpHdr:offset+ipv6Hdr+udpHdr+size])
		}
		r.putIPv6(bufs[n][offset:], &r.sa6[i], &dst, hop, tc, size)
		sizes[n] = ipv6Hdr + udpHdr + size
		n++
	}
	return n
}

// deliver6 delivers frames from IPv6 datagram d (GRO mode), splitting a
// coalesced one by the kernel-reported segment size.
func (r *rxState) deliver6(m *unix.Mmsghdr, d []byte, bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	dst, hop, tc, gro, ok := r.ipv6Info(m, r.cur)
	if !ok || dst != e.cfg.Addr.As16() {
		e.st.rxWrongAddress.Add(1)
		r.next()
		return 0
	}
	gro = r.groSize(d, gro)
	n := 0
	for n < len(bufs) {
		out := bufs[n][offset:]
		seg, ok := r.groSegment(d, gro, ipv6Hdr+udpHdr, len(out))
		if !ok {
			break
		}
		copy(out[ipv6Hdr+udpHdr:], seg)
		r.putIPv6(out, &r.sa6[r.cur], &dst, hop, tc, len(seg))
		sizes[n] = ipv6Hdr + udpHdr + len(seg)
		n++
	}
	return n
}

// groSize returns the segment size of datagram d from the kernel-reported
// UDP GRO size gro (d itself when gro is 0 or not smaller), counting d as
// an aggregate before its first segment when it is one.
func (r *rxState) groSize(d []byte, gro int) int {
	if gro <= 0 || gro >= len(d) {
		return len(d)
	}
	if r.seg == 0 {
		r.e.st.rxAggregates.Add(1)
	}
	return gro
}

// groSegment returns the next segment of datagram d (segment size gro)
// that fits room bytes with hl bytes of headers in front, counting those
// that do not as too large; ok false: d is done, and r has moved past it.
func (r *rxState) groSegment(d []byte, gro, hl, room int) (seg []byte, ok bool) {
	for {
		start := r.seg * gro
		if start >= len(d) {
			if len(d) == 0 {
				// An empty datagram has no segment to hand up: it is
				// counted here, as the decoder would a header-only frame.
				r.e.st.rxMalformed.Add(1)
			}
			r.next()
			return nil, false
		}
		size := min(gro, len(d)-start)
		r.seg++
		if hl+size > room {
			r.e.st.rxTooLarge.Add(1)
			continue
		}
		return d[start : start+size], true
	}
}

// direct4 finishes IPv4 datagram i of a PlainIPv4 receive, which recvmmsg
// put into in after ipv4Hdr+udpHdr bytes of room, as a frame in out (in
// itself, or an earlier buffer when compacting over dropped datagrams):
// it writes the IPv4 and UDP headers the socket reported, with the ID and
// DF flag that make the ICRC verify. It reports false for a datagram
// dropped and counted.
func (r *rxState) direct4(m *unix.Mmsghdr, i int, out, in []byte) bool {
	e := r.e
	const h = ipv4Hdr + udpHdr
	size := int(m.Len)
	var in4 plainInfo
	if !r.ipv4Info(m, i, &in4) {
		return false
	}
	if h+size > 0xFFFF {
		e.st.rxMalformed.Add(1)
		return false
	}
	if &out[0] != &in[0] {
		copy(out[h:], in[h:h+size])
	}
	r.rebuild4(out[:h+size], &in4)
	return true
}

// plainInfo is what a PlainIPv4 socket reports of a datagram besides its
// payload.
type plainInfo struct {
	src      *unix.RawSockaddrInet4
	dst      [4]byte
	ttl, tos uint8
	gro      int // UDP GRO segment size (0: one datagram)
}

// deliverPlain delivers frames from IPv4 datagram d of a PlainIPv4 receive
// with UDP GRO, splitting a coalesced one by the kernel-reported segment
// size, each segment's header rebuilt (rebuild4).
func (r *rxState) deliverPlain(m *unix.Mmsghdr, d []byte, bufs [][]byte, sizes []int, offset int) int {
	const h = ipv4Hdr + udpHdr
	var in4 plainInfo
	if !r.ipv4Info(m, r.cur, &in4) {
		r.next()
		return 0
	}
	gro := r.groSize(d, in4.gro)
	n := 0
	for n < len(bufs) {
		out := bufs[n][offset:]
		seg, ok := r.groSegment(d, gro, h, min(len(out), 0xFFFF))
		if !ok {
			break
		}
		copy(out[h:], seg)
		r.rebuild4(out[:h+len(seg)], &in4)
		sizes[n] = h + len(seg)
		n++
	}
	return n
}

// rebuild4 writes the IPv4 and UDP headers of frame f (payload from byte
// 28 on) from what the socket reported, with the ID and DF flag that make
// the ICRC verify (vnet.IDSolver), and counts the packet as solved or not:
// one no ID explains keeps ID 0 and DF, and fails the HCA's ICRC check.
func (r *rxState) rebuild4(f []byte, in4 *plainInfo) {
	e := r.e
	const h = ipv4Hdr + udpHdr
	size := len(f) - h
	f[0], f[1] = 0x45, in4.tos
	binary.BigEndian.PutUint16(f[2:], uint16(len(f)))
	binary.BigEndian.PutUint32(f[4:], 0x4000) // ID 0, DF: solved below
	f[8], f[9] = in4.ttl, unix.IPPROTO_UDP
	f[10], f[11] = 0, 0
	copy(f[12:16], in4.src.Addr[:])
	copy(f[16:20], in4.dst[:])
	copy(f[20:22], (*[2]byte)(unsafe.Pointer(&in4.src.Port))[:])
	binary.BigEndian.PutUint16(f[22:], e.cfg.Port)
	binary.BigEndian.PutUint16(f[24:], uint16(udpHdr+size))
	f[26], f[27] = 0, 0 // no UDP checksum (masked in the ICRC)
	if size >= bth12+4 {
		r.pkt = wire.Packet{Frame: f, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: ipv4Hdr,
			BTHOff: h, ICRCOff: len(f) - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
		d := wire.ICRC(f, &r.pkt) ^ binary.LittleEndian.Uint32(f[len(f)-4:])
		if id, df, ok := r.ids.Get(len(f)).Solve(d); ok {
			binary.BigEndian.PutUint16(f[4:], id)
			if !df {
				f[6] = 0
			}
			e.st.rxIDSolved.Add(1)
		} else {
			e.st.rxIDUnsolved.Add(1)
		}
	}
	vnet.SetIPv4Checksum(f[:ipv4Hdr])
}

// ipv4Info reads what the socket reported of PlainIPv4 datagram i (its
// source, the control messages of m) into in4, and reports false for a
// datagram not addressed to the endpoint, counted.
func (r *rxState) ipv4Info(m *unix.Mmsghdr, i int, in4 *plainInfo) bool {
	*in4 = plainInfo{src: (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa6[i])), ttl: 64}
	ok := false
	it := cmsgIter{r.oob[i*oobSize : i*oobSize+int(m.Hdr.Controllen)]}
	for level, typ, data, more := it.next(); more; level, typ, data, more = it.next() {
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex, spec_dst, then the header's
			// destination address.
			in4.dst, ok = [4]byte(data[8:12]), true
		case level == unix.IPPROTO_IP && typ == unix.IP_TTL && len(data) >= 4:
			in4.ttl = uint8(binary.NativeEndian.Uint32(data))
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			in4.tos = data[0]
		case level == unix.IPPROTO_UDP && typ == unix.UDP_GRO:
			in4.gro = groValue(data)
		}
	}
	if !ok || in4.dst != r.e.cfg.Addr.As4() {
		r.e.st.rxWrongAddress.Add(1)
		return false
	}
	return true
}
