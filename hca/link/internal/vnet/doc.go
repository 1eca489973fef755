// Package vnet is the struct virtio_net_hdr that Linux puts before frames
// on a TUN/TAP fd opened with IFF_VNET_HDR (and on a packet socket with
// PACKET_VNET_HDR), and the software work those headers ask of a reader or
// a writer: splitting a UDP GSO super-packet into the packets the kernel's
// own segmentation would have produced (__udp_gso_segment and
// inet_gso_segment: lengths, IPv4 identification id+i, header and UDP
// checksums), finishing a CHECKSUM_PARTIAL checksum (skb_checksum_help),
// building the header of a super-packet for the kernel to segment, and
// correcting a RoCEv2 ICRC for a changed IPv4 identification by CRC
// linearity (the ICRC covers the ID, and segmentation renumbers it), and
// the inverse, finding the ID and DF flag of a received packet from its
// ICRC (IDSolver: a UDP socket does not report them).
//
// Frames are byte slices whose IP header starts at a given offset (0 for a
// TUN, 14 for an untagged Ethernet frame). Nothing here allocates except
// IDCache and IDSolverCache on a frame length they have not seen.
//
// Runs groups a send batch into super-packets for both the tun link (no
// L2 header) and the afpacket link (a 14-byte Ethernet header counted in
// the virtio_net_hdr's hdr_len and csum_start): one implementation of the
// run rules, the header and the ICRC patch.
//
// Short runs (short.go) are the rules both ends keep for a super-packet
// no longer than one RoCE packet, which a receiver that sees it whole
// without a gso_size (the udp link's raw IPv4 socket, an AF_XDP socket)
// must tell from one packet: the senders build them only in shapes that
// tell their segment size, and those receivers find it.
//
// This package imports the standard library, goroce's bth (which opcodes
// have one length) and wire (the ICRC that confirms a short run's segment
// size). It is internal to hca/link: the tun and afpacket links use all of
// it, the udp link the ICRC correction and the short-run rules.
package vnet
