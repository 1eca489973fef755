package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// Addr is everything below the BTH needed to build a frame. Which fields
// matter depends on Kind and on the framing passed to Finish.
type Addr struct {
	Kind Kind

	// Ethernet (FramingEthernet only).
	SrcMAC, DstMAC [6]byte
	VLAN           bool
	VLANTCI        uint16

	// RoCEv2: the IP addresses (both IPv4, or both IPv6).
	SrcIP, DstIP netip.Addr
	// RoCEv1 and IB with GRH: the GIDs. Decode fills them for RoCEv2 too
	// (IPv4-mapped for IPv4); Finish uses SrcIP/DstIP for RoCEv2.
	SGID, DGID [16]byte

	// IP TOS / IPv6 traffic class / GRH TClass; flow label (IPv6, GRH);
	// IPv4 TTL / IPv6 hop limit / GRH HopLmt.
	TrafficClass uint8
	FlowLabel    uint32
	HopLimit     uint8

	// IPv4 only. rxe sends DF and a kernel-chosen ID; an unconnected Linux
	// UDP socket with IP_PMTUDISC_DO sends ID 0 (wire-spec §14).
	IPID         uint16
	DontFragment bool

	// SrcPort is the UDP source port; the destination is always 4791.
	SrcPort uint16
	// UDPChecksum asks Finish to compute the UDP checksum; otherwise it is
	// 0, as rxe sends (over IPv6 too).
	UDPChecksum bool

	// Native IB LRH.
	VL, SL, LVer uint8
	DLID, SLID   uint16
}

// Tailroom is what Finish appends after the pad at most: ICRC + VCRC.
const Tailroom = ICRCLen + VCRCLen

// MaxHeadroom is the largest Headroom of any kind and framing, plus an
// 802.1Q tag: Ethernet + VLAN + IPv6 + UDP.
const MaxHeadroom = EthernetLen + VLANLen + IPv6Len + UDPLen

// Headroom returns the bytes Finish writes before the BTH for kind k in
// framing f, without an 802.1Q tag (see Addr.Headroom), e.g. 42 for RoCEv2
// IPv4 over Ethernet. It returns -1 when k cannot be carried in f.
//
// FramingBTH accepts KindRoCEv2IPv4 and KindRoCEv2IPv6 (headroom 0): Finish
// then computes the ICRC over the IP and UDP headers the kernel will put in
// front of the datagram, built from Addr. It also accepts KindBTH, for
// which Finish can compute no ICRC and returns ErrHeaderMismatch.
func Headroom(k Kind, f Framing) int {
	switch f {
	case FramingEthernet:
		switch k {
		case KindRoCEv2IPv4:
			return EthernetLen + IPv4Len + UDPLen
		case KindRoCEv2IPv6:
			return EthernetLen + IPv6Len + UDPLen
		case KindRoCEv1:
			return EthernetLen + GRHLen
		}
	case FramingIP:
		switch k {
		case KindRoCEv2IPv4:
			return IPv4Len + UDPLen
		case KindRoCEv2IPv6:
			return IPv6Len + UDPLen
		}
	case FramingIB:
		switch k {
		case KindIB:
			return LRHLen
		case KindIBGRH:
			return LRHLen + GRHLen
		}
	case FramingBTH:
		switch k {
		case KindRoCEv2IPv4, KindRoCEv2IPv6, KindBTH:
			return 0
		}
	}
	return -1
}

// Headroom is Headroom(a.Kind, f) plus 4 for an 802.1Q tag on Ethernet.
func (a *Addr) Headroom(f Framing) int {
	n := Headroom(a.Kind, f)
	if n >= 0 && f == FramingEthernet && a.VLAN {
		n += VLANLen
	}
	return n
}

func tailroom(k Kind) int {
	if k == KindIB || k == KindIBGRH {
		return ICRCLen + VCRCLen
	}
	return ICRCLen
}

// Finish completes a packet in place. buf[bthOff:bthOff+n] already holds the
// BTH, extended headers, payload and pad. Finish writes every lower header
// into buf[bthOff-a.Headroom(f):bthOff] (all length fields, the IPv4 header
// checksum, the UDP checksum if a.UDPChecksum, LRH PktLen, GRH PayLen), then
// the ICRC (and for native IB the VCRC) after the pad, and returns the frame
// buf[bthOff-a.Headroom(f) : bthOff+n+4(+2)]. It never allocates.
//
// Errors: ErrHeaderMismatch when a.Kind cannot be carried in f; ErrNoRoom
// when buf lacks headroom or tailroom; ErrBadLength when n is shorter than a
// BTH (or, for native IB, not a multiple of 4); ErrTooLong when a length
// field would overflow; ErrBadAddr when the IP addresses do not fit the kind.
func Finish(buf []byte, bthOff, n int, f Framing, a *Addr) ([]byte, error) {
	hr := a.Headroom(f)
	if hr < 0 {
		return nil, ErrHeaderMismatch
	}
	if a.Kind == KindBTH {
		// No covered lower headers are known: no ICRC can be computed.
		return nil, ErrHeaderMismatch
	}
	if n < bth.HeaderLen {
		return nil, ErrBadLength
	}
	if bthOff < hr || bthOff > len(buf) || n > len(buf)-bthOff-tailroom(a.Kind) {
		return nil, ErrNoRoom
	}
	start := bthOff - hr
	tr := buf[bthOff : bthOff+n]
	icrcOff := bthOff + n
	end := icrcOff + ICRCLen

	if f == FramingBTH {
		// Only RoCEv2 kinds reach here: build the IP/UDP headers the kernel
		// will send on a scratch array, only to compute the ICRC.
		var lower [IPv6Len + UDPLen]byte
		ln, err := a.encodeIPUDP(lower[:], n)
		if err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint32(buf[icrcOff:], icrcCompute(a.Kind, lower[:ln], tr))
		return buf[start:end:end], nil
	}

	off := start
	if f == FramingEthernet {
		var et uint16
		switch a.Kind {
		case KindRoCEv2IPv4:
			et = EtherTypeIPv4
		case KindRoCEv2IPv6:
			et = EtherTypeIPv6
		default:
			et = EtherTypeRoCEv1
		}
		e := Ethernet(buf[off:])
		e.Encode(&EthernetFields{Dst: a.DstMAC, Src: a.SrcMAC, VLAN: a.VLAN, TCI: a.VLANTCI, EtherType: et})
		off += e.HeaderLen()
	}
	first := off
	switch a.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		if _, err := a.encodeIPUDP(buf[off:bthOff+4], n); err != nil {
			return nil, err
		}
	case KindRoCEv1:
		if ICRCLen+n > 0xFFFF {
			return nil, ErrTooLong
		}
		a.encodeGRH(buf[off:], n)
	case KindIB, KindIBGRH:
		if n%4 != 0 {
			return nil, ErrBadLength
		}
		words := (bthOff - off + n + ICRCLen) / 4
		if words > 0x7FF {
			return nil, ErrTooLong
		}
		lnh := uint8(LNHIBALocal)
		if a.Kind == KindIBGRH {
			lnh = LNHIBAGlobal
			a.encodeGRH(buf[off+LRHLen:], n)
		}
		LRH(buf[off:]).Encode(&LRHFields{VL: a.VL, LVer: a.LVer, SL: a.SL, LNH: lnh,
			DLID: a.DLID, SLID: a.SLID, PktLen: words})
	}
	icrc := icrcContiguous(a.Kind, buf[first:icrcOff])
	binary.LittleEndian.PutUint32(buf[icrcOff:], icrc)
	switch a.Kind {
	case KindRoCEv2IPv4, KindRoCEv2IPv6:
		if a.UDPChecksum {
			// The UDP checksum covers the ICRC, so it comes last.
			udpOff := bthOff - UDPLen
			u := UDP(buf[udpOff:end])
			src, dst := a.SrcIP, a.DstIP
			if a.Kind == KindRoCEv2IPv4 {
				src, dst = src.Unmap(), dst.Unmap()
			}
			u.SetChecksum(u.CalculateChecksum(src, dst))
		}
	case KindIB, KindIBGRH:
		binary.LittleEndian.PutUint16(buf[end:], CRC16IB(buf[first:end]))
		end += VCRCLen
	}
	return buf[start:end:end], nil
}

// encodeIPUDP writes the IPv4/IPv6 and UDP headers (UDP checksum 0) of a
// RoCEv2 packet whose BTH..pad is n bytes into h, and returns their length.
// For IPv4, h must go on for 4 bytes past the headers (the BTH's first 4
// in a frame, scratch otherwise): the headers are written with them as
// four 8-byte words, the words the ICRC's prefix then loads (prefixCRC),
// so that each load is forwarded from one store instead of waiting for two
// to commit, behind the payload copied just before.
func (a *Addr) encodeIPUDP(h []byte, n int) (int, error) {
	udpLen := UDPLen + n + ICRCLen
	switch a.Kind {
	case KindRoCEv2IPv4:
		src, dst := a.SrcIP.Unmap(), a.DstIP.Unmap()
		if !src.Is4() || !dst.Is4() {
			return 0, ErrBadAddr
		}
		if IPv4Len+udpLen > 0xFFFF {
			return 0, ErrTooLong
		}
		s4, d4 := src.As4(), dst.As4()
		src4, dst4 := binary.BigEndian.Uint32(s4[:]), binary.BigEndian.Uint32(d4[:])
		w0, w1 := ipv4Words(a.TrafficClass, uint16(IPv4Len+udpLen), a.IPID, a.DontFragment, a.HopLimit, IPProtoUDP, src4, dst4)
		bth0 := binary.BigEndian.Uint32(h[IPv4Len+UDPLen : IPv4Len+UDPLen+4])
		binary.BigEndian.PutUint64(h[0:], w0)
		binary.BigEndian.PutUint64(h[8:], w1)
		binary.BigEndian.PutUint64(h[16:], uint64(dst4)<<32|uint64(a.SrcPort)<<16|RoCEv2Port)
		binary.BigEndian.PutUint64(h[24:], uint64(uint16(udpLen))<<48|uint64(bth0))
		return IPv4Len + UDPLen, nil
	case KindRoCEv2IPv6:
		if !a.SrcIP.Is6() || !a.DstIP.Is6() || a.FlowLabel > 0xFFFFF {
			return 0, ErrBadAddr
		}
		if udpLen > 0xFFFF {
			return 0, ErrTooLong
		}
		IPv6(h).Encode(&IPv6Fields{TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel,
			PayloadLength: uint16(udpLen), NextHeader: IPProtoUDP, HopLimit: a.HopLimit,
			Src: a.SrcIP.As16(), Dst: a.DstIP.As16()})
		encodeUDP(h[IPv6Len:], a.SrcPort, udpLen)
		return IPv6Len + UDPLen, nil
	}
	return 0, ErrHeaderMismatch
}

// encodeUDP writes a RoCEv2 UDP header with checksum 0, as one 8-byte
// store (see IPv4.Encode).
func encodeUDP(h []byte, sport uint16, length int) {
	binary.BigEndian.PutUint64(h[:UDPLen], uint64(sport)<<48|uint64(RoCEv2Port)<<32|uint64(uint16(length))<<16)
}

func (a *Addr) encodeGRH(h []byte, n int) {
	GRH(h).Encode(&GRHFields{TClass: a.TrafficClass, FlowLabel: a.FlowLabel, PayLen: uint16(n + ICRCLen),
		NxtHdr: NxtHdrIBA, HopLmt: a.HopLimit, SGID: a.SGID, DGID: a.DGID})
}

// UDPSourcePort returns the RoCEv2 UDP source port rxe uses for a connected
// QP pair: rdma_get_udp_sport(flow_label = 0, lqpn, rqpn) (ib_verbs.h
// rdma_calc_flow_label + rdma_flow_label_to_udp_sport, wire-spec §1.1). It
// is symmetric in the two QPNs and always in 0xC000..0xFFFF.
func UDPSourcePort(lqpn, rqpn bth.QPN) uint16 {
	v := uint64(lqpn&0xFFFFFF) * uint64(rqpn&0xFFFFFF)
	v ^= v >> 20
	v ^= v >> 40
	fl := uint32(v & 0xFFFFF)
	low := fl&0x3FFF ^ (fl&0xFC000)>>14
	return uint16(low | 0xC000)
}

// GIDFromAddr returns the RoCEv2 GID of an IP address: the IPv6 address
// itself, or ::ffff:a.b.c.d for IPv4. The zero Addr gives the zero GID.
func GIDFromAddr(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return a.As16()
}

// AddrFromGID is GIDFromAddr's inverse: an IPv4-mapped GID gives the IPv4
// address, any other GID its IPv6 form.
func AddrFromGID(g [16]byte) netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}
