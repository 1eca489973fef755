// Package tun is the link backend over Linux TUN and TAP devices, opened
// on /dev/net/tun with golang.org/x/sys/unix: a TUN device carries RoCEv2
// as bare IPv4/IPv6 packets (link.FormatIP), a TAP device carries Ethernet
// frames with RoCEv2 or RoCEv1 (link.FormatEthernet). (It used
// songgao/water until the virtio-net header, which water cannot ask for;
// nothing in goroce imports water since.)
//
// # Topology: the goroce host sits behind the device
//
// A TUN/TAP device has two sides: the kernel's network stack and the file
// descriptor this package reads and writes. The goroce HCA is a host on the
// far side of the device, like a virtual machine behind a tap: what the HCA
// writes, the kernel receives on the device and routes (or bridges), and
// what the kernel sends into the device, the HCA reads.
//
//	goroce HCA (Config.Addr, e.g. 10.71.1.2) ── fd ══ tun0 ══ kernel (Config.KernelAddr, e.g. 10.71.1.1/24)
//	                                                             │ routes, forwarding, veth, sockets
//
// So the HCA's address, from which it builds its GIDs and the source of
// every IP header it writes, is Config.Addr, and that address is NOT
// assigned to the kernel side of the device: if it were, the kernel would
// deliver the peer's packets to its own UDP stack (no listener on 4791:
// ICMP port unreachable) instead of sending them into the device, and
// would drop the HCA's packets as martians (a local source address arriving
// from outside). Open routes Config.Addr's prefix (and Config.Routes) into
// the device; Config.KernelAddr, when set, is the kernel's own address on
// the device (what a kernel UDP socket, rdma_rxe or ping on that side
// uses). This is how every test here is built:
//
//   - TUN to TUN: two namespaces joined by a veth, each with IP forwarding
//     and one TUN; hca A's packets go A's fd → tunA → routed → veth →
//     routed → tunB → B's fd. IPv4 TTL and checksum change on the way; the
//     ICRC masks both.
//   - TUN to the UDP link: one namespace; the UDP link binds KernelAddr, the
//     TUN host is Addr, and the kernel delivers between the device and the
//     socket with no forwarding at all.
//   - TAP to TAP: two TAPs enslaved to one Linux bridge; frames are
//     bridged unchanged, so RoCEv1 (not routable) works too. The HCA's MAC
//     (Config.HardwareAddr, default a locally administered address derived
//     from Addr) is not the TAP's own MAC; the kernel has no ARP answers from
//     the HCA (goroce speaks no ARP/NDP), so next hops are resolved by the
//     caller (hca.Options.Resolver or AHAttr.DMAC). When Open gives a TAP a
//     KernelAddr it also adds a permanent neighbour entry for Addr with the
//     HCA's MAC, so the kernel (a UDP socket or rdma_rxe on KernelAddr, or
//     routing) reaches the HCA; the HCA's next hop is then the TAP's MAC.
//
// Config.Attach opens an existing persistent device instead (ip tuntap
// add; the interop harness puts one on its bridge) and configures nothing:
// its owner set addresses, routes and neighbours, and it outlives the
// endpoint.
//
// # Data path
//
// Open opens /dev/net/tun non-blocking and close-on-exec and wraps it in an
// *os.File, which the Go runtime registers with its netpoller: Read and
// Write go through syscall.RawConn, so a blocked Read waits in the
// netpoller, not in a thread, and Close from another goroutine unblocks it
// with link.ErrClosed (linktest CloseUnblocksRead).
//
// Offloads (TUN, unless Config.NoOffload; Endpoint.Offloads says what was
// granted). Open asks for IFF_VNET_HDR (when TUNGETFEATURES lists it),
// TUNSETVNETHDRSZ 10 and TUNSETOFFLOAD TUN_F_CSUM|TUN_F_USO4|TUN_F_USO6;
// a kernel that refuses (EINVAL: USO is Linux 6.2+, and comes as a pair)
// is asked for TUN_F_CSUM alone, then for nothing; without IFF_VNET_HDR
// the fd carries bare packets as before. Every read and write then starts
// with a struct virtio_net_hdr (hca/link/internal/vnet).
//
//   - Write groups a batch into messages, one writev(2) each. A run of
//     RoCEv2 packets to UDP 4791 with the same IP and UDP headers but for
//     the lengths and the IPv4 ID and checksums (one flow: addresses,
//     ports, TOS/traffic class, flow label, TTL, DF), all of one size but
//     a shorter last one, at most 64 and under 64 KiB in all, becomes one
//     super-packet: virtio_net_hdr {NEEDS_CSUM, GSO_UDP_L4, gso_size =
//     the packets' UDP payload, csum_start = the UDP header, csum_offset
//     6}, the first packet's IP and UDP headers with the run's lengths, a
//     fresh IPv4 header checksum and the UDP pseudo-header sum (what
//     udp_send_skb leaves for a NIC), then each packet's UDP payload,
//     gathered from the caller's buffers. The kernel segments it where it
//     must (before a device without USO, or before a local socket) or
//     carries it whole (veth, forwarding, a TUN with USO).
//   - The ICRC covers the IPv4 identification, and segmentation gives
//     segment i the ID id0+i (measured: TestHairpinGSO; every segment's
//     ICRC verified in TestGSOThroughKernel). A packet built with another
//     ID (the HCA builds IPv4 ID 0) is sent with its last 4 bytes replaced
//     by the ICRC for ID id0+i, corrected by CRC linearity (16 XORs from a
//     per-length basis, vnet.IDCache, the udp link's technique) in a 4-byte
//     scratch slot: the caller's bytes are never written or copied. IPv6
//     has no ID; nothing changes. The UDP checksum is masked by the ICRC:
//     segments leave with a full one (the kernel's software segmentation
//     or checksum help computes it) even if the HCA sent 0.
//   - IPv4 runs of 4140 bytes of UDP payload or less (one 4 KiB-MTU
//     packet's worth) go one by one: a local receiver on a raw socket (the
//     udp link) sees a super-packet unsegmented and tells one from a
//     single packet by its length only.
//   - Everything else (single packets, other flows, non-RoCE) goes whole
//     after a zero header. If the kernel refuses a super-packet (EINVAL),
//     Write turns GSO off for good (Endpoint.GSO) and resends the run
//     packet by packet.
//   - Read: with USO the kernel hands over super-packets (from a local UDP
//     sender with UDP_SEGMENT, such as the udp link, or forwarded whole
//     from another TUN writer or a veth). Read splits them exactly as
//     __udp_gso_segment and inet_gso_segment would (payload slices, IPv4
//     total length, ID id0+i and header checksum, IPv6 payload length, UDP
//     length and a full UDP checksum): TestReadFromGSOSocket compares the
//     split with the kernel's own segmentation byte for byte. Every ICRC
//     verifies, as the sender computed it for the ID the kernel would
//     give. Counted in RxGSO and RxGSOSegments.
//   - A packet flagged NEEDS_CSUM (a local sender left the UDP checksum to
//     the "NIC") gets it finished in place: choosing to fix it up rather
//     than leave a pseudo-header sum keeps every frame Read returns a
//     valid UDP packet (captures, Wireshark), at one checksum pass over a
//     packet the HCA is about to CRC anyway (RxCsumPartial).
//
// Each read is a readv into [virtio_net_hdr] [the caller's buffer]
// [overflow]. A plain packet that fits lands in the caller's buffer and is
// never copied; one that spills into the overflow is dropped and counted
// (RxTooLarge), never truncated. A super-packet's head is copied in front
// of its tail in the overflow buffer (which starts right where the head
// ends) and split from there into the following buffers of the batch;
// segments that do not fit the batch wait for the next Read. No
// allocation, lock or channel operation per packet; the counters are
// updated once per Read or Write (per frame only on error paths).
//
// Measured (BenchmarkTUN: routed topology, 64 KiB messages, one Write
// each, 2 vCPUs at load average 7, median of 5): 1024-byte payloads 0.68
// against 6.9 µs per frame (10x; 62 frames per super-packet), 4096-byte
// payloads 2.0 against 9.4 µs (4.7x; 15 per super-packet), offload against
// NoOffload, zero allocations.
//
// Without a virtio-net header (NoOffload, a refused IFF_VNET_HDR, TAP): a
// TUN fd moves one packet per read(2) or write(2): a Read batch is as many
// packets as are queued when the first one is ready (one netpoller wait
// per batch, one syscall per packet), a Write batch is one write(2) per
// frame in one callback.
//
// One queue, deliberately. IFF_MULTI_QUEUE was implemented (one fd per
// queue, Read waiting on an epoll fd in the netpoller and draining the
// queues round-robin) and measured: no gain (BenchmarkTUN, routed
// topology, 2 vCPUs: 6.2 against 6.4 µs per 1082-byte frame, 1.3 against
// 3.6 frames per Read), and it broke the link contract: the kernel picks a
// queue per flow from its flow table, which learns from the queue the
// reply direction was written on and ages entries, so one flow moves
// between queues and a single reader cannot restore the order
// (linktest ConcurrentBothWays failed). Queues pay off only with one reader
// per queue, which the hca runtime does not have.
//
// In race builds Write and Read also release and acquire one atomic word
// (race_on.go): the race detector cannot see the kernel carrying bytes
// from one device's write(2) to another's read(2), which is how two HCAs
// in one test process synchronise (an RDMA WRITE's data is checked after
// its ACK came back). Normal builds compile this out.
//
// Read drops and counts frames that are not RoCE (not UDP to port 4791,
// not ethertype 0x8915): the kernel sends router solicitations, MLD and
// ARP into the device on its own. It checks no ICRC; the HCA does.
//
// Device configuration (address, MTU, up, routes, sysctls) goes through
// hca/netcfg.
//
// This package imports the standard library, golang.org/x/sys/unix and
// goroce's hca/link, hca/link/internal/vnet, hca/netcfg and wire.
package tun
