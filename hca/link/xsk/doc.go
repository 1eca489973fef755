// Package xsk owns an AF_XDP socket (Linux) for one queue of one Ethernet
// interface, together with the XDP program and XSKMAP that steer RoCE
// frames into it: the kernel path under a packet socket or a UDP socket
// (the IP layer, UDP, socket lookup, the packet tap and its clone) is
// skipped on receive, and on send the frame goes from the socket straight
// to the driver (dev_direct_xmit in copy mode), with no qdisc, IP output
// or neighbour lookup.
//
// What Open sets up:
//
//   - An XDP program, written here as eBPF instructions (prog.go), that
//     redirects to the socket (bpf_redirect_map on an XSKMAP keyed by the
//     receive queue) exactly the frames a RoCE endpoint on this interface
//     wants: destination MAC the interface's, and RoCEv1 (ethertype 0x8915)
//     or RoCEv2 (IPv4 without options and not a fragment, or IPv6 with UDP
//     as the next header; UDP destination port 4791), and no longer than a
//     UMEM chunk holds. Every other frame, and every frame arriving on a
//     queue the socket is not bound to, passes to the kernel stack as if
//     no program were there (bpf_redirect_map's XDP_PASS fallback), so a
//     packet socket beside it still sees what the socket cannot take (a
//     UDP GSO super-frame a veth passes whole and no chunk holds, a frame
//     of another queue). A super-frame that fits a chunk is redirected
//     like any frame: the afpacket link splits it.
//   - The program is attached through a BPF link (BPF_LINK_CREATE, Linux
//     5.9+), in generic (skb) mode by default or in the driver's mode
//     (Config.Native); the attachment goes away when the socket is closed
//     or the process exits, and an interface that already has a program
//     is refused (EBUSY), never taken over.
//   - The socket in copy mode (XDP_COPY: works on every driver; zero-copy
//     needs driver support and is not tried) with one UMEM of 4 KiB
//     chunks: the first RxFrames chunks circulate through the fill and RX
//     rings, the rest through the TX and completion rings.
//
// Frames and memory: a chunk holds a frame of at most MaxFrame bytes
// (4096 less the 256-byte XDP headroom the kernel reserves in copy mode);
// Linux before 6.6 has no multi-buffer AF_XDP, so a larger frame cannot be
// received here at all. Recv copies each frame out and returns its chunk
// to the fill ring at once. A frame longer than the caller's buffer stays
// at the head of the RX ring (NextLen gives its length) until a Recv with
// a buffer that holds it takes it, so that nothing is dropped for want of
// a larger buffer (the afpacket link takes a peer's short-run super-frame
// into a chunk-sized one of its own and splits it). Send copies each frame
// into a free TX chunk, queues its descriptor and kicks the kernel once
// per batch (sendto with no data), which transmits in the system call in
// copy mode.
//
// Counting what Send passes: each frame is in one of Stats.TxFrames (the
// kernel took it and the device did not refuse it), TxDropped (never
// sent: Send gave up on it before queuing it, or the device refused it,
// EBUSY when it has no carrier) and TxQueued. A kick that finds the device
// down (ENETDOWN) leaves the descriptors already published in the TX ring,
// where nothing can take them back (the kernel caches the producer index,
// and a poll(2) on the socket transmits too): they are TxQueued until the
// device is up again and the next kick sends them, and Sends while it is
// still down drop their frames without queuing them. A frame counted
// dropped never reaches the wire.
//
// Concurrency: Recv (and Ready) run in one goroutine at a time, Send in
// one at a time; the two may run concurrently (separate rings, separate
// chunks). Close must not run concurrently with either: the caller
// guarantees no Recv or Send is in progress (the afpacket link does so
// with its sockpoll.Waiter).
//
// Opening needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN): in practice,
// root. The socket lives in the network namespace of the calling thread.
//
// This package imports the standard library and golang.org/x/sys/unix.
package xsk
