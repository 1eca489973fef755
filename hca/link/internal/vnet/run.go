package vnet

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// Send side: grouping a batch of RoCEv2 frames into UDP GSO super-packets
// for the kernel to segment (TUN with TUNSETOFFLOAD, a packet socket with
// PACKET_VNET_HDR). Both links build their iovecs from these pieces:
//
//	[virtio_net_hdr, L2 header, IP, UDP]  from Runs.Header, in the link's slot
//	frame 0's UDP payload                 the caller's bytes
//	frame 1's UDP payload (maybe without  the caller's bytes, and a 4-byte
//	  its ICRC, then a corrected ICRC)      corrected ICRC (Runs.Payload)
//	...
//
// A run is RoCEv2 packets with equal L2, IP and UDP headers but for the
// lengths, IPv4 ID and checksums (so one flow: same MACs, addresses, ports,
// TOS, TTL, DF), all of one size but a shorter last one. Kernel
// segmentation gives segment i the IPv4 ID id0+i (inet_gso_segment); a
// frame built with another ID gets its ICRC corrected for id0+i by CRC
// linearity, from a 4-byte copy: the caller's bytes are never written.

// MaxRunSegments bounds a super-packet (UDP_MAX_SEGMENTS of older kernels;
// 6.x allows 128).
const MaxRunSegments = 64

// MaxRoCEPacket is the longest BTH-through-ICRC an IBA packet can be (BTH,
// AtomicETH, 4096 bytes of payload, ICRC): a longer UDP payload can only
// be a super-packet.
const MaxRoCEPacket = 12 + 28 + 4096 + 4

// MinRunPayload is the shortest UDP payload of a super-packet: two packets
// of a BTH and an ICRC each. FixedRunSegment and EqualRunSegment find no
// run in anything shorter, so a receiver may pass a shorter datagram on as
// one packet without looking at its headers.
const MinRunPayload = 2 * (12 + 4)

// HeaderRoom is the most bytes Runs.Header writes for an L2 header of l2
// bytes: virtio_net_hdr, L2, IPv6 and UDP headers.
func HeaderRoom(l2 int) int { return HdrLen + l2 + ipv6Len + udpLen }

// Runs groups frames into super-packets; one per sending link, single
// owner. L2 is the length of the header before the IP header (0 for a TUN,
// 14 for untagged Ethernet; an Ethernet frame must carry ethertype IPv4 or
// IPv6 there), USO4 and USO6 the families the kernel segments.
type Runs struct {
	L2         int
	USO4, USO6 bool

	ids IDCache
}

// HeaderLen returns the IP+UDP header length of f (after its L2 header) if
// f may start a super-packet: a RoCEv2 packet (UDP to 4791, room for a BTH
// and an ICRC) over IPv4 without options and not a fragment, or IPv6
// without extension headers, whose header lengths describe f exactly, of a
// family the kernel segments. It returns 0 otherwise.
func (r *Runs) HeaderLen(f []byte) int {
	l2 := r.L2
	if len(f) < l2+ipv4Len {
		return 0
	}
	if l2 >= 2 {
		et := binary.BigEndian.Uint16(f[l2-2:])
		if et != 0x0800 && et != 0x86DD {
			return 0
		}
	}
	p := f[l2:]
	var hl int
	switch {
	case p[0] == 0x45 && r.USO4:
		hl = ipv4Len + udpLen
		if p[9] != 17 || binary.BigEndian.Uint16(p[6:])&0x3FFF != 0 ||
			int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			return 0
		}
	case p[0]>>4 == 6 && r.USO6:
		hl = ipv6Len + udpLen
		if len(p) < hl || p[6] != 17 || int(binary.BigEndian.Uint16(p[4:])) != len(p)-ipv6Len {
			return 0
		}
	default:
		return 0
	}
	if len(p) < hl+12+4 || int(binary.BigEndian.Uint16(p[hl-4:])) != len(p)-hl+udpLen ||
		binary.BigEndian.Uint16(p[hl-6:]) != roceV2Port {
		return 0
	}
	return hl
}

const roceV2Port = 4791

// sameRun reports whether g may follow prev in the run started by first,
// as its segment number segs-1: g is a RoCEv2 packet no longer than first
// with the same headers but for the IP lengths, ID and checksum and the
// UDP length and checksum, and the run's IP packet stays under 64 KiB.
// All three include the L2 header.
func (r *Runs) sameRun(first, prev, g []byte, hl, segs int) bool {
	l2 := r.L2
	if len(g) > len(first) || len(prev) != len(first) || len(g) < l2+hl+12+4 ||
		string(first[:l2]) != string(g[:l2]) {
		return false
	}
	first, g = first[l2:], g[l2:]
	// 64 KiB IP packet; segs-1 full packets and g. For IPv6 the whole
	// packet too, not only its payload: the kernel segments anything of
	// 64 KiB or more (gso_max_size) before a device.
	if hl+(segs-1)*(len(first)-hl)+len(g)-hl > 65535 {
		return false
	}
	if hl == ipv4Len+udpLen {
		return string(first[:2]) == string(g[:2]) && string(first[6:10]) == string(g[6:10]) &&
			string(first[12:24]) == string(g[12:24]) &&
			int(binary.BigEndian.Uint16(g[2:])) == len(g) &&
			int(binary.BigEndian.Uint16(g[24:])) == len(g)-ipv4Len
	}
	return string(first[:4]) == string(g[:4]) && string(first[6:44]) == string(g[6:44]) &&
		int(binary.BigEndian.Uint16(g[4:])) == len(g)-ipv6Len &&
		int(binary.BigEndian.Uint16(g[44:])) == len(g)-ipv6Len
}

// Next returns the end j of the message that starts at frames[i] (frames
// taken from offset) and, if frames[i:j] is a super-packet, its IP+UDP
// header length hl; hl is 0 and j is i+1 for a frame sent alone.
//
// A run whose UDP payload fits one RoCE packet goes whole only in a shape
// a receiver that sees it unsegmented (the udp link's raw IPv4 socket, an
// AF_XDP socket) can tell from one packet (short.go): led by a packet
// without payload (an ACK), whose opcode has one length only (e.g. an ACK
// and the 2-byte SEND after it, 20 bytes each), or 2, 4, ... 64 packets of
// one length; the rest of it goes in the next calls.
func (r *Runs) Next(frames [][]byte, offset, i int) (j, hl int) {
	f := frames[i][offset:]
	hl = r.HeaderLen(f)
	if hl == 0 {
		return i + 1, 0
	}
	j = r.extent(frames, offset, i, hl)
	fixed := FixedSegment(f[r.L2+hl:]) == len(f)-r.L2-hl
	if !fixed && hl == ipv4Len+udpLen && j-i >= 2 && j < len(frames) {
		j = r.leaveTail(frames, offset, i, j, hl)
	}
	if !fixed && j-i >= 2 && r.payload(frames[i:j], offset, hl) <= MaxRoCEPacket {
		j = i + ShortRunLen(j-i, len(frames[j-1]) < len(frames[i]))
	}
	if j == i+1 {
		return i + 1, 0
	}
	return j, hl
}

// extent returns the end of the longest run that frames[i] (header length
// hl) may start: frames that sameRun admits, at most MaxRunSegments, a
// shorter one ending it.
func (r *Runs) extent(frames [][]byte, offset, i, hl int) int {
	f := frames[i][offset:]
	j := i + 1
	for j < len(frames) && j-i < MaxRunSegments &&
		r.sameRun(f, frames[j-1][offset:], frames[j][offset:], hl, j-i+1) {
		j++
		if len(frames[j-1])-offset < len(f) {
			break // a shorter packet ends the run
		}
	}
	return j
}

// leaveTail returns where the IPv4 run frames[i:j], cut at the segment or
// size cap, should end so that the rest of its flow is not sent frame by
// frame: an IPv4 run no longer than MaxRoCEPacket goes whole only in the
// shapes of short runs (see Next), so the 64 packets of a 65000-byte SEND
// at IB MTU 1024 (the last one shorter) went as 62 + 1 + 1. Full segments
// move from this run's end to the tail until the tail can be a
// super-packet too: 60 + 4. (The udp link's send path does the same for
// its GSO datagrams.)
func (r *Runs) leaveTail(frames [][]byte, offset, i, j, hl int) int {
	f := frames[i][offset:]
	seg := len(f) - r.L2 - hl
	if len(frames[j-1])-offset != len(f) || !r.sameRun(f, frames[j-1][offset:], frames[j][offset:], hl, 2) {
		return j // the flow does not go on: nothing to balance
	}
	sum := r.payload(frames[i:j], offset, hl)
	if sum <= MaxRoCEPacket {
		return j
	}
	tail := r.payload(frames[j:r.extent(frames, offset, j, hl)], offset, hl)
	j, _ = BalanceTail(i, j, seg, sum, tail)
	return j
}

// BalanceTail moves full segments (seg bytes each) from the end of the
// IPv4 run [i, j), sum bytes of UDP payload, to the tail run after it,
// tail bytes, until the tail is longer than MaxRoCEPacket (so that it can
// be a super-packet too), while the run keeps at least two segments and
// more than MaxRoCEPacket bytes. It returns the run's new end and sum.
func BalanceTail(i, j, seg, sum, tail int) (int, int) {
	for tail <= MaxRoCEPacket && j-1-i >= 2 && sum-seg > MaxRoCEPacket {
		j--
		sum -= seg
		tail += seg
	}
	return j, sum
}

// FixedSegment returns the one length (BTH through ICRC) a packet whose
// BTH starts p can have when its opcode carries no payload (ACK, atomic
// ACK, RDMA READ request, atomic request, CNP; bth.Opcode.FixedHdrLen),
// else 0. A super-packet led by such a packet tells its segment size by
// its first byte: the udp link's receiver splits short runs by it.
func FixedSegment(p []byte) int {
	if n := bth.Opcode(p[0]).FixedHdrLen(); n > 0 {
		return n + 4 // + ICRC
	}
	return 0
}

// payload is the UDP payload of a run: its frames without headers.
func (r *Runs) payload(run [][]byte, offset, hl int) int {
	n := 0
	for _, g := range run {
		n += len(g) - offset - r.L2 - hl
	}
	return n
}

// Header writes the super-packet header of run (from Next) into slot
// (HeaderRoom(L2) bytes) and returns its length: a virtio_net_hdr
// {NEEDS_CSUM, UDP_L4, gso_size, hdr_len and csum_start counting the L2
// header, csum_offset 6}, the first frame's L2 header, its IP and UDP
// headers with the run's lengths, the IPv4 header checksum and the UDP
// pseudo-header sum in the UDP checksum (CHECKSUM_PARTIAL, as udp_send_skb
// leaves it).
func (r *Runs) Header(slot []byte, run [][]byte, offset, hl int) int {
	l2 := r.L2
	f := run[0][offset:]
	plen := r.payload(run, offset, hl)
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(l2 + hl),
		GSOSize: uint16(len(f) - l2 - hl), CsumStart: uint16(l2 + hl - udpLen), CsumOffset: 6}
	h.Encode(slot)
	n := HdrLen + l2 + hl
	copy(slot[HdrLen:n], f[:l2+hl])
	sh := slot[HdrLen+l2 : n]
	u := sh[hl-udpLen:]
	ulen := udpLen + plen
	binary.BigEndian.PutUint16(u[4:], uint16(ulen))
	if sh[0]>>4 == 4 {
		binary.BigEndian.PutUint16(sh[2:], uint16(hl+plen))
		SetIPv4Checksum(sh[:ipv4Len])
	} else {
		binary.BigEndian.PutUint16(sh[4:], uint16(ulen))
	}
	binary.BigEndian.PutUint16(u[6:], Fold(PseudoSum(sh, ulen)))
	return n
}

// Payload returns segment s of run (hl from Next): the UDP payload of
// run[s]. If the kernel will give the segment an IPv4 ID other than the
// one its ICRC was computed with (id0+s, id0 the first frame's), pay
// stops before the ICRC and patched is true: the corrected ICRC is in
// icrc[:4], to be sent after pay.
func (r *Runs) Payload(run [][]byte, offset, hl, s int, icrc []byte) (pay []byte, patched bool) {
	g := run[s][offset+r.L2:]
	pay = g[hl:]
	if hl != ipv4Len+udpLen {
		return pay, false
	}
	id := binary.BigEndian.Uint16(g[4:])
	want := binary.BigEndian.Uint16(run[0][offset+r.L2+4:]) + uint16(s)
	if id == want {
		return pay, false
	}
	c := binary.LittleEndian.Uint32(g[len(g)-4:]) ^ r.ids.Get(len(g)).Delta(want^id)
	binary.LittleEndian.PutUint32(icrc[:4], c)
	return pay[:len(pay)-4], true
}
