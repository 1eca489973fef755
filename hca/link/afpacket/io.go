//go:build linux

package afpacket

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/sockpoll"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/xsk"
)

// Receive path, per Read:
//  1. Deliver what an earlier Read left pending (the segments of a GSO
//     frame and the frames received after it), and return if that gave
//     anything.
//  2. Point three iovecs per message at: its virtio_net_hdr slot, the
//     caller's bufs[i][offset:], and the endpoint's 64 KiB overflow buffer
//     for that message (a GSO frame larger than the caller's buffer).
//  3. recvmmsg (MSG_DONTWAIT; on EAGAIN a blocking Read waits, in the
//     netpoller or in ppoll (doc.go), until data or Close).
//  4. Walk the messages: drop (and count) truncated, runt and oversized
//     frames, finish CHECKSUM_PARTIAL checksums, close up the gaps so frames
//     0..n-1 are in bufs[0..n-1]. At the first UDP GSO frame, move it and
//     every later message of the batch into their overflow buffers (they
//     must not stay in caller memory past this Read) and deliver from there
//     (gso.go).
//
// Send path, per Write (by sendmmsg; what goes through the transmit ring
// first is in txring.go):
//  1. Check every frame (Ethernet header present, IP part within the MTU);
//     stop the batch at the first bad one.
//  2. Group the good prefix into messages (build): a run of RoCEv2 frames
//     of one flow becomes one UDP GSO super-packet (vnet.Runs: header slot,
//     then each frame's payload by iovec, ICRC patched for id0+i where the
//     ID differs), any other frame one message after a zero virtio_net_hdr.
//  3. sendmmsg the messages without addresses (the socket is bound to the
//     interface); on EAGAIN wait for writability; a message the device
//     refuses (ENOBUFS) is counted in TxDropped (all its frames) and
//     skipped; EINVAL on a super-packet turns GSO off and resends its
//     frames one by one.

const ethHdr = 14

type rxState struct {
	e    *Endpoint
	msgs []unix.Mmsghdr
	iovs []unix.Iovec // 3 per message
	vnet []byte       // vnetHdrLen per message
	// over holds the pending messages (below): big, per message overflow
	// of maxFrame bytes for the packet socket's frames, allocated by the
	// first Read that looks at that socket (allocOver); or, with XDP,
	// chunks, xsk.MaxFrame bytes per message (allocated at Open) for the
	// super-frames the AF_XDP socket takes whole, which must not wait for
	// 4 MiB to be allocated and faulted in (a ~2 ms stall inside a timed
	// send_lat run, with a peer that sent super-frames from the first
	// round trip).
	over, big, chunks [][]byte

	// Pending messages pend..got-1, moved whole into over[]; flen[j] is
	// message j's frame length, seg the next segment of message pend.
	pend, got, seg int
	flen           []int
	lay            gsoLayout // layout of message pend when it is GSO (seg > 0)

	poll  sockpoll.Poll // TryRead, Read and WaitRead
	nmsg  int
	n     int
	errno unix.Errno

	// The receive ring (ring.go), when ring.mem is set. rbufs, rsizes and
	// roff are the caller's, for the callback only; rn is what it
	// delivered.
	ring     ring
	rbufs    [][]byte
	rsizes   []int
	roff, rn int
	copyIov  [2]unix.Iovec
	copyMsg  unix.Msghdr
	ringPoll sockpoll.Poll // ringRecv, waiting until ring.ready
}

func (r *rxState) init(e *Endpoint) {
	r.e = e
	n := e.cfg.BatchSize
	r.msgs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, 3*n)
	r.vnet = make([]byte, vnetHdrLen*n)
	r.flen = make([]int, n)
	if x := e.xsk; x != nil {
		// Waits end on the AF_XDP socket too (Waiter.WaitAlsoOn); a
		// frame already in its RX ring ends them at once.
		r.poll.Init(e.w, r.recv, x.Ready)
		r.ringPoll.Init(e.w, r.ringRecv, func() bool { return x.Ready() || r.ring.ready() })
		r.chunks = make([][]byte, n)
		mem := make([]byte, n*xsk.MaxFrame)
		for i := range r.chunks {
			r.chunks[i] = mem[i*xsk.MaxFrame : (i+1)*xsk.MaxFrame : (i+1)*xsk.MaxFrame]
		}
		return
	}
	r.poll.Init(e.w, r.recv, nil)
	r.ringPoll.Init(e.w, r.ringRecv, r.ring.ready)
}

func setIov(v *unix.Iovec, b []byte) {
	v.Base = unsafe.SliceData(b)
	v.SetLen(len(b))
}

// Read implements link.Endpoint. A frame larger than its buffer is dropped
// and counted in RxTooLarge; a UDP GSO frame is split into its segments,
// which may be spread over several Reads.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, true)
}

// TryRead is Read that never waits (link.Poller): (0, nil) when nothing is
// queued.
func (e *Endpoint) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, false)
}

// WaitRead blocks (in the netpoller, or in ppoll with Config.BusyPoll)
// until the socket may hold a frame (link.Poller). It consumes nothing, so it may run while
// another goroutine calls TryRead.
func (e *Endpoint) WaitRead() error {
	if e.closed.Load() {
		return link.ErrClosed
	}
	if e.xsk != nil {
		if !e.w.Enter() {
			return link.ErrClosed
		}
		ready := e.xsk.Ready()
		e.w.Exit()
		if ready {
			return nil
		}
	}
	var err error
	if e.rx.ring.mem != nil {
		err = e.rx.ringPoll.Wait(e.rc)
	} else {
		err = e.rx.poll.Wait(e.rc)
	}
	if err != nil {
		return e.closedErr(err)
	}
	return nil
}

func (e *Endpoint) read(bufs [][]byte, sizes []int, offset int, wait bool) (int, error) {
	if e.xsk == nil || !wait {
		return e.readOnce(bufs, sizes, offset, wait)
	}
	// With XDP a blocking Read looks at both sockets without waiting,
	// then waits on both (WaitRead), never on one alone.
	for {
		n, err := e.readOnce(bufs, sizes, offset, false)
		if n > 0 || err != nil {
			return n, err
		}
		if err := e.WaitRead(); err != nil {
			return 0, err
		}
	}
}

func (e *Endpoint) readOnce(bufs [][]byte, sizes []int, offset int, wait bool) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	r := &e.rx
	if x := e.xsk; x != nil && !wait && r.pend == r.got {
		// A busy poller's empty poll, before any other work: two
		// atomic loads under the Waiter (which keeps Close from
		// unmapping the rings meanwhile).
		if !e.w.Enter() {
			return 0, link.ErrClosed
		}
		empty := !x.Ready() && (r.ring.mem == nil || !r.ring.ready())
		e.w.Exit()
		if empty {
			return 0, nil
		}
	}
	bufs, err := link.ReadBatch("afpacket", bufs, sizes, offset, e.cfg.BatchSize)
	if len(bufs) == 0 {
		return 0, err
	}
	k := len(bufs)
	for {
		if r.pend < r.got {
			if n := r.deliverPending(bufs[:k], sizes, offset); n > 0 {
				raceAcquire()
				e.st.rxFrames.Add(uint64(n))
				return n, nil
			}
			continue
		}
		if x := e.xsk; x != nil {
			// The Waiter (outside the netpoller with XDP) keeps Close
			// from unmapping either ring under these looks.
			if !e.w.Enter() {
				return 0, link.ErrClosed
			}
			n := x.Recv(bufs[:k], sizes, offset)
			// A frame longer than the caller's next buffer (a peer's
			// super-frame, or a frame too large) waits at the head of
			// the ring: it goes to the overflow buffer n.
			long := n < k && x.NextLen() > len(bufs[n])-offset && r.xdpLong(n)
			ringEmpty := n == 0 && !long && r.ring.mem != nil && !r.ring.ready()
			e.w.Exit()
			if n > 0 || long {
				m := r.splitXDP(bufs[:n], sizes, offset)
				if long {
					if m == n {
						r.pend = n
					}
					r.got = n + 1
				}
				if m < n || long {
					if n = m + r.deliverPending(bufs[m:k], sizes[m:], offset); n == 0 {
						continue // every segment dropped; the rest is pending
					}
				}
				raceAcquire()
				e.st.rxFrames.Add(uint64(n))
				return n, nil
			}
			if ringEmpty && !wait {
				return 0, nil // not through the ring's RawConn
			}
		}
		// Not before the first look at the packet socket: an XDP endpoint
		// may never need them.
		r.allocOver()
		if r.ring.mem != nil {
			n, again, err := r.ringRead(bufs[:k], sizes, offset, wait)
			if err != nil {
				return 0, err
			}
			if n > 0 {
				raceAcquire()
				e.st.rxFrames.Add(uint64(n))
				return n, nil
			}
			if again {
				return 0, nil // TryRead: the ring is empty
			}
			continue
		}
		for i := range k {
			v := r.iovs[3*i : 3*i+3]
			setIov(&v[0], r.vnet[i*vnetHdrLen:(i+1)*vnetHdrLen])
			setIov(&v[1], bufs[i][offset:])
			setIov(&v[2], r.over[i])
			m := &r.msgs[i]
			*m = unix.Mmsghdr{}
			m.Hdr.Iov = &v[0]
			m.Hdr.SetIovlen(3)
		}
		r.nmsg, r.n, r.errno = k, 0, 0
		var err error
		again := false
		if wait {
			err = r.poll.Recv(e.rc)
		} else {
			again, err = r.poll.Try(e.rc)
		}
		for i := range k {
			r.iovs[3*i+1] = unix.Iovec{} // do not keep the caller's buffers reachable
		}
		if err != nil {
			return 0, e.closedErr(err)
		}
		if again {
			return 0, nil // TryRead: nothing queued
		}
		if r.errno != 0 {
			if e.closed.Load() {
				return 0, link.ErrClosed
			}
			return 0, fmt.Errorf("afpacket: %s: recvmmsg: %w", e.ifname, r.errno)
		}
		if n := r.deliver(bufs[:k], sizes, offset); n > 0 {
			raceAcquire()
			e.st.rxFrames.Add(uint64(n))
			return n, nil
		}
	}
}

// ringRead runs ringRecv: Read waits while the ring is empty, TryRead
// does not (again: nothing was there). n counts frames delivered; frames
// dropped, and pending frames left for the caller's loop, make n 0 with
// again false.
func (r *rxState) ringRead(bufs [][]byte, sizes []int, offset int, wait bool) (n int, again bool, err error) {
	e := r.e
	r.rbufs, r.rsizes, r.roff, r.rn, r.errno = bufs, sizes, offset, 0, 0
	// Each look at the ring is an operation of the Waiter (or a RawConn
	// callback of a File in the netpoller), which keeps Close from
	// unmapping the ring under it.
	took := true
	if wait {
		err = r.ringPoll.Recv(e.rc)
	} else {
		var again bool
		again, err = r.ringPoll.Try(e.rc)
		took = !again
	}
	r.rbufs, r.rsizes = nil, nil // do not keep the caller's buffers reachable
	if err != nil {
		return 0, false, e.closedErr(err)
	}
	if r.errno != 0 {
		if e.closed.Load() {
			return 0, false, link.ErrClosed
		}
		return 0, false, fmt.Errorf("afpacket: %s: recvmsg: %w", e.ifname, r.errno)
	}
	return r.rn, !took && r.pend == r.got, nil
}

// deliver checks the r.n frames recvmmsg placed and compacts them to the
// front of bufs; it hands a GSO frame and everything after it to the
// pending queue.
func (r *rxState) deliver(bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	n := 0
	for i := range r.n {
		m := &r.msgs[i]
		fl := int(m.Len) - vnetHdrLen
		switch {
		case m.Hdr.Flags&unix.MSG_TRUNC != 0:
			e.st.rxTooLarge.Add(1)
			continue
		case fl < ethHdr:
			e.st.rxRunt.Add(1)
			continue
		}
		h := parseVnetHdr(r.vnet[i*vnetHdrLen:])
		if h.gsoType != vnetGSONone {
			r.stash(i, bufs, offset)
			return n + r.deliverPending(bufs[n:], sizes[n:], offset)
		}
		b := bufs[i][offset:]
		if fl > len(b) {
			e.st.rxTooLarge.Add(1) // the rest went to the overflow buffer
			continue
		}
		if h.flags&vnetFlagNeedsCsum != 0 && !finishChecksum(b[:fl], h.csumStart, h.csumOffset) {
			e.st.rxMalformed.Add(1)
			continue
		}
		if n != i {
			copy(bufs[n][offset:], b[:fl])
		}
		sizes[n] = fl
		n++
	}
	return n
}

// allocOver makes the packet socket's overflow buffers (big, allocated
// once) the pending set, for the packet socket's frames. They are address
// space only until a GSO frame is received: large allocations come zeroed
// from the OS and are not touched here.
func (r *rxState) allocOver() {
	if r.big == nil {
		r.big = make([][]byte, r.e.cfg.BatchSize)
		for i := range r.big {
			r.big[i] = make([]byte, maxFrame)
		}
	}
	r.over = r.big
}

// xdpRuns recognises the headers of a RoCEv2 super-frame (IPv4 or IPv6,
// untagged Ethernet, what the XDP program redirects).
var xdpRuns = vnet.Runs{L2: ethHdr, USO4: true, USO6: true}

// shortRunSegment returns the segment size of frame f when f is a short
// super-frame (vnet: short runs), else 0.
func shortRunSegment(f []byte) int {
	if len(f) < ethHdr+20+8+vnet.MinRunPayload {
		// Shorter than any run (a latency test's ACK and 2-byte SEND):
		// one packet, without the ~200 instructions of the header
		// checks below.
		return 0
	}
	hl := xdpRuns.HeaderLen(f)
	if hl == 0 {
		return 0
	}
	return vnet.ShortRunSegment(f, ethHdr, hl)
}

// splitXDP finds the super-frames among frames bufs[:n] from the AF_XDP
// socket: a peer's UDP GSO run that fits a UMEM chunk, which generic XDP
// hands the program linearized and without its gso_size (vnet: short
// runs). It moves the frames from the first of them on to the pending
// queue, each super-frame with the segment size vnet.ShortRunSegment finds
// (as stash does for the packet socket's), for deliverPending to split,
// and returns how many frames of bufs[:n] stay where they are.
func (r *rxState) splitXDP(bufs [][]byte, sizes []int, offset int) int {
	n := len(bufs)
	for i := range n {
		g := shortRunSegment(bufs[i][offset : offset+sizes[i]])
		if g == 0 {
			continue
		}
		r.over = r.chunks
		for j := i; j < n; j++ {
			f := bufs[j][offset : offset+sizes[j]]
			if j > i {
				g = shortRunSegment(f)
			}
			h := vnet.Hdr{}
			if g > 0 {
				h.GSOType, h.GSOSize = vnet.GSOUDPL4, uint16(g)
			}
			h.Encode(r.vnet[j*vnetHdrLen:])
			r.flen[j] = copy(r.over[j], f)
		}
		r.pend, r.got, r.seg = i, n, 0
		return i
	}
	return n
}

// xdpLong takes the frame at the head of the AF_XDP socket's RX ring,
// longer than the caller's buffer j, into overflow buffer j, its
// virtio_net_hdr saying how to split it if it is a short run's
// super-frame; deliverPending then splits it, or drops it as too large
// and counts it. It returns false if the frame was not there to take (a
// malformed descriptor, which Recv skips).
func (r *rxState) xdpLong(j int) bool {
	r.over = r.chunks
	if r.e.xsk.Recv(r.over[j:j+1], r.flen[j:j+1], 0) == 0 {
		return false
	}
	h := vnet.Hdr{}
	if g := shortRunSegment(r.over[j][:r.flen[j]]); g > 0 {
		h.GSOType, h.GSOSize = vnet.GSOUDPL4, uint16(g)
	}
	h.Encode(r.vnet[j*vnetHdrLen:])
	return true
}

// Pending frame lengths that mark a frame dropped at stash time.
const (
	pendTooLarge = -1
	pendRunt     = -2
)

// stash moves messages i..r.n-1 whole into their overflow buffers (each
// frame starts in the caller's buffer and may continue in the overflow) and
// makes them the pending queue.
func (r *rxState) stash(i int, bufs [][]byte, offset int) {
	for j := i; j < r.n; j++ {
		m := &r.msgs[j]
		fl := int(m.Len) - vnetHdrLen
		switch {
		case m.Hdr.Flags&unix.MSG_TRUNC != 0 || fl > len(r.over[j]):
			r.flen[j] = pendTooLarge // dropped and counted on delivery
			continue
		case fl < ethHdr:
			r.flen[j] = pendRunt
			continue
		}
		b := bufs[j][offset:]
		in := min(fl, len(b))
		copy(r.over[j][in:fl], r.over[j][:fl-in]) // memmove: the tail first
		copy(r.over[j], b[:in])
		r.flen[j] = fl
	}
	r.pend, r.got, r.seg = i, r.n, 0
}

// deliverPending delivers pending frames into bufs, splitting GSO frames.
func (r *rxState) deliverPending(bufs [][]byte, sizes []int, offset int) int {
	e := r.e
	n := 0
	for n < len(bufs) && r.pend < r.got {
		j := r.pend
		fl := r.flen[j]
		switch fl {
		case pendTooLarge:
			e.st.rxTooLarge.Add(1)
			r.pend++
			continue
		case pendRunt:
			e.st.rxRunt.Add(1)
			r.pend++
			continue
		}
		f := r.over[j][:fl]
		h := parseVnetHdr(r.vnet[j*vnetHdrLen:])
		out := bufs[n][offset:]
		if h.gsoType == vnetGSONone {
			r.pend++
			if fl > len(out) {
				e.st.rxTooLarge.Add(1)
				continue
			}
			copy(out, f)
			if h.flags&vnetFlagNeedsCsum != 0 && !finishChecksum(out[:fl], h.csumStart, h.csumOffset) {
				e.st.rxMalformed.Add(1)
				continue
			}
			sizes[n] = fl
			n++
			continue
		}
		if r.seg == 0 {
			var err error
			if h.gsoType&^vnetGSOECN != vnetGSOUDPL4 {
				err = errBadGSO // TCP: the filter passes none
			} else {
				r.lay, err = parseGSO(f, h.gsoSize)
			}
			if err != nil {
				e.st.rxMalformed.Add(1)
				r.pend++
				continue
			}
			e.st.rxGSO.Add(1)
		}
		k := gsoSegment(f, &r.lay, h.gsoSize, r.seg, out)
		if r.seg++; r.seg == r.lay.Segs {
			r.pend, r.seg = r.pend+1, 0
		}
		if k == 0 {
			e.st.rxTooLarge.Add(1)
			continue
		}
		e.st.rxGSOSegments.Add(1)
		sizes[n] = k
		n++
	}
	return n
}

// recv is the RawConn.Read callback.
func (r *rxState) recv(fd uintptr) bool {
	for {
		r.e.st.rxSyscalls.Add(1)
		n, errno := mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.nmsg])
		switch errno {
		case 0:
			r.n = n
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR, unix.ENOBUFS:
			// ENOBUFS is a send's device drop left in sk_err (see
			// txState.send) that this receive picked up first.
		case unix.EINVAL:
			// The kernel could not describe a frame's offloads in a
			// virtio_net_hdr (packet_rcv_vnet) and dropped it; after a
			// partial batch the error comes back on the next call.
			r.e.st.rxMalformed.Add(1)
		default:
			r.errno = errno
			return true
		}
	}
}

type txState struct {
	e     *Endpoint
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec // at most 3 per frame: a super-packet's header, then payload and patched ICRC
	first []int        // first[i]: message i's first frame; first[nmsg] the frames in all
	gso   []bool       // message i is a super-packet
	npat  []int        // ICRCs patched in message i
	hdrs  []byte       // vnet.HeaderRoom(ethHdr) per message
	icrcs []byte       // 4 per frame: corrected ICRCs
	runs  vnet.Runs
	// probed: a super-packet went out, so this kernel takes UDP_L4 from a
	// packet socket. Until then a super-packet is sent in a sendmmsg of
	// its own: its errno is the kernel's verdict, which a later message's
	// error would not be (see send).
	probed bool

	sender sockpoll.Sender // send
	nmsg   int
	niov   int
	sent   int // messages past (sent or dropped) in msgs[:nmsg]
	drops  int // frames in the messages the device dropped
	errno  unix.Errno
	// Per write, added to the shared counters once.
	gsoMsgs, gsoSegs, patched int

	// The transmit ring (txring.go), when ring.mem is set, and the
	// state of one write through it (see ringFrames).
	ring                txRing
	rsender             sockpoll.Sender // ringWrite
	rframes             [][]byte
	roff                int
	rfirst, rlen, rpat  []int
	rgso                []bool
	rk0, rn, rtaken     int
	rfull, rplaced      bool
	rstale              bool // an error left slots for the kernel to skip
	rerrno              unix.Errno
	rdropFrames, rkicks int
	rskipped            int
}

func (t *txState) init(e *Endpoint) {
	t.e = e
	n := e.cfg.BatchSize
	t.msgs = make([]unix.Mmsghdr, n)
	t.iovs = make([]unix.Iovec, 3*n)
	t.first = make([]int, n+1)
	t.gso = make([]bool, n)
	t.npat = make([]int, n)
	t.hdrs = make([]byte, vnet.HeaderRoom(ethHdr)*n)
	t.icrcs = make([]byte, 4*n)
	t.runs = vnet.Runs{L2: ethHdr, USO4: true, USO6: true}
	t.sender.Init(e.w, t.send)
	t.rfirst = make([]int, n+1)
	t.rlen = make([]int, n)
	t.rpat = make([]int, n)
	t.rgso = make([]bool, n)
	t.rsender.Init(e.w, t.ringWrite)
}

// noOffload is the virtio_net_hdr sent before a frame sent whole: no
// checksum or segmentation asked of the kernel. Only the kernel reads it.
var noOffload [vnetHdrLen]byte

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
		if offset < 0 || offset > len(b) {
			// API misuse, not a frame: an error naming it, not a panic.
			e.st.txRejected.Add(1)
			raceReleaseMerge()
			sent, err := t.sendFrames(bufs[:i], offset)
			if err != nil {
				return sent, err
			}
			return i, fmt.Errorf("afpacket: %s: frame %d: offset %d outside a %d-byte buffer", e.ifname, i, offset, len(b))
		}
		f := b[offset:]
		switch {
		case len(f) < ethHdr:
			bad = ErrRunt
		case frameIPLen(f) > e.mtu:
			bad = link.ErrFrameTooLarge
		default:
			continue
		}
		e.st.txRejected.Add(1)
		valid = i
		break
	}
	raceReleaseMerge()
	n, err := t.sendFrames(bufs[:valid], offset)
	if err != nil {
		return n, err
	}
	if bad != nil {
		return valid, fmt.Errorf("afpacket: %s: frame %d: %w", e.ifname, valid, bad)
	}
	return valid, nil
}

// sendFrames sends checked frames and returns how many are past (sent or
// dropped by the device): through the transmit ring when there is one,
// then by sendmmsg what the ring did not take (txring.go).
func (t *txState) sendFrames(frames [][]byte, offset int) (int, error) {
	if x := t.e.xsk; x != nil && len(frames) > 0 {
		// Every frame fits a chunk: Open checked the MTU.
		if !t.e.w.Enter() {
			return 0, link.ErrClosed
		}
		f0 := x.TxFrames()
		n, err := x.Send(frames, offset)
		// Send's count includes what it dropped (xsk's TxDropped, which
		// Stats adds to ours) and what a device that went down left in
		// the TX ring (xsk's TxQueued: it goes out when the device is up
		// again, and only then is it in xsk's TxFrames). TxFrames is what
		// went out, as on the sendmmsg and ring paths: xsk's TxFrames
		// grew by what the kernel took in this call, frames queued by an
		// earlier call included.
		sent := x.TxFrames() - f0
		t.e.w.Exit()
		t.e.st.txFrames.Add(sent)
		return n, err
	}
	if t.ring.mem == nil || len(frames) == 0 {
		return t.mmsgFrames(frames, offset)
	}
	n, err := t.ringFrames(frames, offset)
	if err != nil || n == len(frames) {
		return n, err
	}
	m, err := t.mmsgFrames(frames[n:], offset)
	return n + m, err
}

// mmsgFrames is sendFrames by sendmmsg.
func (t *txState) mmsgFrames(frames [][]byte, offset int) (int, error) {
	e := t.e
	if len(frames) == 0 {
		return 0, nil
	}
	t.build(frames, offset, e.gso.Load())
	t.sent, t.drops, t.gsoMsgs, t.gsoSegs, t.patched = 0, 0, 0, 0, 0
	var err error
	for t.sent < t.nmsg && err == nil {
		t.errno = 0
		if err = t.sender.Send(e.rc); err != nil {
			err = e.closedErr(err)
			break
		}
		if t.errno != 0 {
			err = fmt.Errorf("afpacket: %s: sendmmsg: %w", e.ifname, t.errno)
		}
	}
	clear(t.iovs[:t.niov]) // retain no caller memory
	n := t.first[t.sent]
	e.st.txFrames.Add(uint64(n - t.drops))
	if t.gsoMsgs > 0 {
		e.st.txGSO.Add(uint64(t.gsoMsgs))
		e.st.txGSOSegments.Add(uint64(t.gsoSegs))
	}
	if t.patched > 0 {
		e.st.txICRCPatched.Add(uint64(t.patched))
	}
	if t.errno == unix.EINVAL && t.sent < t.nmsg && t.gso[t.sent] {
		// This kernel does not take UDP_L4 from a packet socket: off for
		// good, and the rest goes one frame per message.
		e.gso.Store(false)
		m, err := t.sendFrames(frames[n:], offset)
		return n + m, err
	}
	return n, err
}

// build fills msgs and iovs for frames: runs of one flow become
// super-packets (vnet.Runs) when gso is on, other frames go whole after a
// zero virtio_net_hdr. Nothing of the caller's is copied or written.
func (t *txState) build(frames [][]byte, offset int, gso bool) {
	room := vnet.HeaderRoom(ethHdr)
	iov, fi := 0, 0
	t.nmsg = 0
	for i := 0; i < len(frames); {
		j, hl := i+1, 0
		if gso {
			j, hl = t.runs.Next(frames, offset, i)
		}
		k := t.nmsg
		t.nmsg++
		t.first[k], t.gso[k], t.npat[k] = i, hl > 0, 0
		start := iov
		if hl == 0 {
			setIov(&t.iovs[iov], noOffload[:])
			setIov(&t.iovs[iov+1], frames[i][offset:])
			iov += 2
			fi++
		} else {
			run := frames[i:j]
			slot := t.hdrs[k*room : (k+1)*room]
			setIov(&t.iovs[iov], slot[:t.runs.Header(slot, run, offset, hl)])
			iov++
			for s := range run {
				c := t.icrcs[4*fi : 4*fi+4]
				pay, p := t.runs.Payload(run, offset, hl, s, c)
				setIov(&t.iovs[iov], pay)
				iov++
				if p {
					setIov(&t.iovs[iov], c)
					iov++
					t.npat[k]++
				}
				fi++
			}
		}
		m := &t.msgs[k]
		*m = unix.Mmsghdr{}
		m.Hdr.Iov = &t.iovs[start]
		m.Hdr.SetIovlen(iov - start)
		i = j
	}
	t.first[t.nmsg] = len(frames)
	t.niov = iov
}

// refuseGSO plays, for tests, a kernel whose packet sockets refuse UDP_L4
// super-packets (EINVAL from virtio_net_hdr_to_skb).
var refuseGSO bool

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
// from, rather than duplicated. A super-packet dropped this way loses its
// whole run, as the device would have dropped it whole. The one other
// error a super-packet can meet, EINVAL from a kernel that does not take
// UDP_L4, is read from the first one sent, alone (probed).
func (t *txState) send(fd uintptr) bool {
	for t.sent < t.nmsg {
		end := t.nmsg
		if !t.probed || refuseGSO {
			for k := t.sent; k < end; k++ {
				if t.gso[k] {
					end = max(k, t.sent+1)
					break
				}
			}
		}
		var n int
		var errno unix.Errno
		if refuseGSO && t.gso[t.sent] {
			errno = unix.EINVAL
		} else {
			n, errno = mmsg(unix.SYS_SENDMMSG, fd, t.msgs[t.sent:end])
		}
		switch errno {
		case 0:
			for k := t.sent; k < t.sent+n; k++ {
				if t.gso[k] {
					t.probed = true
					t.gsoMsgs++
					t.gsoSegs += t.first[k+1] - t.first[k]
					t.patched += t.npat[k]
				}
			}
			t.sent += n
			if t.sent < end {
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
			// filter) dropped the frame or run: it is lost, like a frame
			// dropped on the wire.
			k := t.first[t.sent+1] - t.first[t.sent]
			t.e.st.txDropped.Add(uint64(k))
			t.drops += k
			t.sent++
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

// mmsg calls sendmmsg or recvmmsg (trap) on fd with MSG_DONTWAIT, without
// allocating. Like every data-path call of this link it cannot sleep, so
// it goes through RawSyscall6, unseen by the Go scheduler: a call it saw
// would keep sysmon waking every 20 µs and handing the P to another
// thread when the call outlasts a tick (see the udp link's mmsgNow, where
// this was measured).
func mmsg(trap uintptr, fd uintptr, msgs []unix.Mmsghdr) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
