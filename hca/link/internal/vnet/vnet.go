package vnet

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// HdrLen is sizeof(struct virtio_net_hdr), the header without
// num_buffers (TUNSETVNETHDRSZ 10, the TUN default).
const HdrLen = 10

// virtio_net_hdr flags and GSO types (include/uapi/linux/virtio_net.h).
const (
	FlagNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM: checksum at CsumStart+CsumOffset is partial
	FlagDataValid = 2 // VIRTIO_NET_HDR_F_DATA_VALID: checksum already verified

	GSONone  = 0    // VIRTIO_NET_HDR_GSO_NONE
	GSOTCPv4 = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	GSOUDP   = 3    // VIRTIO_NET_HDR_GSO_UDP (UFO, fragments)
	GSOTCPv6 = 4    // VIRTIO_NET_HDR_GSO_TCPV6
	GSOUDPL4 = 5    // VIRTIO_NET_HDR_GSO_UDP_L4 (USO: one UDP datagram per segment)
	GSOECN   = 0x80 // VIRTIO_NET_HDR_GSO_ECN
)

// Hdr is a decoded struct virtio_net_hdr. Linux reads and writes it in the
// host's byte order on a little-endian host (legacy virtio; TUN's
// TUNSETVNETLE/BE only matter on big-endian hosts), so Decode and Encode
// use the native order.
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // length of the headers before the segmented payload
	GSOSize    uint16 // payload bytes per segment
	CsumStart  uint16 // where the checksummed range starts
	CsumOffset uint16 // where, after CsumStart, the checksum field is
}

// Decode reads h from b[:HdrLen].
func (h *Hdr) Decode(b []byte) {
	_ = b[HdrLen-1]
	h.Flags = b[0]
	h.GSOType = b[1]
	h.HdrLen = binary.NativeEndian.Uint16(b[2:])
	h.GSOSize = binary.NativeEndian.Uint16(b[4:])
	h.CsumStart = binary.NativeEndian.Uint16(b[6:])
	h.CsumOffset = binary.NativeEndian.Uint16(b[8:])
}

// Encode writes h into b[:HdrLen].
func (h *Hdr) Encode(b []byte) {
	_ = b[HdrLen-1]
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.NativeEndian.PutUint16(b[2:], h.HdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.GSOSize)
	binary.NativeEndian.PutUint16(b[6:], h.CsumStart)
	binary.NativeEndian.PutUint16(b[8:], h.CsumOffset)
}

// IsUDPL4 reports whether h describes a UDP_L4 (USO) super-packet, with
// or without the ECN bit.
func (h *Hdr) IsUDPL4() bool { return h.GSOType&^GSOECN == GSOUDPL4 }

// ErrBadGSO is returned for a super-packet that is not an IPv4 or IPv6 UDP
// packet whose header lengths agree with the frame.
var ErrBadGSO = errors.New("vnet: GSO frame is not an IPv4/IPv6 UDP packet that can be segmented")

const (
	ipv4Len = 20
	ipv6Len = 40
	udpLen  = 8
)

// Layout locates the headers of a UDP GSO super-packet in its frame.
type Layout struct {
	IP, UDP, Payload int // offsets of the IP header, UDP header, UDP payload
	V6               bool
	Segs             int // number of segments
	GSOSize          int
}

// ParseUDPGSO checks that f, with its IP header at offset ip, is an IPv4
// (options allowed, not a fragment) or IPv6 (no extension headers) UDP
// packet whose IP and UDP lengths describe the whole frame, and returns its
// layout for segments of gsoSize payload bytes.
func ParseUDPGSO(f []byte, ip, gsoSize int) (Layout, error) {
	l := Layout{IP: ip, GSOSize: gsoSize}
	if gsoSize <= 0 || ip < 0 || len(f) < ip+ipv4Len+udpLen {
		return l, ErrBadGSO
	}
	switch f[ip] >> 4 {
	case 4:
		ihl := int(f[ip]&0xF) * 4
		if ihl < ipv4Len || f[ip+9] != 17 || binary.BigEndian.Uint16(f[ip+6:])&0x3FFF != 0 {
			return l, ErrBadGSO // not UDP, or a fragment
		}
		l.UDP = ip + ihl
		if int(binary.BigEndian.Uint16(f[ip+2:])) != len(f)-ip {
			return l, ErrBadGSO
		}
	case 6:
		if len(f) < ip+ipv6Len+udpLen || f[ip+6] != 17 {
			return l, ErrBadGSO // extension headers: no UDP GSO sender makes them
		}
		l.UDP, l.V6 = ip+ipv6Len, true
		if ipv6Len+int(binary.BigEndian.Uint16(f[ip+4:])) != len(f)-ip {
			return l, ErrBadGSO
		}
	default:
		return l, ErrBadGSO
	}
	l.Payload = l.UDP + udpLen
	if len(f) <= l.Payload || int(binary.BigEndian.Uint16(f[l.UDP+4:])) != len(f)-l.UDP {
		return l, ErrBadGSO
	}
	l.Segs = (len(f) - l.Payload + gsoSize - 1) / gsoSize
	return l, nil
}

// Segment writes segment s of the super-packet f into out as the kernel's
// software segmentation would: the headers (and anything before the IP
// header) copied, payload bytes [s*GSOSize, (s+1)*GSOSize), IPv4 total
// length, identification id+s and header checksum, IPv6 payload length,
// UDP length and a full UDP checksum. It returns the segment's length, or 0
// if out is too short.
func (l *Layout) Segment(f []byte, s int, out []byte) int {
	start := l.Payload + s*l.GSOSize
	size := min(l.GSOSize, len(f)-start)
	n := l.Payload + size
	if size <= 0 || n > len(out) {
		return 0
	}
	copy(out, f[:l.Payload])
	copy(out[l.Payload:], f[start:start+size])
	ulen := udpLen + size
	if l.V6 {
		binary.BigEndian.PutUint16(out[l.IP+4:], uint16(ulen))
	} else {
		binary.BigEndian.PutUint16(out[l.IP+2:], uint16(l.UDP-l.IP+ulen))
		binary.BigEndian.PutUint16(out[l.IP+4:], binary.BigEndian.Uint16(f[l.IP+4:])+uint16(s))
		SetIPv4Checksum(out[l.IP:l.UDP])
	}
	binary.BigEndian.PutUint16(out[l.UDP+4:], uint16(ulen))
	binary.BigEndian.PutUint16(out[l.UDP+6:], UDPChecksum(out[l.IP:n]))
	return n
}

// SetIPv4Checksum computes and stores the checksum of the IPv4 header h
// (its whole length, options included).
func SetIPv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^Fold(Sum(0, h)))
}

// PseudoSum is the unfolded one's-complement sum of the UDP pseudo-header
// of the IPv4 or IPv6 packet p (IP header at p[0]) for a UDP length ulen.
func PseudoSum(p []byte, ulen int) uint64 {
	var s uint64
	if p[0]>>4 == 6 {
		s = Sum(0, p[8:40]) // source and destination
	} else {
		s = Sum(0, p[12:20])
	}
	return s + uint64(ulen) + 17
}

// UDPChecksum is the full UDP checksum of the IPv4 or IPv6 UDP packet p
// (IP header at p[0], no IPv6 extension headers, the UDP length field not
// trusted: the datagram is the rest of p), 0 written as 0xFFFF (RFC 768,
// skb_checksum_help's CSUM_MANGLED_0). The checksum field counts as 0.
func UDPChecksum(p []byte) uint16 {
	u := ipv6Len
	if p[0]>>4 == 4 {
		u = int(p[0]&0xF) * 4
	}
	s := PseudoSum(p, len(p)-u)
	s = Sum(s, p[u:u+6]) // ports and length
	s = Sum(s, p[u+udpLen:])
	c := ^Fold(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// FinishChecksum completes a CHECKSUM_PARTIAL frame f: the field at
// start+off holds the pseudo-header sum, and the checksum is the
// complement of the sum from start to the end (skb_checksum_help). It
// reports false if the offsets do not fit the frame or start before min.
func FinishChecksum(f []byte, start, off, min int) bool {
	at := start + off
	if start < min || at+2 > len(f) {
		return false
	}
	c := ^Fold(Sum(0, f[start:]))
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(f[at:], c)
	return true
}

// Sum adds b as big-endian 16-bit words to the one's-complement
// accumulator s (not folded); an odd last byte is padded with zero. It
// adds 64-bit big-endian words with end-around carry, which is the same
// sum modulo 0xFFFF (RFC 1071 §2): what Fold reduces.
func Sum(s uint64, b []byte) uint64 {
	var c, carry uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), 0)
		carry += c
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), 0)
		carry += c
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), 0)
		carry += c
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), 0)
		carry += c
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), 0)
		carry += c
		b = b[8:]
	}
	var t uint64
	if len(b) >= 4 {
		t = uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		t += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		t += uint64(b[0]) << 8
	}
	s, c = bits.Add64(s, t, 0)
	carry += c
	// 2^64 ≡ 1 (mod 0xFFFF): each carry out adds one back.
	s, c = bits.Add64(s, carry, 0)
	return s + c
}

// Fold folds the accumulator s to 16 bits (end-around carry).
func Fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
