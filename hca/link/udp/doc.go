// Package udp is the RoCEv2 link over kernel UDP sockets (Linux): Write
// takes complete IP packets (IPv4/IPv6 + UDP + BTH ... ICRC) and Read
// returns complete IP packets, so the HCA builds and verifies every ICRC
// over the real IP header, exactly as an rxe peer does.
//
// Send path: one unconnected UDP socket bound to Addr:Port (4791) with
// IP_PMTUDISC_DO / IPV6_PMTUDISC_DO, and over IPv4 a socket connected to
// each destination (up to 8 per transmit queue, conn.go), bound beside it,
// whose sends use a cached route instead of a route lookup per datagram.
// It is opened when the HCA names the destination (link.Preparer: a
// connected QP's path at RTR, an AH), or else at the first frame to it.
// The kernel writes the IP and UDP headers, and the ICRC covers the IPv4
// ID, DF, lengths, addresses and the UDP source port, so Write accepts only
// frames the kernel will reproduce byte for byte in the covered fields but
// the ID: source IP and port ours (see link.SourcePorter), DF set, IPv4 ID
// 0 (what Linux sends on an unconnected DF socket, checked by
// TestKernelIPIDZero), no options. A connected socket numbers its skbs
// from a counter, which it learns by probing itself once (no probe leaves
// the host) and then follows; Write corrects the ICRC of each frame for
// the ID it will get. Of the fields the ICRC masks, the IPv4 TOS / IPv6
// traffic class (DSCP and ECN) goes to the kernel as an IP_TOS /
// IPV6_TCLASS cmsg when it is not 0 (TestTrafficClass); the TTL / hop
// limit is the kernel's. Frames go out with
// sendmmsg; runs of same-size packets of one QP to one destination, and
// runs led by a packet without payload (an ACK: one length only) of
// packets that long to one destination, whatever their QP, all of one
// traffic class, go as a UDP
// GSO super-datagram (UDP_SEGMENT), whose segments the kernel numbers
// with IP IDs 0, 1, 2, ... from the unconnected socket and on from the
// counter of a connected one (TestGSOSegmentIPIDs): Write sends each
// packet whose ID is not 0 with a separate copy of its ICRC, corrected for
// that ID, never writing the caller's bytes. A run whose payload would fit
// one RoCE packet goes whole only if an ACK-like packet leads it or as 2,
// 4, ... 64 packets of one length (hca/link/internal/vnet's short runs),
// so that a receiver that sees it whole without a gso_size (the raw
// socket below, a peer's AF_XDP socket) can tell it from one packet.
//
// Receive path, IPv4: a raw socket (AF_INET, SOCK_RAW, IPPROTO_UDP) bound to
// Addr with a classic BPF filter for UDP to Port shows the real IPv4
// header. The UDP socket stays bound so the kernel sends no ICMP port
// unreachable, and a drop-everything filter keeps its queue empty. On
// loopback and veth a GSO super-datagram is never segmented, so the raw
// socket sees it whole; Read splits it the way the kernel's segmentation
// would (IDs id, id+1, ...), taking the segment size from the leading
// opcode when it has one length, or else finding it from the BTHs and
// confirming it with the first segment's ICRC; a datagram no longer than
// one RoCE packet is split only in the shape of a short run.
//
// Receive path, IPv4 with Config.RxRing (ring.go): a SOCK_DGRAM packet
// socket for ETH_P_IP on every interface takes the raw socket's place, with
// the same filter behind a PACKET_HOST check, and fills a TPACKET_V2
// PACKET_RX_RING mapped into the process: a busy poll that finds nothing
// is an atomic load, not a recvmmsg. Packets longer than a slot come whole
// by recvfrom (PACKET_COPY_THRESH). The packet socket sees packets before
// the IP layer: Read checks their IPv4 header checksum, and the host's
// firewall does not see them, hence opt-in (GOROCE_UDP_RXRING=1/0).
//
// Receive path, IPv4 with Config.PlainIPv4 (no CAP_NET_RAW): the UDP
// socket itself receives, with IP_PKTINFO, IP_RECVTOS and IP_RECVTTL, into
// the caller's buffers behind room for the headers, which Read rebuilds.
// Every field the ICRC covers is then known but the identification and
// the DF flag; the ICRC, affine in those 17 bits and one to one on them,
// gives them back (vnet.IDSolver): Read computes the ICRC with ID 0 and DF
// set and solves for the difference. A packet no ID explains (corrupt) is
// counted and passed on with ID 0, for the HCA to drop on its ICRC. A
// corrupt packet escapes with a chance of about 2^-15 instead of 2^-32.
// Frames go out unconnected, since a connected socket would take its
// peer's datagrams. With UDP_GRO (where the kernel has it) a GSO
// super-datagram arrives whole, into the endpoint's buffers, and is split
// by the reported segment size, each segment's ID solved on its own;
// without it the kernel segments it before the socket, and recvmmsg writes
// straight into the caller's buffers.
//
// Receive path, IPv6: raw IPv6 sockets do not show the IP header, so Read
// receives on the UDP socket with IPV6_RECVPKTINFO, IPV6_RECVHOPLIMIT and
// IPV6_RECVTCLASS and rebuilds the 40-byte IPv6 header and the UDP header.
// Every field the ICRC covers (payload length, next header, addresses,
// ports, UDP length) is known exactly; the flow label, masked, is written
// as 0.
// The rebuilt UDP checksum is computed over the rebuilt packet (the ICRC
// masks it, but a zero one over IPv6 is an error to Wireshark).
//
// No goroutines. Read and Write wait, when they must, in the Go netpoller,
// or with Config.BusyPoll in ppoll(2), the sockets then outside the
// netpoller (which would wake a thread for every packet received and every
// sent packet freed, for nothing while a busy poller reads the socket
// itself; hca/link/internal/sockpoll). Close wakes them either way.
// Nothing on the data path allocates.
//
// This package imports the standard library, golang.org/x/sys/unix and
// goroce's bth, wire, hca/link, hca/link/internal/vnet (the ICRC correction
// for kernel-assigned IP IDs, the length of packets without payload) and
// hca/link/internal/sockpoll (link.Poller over a socket) packages.
package udp
