//go:build linux

package afpacket

import (
	"encoding/binary"
	"errors"

	"github.com/goroce/goroce/wire"
)

// Offloaded frames: PACKET_VNET_HDR.
//
// A frame sent by a local UDP socket with UDP_SEGMENT (the udp link's GSO
// super-datagrams) is segmented only when it reaches a device that cannot
// carry it whole. A veth, a bridge and a TAP carry GSO skbs whole, so the
// packet socket on the far end of a veth receives one frame of up to 64 KiB
// holding many RoCE packets under one IP and UDP header, and, for frames of
// a local sender, a UDP checksum that is only the pseudo-header sum
// (CHECKSUM_PARTIAL: a NIC would finish it). With PACKET_VNET_HDR the
// kernel puts a struct virtio_net_hdr before every received frame saying
// so (gso_type, gso_size, NEEDS_CSUM with csum_start/csum_offset), and Read
// finishes the job the way the kernel's software segmentation and checksum
// help would (__udp_gso_segment, inet_gso_segment, skb_checksum_help):
//
//   - segment i carries bytes [i*gso_size, (i+1)*gso_size) of the UDP
//     payload (the last one the rest) under a copy of the headers;
//   - IPv4: total length, identification id+i (UDP_L4 GSO increments the
//     ID, TestGSOSegmentIPIDs in the udp link measures it), header checksum;
//     IPv6: payload length; UDP: length and a full checksum (0 written as
//     0xFFFF);
//   - a frame that is not GSO but flagged NEEDS_CSUM gets its checksum
//     finished at csum_start+csum_offset.
//
// The udp link computed each segment's ICRC for the IPv4 ID the kernel
// gives it, so the split packets verify; the ICRC masks the UDP checksum.
//
// The option applies to sends too: every sent frame is preceded by a zero
// header (no offload requested).

// vnetHdrLen is sizeof(struct virtio_net_hdr).
const vnetHdrLen = 10

// virtio_net_hdr flags and GSO types (include/uapi/linux/virtio_net.h).
const (
	vnetFlagNeedsCsum = 1
	vnetGSONone       = 0
	vnetGSOUDPL4      = 5
	vnetGSOECN        = 0x80
)

// maxFrame bounds a received frame: an Ethernet header, an 802.1Q tag and
// a 64 KiB IPv6 payload with its header.
const maxFrame = ethHdr + 4 + 40 + 65535

// vnetHdr is a decoded struct virtio_net_hdr. The packet socket writes it
// in host byte order (virtio's legacy little-endian on little-endian hosts).
type vnetHdr struct {
	flags, gsoType                         uint8
	hdrLen, gsoSize, csumStart, csumOffset int
}

func parseVnetHdr(b []byte) vnetHdr {
	return vnetHdr{
		flags:      b[0],
		gsoType:    b[1],
		hdrLen:     int(binary.NativeEndian.Uint16(b[2:])),
		gsoSize:    int(binary.NativeEndian.Uint16(b[4:])),
		csumStart:  int(binary.NativeEndian.Uint16(b[6:])),
		csumOffset: int(binary.NativeEndian.Uint16(b[8:])),
	}
}

var errBadGSO = errors.New("afpacket: GSO frame is not an IPv4/IPv6 UDP packet that can be segmented")

// gsoLayout locates the headers of a UDP GSO frame.
type gsoLayout struct {
	ip, udp, payload int // offsets of the IP header, UDP header, UDP payload
	v6               bool
	segs             int // number of segments
}

// parseGSO checks f (Ethernet frame, untagged) is an IPv4 or IPv6 UDP
// packet whose lengths agree with the frame, and returns its layout.
func parseGSO(f []byte, gsoSize int) (gsoLayout, error) {
	var l gsoLayout
	if gsoSize <= 0 || len(f) < ethHdr+40+8 {
		return l, errBadGSO
	}
	l.ip = ethHdr
	switch binary.BigEndian.Uint16(f[12:]) {
	case etherTypeIPv4:
		ihl := int(f[l.ip]&0xF) * 4
		if f[l.ip]>>4 != 4 || ihl < 20 || f[l.ip+9] != 17 || binary.BigEndian.Uint16(f[l.ip+6:])&0x3FFF != 0 {
			return l, errBadGSO // not UDP, or a fragment
		}
		l.udp = l.ip + ihl
	case etherTypeIPv6:
		if f[l.ip]>>4 != 6 || f[l.ip+6] != 17 {
			return l, errBadGSO // extension headers: not produced by a UDP socket's GSO here
		}
		l.udp, l.v6 = l.ip+40, true
	default:
		return l, errBadGSO
	}
	l.payload = l.udp + 8
	if len(f) <= l.payload {
		return l, errBadGSO
	}
	// The headers' lengths describe the whole super-frame (up to 64 KiB).
	ipLen := int(binary.BigEndian.Uint16(f[l.ip+2:]))
	if l.v6 {
		ipLen = 40 + int(binary.BigEndian.Uint16(f[l.ip+4:]))
	}
	if ipLen != len(f)-l.ip || int(binary.BigEndian.Uint16(f[l.udp+4:])) != len(f)-l.udp {
		return l, errBadGSO
	}
	l.segs = (len(f) - l.payload + gsoSize - 1) / gsoSize
	return l, nil
}

// gsoSegment writes segment s of the super-frame f into out and returns its
// length, or 0 if out is too short.
func gsoSegment(f []byte, l *gsoLayout, gsoSize, s int, out []byte) int {
	start := l.payload + s*gsoSize
	size := min(gsoSize, len(f)-start)
	n := l.payload + size
	if n > len(out) {
		return 0
	}
	copy(out, f[:l.payload])
	copy(out[l.payload:], f[start:start+size])
	ulen := 8 + size
	if l.v6 {
		binary.BigEndian.PutUint16(out[l.ip+4:], uint16(ulen))
	} else {
		ip := wire.IPv4(out[l.ip:])
		binary.BigEndian.PutUint16(out[l.ip+2:], uint16(l.udp-l.ip+ulen))
		binary.BigEndian.PutUint16(out[l.ip+4:], binary.BigEndian.Uint16(f[l.ip+4:])+uint16(s))
		ip.SetChecksum(0)
		ip.SetChecksum(ip.CalculateChecksum())
	}
	binary.BigEndian.PutUint16(out[l.udp+4:], uint16(ulen))
	binary.BigEndian.PutUint16(out[l.udp+6:], udpChecksum(out[:n], l))
	return n
}

// udpChecksum is the full UDP checksum of the (segment) frame f, 0 written
// as 0xFFFF (RFC 768; skb_checksum_help's CSUM_MANGLED_0).
func udpChecksum(f []byte, l *gsoLayout) uint16 {
	var s uint64
	ulen := len(f) - l.udp
	if l.v6 {
		s = csumAdd(s, f[l.ip+8:l.ip+40]) // source and destination
	} else {
		s = csumAdd(s, f[l.ip+12:l.ip+20])
	}
	s += uint64(ulen) + 17
	s = csumAdd(s, f[l.udp:l.udp+6]) // ports and length; the checksum counts as 0
	s = csumAdd(s, f[l.payload:])
	c := ^csumFold(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// finishChecksum completes a CHECKSUM_PARTIAL frame: the field at
// start+off holds the pseudo-header sum; the checksum is the complement of
// the sum from start to the end (skb_checksum_help). It reports false if
// the offsets do not fit the frame.
func finishChecksum(f []byte, start, off int) bool {
	at := start + off
	if start < ethHdr || at+2 > len(f) {
		return false
	}
	c := ^csumFold(csumAdd(0, f[start:]))
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(f[at:], c)
	return true
}

// csumAdd adds b as big-endian 16-bit words to the one's-complement
// accumulator s (not folded); an odd last byte is padded with zero.
func csumAdd(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

func csumFold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
