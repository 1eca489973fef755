//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The receive ring: PACKET_RX_RING, TPACKET_V2.
//
// The kernel (tpacket_rcv in net/packet/af_packet.c) copies each frame the
// filter accepts into the next slot of a ring mapped into our address
// space and flips the slot's tp_status from TP_STATUS_KERNEL to
// TP_STATUS_USER; we copy the frame out and store TP_STATUS_KERNEL back.
// An empty poll is one atomic load of the next slot's status: no system
// call. TPACKET_V3 is not used: it hands a block to user space only when
// the block is full or its retire timer (milliseconds) fires, which is
// throughput at the price of latency; V2 hands over each frame at once.
//
// Slot layout (SOCK_RAW with PACKET_VNET_HDR, an untagged frame):
//
//	0   struct tpacket2_hdr (32 bytes) and a struct sockaddr_ll
//	66  struct virtio_net_hdr (10 bytes, written by virtio_net_hdr_from_skb)
//	76  the frame, Ethernet header first (tp_mac = 76, tp_net = 90)
//
// tpacket_rcv computes netoff = TPACKET_ALIGN(TPACKET2_HDRLEN + max(maclen,
// 16)) + tp_reserve, adds the virtio_net_hdr when PACKET_VNET_HDR is on,
// and puts the MAC header maclen bytes before it, the virtio_net_hdr right
// before the MAC header. tp_net is therefore 10 more than a multiple of 16
// exactly when the kernel reserved the header; a slot where it is not is
// dropped as malformed, so a kernel that did not write one could never
// have garbage taken for offload metadata.
//
// A frame longer than the slot (a UDP GSO super-frame of up to 64 KiB
// from a peer's udp or afpacket link, or a frame over ringFrameMax) is
// truncated in the slot, and PACKET_COPY_THRESH makes the kernel also
// queue a clone on the socket and mark the slot TP_STATUS_COPY, in the
// same critical section that advances the ring head: the socket queue
// holds exactly the COPY frames, in ring order. Read takes such a frame
// whole with one recvmsg (virtio_net_hdr first, as without the ring) and
// splits or delivers it like any pending frame (gso.go). If the socket
// receive buffer is full the kernel queues no clone and the slot holds a
// truncated frame without TP_STATUS_COPY: counted in RxKernelDrop.
//
// Ordering: the kernel writes the slot, then (smp_mb, WRITE_ONCE) the
// status; user space loads the status atomically (acquire) before reading
// the slot, and stores TP_STATUS_KERNEL atomically (release) after its
// last read of the slot, which the kernel reads (READ_ONCE after
// smp_rmb) before writing the slot again.
//
// Every access to the mapping happens inside a RawConn callback (Control
// or Read), which holds a reference on the socket's file: os.File.Close
// returns only once every such callback has returned (internal/poll
// FD.Close waits for the last reference), so Close unmaps the ring after
// closing the file and no reader can touch it afterwards.

const (
	// tpHdrLen is TPACKET2_HDRLEN: struct tpacket2_hdr aligned to
	// TPACKET_ALIGNMENT, then a struct sockaddr_ll.
	tpHdrLen = 32 + 20
	// ringMacOff is where tpacket_rcv puts an untagged Ethernet frame in
	// a slot (see above).
	ringMacOff = (tpHdrLen+16+unix.TPACKET_ALIGNMENT-1)&^(unix.TPACKET_ALIGNMENT-1) + vnetHdrLen - ethHdr
	// ringBlock is tp_block_size: a multiple of the page size that holds
	// several slots (64 KiB: 40 slots of an MTU 1500 link); the kernel
	// falls back to vmalloc when it cannot find 16 contiguous pages.
	ringBlock = 64 << 10
	// ringFrameMax caps a slot at what the largest RoCE packet needs
	// (4096 bytes of payload, 128 for IPv6, UDP, BTH, extended headers
	// and ICRC): larger frames on a jumbo link (not RoCE traffic, or GSO
	// super-frames) take the COPY path rather than every slot growing.
	// An MTU 9000 link gets 4320-byte slots, 15 per block.
	ringFrameMax = (ringMacOff + ethHdr + 4 + 4096 + 128 + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	// DefaultRingBytes is the ring size when Config.RingBytes is 0.
	DefaultRingBytes = 2 << 20
	// maxRingBytes bounds Config.RingBytes.
	maxRingBytes = 64 << 20
)

// ring is the mapped PACKET_RX_RING.
type ring struct {
	mem       []byte // the mapping, set by Open; nil when the endpoint receives with recvmmsg
	unmapped  bool   // by Close
	frameSize int    // tp_frame_size
	perBlock  int    // slots per block
	frames    int    // tp_frame_nr
	// head is the next slot to look at. Only the reader moves it; it is
	// atomic because WaitRead looks at it concurrently.
	head atomic.Uint32
}

// ringGeometry sizes a ring of about bytes for frames of an mtu-byte IP
// packet (plus Ethernet header and an 802.1Q tag).
func ringGeometry(mtu, bytes int) unix.TpacketReq {
	fs := ringMacOff + ethHdr + 4 + mtu
	fs = min((fs+unix.TPACKET_ALIGNMENT-1)&^(unix.TPACKET_ALIGNMENT-1), ringFrameMax)
	blocks := max(1, bytes/ringBlock)
	per := ringBlock / fs
	return unix.TpacketReq{Block_size: ringBlock, Block_nr: uint32(blocks),
		Frame_size: uint32(fs), Frame_nr: uint32(blocks * per)}
}

// setupRing asks for the ring on fd (before bind, after PACKET_VNET_HDR:
// both PACKET_VERSION and PACKET_VNET_HDR are refused with EBUSY once a
// ring exists) and maps it. On failure the socket is left as it was for
// recvmmsg.
func (e *Endpoint) setupRing(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fmt.Errorf("PACKET_VERSION TPACKET_V2: %w", err)
	}
	// Any frame larger than a slot is also queued on the socket whole.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return fmt.Errorf("PACKET_COPY_THRESH: %w", err)
	}
	req := ringGeometry(e.mtu, e.cfg.RingBytes)
	size := int(req.Block_size * req.Block_nr)
	switch testRingBreak {
	case ringBreakReq:
		req.Frame_nr++ // not blocks x frames per block
	case ringBreakMmap:
		size += ringBlock // longer than the ring
	}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("PACKET_RX_RING %d x %d-byte blocks, %d-byte frames: %w",
			req.Block_nr, req.Block_size, req.Frame_size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		// Tear the ring down: recvmmsg reads the socket queue, which a
		// socket with a ring never fills.
		off := unix.TpacketReq{}
		_ = unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &off)
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 0)
		return fmt.Errorf("mmap of the %d-byte ring: %w", size, err)
	}
	g := &e.rx.ring
	g.mem, g.frameSize, g.frames = mem, int(req.Frame_size), int(req.Frame_nr)
	g.perBlock = int(req.Block_size / req.Frame_size)
	return nil
}

// ringBreak makes, for tests, a request the kernel refuses (EINVAL): a
// tpacket_req whose frame count does not match its blocks
// (packet_set_ring), or an mmap longer than the ring (packet_mmap).
type ringBreak int

const (
	ringBreakReq ringBreak = iota + 1
	ringBreakMmap
)

var testRingBreak ringBreak

// unmap releases the mapping; the socket is closed already (see above).
// mem keeps its value (a slice header that concurrent calls may still
// test against nil, never dereference: their RawConn calls fail now).
func (g *ring) unmap() {
	if g.mem != nil && !g.unmapped {
		_ = unix.Munmap(g.mem)
		g.unmapped = true
	}
}

// slot returns slot i of the ring.
func (g *ring) slot(i int) []byte {
	off := (i/g.perBlock)*ringBlock + (i%g.perBlock)*g.frameSize
	return g.mem[off : off+g.frameSize : off+g.frameSize]
}

func slotStatus(s []byte) *uint32 { return (*uint32)(unsafe.Pointer(&s[0])) }

// ready reports whether the next slot is the user's.
func (g *ring) ready() bool {
	return atomic.LoadUint32(slotStatus(g.slot(int(g.head.Load()))))&unix.TP_STATUS_USER != 0
}

// ringRecv is the RawConn callback (Control for TryRead, Read for Read)
// that takes frames from the ring into r.rbufs. It returns false, so that
// Read waits, when the ring had no frame for us; it leaves the number
// delivered in r.rn.
func (r *rxState) ringRecv(fd uintptr) bool {
	g := &r.ring
	bufs, sizes, off := r.rbufs, r.rsizes, r.roff
	took := 0
	n := 0
	head := int(g.head.Load())
	for n < len(bufs) && r.pend == r.got && r.errno == 0 {
		s := g.slot(head)
		st := atomic.LoadUint32(slotStatus(s))
		if st&unix.TP_STATUS_USER == 0 {
			break
		}
		took++
		n += r.ringFrame(fd, s, st, bufs[n:], sizes[n:], off)
		// The slot is read: hand it back (release), then look at the next.
		atomic.StoreUint32(slotStatus(s), unix.TP_STATUS_KERNEL)
		if head++; head == g.frames {
			head = 0
		}
	}
	if took > 0 {
		g.head.Store(uint32(head))
		r.e.st.rxRingFrames.Add(uint64(took))
	}
	r.rn = n
	return took > 0 || r.errno != 0
}

// ringFrame delivers the frame in slot s (status st) to bufs[0], or, if it
// is a GSO super-frame or waits whole on the socket (TP_STATUS_COPY),
// makes it the pending frame and delivers what of it fits in bufs. It
// returns the number of frames delivered.
func (r *rxState) ringFrame(fd uintptr, s []byte, st uint32, bufs [][]byte, sizes []int, off int) int {
	e := r.e
	h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&s[0]))
	if st&unix.TP_STATUS_COPY != 0 {
		fl, ok := r.recvCopy(fd)
		if !ok {
			return 0
		}
		r.flen[0] = fl
		r.pend, r.got, r.seg = 0, 1, 0
		return r.deliverPending(bufs, sizes, off)
	}
	mac, snap := int(h.Mac), int(h.Snaplen)
	if mac < tpHdrLen+vnetHdrLen || mac+snap > len(s) || (int(h.Net)-vnetHdrLen)%unix.TPACKET_ALIGNMENT != 0 {
		e.st.rxMalformed.Add(1) // no virtio_net_hdr in the slot, or out of bounds
		return 0
	}
	if snap < int(h.Len) {
		// Larger than a slot, and the kernel kept no copy: the socket
		// receive buffer was full.
		e.st.rxKernelDrop.Add(1)
		return 0
	}
	if snap < ethHdr {
		e.st.rxRunt.Add(1)
		return 0
	}
	f := s[mac : mac+snap]
	vh := parseVnetHdr(s[mac-vnetHdrLen : mac])
	if vh.gsoType != vnetGSONone {
		// A super-frame small enough for a slot: split it from the
		// overflow buffer like one that came whole from the socket.
		copy(r.vnet[:vnetHdrLen], s[mac-vnetHdrLen:mac])
		copy(r.over[0], f)
		r.flen[0] = snap
		r.pend, r.got, r.seg = 0, 1, 0
		return r.deliverPending(bufs, sizes, off)
	}
	out := bufs[0][off:]
	if snap > len(out) {
		e.st.rxTooLarge.Add(1)
		return 0
	}
	copy(out, f)
	if vh.flags&vnetFlagNeedsCsum != 0 && !finishChecksum(out[:snap], vh.csumStart, vh.csumOffset) {
		e.st.rxMalformed.Add(1)
		return 0
	}
	sizes[0] = snap
	return 1
}

// errNoCopy: a slot said TP_STATUS_COPY but the socket had no frame.
var errNoCopy = errors.New("afpacket: ring slot marked TP_STATUS_COPY without a queued frame")

// recvCopy reads the frame a TP_STATUS_COPY slot stands for from the
// socket queue: its virtio_net_hdr into r.vnet[0:10], the frame into
// r.over[0]. It returns the frame length, or pendTooLarge/pendRunt for a
// frame the pending queue drops and counts; false if there was nothing to
// deliver (counted, or r.errno set).
func (r *rxState) recvCopy(fd uintptr) (int, bool) {
	e := r.e
	setIov(&r.copyIov[0], r.vnet[:vnetHdrLen])
	setIov(&r.copyIov[1], r.over[0])
	r.copyMsg = unix.Msghdr{Iov: &r.copyIov[0]}
	r.copyMsg.SetIovlen(2)
	for {
		e.st.rxSyscalls.Add(1)
		n, _, errno := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.copyMsg)), unix.MSG_DONTWAIT) // cannot sleep: see mmsg
		switch errno {
		case 0:
			e.st.rxCopies.Add(1)
			fl := int(n) - vnetHdrLen
			switch {
			case r.copyMsg.Flags&unix.MSG_TRUNC != 0:
				return pendTooLarge, true
			case fl < ethHdr:
				return pendRunt, true
			}
			return fl, true
		case unix.EINTR, unix.ENOBUFS:
			// ENOBUFS: a send's device drop left in sk_err (see
			// txState.send), returned before the frame.
			continue
		case unix.EAGAIN:
			// Cannot happen: the clone is queued before the slot is
			// handed over. Counted rather than trusted.
			e.st.rxMalformed.Add(1)
			return 0, false
		default:
			r.errno = errno
			return 0, false
		}
	}
}
