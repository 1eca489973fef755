//go:build linux

package afpacket

import (
	"encoding/binary"
	"errors"

	"github.com/goroce/goroce/hca/link/internal/vnet"
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

// The header, the segmentation and the checksums are package vnet's,
// shared with the tun link; these are the names this package uses.

const vnetHdrLen = vnet.HdrLen

const (
	vnetFlagNeedsCsum = vnet.FlagNeedsCsum
	vnetGSONone       = vnet.GSONone
	vnetGSOUDPL4      = vnet.GSOUDPL4
	vnetGSOECN        = vnet.GSOECN
)

// maxFrame bounds a received frame: an Ethernet header, an 802.1Q tag and
// a 64 KiB IPv6 payload with its header.
const maxFrame = ethHdr + 4 + 40 + 65535

// vnetHdr is a decoded struct virtio_net_hdr, in ints.
type vnetHdr struct {
	flags, gsoType                         uint8
	hdrLen, gsoSize, csumStart, csumOffset int
}

func parseVnetHdr(b []byte) vnetHdr {
	var h vnet.Hdr
	h.Decode(b)
	return vnetHdr{flags: h.Flags, gsoType: h.GSOType, hdrLen: int(h.HdrLen), gsoSize: int(h.GSOSize),
		csumStart: int(h.CsumStart), csumOffset: int(h.CsumOffset)}
}

var errBadGSO = errors.New("afpacket: GSO frame is not an IPv4/IPv6 UDP packet that can be segmented")

// gsoLayout locates the headers of a UDP GSO frame.
type gsoLayout = vnet.Layout

// parseGSO checks f (Ethernet frame, untagged) is an IPv4 or IPv6 UDP
// packet whose lengths agree with the frame, and returns its layout.
func parseGSO(f []byte, gsoSize int) (gsoLayout, error) {
	if len(f) < ethHdr+40+8 {
		return gsoLayout{}, errBadGSO
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case etherTypeIPv4:
		if f[ethHdr]>>4 != 4 {
			return gsoLayout{}, errBadGSO
		}
	case etherTypeIPv6:
		if f[ethHdr]>>4 != 6 {
			return gsoLayout{}, errBadGSO
		}
	default:
		return gsoLayout{}, errBadGSO
	}
	l, err := vnet.ParseUDPGSO(f, ethHdr, gsoSize)
	if err != nil {
		return l, errBadGSO
	}
	return l, nil
}

// gsoSegment writes segment s of the super-frame f into out and returns its
// length, or 0 if out is too short.
func gsoSegment(f []byte, l *gsoLayout, _ int, s int, out []byte) int {
	return l.Segment(f, s, out)
}

// finishChecksum completes a CHECKSUM_PARTIAL frame (skb_checksum_help);
// false if the offsets do not fit the frame.
func finishChecksum(f []byte, start, off int) bool {
	return vnet.FinishChecksum(f, start, off, ethHdr)
}
