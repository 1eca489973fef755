//go:build linux

package afpacket

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The transmit ring: PACKET_TX_RING, TPACKET_V2, on a second packet socket.
//
// Write copies each message (a frame, or a UDP GSO super-packet built by
// vnet.Runs) into the next free slot of a ring mapped into our address
// space, stores TP_STATUS_SEND_REQUEST in the slot's status word, and
// kicks the kernel once per batch with a send(fd, NULL, 0, MSG_DONTWAIT).
// tpacket_snd (net/packet/af_packet.c) then builds each skb with the
// slot's pages as fragments instead of copying the frame in
// (tpacket_fill_skb copies only the first hdr_len bytes), and hands the
// slot back (TP_STATUS_AVAILABLE, tpacket_destruct_skb) when the skb is
// freed. So the copy sendmmsg made in the kernel becomes the copy Write
// makes into the slot, in user space.
//
// A device that passes the skb on to another stack does not keep the
// saving: tpacket_fill_skb marks the skb zero-copy (skb_zcopy_set_nouarg),
// and a veth (dev_forward_skb) or a packet tap (deliver_skb) copies such
// fragments into kernel pages first (skb_orphan_frags -> skb_copy_ubufs),
// so that the slot may be reused before the peer has read it. Over a veth
// the kernel therefore still copies every frame once, as sendmmsg did;
// what is left is one system call per batch that reads the frames where
// they are. A real NIC DMAs from the slot.
//
// The socket is separate from the receiving one: the receive ring is
// mapped alone on that socket, and a second ring may not be added to a
// mapped socket (packet_set_ring refuses while po->mapped). It is bound to
// the interface with protocol 0, so it receives nothing and is no tap for
// outgoing frames; tpacket_fill_skb's packet_parse_headers sets
// skb->protocol from each frame's Ethernet header.
//
// Slot layout (no PACKET_TX_HAS_OFF):
//
//	0   struct tpacket2_hdr: tp_status, tp_len (virtio_net_hdr + frame), ...
//	32  struct virtio_net_hdr (PACKET_VNET_HDR, as on the sendmmsg path)
//	42  the frame, Ethernet header first
//
// 32 is TPACKET2_HDRLEN - sizeof(struct sockaddr_ll) (tpacket_parse_header).
// Slots hold a whole super-packet (up to 64 KiB of IP packet): whole pages
// (17 of 4 KiB), so a frame's fragments never need more than
// MAX_SKB_FRAGS (17) pages, in 1 MiB blocks (15 slots per block; a block
// is one order-8 allocation, or vmalloc). With Config.NoGSO a slot holds
// one MTU-sized frame. The default ring is 4 MiB: 60 super-packet slots,
// a 64-frame batch of 1 KiB RoCE packets being one slot.
//
// One message per slot. Until the first super-packet went out (probed:
// sendmmsg's errno is the kernel's verdict on UDP_L4, see txState.send) a
// batch's super-packets and everything after them go by sendmmsg; so does
// the rest of a batch when the next slot is still the kernel's (the ring
// is full: skbs not yet freed), counted in TxRingFull. Frames keep their
// order: the ring part is handed over before sendmmsg runs.
//
// After the kick, tpacket_snd has taken every SEND_REQUEST slot in order
// (status SENDING or AVAILABLE) unless:
//
//   - the socket send buffer was full (sock_alloc_send_skb): the kick
//     returns the bytes taken so far, or EAGAIN, and the rest keep
//     SEND_REQUEST; Write waits for writability and kicks
//     again (it returns only once the kernel has every frame);
//   - the device dropped a frame (ENOBUFS: a full veth backlog, an
//     nftables egress drop): tpacket_snd puts SEND_REQUEST back on that
//     slot and stops, to retry it at the next kick. A retry would re-roll
//     netcfg.AddLoss's drop, so Write loses the frame instead, as on the
//     sendmmsg path: it sets the slot's tp_len to 0 and kicks again. With
//     PACKET_LOSS on, tpacket_snd skips a malformed slot (here: shorter than
//     its virtio_net_hdr) and marks it AVAILABLE. The frame is counted in
//     TxDropped.
//   - the kernel refused a slot as malformed (a virtio_net_hdr it does not
//     take, too many fragments): with PACKET_LOSS it skips the slot, marks
//     it AVAILABLE and goes on, so the status cannot tell it from a sent
//     one, but the kick's return value, the bytes of the frames sent, comes
//     short. Write then turns GSO off for good (if super-packets were in the
//     kick: the only slot kind the kernel might refuse) and counts the kick
//     in TxRingSkipped; the skipped frames are lost. PACKET_LOSS is needed
//     for ENOBUFS above: without it the kernel never moves past a slot it
//     cannot send (TP_STATUS_WRONG_FORMAT stops the ring until user space
//     rewrites that slot), and a dropped frame could only be retried.
//
// Ordering: Write stores the slot's bytes, then tp_status with an atomic
// store; the kernel reads tp_status (READ_ONCE, smp_rmb) before the slot,
// in the kick's system call. It writes AVAILABLE after its last use of the
// slot (smp_wmb in __packet_set_status); Write loads tp_status atomically
// before writing the slot again.
//
// All access to the mapping happens inside a RawConn callback on the
// socket (Write), which holds a reference on the file: Close closes the
// file, which waits for the callback to return, and unmaps afterwards.

const (
	// txDataOff is where tpacket_snd reads a slot's data.
	txDataOff = tpHdrLen - 20
	// txBlock is tp_block_size: a power-of-two number of pages, so that
	// the kernel's allocation of 2^order pages per block is not wasted.
	txBlock = 1 << 20
	// DefaultTxRingBytes is the transmit ring's size when
	// Config.TxRingBytes is 0.
	DefaultTxRingBytes = 4 << 20
	// maxTxRingBytes bounds Config.TxRingBytes.
	maxTxRingBytes = 64 << 20
	// txBusy: the kernel owns a slot (to send, or sending).
	txBusy = unix.TP_STATUS_SEND_REQUEST | unix.TP_STATUS_SENDING
)

// txRing is the mapped PACKET_TX_RING and its socket.
type txRing struct {
	file      *os.File
	rc        syscall.RawConn
	mem       []byte // nil: Write uses sendmmsg only
	unmapped  bool
	frameSize int
	perBlock  int
	frames    int
	blockSize int
	// head is the next slot Write fills. The kernel's own head (the next
	// slot tpacket_snd looks at) equals it whenever no Write is running.
	head int
}

// txRingGeometry sizes a transmit ring of about bytes for an mtu-byte link:
// super-packet slots (whole pages) when gso, else MTU-sized slots.
func txRingGeometry(mtu, bytes, pageSize int, gso bool) unix.TpacketReq {
	var fs int
	if gso {
		fs = txDataOff + vnetHdrLen + maxFrame
		fs = (fs + pageSize - 1) / pageSize * pageSize
	} else {
		fs = txDataOff + vnetHdrLen + ethHdr + 4 + mtu
		fs = (fs + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	}
	bs := txBlock
	for bs < fs {
		bs *= 2
	}
	blocks := max(1, bytes/bs)
	per := bs / fs
	return unix.TpacketReq{Block_size: uint32(bs), Block_nr: uint32(blocks),
		Frame_size: uint32(fs), Frame_nr: uint32(blocks * per)}
}

// txRingEnv is the environment variable that, set to 0 or 1, turns the
// transmit ring off or on (overriding Config.NoTxRing) for A/B
// measurements with programs whose flags do not reach Config.
const txRingEnv = "GOROCE_AFPACKET_TXRING"

// setupTxRing opens the transmit socket with its ring, in the endpoint's
// namespace (open calls it after binding the receiving socket). On failure
// nothing is left open and Write uses sendmmsg.
func (e *Endpoint) setupTxRing() error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	g := &e.tx.ring
	if err := e.txRingOpts(fd, g); err != nil {
		unix.Close(fd)
		return err
	}
	if g.file, err = e.w.File(fd, "afpacket-tx:"+e.ifname); err != nil {
		// The mapping holds the socket (and its pinned ring) after the
		// descriptor closes: unmap it too.
		_ = unix.Munmap(g.mem)
		unix.Close(fd)
		g.mem = nil
		return err
	}
	if g.rc, err = g.file.SyscallConn(); err != nil {
		g.close()
		g.mem, g.file = nil, nil
		return err
	}
	return nil
}

func (e *Endpoint) txRingOpts(fd int, g *txRing) error {
	for _, o := range []struct {
		name string
		opt  int
		val  int
	}{
		{"PACKET_VERSION TPACKET_V2", unix.PACKET_VERSION, unix.TPACKET_V2},
		{"PACKET_VNET_HDR", unix.PACKET_VNET_HDR, 1},
		// Skip a slot the kernel cannot send rather than stop at it
		// (see above: how a device drop is lost).
		{"PACKET_LOSS", unix.PACKET_LOSS, 1},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, o.opt, o.val); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	req := txRingGeometry(e.mtu, e.cfg.TxRingBytes, os.Getpagesize(), !e.cfg.NoGSO)
	size := int(req.Block_size * req.Block_nr)
	if testTxRingBreak {
		req.Frame_nr++ // not blocks x frames per block: EINVAL
	}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req); err != nil {
		return fmt.Errorf("PACKET_TX_RING %d x %d-byte blocks, %d-byte frames: %w",
			req.Block_nr, req.Block_size, req.Frame_size, err)
	}
	// The ring bounds the bytes in flight; the send buffer (which counts
	// them too, sk_wmem_alloc) should not stop the kernel first.
	snd := e.cfg.SendBuf
	if snd == 0 {
		snd = size + size/2
	}
	setBuffers(fd, 0, snd)
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap of the %d-byte ring: %w", size, err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: 0, Ifindex: e.ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Munmap(mem)
		return fmt.Errorf("bind: %w", err)
	}
	g.mem, g.frameSize, g.frames = mem, int(req.Frame_size), int(req.Frame_nr)
	g.blockSize, g.perBlock = int(req.Block_size), int(req.Block_size/req.Frame_size)
	return nil
}

// testTxRingBreak makes, for tests, a ring request the kernel refuses.
var testTxRingBreak bool

// close closes the socket (waiting for a running Write callback), then
// unmaps the ring.
func (g *txRing) close() {
	if g.file != nil {
		g.file.Close()
	}
	if g.mem != nil && !g.unmapped {
		_ = unix.Munmap(g.mem)
		g.unmapped = true
	}
}

// slot returns slot i.
func (g *txRing) slot(i int) []byte {
	off := (i/g.perBlock)*g.blockSize + (i%g.perBlock)*g.frameSize
	return g.mem[off : off+g.frameSize : off+g.frameSize]
}

// TxRing reports whether Write sends through a PACKET_TX_RING: not with
// Config.NoTxRing or GOROCE_AFPACKET_TXRING=0, nor when the kernel refused
// the ring (TxRingErr).
func (e *Endpoint) TxRing() bool { return e.tx.ring.mem != nil }

// TxRingErr is why Open fell back to sendmmsg only, or nil.
func (e *Endpoint) TxRingErr() error { return e.txRingErr }

// Per-write ring state, in txState (io.go): rfirst[k] is slot k's first
// frame (rfirst[rn] the frames placed), rlen[k] its tp_len less the
// virtio_net_hdr (what tpacket_snd adds to its return value; 0 once the
// slot is to be skipped), rgso[k] whether it is a super-packet, rpat[k]
// its patched ICRCs, rk0 the first slot, rtaken the slots the kernel has
// taken, rfull that the ring ran out of slots.

// ringFrames sends a prefix of frames through the ring and returns how many
// are past (sent, or dropped by the device); the caller sends the rest by
// sendmmsg. Errors are the kick's, after the frames before it.
func (t *txState) ringFrames(frames [][]byte, offset int) (int, error) {
	e := t.e
	t.rframes, t.roff = frames, offset
	t.rn, t.rtaken, t.rfull, t.rplaced, t.rerrno = 0, 0, false, false, 0
	t.rdropFrames, t.rkicks, t.rskipped = 0, 0, 0
	t.gsoMsgs, t.gsoSegs, t.patched = 0, 0, 0
	err := t.rsender.Send(t.ring.rc)
	t.rframes = nil // retain no caller memory
	n := t.rfirst[t.rtaken]
	if t.rn == 0 {
		n = 0
	}
	if err == nil && t.rerrno != 0 {
		err = fmt.Errorf("afpacket: %s: transmit ring: %w", e.ifname, t.rerrno)
	}
	if err != nil {
		err = e.closedErr(err)
	}
	e.st.txFrames.Add(uint64(n - t.rdropFrames))
	e.st.txRingFrames.Add(uint64(n - t.rdropFrames))
	e.st.txRingKicks.Add(uint64(t.rkicks))
	if t.gsoMsgs > 0 {
		e.st.txGSO.Add(uint64(t.gsoMsgs))
		e.st.txGSOSegments.Add(uint64(t.gsoSegs))
	}
	if t.patched > 0 {
		e.st.txICRCPatched.Add(uint64(t.patched))
	}
	if t.rskipped > 0 {
		e.st.txRingSkipped.Add(uint64(t.rskipped))
	}
	if t.rfull && err == nil && n < len(frames) {
		e.st.txRingFull.Add(uint64(len(frames) - n))
	}
	return n, err
}

// ringWrite is the Sender callback: the first call fills slots, every
// call kicks until the kernel has taken them all (true) or the socket has
// no room (false: wait for writability).
func (t *txState) ringWrite(fd uintptr) bool {
	if !t.rplaced {
		t.rplaced = true
		t.place()
		if t.rn == 0 {
			if t.rstale {
				// Slots an error left behind still wait to be
				// skipped; nothing else would kick them.
				_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
				t.rkicks++
				t.rstale = errno != 0
			}
			return true
		}
	}
	return t.kick(fd)
}

// place copies messages of t.rframes into consecutive free slots from the
// ring's head and hands them to the kernel (SEND_REQUEST).
func (t *txState) place() {
	g := &t.ring
	frames, offset := t.rframes, t.roff
	gso := t.e.gso.Load()
	t.rk0 = g.head
	k, i := 0, 0
	for i < len(frames) && k < len(t.rlen) {
		j, hl := i+1, 0
		if gso {
			j, hl = t.runs.Next(frames, offset, i)
		}
		if hl > 0 && (!t.probed || refuseGSO) {
			break // the first super-packet goes by sendmmsg: its errno is the verdict
		}
		s := g.slot(g.head)
		st := (*uint32)(unsafe.Pointer(&s[0]))
		if atomic.LoadUint32(st)&txBusy != 0 {
			t.rfull = true
			break
		}
		d := s[txDataOff:]
		var l, pat int
		if hl == 0 {
			copy(d, noOffload[:])
			l = copy(d[vnetHdrLen:], frames[i][offset:])
		} else {
			run := frames[i:j]
			p := t.runs.Header(d, run, offset, hl)
			if testTxBadGSO {
				d[1] = 0x7F // a gso_type virtio_net_hdr_to_skb refuses
			}
			c := t.icrcs[:4]
			for s := range run {
				pay, patched := t.runs.Payload(run, offset, hl, s, c)
				p += copy(d[p:], pay)
				if patched {
					p += copy(d[p:], c)
					pat++
				}
			}
			l = p - vnetHdrLen
		}
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&s[0]))
		h.Len = uint32(vnetHdrLen + l)
		t.rfirst[k], t.rlen[k], t.rgso[k], t.rpat[k] = i, l, hl > 0, pat
		atomic.StoreUint32(st, unix.TP_STATUS_SEND_REQUEST)
		if g.head++; g.head == g.frames {
			g.head = 0
		}
		k++
		i = j
	}
	t.rn = k
	t.rfirst[k] = i
}

// testTxBadGSO makes, for tests, every super-packet in the ring carry a
// virtio_net_hdr the kernel refuses (EINVAL in virtio_net_hdr_to_skb), as
// a kernel without UDP_L4 would.
var testTxBadGSO bool

// rslot is the ring slot of this write's k-th message.
func (t *txState) rslot(k int) []byte {
	i := t.rk0 + k
	if i >= t.ring.frames {
		i -= t.ring.frames
	}
	return t.ring.slot(i)
}

// kick sends the placed slots: see the top of this file for what a short
// kick means.
func (t *txState) kick(fd uintptr) bool {
	for t.rtaken < t.rn {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		t.rkicks++
		before := t.rtaken
		for t.rtaken < t.rn {
			if atomic.LoadUint32((*uint32)(unsafe.Pointer(&t.rslot(t.rtaken)[0])))&unix.TP_STATUS_SEND_REQUEST != 0 {
				break
			}
			t.rtaken++
		}
		switch errno {
		case 0:
			t.rstale = false
			want, gso := 0, false
			for k := before; k < t.rtaken; k++ {
				want += t.rlen[k]
				gso = gso || t.rgso[k]
			}
			if int(n) < want {
				// The kernel skipped a slot it could not send.
				t.rskipped++
				if gso {
					t.e.gso.Store(false)
				}
			} else {
				t.countGSO(before, t.rtaken)
			}
			if t.rtaken < t.rn && t.rtaken == before {
				return false // send buffer full: wait for writability
			}
		case unix.EAGAIN:
			if t.rtaken == before {
				return false
			}
		case unix.EINTR:
		case unix.ENOBUFS:
			// The device dropped slot rtaken (SEND_REQUEST again): lose
			// it; the kernel skips a slot shorter than its
			// virtio_net_hdr. Those before it were sent.
			t.countGSO(before, t.rtaken)
			if t.rtaken < t.rn {
				t.skipSlot(t.rtaken)
			}
		default:
			// Not sent, and Write says so: the kernel must skip these
			// at the next kick rather than send them late.
			t.countGSO(before, t.rtaken)
			for k := t.rtaken; k < t.rn; k++ {
				(*unix.Tpacket2Hdr)(unsafe.Pointer(&t.rslot(k)[0])).Len = 0
			}
			t.rstale = t.rtaken < t.rn
			t.rerrno = errno
			return true
		}
	}
	return true
}

// skipSlot makes the kernel skip this write's k-th slot (PACKET_LOSS) and
// counts its frames as dropped by the device.
func (t *txState) skipSlot(k int) {
	(*unix.Tpacket2Hdr)(unsafe.Pointer(&t.rslot(k)[0])).Len = 0
	if t.rlen[k] != 0 {
		f := t.rfirst[k+1] - t.rfirst[k]
		t.rdropFrames += f
		t.e.st.txDropped.Add(uint64(f))
		t.rlen[k] = 0
	}
}

// countGSO counts the super-packets of slots [from, to) as sent.
func (t *txState) countGSO(from, to int) {
	for k := from; k < to; k++ {
		if t.rgso[k] && t.rlen[k] != 0 {
			t.probed = true
			t.gsoMsgs++
			t.gsoSegs += t.rfirst[k+1] - t.rfirst[k]
			t.patched += t.rpat[k]
		}
	}
}
