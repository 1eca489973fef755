// Package afpacket is the raw-Ethernet link: an AF_PACKET SOCK_RAW socket
// bound to one interface, carrying RoCEv2 (IPv4/IPv6 + UDP 4791) and
// RoCEv1 (ethertype 0x8915) frames built whole by goroce, Ethernet header
// included (link.FormatEthernet).
//
// What the kernel is asked to do, and why:
//
//   - A classic BPF filter, attached before the socket is bound so nothing
//     else is ever queued, accepts only RoCEv1 frames and RoCEv2 frames
//     to one of the interface's addresses (non-fragments, UDP destination
//     port 4791) that were sent to this host (not PACKET_OTHERHOST when the
//     interface is promiscuous, not PACKET_OUTGOING).
//   - PACKET_IGNORE_OUTGOING keeps our own transmitted frames (and every
//     other local sender's) out of the receive queue.
//   - The kernel IP stack also sees every received RoCEv2 packet. With no
//     socket on UDP 4791 it would answer each with an ICMP port
//     unreachable, so Open holds port 4791 on each interface address with
//     a UDP socket whose filter drops everything (rdma_rxe holds the port
//     with its own UDP tunnel socket for the same reason). If the port is
//     taken already (rdma_rxe or a udp link) the holder is skipped: that
//     owner keeps the kernel quiet, and also receives the packets.
//   - Frames are received from a PACKET_RX_RING (TPACKET_V2, ring.go)
//     mapped at Open and unmapped at Close: the kernel copies each
//     accepted frame, after its virtio_net_hdr, into the next slot and
//     hands the slot over with its status word; Read copies the frame
//     out into the caller's buffer (one copy) and hands the slot back.
//     An empty poll is one atomic load: a busy-polling HCA
//     (hca.Options.BusyPoll, TryRead/WaitRead of link.Poller) makes no
//     system call until a frame is there, where recvmmsg cost one per
//     empty poll (several microseconds each under qemu TCG, where
//     send_lat was ~60 us against rdma_rxe's ~30). Sizes: slots of the
//     interface MTU + 94 bytes (tpacket2_hdr, sockaddr_ll, virtio_net_hdr,
//     Ethernet header and tag), 16-byte aligned, capped at 4320 bytes (a
//     4096-byte RoCE payload with every header), in 64 KiB blocks;
//     Config.RingBytes, default DefaultRingBytes = 2 MiB: 1280 slots at
//     MTU 1500, 480 at MTU 9000: a few 64-frame batches and a 512-PSN
//     window of MTU-1024 packets, in memory the kernel pins per endpoint
//     (the socket receive buffer, 4 MiB by default, now only limits the
//     COPY frames queued beside the ring). A frame that does not fit a
//     slot (a GSO super-frame of up to 64 KiB, a jumbo non-RoCE frame) is
//     also queued on the socket whole (PACKET_COPY_THRESH; the slot says
//     TP_STATUS_COPY) and Read takes it with one recvmsg, then splits it
//     as below. When the ring is full the kernel drops the frame and
//     counts it (RxKernelDrop). Config.NoRing, or a kernel that refuses
//     the ring (RingErr), receives with recvmmsg instead: a whole batch
//     per system call straight into the caller's buffers.
//     Stats.RxSyscalls counts receive system calls, RxRingFrames and
//     RxCopies the slots taken and the copies read.
//   - Write sends through a PACKET_TX_RING (below) by default; sendmmsg,
//     on the receiving socket, moves a whole batch per system call,
//     straight from the caller's buffers. The sockets are non-blocking and
//     wait in the Go netpoller or, with Config.BusyPoll, outside it in
//     ppoll(2) (hca/link/internal/sockpoll); the kernel ends either wait
//     for ring frames as for queued ones, and Close unblocks it.
//   - PACKET_VNET_HDR puts a struct virtio_net_hdr before every frame.
//     Veths, bridges and TAPs pass GSO skbs through unsegmented, so a
//     kernel UDP sender with UDP_SEGMENT (the udp link, rdma_rxe does not)
//     on the far side of a veth delivers up to 64 KiB of RoCE packets
//     under one IP/UDP header, with a checksum only a NIC would finish.
//     The header says so (gso_type UDP_L4, gso_size, NEEDS_CSUM), and Read
//     segments the frame as the kernel would (IPv4 ID id+i, lengths,
//     header and UDP checksums; gso.go) and finishes partial checksums.
//     With the ring such a frame comes by the COPY path (or, when it
//     fits, from its slot) into a 64 KiB overflow buffer and its segments
//     are delivered over the next Reads. With recvmmsg it lands partly
//     in a per-message 64 KiB overflow buffer (address space until first
//     used); it and the frames behind it in the batch are copied there and
//     delivered over the next Reads, and frames that are not GSO are
//     received straight into the caller's buffers.
//   - Write sends a run of RoCEv2 frames of one flow (equal Ethernet, IP
//     and UDP headers but for lengths, IPv4 ID and checksums; equal size
//     but a shorter last one; at most 64 frames and a 64 KiB IP packet) as
//     ONE skb: a virtio_net_hdr {NEEDS_CSUM, UDP_L4, gso_size, hdr_len and
//     csum_start counting the Ethernet header, csum_offset 6}, the first
//     frame's headers with the run's lengths, IPv4 header checksum and UDP
//     pseudo-header sum, then each frame's UDP payload by iovec, straight
//     from the caller's buffers (hca/link/internal/vnet.Runs, shared with
//     the tun link). A 64 KiB message at IB MTU 1024 is one skb through
//     the qdisc and the veth instead of 64. The veth passes it whole: a
//     packet socket on the far end splits it (as above), the far kernel IP
//     stack segments it for a UDP socket (IPv6 udp link, rdma_rxe) or hands
//     it whole to a raw socket (the IPv4 udp link splits it), and a real
//     NIC would segment it in hardware or the kernel before the wire.
//     Segmentation numbers IPv4 IDs id0, id0+1, ...; a frame built with
//     another ID is sent with its ICRC corrected for that ID (4 bytes from
//     a per-frame slot, by CRC linearity), so the segments' ICRCs verify.
//     A run whose payload would fit one RoCE packet goes whole only in a
//     shape a receiver that sees it whole without a gso_size (a raw IPv4
//     socket, an AF_XDP socket) can tell from one packet: led by a packet
//     of fixed length, or a power of two of packets of one length (vnet's
//     short runs); the rest of it, and all other frames, go frame by
//     frame, each after a zero virtio_net_hdr.
//   - The first super-packet an endpoint sends goes in a sendmmsg of its
//     own, so the kernel's verdict is its errno: EINVAL (a kernel whose
//     packet sockets do not take UDP_L4) turns GSO off for good (GSO()
//     false) and the run and the rest of the batch are resent frame by
//     frame. Config.NoGSO turns it off from the start.
//   - The transmit ring (txring.go): a second packet socket, bound to the
//     interface with protocol 0 (it receives nothing and taps nothing),
//     with PACKET_VNET_HDR, PACKET_LOSS and a TPACKET_V2 PACKET_TX_RING.
//     Write copies each message, a frame or a super-packet built as above
//     (headers from vnet.Runs, payloads and patched ICRCs copied after
//     them), into the next free slot after its virtio_net_hdr, stores
//     TP_STATUS_SEND_REQUEST (atomic, after the data) and kicks the kernel
//     once per batch (send with no data, MSG_DONTWAIT); tpacket_snd builds
//     each skb with the slot's pages as fragments, no copy, and the slot
//     comes back (TP_STATUS_AVAILABLE) when the skb is freed. Slots hold a
//     64 KiB super-packet: 17 pages (69632 bytes) in 1 MiB blocks;
//     Config.TxRingBytes, default DefaultTxRingBytes = 4 MiB: 60 slots
//     (with Config.NoGSO, MTU-sized slots: 2672 at MTU 1500). The first
//     super-packet still probes by sendmmsg (above); a batch's messages
//     for which no slot is free (skbs not yet freed) go by sendmmsg after
//     the ring's (Stats.TxRingFull). A short kick (send buffer full) waits
//     for writability and kicks again: Write returns when
//     the kernel has every frame. A device drop (ENOBUFS), which
//     tpacket_snd would retry at the next kick, is lost and counted in
//     TxDropped as with sendmmsg: the slot's tp_len becomes 0 and the next
//     kick skips it (PACKET_LOSS). A slot the kernel skips as malformed
//     shows only in the kick's byte count (TxRingSkipped; GSO goes off).
//     A veth (dev_forward_skb) and a packet tap copy the ring's pages
//     before passing the skb on (skb_orphan_frags), so over a veth the
//     kernel still copies each frame once and the ring saves system call
//     work, not the copy (BenchmarkTxRing); a NIC sends from the slot.
//     Which copy that is matters under emulation: in the TCG guest of
//     bench-vs-rxe the sendmmsg path copies with copy_from_user, which
//     with ERMS and without FSRM is an emulated rep movsb, while the
//     veth copies the ring's pages with the kernel's memcpy loop; at IB
//     MTU 4096 write_bw went from 51 to 73 MB/s with the ring (at 1024
//     the two were within noise), and on this host's veths the ring is
//     level with sendmmsg. Config.NoTxRing or GOROCE_AFPACKET_TXRING=0
//     (=1 forces it on) sends by sendmmsg only, as does a kernel that
//     refuses the ring (TxRingErr).
//     TxRingFrames, TxRingKicks count what went through it.
//   - The port holders set UDP_GRO: a socket without it has every arriving
//     super-packet segmented for it (udp_unexpected_gso), checksums and
//     all, only for its filter to drop each segment (BenchmarkWriteRead:
//     gso=on 1024-byte frames 1031 MB/s with holder GRO off, 1689 on).
//
// Sends go through dev_queue_xmit (no PACKET_QDISC_BYPASS), so qdiscs and
// the nftables netdev egress hook (netcfg.AddLoss) apply. A frame the
// device drops on the way out (ENOBUFS: a full veth peer backlog, an egress
// rule) is counted in TxDropped and treated as lost on the wire, as RoCE
// expects; a dropped super-packet loses its whole run, as it would on a
// NIC's queue.
//
// With Config.XDP an AF_XDP socket on the interface's queue 0 (package
// hca/link/xsk) carries the RoCE frames beside the packet socket:
//
//   - An XDP program (generic mode, or the driver's with Config.XDPNative)
//     redirects to it every RoCE frame to our MAC that fits a 4 KiB UMEM
//     chunk; Read takes those from its RX ring (one copy out, the chunk
//     straight back to the fill ring) before it looks at the packet
//     socket's ring, which still receives what the program passes: a
//     peer's UDP GSO super-frame longer than a chunk, a frame from another
//     receive queue. A super-frame that fits a chunk (a short run: an ACK
//     and the answer it travels with, a power of two of small packets,
//     hca/link/internal/vnet's short runs) is redirected whole, and
//     without the gso_size the packet socket would be told: Read finds
//     its segment size from its shape (vnet.ShortRunSegment) and splits it
//     like the packet socket's, from chunk-sized overflow buffers
//     allocated at Open (the packet socket's 64 KiB ones are allocated
//     when that socket is first read). A super-frame longer than the
//     caller's buffer waits at the head of the RX ring and is taken into
//     one of those; a single frame longer than the buffer is dropped and
//     counted in RxTooLarge, as from the packet socket.
//     Frames on one path keep their order; between the two there is no
//     order, so against a peer that sends super-frames (goroce's udp link,
//     its afpacket link without XDP) a small frame may overtake a run,
//     which RC repairs with a sequence NAK and a retransmission. rdma_rxe
//     and a goroce XDP endpoint send no super-frames.
//   - Write copies every frame into a TX chunk and kicks the socket once
//     per batch; in copy mode the kernel builds the skb and hands it to
//     the driver in the system call (dev_direct_xmit: no qdisc, no egress
//     hook). No GSO (each frame is its own skb) and no PACKET_TX_RING.
//     A Write on an interface that is down leaves its frames in the
//     AF_XDP TX ring, which cannot be taken back: Stats.XDPTxQueued,
//     neither sent nor dropped, until the interface is up and the next
//     Write sends them first; Writes while it stays down count their
//     frames in TxDropped, and those never go out (hca/link/xsk, Send).
//   - The interface MTU must leave every frame within a chunk
//     (MaxXDPMTU, 3822 bytes): a larger one is refused at Open, since
//     frames over a chunk could only go by the packet socket and would
//     overtake or trail the others.
//   - Reads and waits are outside the netpoller (as with BusyPoll): a
//     busy poll that finds nothing is two atomic loads under the Waiter,
//     and a wait is one ppoll on the packet socket and the AF_XDP socket
//     (sockpoll.Waiter.WaitAlsoOn).
//   - Under qemu TCG, where the kernel's receive path runs inline in the
//     peer's send system call, generic XDP took goroce's send_lat from
//     2.3x kernel rxe's (udp link) to 1.25-1.35x; it is a latency path:
//     without GSO, bandwidth is half rxe's (docs/performance.md, session
//     18).
//
// Not done: TPACKET_V3 (it hands a block over when full or on a
// millisecond timer: latency), PACKET_FANOUT; 802.1Q
// tagged frames are sent as given but not received (the kernel strips the
// tag and the filter matches untagged frames only); addresses added to the
// interface after Open are not in the filter.
//
// Opening needs CAP_NET_RAW. The endpoint lives in the network namespace
// it was opened in (Config.NetNS, or the calling thread's).
//
// This package imports the standard library, golang.org/x/sys/unix, and
// goroce's wire, hca/link, hca/link/internal/vnet (virtio_net_hdr, UDP GSO
// segmentation and checksums, shared with the tun link),
// hca/link/internal/sockpoll (link.Poller over a socket, shared with the
// udp link), hca/link/xsk (the AF_XDP socket) and hca/netcfg packages.
package afpacket
