//go:build linux

package udp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IPv4 receive from a packet socket's RX ring (Config.RxRing).
//
// In place of the raw socket, a SOCK_DGRAM packet socket for ETH_P_IP on
// every interface, with the same filter (from the IPv4 header on, which is
// where a SOCK_DGRAM packet socket's data starts) behind a check that the
// packet is for this host (PACKET_HOST; PACKET_IGNORE_OUTGOING drops what
// we send), and a TPACKET_V2 PACKET_RX_RING mapped into our address space.
// The kernel's tpacket_rcv copies each accepted packet into the next slot
// and flips its tp_status to TP_STATUS_USER; an empty poll is then one
// atomic load instead of a recvmmsg. Under emulation a system call costs
// several µs: in the 6.1 TCG guest of bench-vs-rxe, a busy-polled UDP
// ping-pong shaped like goroce's send_lat traffic (interop/udplat -connect
// -gso 2) took 12–16 µs per half round trip with -ring against 16–25 µs
// with -raw (docs/performance.md, session 9).
//
// A packet longer than a slot (a UDP GSO super-datagram from a peer on
// loopback or a veth) is truncated in the slot, and PACKET_COPY_THRESH
// makes the kernel also queue it whole on the socket and mark the slot
// TP_STATUS_COPY, in ring order: ringRecv then takes it with one recvfrom.
//
// What changes against the raw socket: the packet socket sees packets
// before the IP layer does. So this path checks the IPv4 header checksum
// itself (deliver4), and it does not see the host's firewall: a packet
// that an INPUT rule would drop still reaches the ring. That is why the
// ring is opt-in.
//
// Slot access follows the afpacket link's ring (acquire load of the
// status before reading the slot, release store of TP_STATUS_KERNEL after
// the last read), and happens only inside RawConn callbacks, so Close can
// unmap the ring once the socket's file is closed.

const (
	// rxRingBlock is tp_block_size (16 pages).
	rxRingBlock = 64 << 10
	// rxRingDataOff is where tpacket_rcv puts the network header of a
	// SOCK_DGRAM packet: TPACKET_ALIGN(TPACKET2_HDRLEN + 16).
	rxRingDataOff = (32 + 20 + 16 + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	// rxRingSlotMax holds the largest RoCE packet (4096 bytes of payload,
	// IPv4, UDP, BTH, extended headers, pad and ICRC); longer packets
	// take the TP_STATUS_COPY path.
	rxRingSlotMax = (rxRingDataOff + maxRoCEPacket + ipv4Hdr + udpHdr + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	// DefaultRxRingBytes is the size of each receive queue's ring.
	DefaultRxRingBytes = 2 << 20
)

// rxRing is one receive queue's mapped ring.
type rxRing struct {
	mem       []byte
	frameSize int
	perBlock  int
	frames    int
	// head is the next slot. Only the reader moves it; it is atomic
	// because WaitRead looks at it concurrently (ready).
	head     atomic.Uint32
	unmapped bool
}

// openRxRing opens the packet socket of one receive queue with filter
// prog (an IPv4-header-relative program such as acceptUDPToQP), maps its
// ring and binds it. It returns the socket and the ring.
func openRxRing(mtu, rcvbuf int, prog []unix.SockFilter) (int, *rxRing, error) {
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, nil, fmt.Errorf("udp: packet socket (needs CAP_NET_RAW): %w", err)
	}
	fail := func(what string, err error) (int, *rxRing, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("udp: packet socket: %s: %w", what, err)
	}
	setBuffers(fd, rcvbuf, 0)
	if err := attachFilter(fd, hostOnly(prog)); err != nil {
		return fail("filter", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING (Linux 4.20+)", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fail("PACKET_VERSION TPACKET_V2", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return fail("PACKET_COPY_THRESH", err)
	}
	req := rxRingGeometry(mtu, DefaultRxRingBytes)
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail(fmt.Sprintf("PACKET_RX_RING %d x %d-byte blocks, %d-byte slots", req.Block_nr, req.Block_size, req.Frame_size), err)
	}
	mem, err := unix.Mmap(fd, 0, int(req.Block_size*req.Block_nr), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	// Every interface: a packet for our address may arrive on any of them.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto)}); err != nil {
		unix.Munmap(mem)
		return fail("bind", err)
	}
	g := &rxRing{mem: mem, frameSize: int(req.Frame_size), frames: int(req.Frame_nr),
		perBlock: int(req.Block_size / req.Frame_size)}
	return fd, g, nil
}

// rxRingGeometry sizes a ring of about bytes whose slots hold an IP
// packet of mtu bytes, at most rxRingSlotMax.
func rxRingGeometry(mtu, bytes int) unix.TpacketReq {
	fs := (rxRingDataOff + mtu + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	fs = min(fs, rxRingSlotMax)
	blocks := max(1, bytes/rxRingBlock)
	per := rxRingBlock / fs
	return unix.TpacketReq{Block_size: rxRingBlock, Block_nr: uint32(blocks),
		Frame_size: uint32(fs), Frame_nr: uint32(blocks * per)}
}

// hostOnly prefixes prog with a check that the packet is addressed to
// this host at the link layer (skb->pkt_type PACKET_HOST): a packet
// socket also sees broadcasts and, in promiscuous mode, other hosts'
// traffic. prog's jumps are relative, so it runs unchanged after it.
func hostOnly(prog []unix.SockFilter) []unix.SockFilter {
	out := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: skfAdOff + skfAdPktType},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.PACKET_HOST, Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	return append(out, prog...)
}

// The classic BPF ancillary load of skb->pkt_type (linux/filter.h:
// SKF_AD_OFF is -0x1000, SKF_AD_PKTTYPE 4).
const (
	skfAdOff     = 0xFFFFF000
	skfAdPktType = 4
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (g *rxRing) slot(i int) []byte {
	off := (i/g.perBlock)*rxRingBlock + (i%g.perBlock)*g.frameSize
	return g.mem[off : off+g.frameSize : off+g.frameSize]
}

func ringStatus(s []byte) *uint32 { return (*uint32)(unsafe.Pointer(&s[0])) }

// ready reports whether the next slot is the user's (sockpoll's ready: a
// ring's packets are not on the socket queue, where a peek would look).
func (g *rxRing) ready() bool {
	return atomic.LoadUint32(ringStatus(g.slot(int(g.head.Load()))))&unix.TP_STATUS_USER != 0
}

// unmap releases the mapping once the socket is closed.
func (g *rxRing) unmap() {
	if g != nil && !g.unmapped {
		_ = unix.Munmap(g.mem)
		g.unmapped = true
	}
}

// ringRecv is the RawConn callback that stands for recvmmsg when r reads
// a ring: it moves up to r.nmsg packets from the ring into r.own (a
// TP_STATUS_COPY packet whole from the socket), setting r.msgs[i].Len and
// the MSG_TRUNC flag as recvmmsg would, and leaves their number in r.n.
// It returns false, so that a Read waits, when the ring is empty.
func (r *rxState) ringRecv(fd uintptr) bool {
	g := r.ring
	n := 0
	head := int(g.head.Load())
	for n < r.nmsg {
		s := g.slot(head)
		st := atomic.LoadUint32(ringStatus(s))
		if st&unix.TP_STATUS_USER == 0 {
			break
		}
		m := &r.msgs[n]
		m.Hdr.Flags = 0
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&s[0]))
		net, snap := int(h.Net), int(h.Snaplen)
		switch {
		case st&unix.TP_STATUS_COPY != 0:
			k, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&r.own[n][0])),
				uintptr(len(r.own[n])), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0) // cannot sleep: see mmsgNow
			if errno != 0 {
				// The kernel queues the copy before it hands the slot
				// over; without one the packet is lost (deliver4 counts
				// it malformed, as every zero-length one).
				m.Len = 0
			} else {
				m.Len = uint32(min(int(k), len(r.own[n])))
				if int(k) > len(r.own[n]) {
					m.Hdr.Flags = unix.MSG_TRUNC
				}
			}
		case net < rxRingDataOff || net+snap > len(s):
			m.Len = 0 // counted malformed by deliver4
		default:
			// snap < tp_len: longer than the slot and not copied (the
			// socket's receive buffer was full): dropped as truncated.
			m.Len = uint32(copy(r.own[n], s[net:net+snap]))
			if snap < int(h.Len) {
				m.Hdr.Flags = unix.MSG_TRUNC
			}
		}
		atomic.StoreUint32(ringStatus(s), unix.TP_STATUS_KERNEL)
		if head++; head == g.frames {
			head = 0
		}
		n++
	}
	if n > 0 {
		g.head.Store(uint32(head))
		r.e.st.rxRing.Add(uint64(n))
	}
	r.n = n
	return n > 0
}
