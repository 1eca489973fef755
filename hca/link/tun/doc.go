// Package tun is the link backend over Linux TUN and TAP devices, created
// with songgao/water: a TUN device carries RoCEv2 as bare IPv4/IPv6 packets
// (link.FormatIP), a TAP device carries Ethernet frames with RoCEv2 or
// RoCEv1 (link.FormatEthernet). It is the only goroce package that imports
// water.
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
// water opens /dev/net/tun non-blocking and wraps it in an *os.File, which
// the Go runtime registers with its netpoller: Read and Write go through
// syscall.RawConn, so a blocked Read waits in the netpoller, not in a
// thread, and Close from another goroutine unblocks it with
// link.ErrClosed (linktest CloseUnblocksRead). A TUN fd moves one packet per read(2) or
// write(2): a Read batch is as many packets as are queued when the first
// one is ready (one netpoller wait per batch, one syscall per packet), a
// Write batch is one write(2) per frame in one callback. Each frame is read
// with readv into the caller's buffer plus an overflow scratch buffer, so a
// frame larger than the caller's buffer is detected, dropped and counted,
// never truncated, and nothing is copied otherwise.
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
// This package imports the standard library, golang.org/x/sys/unix,
// github.com/songgao/water and goroce's hca/link, hca/netcfg and wire.
package tun
