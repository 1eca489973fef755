package vnet

import (
	"encoding/binary"
	"math/bits"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// Short runs: super-packets a receiver may mistake for one packet.
//
// A UDP GSO super-packet is segmented only where a device cannot carry it
// whole. On loopback, a veth or a bridge two receivers here see it whole
// with nothing beside it to give the segment size: the udp link's raw IPv4
// socket, and an AF_XDP socket (generic XDP hands the program the
// linearized skb, and one that fits a UMEM chunk is redirected like any
// frame). Past MaxRoCEPacket bytes of UDP payload no single RoCE packet
// fits, so a longer datagram is a run and its segment size can be searched
// for. A shorter one might be one packet, so the senders here build short
// runs in two shapes only, each of which tells its segment size cheaply:
//
//   - led by a packet of fixed length (FixedSegment: an ACK, a READ
//     request...): that length;
//   - 2, 4, ... 64 packets of one length (ShortRunLen): the length is the
//     datagram's over a power of two, confirmed by a BTH at every multiple
//     of it and by the first segment's ICRC (EqualRunSegment).
//
// Any other short datagram is one packet.

// ShortRunLen returns how many of the n packets of a run that fits one
// RoCE packet, not led by a packet of fixed length, may go as one
// super-packet: the largest power of two of its packets of the first one's
// length (all but a shorter last one, lastShort), or 1 when that is one.
func ShortRunLen(n int, lastShort bool) int {
	if lastShort {
		n--
	}
	if n < 2 {
		return 1
	}
	return 1 << (bits.Len(uint(min(n, MaxRunSegments))) - 1)
}

// FixedRunSegment returns the segment size of UDP payload p when p is a
// super-packet led by a packet of fixed length (FixedSegment), else 0: p
// is longer than that length, its segments (at most 2*MaxRunSegments) each
// start with a known opcode, and the last holds at least a BTH and an
// ICRC. Each segment is checked again, ICRC and all, by whoever reads it.
func FixedRunSegment(p []byte) int {
	if len(p) < bth.HeaderLen+4 {
		return 0
	}
	g := FixedSegment(p)
	if g == 0 || len(p) <= g || (len(p)+g-1)/g > 2*MaxRunSegments {
		return 0
	}
	for off := g; off < len(p); off += g {
		if len(p)-off < bth.HeaderLen+4 || !bth.Opcode(p[off]).Valid() {
			return 0
		}
	}
	return g
}

// EqualRunSegment returns the segment size of f when f is a super-packet
// of 2^k (k = 1..6) RoCE packets of one length, else 0. f holds l2 bytes of
// link header, then an IPv4 (20-byte header) or IPv6 packet with hl bytes
// of IP and UDP headers, whose lengths the caller has checked describe f.
//
// Candidates go from the shortest segment up. One is taken when a BTH (a
// known opcode, TVer 0, the first packet's P_Key) starts at each of its
// multiples and the first segment's ICRC, computed over the headers that
// segment would carry alone, verifies. f's length fields are rewritten for
// that check and restored: f must be writable, and nobody else may read it
// meanwhile.
func EqualRunSegment(f []byte, l2, hl int) int {
	p := f[l2+hl:]
	if len(p) < 2*(bth.HeaderLen+4) || len(p)%4 != 0 {
		return 0
	}
	for k := MaxRunSegments; k >= 2; k >>= 1 {
		g := len(p) / k
		if g < bth.HeaderLen+4 || g%4 != 0 || g*k != len(p) || !bthsAt(p, g) {
			continue
		}
		if FirstSegmentVerifies(f, l2, hl, g) {
			return g
		}
	}
	return 0
}

// bthsAt reports whether a BTH like p's first one (known opcode, TVer 0,
// same P_Key) starts at every multiple of g in p.
func bthsAt(p []byte, g int) bool {
	for off := g; off < len(p); off += g {
		c := p[off:]
		if !bth.Opcode(c[0]).Valid() || c[1]&0x0F != 0 || c[2] != p[2] || c[3] != p[3] {
			return false
		}
	}
	return true
}

// FirstSegmentVerifies reports whether the first g bytes of the UDP
// payload of super-packet f (l2 bytes of link header, then an IPv4 packet
// with a 20-byte header or an IPv6 one, hl bytes of IP and UDP headers)
// are a packet whose ICRC verifies under the headers it would carry alone:
// f's lengths as for g bytes of payload, and, for IPv4, f's own ID, which
// segmentation gives segment 0. It rewrites f's length fields for the
// check and restores them: f must be writable, and nobody else may read it
// meanwhile.
func FirstSegmentVerifies(f []byte, l2, hl, g int) bool {
	ip := f[l2:]
	kind, lenOff, ipLen := wire.KindRoCEv2IPv4, 2, hl+g // IPv4 total length
	if ip[0]>>4 == 6 {
		kind, lenOff, ipLen = wire.KindRoCEv2IPv6, 4, udpLen+g // IPv6 payload length
	}
	udp := ip[hl-udpLen:]
	ipWas, udpWas := binary.BigEndian.Uint16(ip[lenOff:]), binary.BigEndian.Uint16(udp[4:])
	binary.BigEndian.PutUint16(ip[lenOff:], uint16(ipLen))
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen+g))
	pkt := wire.Packet{Frame: f, Kind: kind, IPOff: l2, UDPOff: l2 + hl - udpLen, BTHOff: l2 + hl,
		ICRCOff: l2 + hl + g - wire.ICRCLen, EthOff: -1, LRHOff: -1, GRHOff: -1, VCRCOff: -1}
	ok := wire.ICRC(f, &pkt) == binary.LittleEndian.Uint32(f[pkt.ICRCOff:])
	binary.BigEndian.PutUint16(ip[lenOff:], ipWas)
	binary.BigEndian.PutUint16(udp[4:], udpWas)
	return ok
}

// ShortRunSegment returns the segment size of a datagram that fits one
// RoCE packet (FixedRunSegment, then EqualRunSegment; f as for
// EqualRunSegment), or 0 when it is one packet.
func ShortRunSegment(f []byte, l2, hl int) int {
	if g := FixedRunSegment(f[l2+hl:]); g > 0 {
		return g
	}
	return EqualRunSegment(f, l2, hl)
}
