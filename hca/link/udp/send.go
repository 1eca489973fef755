//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/sockpoll"
	"github.com/goroce/goroce/hca/link/internal/vnet"
)

// Send path, per Write:
//  1. Validate each frame: the kernel must reproduce every ICRC-covered
//     field of its IP and UDP headers (checkFrame).
//  2. Group frames into messages: a run of same-size packets of one QP with
//     consecutive PSNs to one destination (a shorter last one allowed)
//     becomes one UDP GSO super-datagram; anything else is one datagram.
//  3. Pick each IPv4 message's socket: the connected socket for its
//     destination (conn.go), or the unconnected one. A packet whose IP ID
//     will not be 0 (GSO segment s > 0 on the unconnected socket, which
//     numbers segments 0, 1, 2, ...; every packet on a connected socket,
//     numbered from its counter) is sent as two iovecs: the caller's bytes
//     up to the ICRC, then the ICRC for that ID, adjusted by CRC linearity
//     rather than recomputed (vnet.IDBasis); the caller's bytes are never
//     written or copied.
//  4. sendmmsg the messages, each run of messages for one socket in one
//     call, waiting for room (doc.go) when a socket buffer is full.

const (
	// maxGSOSegments is UDP_MAX_SEGMENTS of older kernels (newer allow 128).
	maxGSOSegments = 64
	// maxRoCEPacket is the longest BTH-through-ICRC an IBA packet can be:
	// BTH 12 + the longest extended headers (AtomicETH 28) + 4096 bytes of
	// payload + ICRC 4. A longer IPv4 datagram on the raw socket can only be
	// a GSO super-datagram. A run no longer than that goes as one only in a
	// shape its receiver can tell from one packet (vnet: short runs): led by
	// an opcode without payload (ACK, atomic ACK, RDMA READ request, atomic
	// request, CNP), which has one length (vnet.FixedSegment), e.g. an ACK
	// and the 2-byte SEND after it (20 bytes each); or 2, 4, ... 64 packets
	// of one length (vnet.ShortRunLen). An AF_XDP receiver, which generic XDP
	// hands a super-datagram whole, needs the same of IPv6 runs.
	maxRoCEPacket = vnet.MaxRoCEPacket // bth12 + 28 + 4096 + 4
	bth12         = 12
	ipv4Hdr       = 20
	ipv6Hdr       = 40
	udpHdr        = 8
)

type txState struct {
	e       *Endpoint
	rc      syscall.RawConn // the socket this state sends through
	hdr     int             // IP + UDP header length
	msgs    []unix.Mmsghdr
	iovs    []unix.Iovec
	sa4     []unix.RawSockaddrInet4
	sa6     []unix.RawSockaddrInet6
	oob     []byte   // per message: a UDP_SEGMENT and an IP_TOS / IPV6_TCLASS cmsg (oobPerMsg)
	scratch []byte   // IPv4 ICRCs corrected for the IDs the kernel gives (4 bytes per patched frame)
	frames  []int    // frames in message i
	gso     []bool   // message i is a GSO super-datagram
	msock   []int    // message i's socket: an index in conns, or -1 (unconnected)
	mbase   []uint16 // message i's first IP ID on a connected socket
	mpatch  []int    // frames of message i sent with a corrected ICRC
	ids     vnet.IDCache
	conns   []*conn   // connected sockets by destination (IPv4; conn.go)
	gen     uint64    // batches written (conn.failGen)
	gsoOff  []destKey // destinations the kernel refused GSO to (refuseGSO); capacity maxGSOOff

	// State of one sendmmsg round (sender).
	sender sockpoll.Sender
	next   int // first message not yet sent
	nmsg   int
	errno  unix.Errno
}

var (
	cmsgSpace2 = unix.CmsgSpace(2)
	cmsgSpace4 = unix.CmsgSpace(4)
	oobPerMsg  = cmsgSpace2 + cmsgSpace4
)

func (t *txState) init(e *Endpoint, rc syscall.RawConn) {
	t.e, t.rc = e, rc
	n := e.cfg.BatchSize
	t.hdr = ipv4Hdr + udpHdr
	if e.is6 {
		t.hdr = ipv6Hdr + udpHdr
		t.sa6 = make([]unix.RawSockaddrInet6, n)
	} else {
		t.sa4 = make([]unix.RawSockaddrInet4, n)
	}
	t.msgs = make([]unix.Mmsghdr, n)
	t.iovs = make([]unix.Iovec, 2*n)
	t.oob = make([]byte, n*oobPerMsg)
	t.frames = make([]int, n)
	t.gso = make([]bool, n)
	t.msock = make([]int, n)
	t.mbase = make([]uint16, n)
	t.mpatch = make([]int, n)
	t.gsoOff = make([]destKey, 0, maxGSOOff)
	t.sender.Init(e.w, t.send)
}

// Write sends each bufs[i][offset:], a complete IPv4 or IPv6 packet (see
// the package documentation for what the headers must hold). It stops at
// the first frame it rejects (ErrBadFrame, ErrNotOurSource,
// link.ErrFrameTooLarge) or the kernel refuses, after sending the frames
// before it.
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	return e.tx.Write(bufs, offset)
}

// txQueue is an extra transmit queue (link.TxQueuer): a duplicate of the
// UDP socket with its own batching state.
type txQueue struct{ txState }

// NewTxQueue returns a Writer that sends through a duplicate of the
// endpoint's UDP socket (see link.TxQueuer). Each os.File has its own
// write lock in the Go runtime; the duplicate lets two goroutines be in
// sendmmsg on the same socket at once, which the kernel allows.
func (e *Endpoint) NewTxQueue() (link.Writer, error) {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	if e.closed.Load() {
		return nil, link.ErrClosed
	}
	var fd int
	var derr error
	if err := e.udpRC.Control(func(s uintptr) { fd, derr = unix.Dup(int(s)) }); err != nil {
		return nil, fmt.Errorf("udp: transmit queue: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("udp: transmit queue: dup: %w", derr)
	}
	unix.CloseOnExec(fd)
	f, err := e.w.File(fd, "udp-txq")
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("udp: transmit queue: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	q := &txQueue{}
	q.init(e, rc)
	e.queues = append(e.queues, f)
	return q, nil
}

// Write sends bufs through t (see Endpoint.Write).
func (t *txState) Write(bufs [][]byte, offset int) (int, error) {
	e := t.e
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	total := 0
	for len(bufs) > 0 {
		k := min(len(bufs), e.cfg.BatchSize)
		t.gen++
		n, err := t.write(bufs[:k], offset, total)
		total += n
		if err != nil {
			return total, err
		}
		bufs = bufs[k:]
	}
	return total, nil
}

// checkFrame returns nil if the kernel will send f with exactly f's covered
// header fields.
func (t *txState) checkFrame(f []byte) error {
	e := t.e
	if len(f) > e.mtu {
		return link.ErrFrameTooLarge
	}
	if len(f) < t.hdr+bth12+4 {
		return ErrBadFrame
	}
	if e.is6 {
		if f[0]>>4 != 6 || f[6] != unix.IPPROTO_UDP ||
			int(binary.BigEndian.Uint16(f[4:])) != len(f)-ipv6Hdr ||
			int(binary.BigEndian.Uint16(f[44:])) != len(f)-ipv6Hdr ||
			binary.BigEndian.Uint16(f[42:]) == 0 { // see the IPv4 case
			return ErrBadFrame
		}
		if [16]byte(f[8:24]) != e.cfg.Addr.As16() || binary.BigEndian.Uint16(f[40:]) != e.cfg.Port {
			return ErrNotOurSource
		}
		return nil
	}
	if f[0] != 0x45 || f[9] != unix.IPPROTO_UDP ||
		int(binary.BigEndian.Uint16(f[2:])) != len(f) ||
		binary.BigEndian.Uint16(f[4:]) != 0 || // IP ID: the kernel sends 0
		binary.BigEndian.Uint16(f[6:]) != 0x4000 || // DF, not a fragment
		int(binary.BigEndian.Uint16(f[24:])) != len(f)-ipv4Hdr ||
		// Destination port 0: the kernel refuses it (EINVAL), which
		// for a GSO run would read as UDP_SEGMENT refused and turn
		// GSO off for the destination (refuseGSO).
		binary.BigEndian.Uint16(f[22:]) == 0 {
		return ErrBadFrame
	}
	if [4]byte(f[12:16]) != e.cfg.Addr.As4() || binary.BigEndian.Uint16(f[20:]) != e.cfg.Port {
		return ErrNotOurSource
	}
	return nil
}

// sameDest reports whether frames a and b go to the same destination
// address and UDP port with the same traffic class: one sendmsg of a GSO
// run.
func (t *txState) sameDest(a, b []byte) bool {
	h := t.hdr
	var dstA, dstB []byte
	if t.e.is6 {
		dstA, dstB = a[24:40], b[24:40]
	} else {
		dstA, dstB = a[16:20], b[16:20]
	}
	return string(dstA) == string(dstB) && a[h-6] == b[h-6] && a[h-5] == b[h-5] &&
		t.trafficClass(a) == t.trafficClass(b)
}

// trafficClass returns frame f's IPv4 TOS or IPv6 traffic class.
func (t *txState) trafficClass(f []byte) uint8 {
	if t.e.is6 {
		return f[0]<<4 | f[1]>>4
	}
	return f[1]
}

// sameFlow reports whether b may follow a in a GSO run: same destination
// address and port, same destination QP, next PSN.
func (t *txState) sameFlow(a, b []byte) bool {
	h := t.hdr
	if !t.sameDest(a, b) {
		return false
	}
	if string(a[h+5:h+8]) != string(b[h+5:h+8]) { // DestQP
		return false
	}
	pa := binary.BigEndian.Uint32(a[h+8:]) & 0xFFFFFF
	pb := binary.BigEndian.Uint32(b[h+8:]) & 0xFFFFFF
	return (pa+1)&0xFFFFFF == pb
}

// run returns the end j of the run that may start at frame i (bufs[i:j]
// one GSO super-datagram when j-i >= 2, see write), the UDP payload bytes
// it holds, and whether a packet of fixed length leads it. A run is one
// QP's consecutive packets (sameFlow), or, led by a packet of fixed length,
// any packets of that length to the same destination: e.g. a deferred ACK
// and the answer it travels with, or the ACKs of many QPs. One skb crosses
// the stack instead of one per packet. Segments after the first may not be
// longer than it, and a shorter one ends the run.
func (t *txState) run(bufs [][]byte, offset, i, valid, maxPayload int) (j, sum int, fixed bool) {
	f := bufs[i][offset:]
	seg := len(f) - t.hdr
	fixed = vnet.FixedSegment(f[t.hdr:]) == seg
	sum = seg
	j = i + 1
	for j < valid && j-i < maxGSOSegments {
		g := bufs[j][offset:]
		gs := len(g) - t.hdr
		if gs > seg || sum+gs > maxPayload {
			break
		}
		if fixed {
			if !t.sameDest(f, g) {
				break
			}
		} else if !t.sameFlow(bufs[j-1][offset:], g) {
			break
		}
		sum += gs
		j++
		if gs < seg {
			break // a shorter segment ends the run
		}
	}
	return j, sum, fixed
}

// leaveTail returns where the IPv4 run bufs[i:j] (sum payload bytes, one
// flow, cut at the segment or size cap) should end so that the rest of its
// flow does not leave packet by packet: an IPv4 run no longer than
// maxRoCEPacket is a GSO super-datagram only in the shapes of vnet's short
// runs (the raw-socket receiver must tell it from one packet), so the 64
// packets of a 65000-byte SEND at IB MTU 1024 (the last one shorter) went
// as 62 + 1 + 1 datagrams. Taking full segments off this run's end until
// the tail is longer than maxRoCEPacket sends them as 60 + 4: two skbs
// instead of three. It also returns the run's new sum.
func (t *txState) leaveTail(bufs [][]byte, offset, i, j, valid, sum, maxPayload int) (int, int) {
	seg := len(bufs[i][offset:]) - t.hdr
	g := bufs[j][offset:]
	if len(g)-t.hdr > seg || len(bufs[j-1][offset:])-t.hdr != seg || !t.sameFlow(bufs[j-1][offset:], g) {
		return j, sum // the flow does not go on at this size: nothing to balance
	}
	_, tail, _ := t.run(bufs, offset, j, valid, maxPayload)
	return vnet.BalanceTail(i, j, seg, sum, tail)
}

// write sends one batch, bufs, which starts at frame base of the caller's
// Write (for the index an error names).
func (t *txState) write(bufs [][]byte, offset, base int) (int, error) {
	e := t.e
	// 1. Validate.
	valid := len(bufs)
	var bad error
	for i, b := range bufs {
		var err error
		if offset < 0 || offset > len(b) {
			// API misuse, not a frame: an error naming it, not a panic
			// on the slice.
			err = fmt.Errorf("%w: offset %d outside a %d-byte buffer", ErrBadFrame, offset, len(b))
		} else {
			err = t.checkFrame(b[offset:])
		}
		if err != nil {
			e.st.txRejected.Add(1)
			valid, bad = i, fmt.Errorf("udp: frame %d: %w", base+i, err)
			break
		}
	}
	// 2-3. Build messages.
	maxPayload := 65535 - t.hdr
	if e.is6 {
		maxPayload = 65535 - udpHdr
	}
	gso := e.gso.Load()
	connect := !e.is6 && !e.cfg.NoConnect
	if !e.is6 {
		// Room for the patched ICRCs (allocated once: no allocation in
		// steady state).
		if need := 4 * len(bufs); need > len(t.scratch) {
			t.scratch = make([]byte, need)
		}
		for _, c := range t.conns {
			c.build = c.next
		}
	}
	nmsg, iov, sc := 0, 0, 0
	for i := 0; i < valid; {
		f := bufs[i][offset:]
		seg := len(f) - t.hdr
		j := i + 1
		if gso && (len(t.gsoOff) == 0 || !t.gsoRefused(f)) {
			var sum int
			var fixed bool
			j, sum, fixed = t.run(bufs, offset, i, valid, maxPayload)
			if !e.is6 && !fixed && j-i >= 2 && j < valid && sum > maxRoCEPacket {
				j, sum = t.leaveTail(bufs, offset, i, j, valid, sum, maxPayload)
			}
			if !fixed && j-i >= 2 && sum <= maxRoCEPacket {
				// A short run goes only in a shape its receiver can
				// tell from one packet (vnet: short runs).
				j = i + vnet.ShortRunLen(j-i, len(bufs[j-1]) < len(bufs[i]))
			}
		}
		m := &t.msgs[nmsg]
		*m = unix.Mmsghdr{}
		ci, base := -1, uint16(0)
		if connect {
			if ci = t.connFor(f); ci >= 0 {
				c := t.conns[ci]
				base = c.build
				c.build = c.advance(base, j-i)
			}
		}
		first, patched := iov, 0
		for k := i; k < j; k++ {
			g := bufs[k][offset:]
			id := base + uint16(k-i)
			if id == 0 || e.is6 {
				setIov(&t.iovs[iov], g[t.hdr:])
				iov++
				continue
			}
			// The kernel gives this packet IP ID id (segment s of a GSO
			// run on the unconnected socket: s; on a connected socket:
			// its counter + s), and the ICRC covers the ID: send the
			// packet's bytes from the caller's frame up to its ICRC, then
			// the ICRC for that ID from scratch, as two iovecs. The
			// caller's bytes are never written (the HCA may be reading
			// them concurrently, e.g. a retransmission queue) and never
			// copied. The frame was checked to carry ID 0; the ICRC
			// changes linearly with the ID (vnet.IDBasis).
			c := t.scratch[sc : sc+4]
			sc += 4
			icrc := binary.LittleEndian.Uint32(g[len(g)-4:]) ^ t.ids.Get(len(g)).Delta(id)
			binary.LittleEndian.PutUint32(c, icrc)
			setIov(&t.iovs[iov], g[t.hdr:len(g)-4])
			setIov(&t.iovs[iov+1], c)
			iov += 2
			patched++
		}
		m.Hdr.Iov = &t.iovs[first]
		m.Hdr.SetIovlen(iov - first)
		if ci < 0 {
			t.setDst(nmsg, f, m)
		} // else the socket's own destination
		t.msock[nmsg], t.mbase[nmsg] = ci, base
		t.frames[nmsg] = j - i
		t.mpatch[nmsg] = patched
		t.gso[nmsg] = j-i > 1
		c := t.oob[nmsg*oobPerMsg : (nmsg+1)*oobPerMsg]
		n := 0
		if j-i > 1 {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level = unix.IPPROTO_UDP
			h.Type = unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(seg))
			n = cmsgSpace2
		}
		if tc := t.trafficClass(f); tc != 0 {
			// The kernel writes the IP header: ask it for the frame's
			// TOS / traffic class (DSCP and ECN; masked in the ICRC,
			// so only a cmsg can carry it). Frames of one run share it
			// (sameDest).
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[n]))
			h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
			if e.is6 {
				h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
			}
			h.SetLen(unix.CmsgLen(4))
			binary.NativeEndian.PutUint32(c[n+unix.CmsgLen(0):], uint32(tc))
			n += cmsgSpace4
		}
		if n > 0 {
			m.Hdr.Control = &c[0]
			m.Hdr.SetControllen(n)
		}
		nmsg++
		i = j
	}
	// 4. Send.
	sent, err := t.sendAll(nmsg)
	clear(t.iovs[:iov]) // retain no caller memory
	if err == errGSORefused {
		// The refused super-datagram's first frame is the first not sent.
		t.refuseGSO(bufs[sent][offset:])
		err = errResend
	}
	if err == errResend {
		n, err := t.write(bufs[sent:valid], offset, base+sent) // GSO is off for the destination now, or the connected socket set aside
		sent += n
		if err != nil {
			return sent, err
		}
		return valid, bad
	}
	if err != nil {
		return sent, err
	}
	return valid, bad
}

// errResend: a connected socket failed; write resends the frames not sent
// (unconnected). errGSORefused: the kernel refused the super-datagram at
// the first frame not sent; write turns GSO off for its destination
// (refuseGSO) and resends.
var (
	errResend     = errors.New("udp: resend")
	errGSORefused = errors.New("udp: UDP_SEGMENT refused")
)

// maxGSOOff bounds the destinations one transmit state turns GSO off for;
// a refusal beyond them turns it off for the link.
const maxGSOOff = 16

// destKey is a destination address (IPv4 in the first 4 bytes) and UDP
// port.
type destKey struct {
	addr [16]byte
	port uint16
}

// dest returns frame f's destination.
func (t *txState) dest(f []byte) (k destKey) {
	if t.e.is6 {
		k.addr = [16]byte(f[24:40])
		k.port = binary.BigEndian.Uint16(f[42:])
	} else {
		copy(k.addr[:4], f[16:20])
		k.port = binary.BigEndian.Uint16(f[22:])
	}
	return k
}

// gsoRefused reports whether the kernel refused GSO to frame f's
// destination.
func (t *txState) gsoRefused(f []byte) bool {
	k := t.dest(f)
	for _, d := range t.gsoOff {
		if d == k {
			return true
		}
	}
	return false
}

// refuseGSO turns GSO off for frame f's destination, after the kernel
// refused a super-datagram to it.
//
// Why per destination: udp_send_skb refuses UDP_SEGMENT for a property of
// the route, EIO where the route goes through xfrm (or, before Linux 6.11,
// out of a device without checksum offload), EINVAL where a segment does
// not fit the route's MTU (older kernels; newer say EMSGSIZE, which is not
// taken for a refusal). Other destinations' routes may take GSO, and lose
// most of their throughput without it. Why for good: the route's property
// lasts, and re-probing a route that still refuses costs a refused send
// and a resend each time; the frames are never lost either way. A refusal
// that is the socket's own (SO_NO_CHECK) refuses every destination: each
// costs one refused call and a resend, and after maxGSOOff of them (which
// also bounds the table and its scan) GSO goes off for the link.
func (t *txState) refuseGSO(f []byte) {
	e := t.e
	if len(t.gsoOff) < cap(t.gsoOff) {
		t.gsoOff = append(t.gsoOff, t.dest(f)) // within capacity: no allocation
		e.st.gsoRefused.Add(1)
		return
	}
	e.gso.Store(false)
	e.st.gsoDisabled.Store(1)
}

// sendAll sends t.msgs[:nmsg], each run of messages for one socket in one
// sendmmsg (or more, if the socket buffer fills), and returns the number of
// frames sent.
func (t *txState) sendAll(nmsg int) (int, error) {
	frames := 0
	for a := 0; a < nmsg; {
		b := a + 1
		for b < nmsg && t.msock[b] == t.msock[a] {
			b++
		}
		n, err := t.sendRun(a, b)
		frames += n
		if err != nil {
			return frames, err
		}
		a = b
	}
	return frames, nil
}

// sendRun sends t.msgs[a:b], which go through one socket, and returns the
// number of frames sent.
func (t *txState) sendRun(a, b int) (int, error) {
	e := t.e
	var c *conn
	rc := t.rc
	if ci := t.msock[a]; ci >= 0 {
		c = t.conns[ci]
		rc = c.rc
	}
	t.next, t.nmsg, t.errno = a, b, 0
	err := t.sender.Send(rc)
	// Count what the kernel took, message by message: a message refused
	// (or not reached) is not sent, and a resend counts its own.
	frames, patched := 0, 0
	for i := a; i < t.next; i++ {
		frames += t.frames[i]
		patched += t.mpatch[i]
		if t.gso[i] {
			e.st.txGSOBatches.Add(1)
			e.st.txGSOSegments.Add(uint64(t.frames[i]))
		}
	}
	if c != nil && t.next > a {
		last := t.next - 1
		c.next = c.advance(t.mbase[last], t.frames[last])
		c.sent(t.next - a)
		e.st.txConnected.Add(uint64(frames))
	}
	e.st.txFrames.Add(uint64(frames))
	if patched > 0 {
		e.st.txICRCPatched.Add(uint64(patched))
	}
	if err != nil {
		return frames, e.closedErr(err)
	}
	if t.errno != 0 {
		failed := t.next
		if c != nil {
			// The error may have come after the kernel took an IP ID (or
			// be an ICMP error reported on this send): the counter is no
			// longer known. Set the socket aside until it is re-probed
			// (setAside); the unconnected one resends, and reports the
			// error if it is not the socket's.
			c.setAside(t.gen)
			e.st.connFallbacks.Add(1)
			return frames, errResend
		}
		if t.gso[failed] && t.errno == unix.ENOPROTOOPT {
			// No UDP segmentation in this kernel: fall back to
			// sendmmsg for good and resend this message's frames alone.
			e.gso.Store(false)
			e.st.gsoDisabled.Store(1)
			return frames, errResend
		}
		if t.gso[failed] && (t.errno == unix.EIO || t.errno == unix.EINVAL) {
			// No usable UDP segmentation on this message's route: write
			// turns it off there and resends the frames alone.
			return frames, errGSORefused
		}
		e.st.txErrors.Add(uint64(t.frames[failed]))
		return frames, fmt.Errorf("udp: sendmmsg: %w", t.errno)
	}
	return frames, nil
}

// send is the RawConn.Write callback.
func (t *txState) send(fd uintptr) bool {
	for t.next < t.nmsg {
		var n int
		var errno unix.Errno
		if f := t.e.sendFault; f != nil {
			errno = f(fd, t.msgs[t.next:t.nmsg])
		}
		if errno == 0 {
			n, errno = mmsgNow(unix.SYS_SENDMMSG, fd, t.msgs[t.next:t.nmsg])
			t.e.st.txCalls.Add(1) // an injected fault made no call
		}
		switch errno {
		case 0:
			t.next += n
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

func setIov(v *unix.Iovec, b []byte) {
	v.Base = &b[0]
	v.SetLen(len(b))
}

func (t *txState) setDst(i int, f []byte, m *unix.Mmsghdr) {
	if t.e.is6 {
		sa := &t.sa6[i]
		sa.Family = unix.AF_INET6
		copy((*[2]byte)(unsafe.Pointer(&sa.Port))[:], f[42:44])
		copy(sa.Addr[:], f[24:40])
		m.Hdr.Name = (*byte)(unsafe.Pointer(sa))
		m.Hdr.Namelen = unix.SizeofSockaddrInet6
		return
	}
	sa := &t.sa4[i]
	sa.Family = unix.AF_INET
	copy((*[2]byte)(unsafe.Pointer(&sa.Port))[:], f[22:24])
	copy(sa.Addr[:], f[16:20])
	m.Hdr.Name = (*byte)(unsafe.Pointer(sa))
	m.Hdr.Namelen = unix.SizeofSockaddrInet4
}
