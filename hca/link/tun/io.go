//go:build linux

package tun

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/wire"
)

// scratchLen is the overflow room of every read: the largest frame a TAP
// can hold (64 KiB IP packet plus a tagged Ethernet header). A frame that
// spills into it did not fit the caller's buffer, or is a GSO
// super-packet.
const scratchLen = 65536 + wire.EthernetLen + wire.VLANLen

// Receive path, per Read (rxState):
//  1. Deliver the rest of a super-packet an earlier Read split only in
//     part.
//  2. readv each packet into [virtio_net_hdr] [the caller's
//     bufs[n][offset:]] [overflow], until the batch is full or the device
//     queue is empty (the first wait in the netpoller).
//  3. Without GSO: a frame that spilled into the overflow is dropped
//     (RxTooLarge), a frame that is not RoCE too (RxNotRoCE), a partial
//     UDP checksum (NEEDS_CSUM) is finished in place; nothing is copied.
//  4. A UDP_L4 super-packet is made contiguous in super (the overflow
//     already sits right behind where its head goes, so only the head, at
//     most the caller's buffer, is copied) and split into the next
//     buffers as the kernel would have segmented it (vnet.Layout.Segment);
//     segments that do not fit this batch stay there for the next Read.
type rxState struct {
	e     *Endpoint
	hdr   [vnet.HdrLen]byte
	iov   [3]unix.Iovec
	super []byte // 2*scratchLen: the overflow of every read, and a super-packet being split

	// A super-packet being split: super[:plen], next segment seg.
	pending bool
	plen    int
	seg     int
	lay     vnet.Layout

	// State of one Read. The per-frame counts go to the shared counters
	// once per Read.
	csums, segs int
	bufs        [][]byte
	sizes       []int
	offset      int
	n           int
	errno       unix.Errno

	fn func(fd uintptr) bool // drain the device into bufs
}

func (r *rxState) init(e *Endpoint) {
	r.e = e
	r.super = make([]byte, 2*scratchLen)
	r.iov[0].Base = &r.hdr[0]
	r.iov[0].SetLen(vnet.HdrLen)
	r.fn = r.drain
}

// Read implements link.Endpoint. It waits for the first frame, then takes
// whatever else is queued, up to the batch size. Frames larger than their
// buffer (RxTooLarge) and frames that are not RoCE (RxNotRoCE) are dropped;
// a UDP GSO super-packet is split into its packets, which may be spread
// over several Reads.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	// A buffer with no room after offset ends the batch (a frame read
	// into it would be dropped as too large).
	bufs, err := link.ReadBatch("tun", bufs, sizes, offset, e.cfg.BatchSize)
	if len(bufs) == 0 {
		return 0, err
	}
	r := &e.rx
	r.bufs, r.sizes, r.offset, r.n, r.errno = bufs, sizes, offset, 0, 0
	defer r.reset()
	if r.pending {
		r.deliver()
		if r.n == len(bufs) {
			return r.result()
		}
	}
	// With frames in hand, drain returns true on EAGAIN: no wait.
	if err := e.rc.Read(r.fn); err != nil {
		if r.n > 0 {
			return r.result()
		}
		return 0, e.closedErr(err)
	}
	return r.result()
}

func (r *rxState) result() (int, error) {
	if r.csums > 0 {
		r.e.st.rxCsumPartial.Add(uint64(r.csums))
		r.csums = 0
	}
	if r.segs > 0 {
		r.e.st.rxGSOSegments.Add(uint64(r.segs))
		r.segs = 0
	}
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
	r.iov[1] = unix.Iovec{}
}

// drain reads frames until the batch is full or the device queue is
// empty. It returns false (wait in the netpoller) when nothing was read.
func (r *rxState) drain(fd uintptr) bool {
	e := r.e
	iov, niov := &r.iov[1], uintptr(2)
	if e.off.VnetHdr {
		iov, niov = &r.iov[0], 3
	}
	for r.n < len(r.bufs) && !r.pending {
		var dst []byte
		if b := r.bufs[r.n]; len(b) > r.offset {
			dst = b[r.offset:]
			r.iov[1].Base = &dst[0]
		} else {
			r.iov[1].Base = nil
		}
		r.iov[1].SetLen(len(dst))
		// The overflow starts where the head of a super-packet will be
		// copied to, so the super-packet is contiguous after one copy.
		k := min(len(dst), scratchLen)
		r.iov[2].Base = &r.super[k]
		r.iov[2].SetLen(scratchLen)
		// RawSyscall: the fd is O_NONBLOCK (device.go), so the call cannot
		// sleep, and one the scheduler saw would keep sysmon waking every
		// 20 µs and handing the P over (the udp link's mmsgNow).
		m, _, errno := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(iov)), niov)
		switch errno {
		case 0:
		case unix.EAGAIN:
			return r.n > 0
		case unix.EINTR:
			continue
		case unix.EFAULT:
			// The frame outgrew buffer and overflow together; the kernel
			// consumed it (tun_do_read frees the skb on error).
			e.st.rxTooLarge.Add(1)
			continue
		default:
			e.st.rxErrors.Add(1)
			r.errno = errno
			return true
		}
		size := int(m)
		var h vnet.Hdr
		if e.off.VnetHdr {
			if size < vnet.HdrLen {
				e.st.rxMalformed.Add(1)
				continue
			}
			size -= vnet.HdrLen
			h.Decode(r.hdr[:])
		}
		if h.GSOType != vnet.GSONone {
			r.split(dst, size, k, &h)
			continue
		}
		if size > len(dst) {
			e.st.rxTooLarge.Add(1)
			continue
		}
		if !isRoCE(dst[:size], e.format) {
			e.st.rxNotRoCE.Add(1)
			continue
		}
		if h.Flags&vnet.FlagNeedsCsum != 0 {
			if !vnet.FinishChecksum(dst[:size], int(h.CsumStart), int(h.CsumOffset), wire.IPv4Len) {
				e.st.rxMalformed.Add(1)
				continue
			}
			r.csums++
		}
		r.sizes[r.n] = size
		r.n++
	}
	return true
}

// split takes the super-packet just read (its first min(size, len(dst))
// bytes in dst, the rest at super[k:]) and delivers its segments.
func (r *rxState) split(dst []byte, size, k int, h *vnet.Hdr) {
	e := r.e
	if size > len(dst) && k != len(dst) {
		e.st.rxTooLarge.Add(1) // cannot happen: an IP packet is under scratchLen
		return
	}
	copy(r.super, dst[:min(size, len(dst))])
	f := r.super[:size]
	if !h.IsUDPL4() || e.format != link.FormatIP {
		// TCP or UFO: the device was not offered them. TAP: no offloads.
		e.st.rxMalformed.Add(1)
		return
	}
	if !isRoCE(f, e.format) {
		e.st.rxNotRoCE.Add(1)
		return
	}
	lay, err := vnet.ParseUDPGSO(f, 0, int(h.GSOSize))
	if err != nil {
		e.st.rxMalformed.Add(1)
		return
	}
	e.st.rxGSO.Add(1)
	r.lay, r.plen, r.seg, r.pending = lay, size, 0, true
	r.deliver()
}

// deliver writes the pending super-packet's next segments into the batch.
func (r *rxState) deliver() {
	e := r.e
	f := r.super[:r.plen]
	for r.pending && r.n < len(r.bufs) {
		var out []byte
		if b := r.bufs[r.n]; len(b) > r.offset {
			out = b[r.offset:]
		}
		k := r.lay.Segment(f, r.seg, out)
		if r.seg++; r.seg == r.lay.Segs {
			r.pending = false
		}
		if k == 0 {
			e.st.rxTooLarge.Add(1)
			continue
		}
		r.segs++
		r.sizes[r.n] = k
		r.n++
	}
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

// Send path, per Write (txState):
//  1. Check every frame (ErrBadFrame, link.ErrFrameTooLarge); the frames
//     before a bad one are sent.
//  2. Without a virtio-net header: one write(2) per frame.
//  3. With one: group the frames into messages. A run of RoCEv2 packets
//     with equal IP and UDP headers but for the lengths and the IPv4 ID
//     (so one flow: same addresses, ports, TOS, TTL, DF), equal size but a
//     shorter last one, becomes one super-packet: a virtio_net_hdr
//     {NEEDS_CSUM, UDP_L4, gso_size}, the first frame's headers with the
//     run's lengths, the IPv4 header checksum and the UDP pseudo-header sum
//     (CHECKSUM_PARTIAL, as udp_send_skb leaves it), then each frame's UDP
//     payload. Kernel segmentation gives segment i the IPv4 ID id0+i; a
//     frame built with another ID gets its ICRC corrected for id0+i by CRC
//     linearity, from a 4-byte copy: the caller's bytes are never written
//     or copied. Other frames go one each after a zero header.
//  4. writev each message, all in one netpoller round. EINVAL on a
//     super-packet (a kernel that took TUNSETOFFLOAD but not UDP_L4 from
//     the writer) turns GSO off for good and resends the run one by one.

// hdrSlot is a message's header room: virtio_net_hdr, IPv6 and UDP headers.
var hdrSlot = vnet.HeaderRoom(0)

type txMsg struct {
	iov, niov int // t.iovs[iov:iov+niov]
	frames    int
	gso       bool
}

// txState is the send side; the single writer owns it. Its slices are
// sized for a full batch at init, so a Write allocates nothing (the ICRC
// basis cache computes once per new packet length).
type txState struct {
	e      *Endpoint
	frames [][]byte
	offset int

	msgs  []txMsg
	iovs  []unix.Iovec
	hdrs  []byte // hdrSlot per message
	icrcs []byte // 4 per frame: corrected ICRCs
	runs  vnet.Runs

	// State of one round through RawConn.Write.
	nmsg, next int
	niov       int // iovs in use
	n          int // frames written (no header: the next frame)
	errno      unix.Errno
	fn         func(fd uintptr) bool
}

func (t *txState) init(e *Endpoint) {
	t.e = e
	t.fn = t.send
	if e.off.VnetHdr {
		n := e.cfg.BatchSize
		t.msgs = make([]txMsg, n)
		t.iovs = make([]unix.Iovec, 2*n+n)
		t.hdrs = make([]byte, hdrSlot*n)
		t.icrcs = make([]byte, 4*n)
		t.fn = t.sendv
		t.runs = vnet.Runs{L2: 0, USO4: e.off.USO4, USO6: e.off.USO6}
	}
}

// Write implements link.Endpoint. Frames are checked first; the frames
// before a bad one are sent and the bad one's error returned (ErrBadFrame,
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
	raceRelease()
	n, err := e.tx.write(bufs[:k], offset)
	if err != nil {
		return n, err
	}
	return n, bad
}

func (t *txState) write(frames [][]byte, offset int) (int, error) {
	e := t.e
	t.frames, t.offset, t.n, t.errno = frames, offset, 0, 0
	if e.off.VnetHdr {
		t.build(e.gso.Load())
	}
	err := e.rc.Write(t.fn)
	n := t.n
	if e.off.VnetHdr {
		n = 0
		for _, m := range t.msgs[:t.next] {
			n += m.frames
			if m.gso {
				e.st.txGSO.Add(1)
				e.st.txGSOSegments.Add(uint64(m.frames))
			}
		}
		clear(t.iovs[:t.niov]) // retain no caller memory
	}
	t.frames = nil
	e.st.txFrames.Add(uint64(n))
	switch {
	case err != nil:
		return n, e.closedErr(err)
	case t.errno == unix.EINVAL && e.off.VnetHdr && t.msgs[t.next].gso:
		// This kernel does not take UDP_L4 from a writer: resend the
		// rest one frame per message.
		e.gso.Store(false)
		m, err := t.write(frames[n:], offset)
		return n + m, err
	case t.errno != 0:
		e.st.txErrors.Add(1)
		return n, e.closedErr(fmt.Errorf("tun: write: %w", t.errno))
	}
	return n, nil
}

// send is the RawConn.Write callback without a virtio-net header.
func (t *txState) send(fd uintptr) bool {
	for t.n < len(t.frames) {
		f := t.frames[t.n][t.offset:]
		_, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&f[0])), uintptr(len(f)))
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

// refuseGSO plays, for tests, a kernel that takes TUNSETOFFLOAD but
// refuses UDP_L4 super-packets from the writer (EINVAL).
var refuseGSO bool

// sendv is the RawConn.Write callback with a virtio-net header: one
// writev per message.
func (t *txState) sendv(fd uintptr) bool {
	for t.next < t.nmsg {
		m := &t.msgs[t.next]
		if refuseGSO && m.gso {
			t.errno = unix.EINVAL
			return true
		}
		_, _, errno := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.iovs[m.iov])), uintptr(m.niov))
		switch errno {
		case 0:
			t.next++
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

// noOffload is the virtio_net_hdr before a frame sent whole.
var noOffload [vnet.HdrLen]byte

// build fills msgs and iovs for t.frames.
func (t *txState) build(gso bool) {
	e := t.e
	t.nmsg, t.next = 0, 0
	iov, fi, patched := 0, 0, 0
	for i := 0; i < len(t.frames); {
		j, hl := i+1, 0
		if gso && e.format == link.FormatIP {
			j, hl = t.runs.Next(t.frames, t.offset, i)
		}
		m := &t.msgs[t.nmsg]
		t.nmsg++
		*m = txMsg{iov: iov, frames: j - i, gso: hl > 0}
		if !m.gso {
			setIov(&t.iovs[iov], noOffload[:])
			setIov(&t.iovs[iov+1], t.frames[i][t.offset:])
			iov += 2
			m.niov = 2
			i = j
			fi++
			continue
		}
		run := t.frames[i:j]
		slot := t.hdrs[(t.nmsg-1)*hdrSlot : t.nmsg*hdrSlot]
		setIov(&t.iovs[iov], slot[:t.runs.Header(slot, run, t.offset, hl)])
		iov++
		for s := range run {
			c := t.icrcs[4*fi : 4*fi+4]
			pay, p := t.runs.Payload(run, t.offset, hl, s, c)
			setIov(&t.iovs[iov], pay)
			iov++
			if p {
				setIov(&t.iovs[iov], c)
				iov++
				patched++
			}
			fi++
		}
		m.niov = iov - m.iov
		i = j
	}
	t.niov = iov
	if patched > 0 {
		e.st.txICRCPatched.Add(uint64(patched))
	}
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
	} else if len(f) < wire.IPv4Len || (f[0]>>4 != 4 && f[0]>>4 != 6) ||
		(f[0]>>4 == 6 && len(f) < wire.IPv6Len) {
		// The kernel refuses other versions with EINVAL (tun_get_user);
		// a packet shorter than its header it takes and drops unseen.
		return fmt.Errorf("%w: %d bytes is no IPv4/IPv6 packet", ErrBadFrame, len(f))
	}
	if ip > e.mtu {
		return fmt.Errorf("%w: %d bytes for MTU %d", link.ErrFrameTooLarge, ip, e.mtu)
	}
	return nil
}
