//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/sockpoll"
	"github.com/goroce/goroce/hca/link/xsk"
	"github.com/goroce/goroce/hca/netcfg"
)

// Config configures Open.
type Config struct {
	// Interface is the Ethernet interface to bind to (required).
	Interface string
	// NetNS, when set, is the namespace the interface is in; Open creates
	// the sockets there (they keep working from any goroutine). Nil means
	// the calling thread's namespace.
	NetNS *netcfg.NetNS
	// BatchSize is the most frames per Read or Write; default
	// link.IdealBatchSize.
	BatchSize int
	// Addrs restricts the RoCEv2 receive filter and Addrs() to these
	// addresses, which must be on the interface. Default: every address
	// the interface has when Open runs.
	Addrs []netip.Addr
	// RecvBuf and SendBuf are socket buffer sizes in bytes (SO_RCVBUFFORCE
	// when permitted); 0 means 4 MiB receive and the kernel's default send.
	RecvBuf, SendBuf int
	// NoGSO sends every frame as its own skb: no UDP GSO super-packets.
	NoGSO bool
	// BusyPoll keeps the sockets out of the Go runtime's netpoller: set it
	// when the HCA on this link busy-polls (hca.Options.BusyPoll). The
	// netpoller wakes a thread for every packet received and every sent
	// packet freed, which a busy poller, reading the socket itself, never
	// needs; without it a Read or Write that must wait blocks in ppoll(2),
	// which costs an HCA that blocks more than the netpoller's parking
	// (hca/link/internal/sockpoll).
	BusyPoll bool
	// NoRing receives with recvmmsg from the socket queue instead of
	// from a PACKET_RX_RING (ring.go). Open also falls back to recvmmsg
	// when the kernel refuses the ring (RingErr says why).
	NoRing bool
	// RingBytes is the receive ring's size in bytes, rounded down to
	// 64 KiB blocks (at least one); 0 means DefaultRingBytes, the most is
	// 64 MiB. The kernel pins this much memory per endpoint.
	RingBytes int
	// NoTxRing sends with sendmmsg only, not through a PACKET_TX_RING
	// (txring.go); so does GOROCE_AFPACKET_TXRING=0 in the environment
	// (=1 turns the ring on even here). Open also falls back to sendmmsg
	// when the kernel refuses the ring (TxRingErr says why).
	NoTxRing bool
	// TxRingBytes is the transmit ring's size in bytes, rounded down to
	// 1 MiB blocks (at least one); 0 means DefaultTxRingBytes, the most is
	// 64 MiB. The kernel pins this much memory per endpoint.
	TxRingBytes int
	// XDP moves RoCE frames through an AF_XDP socket on the interface's
	// queue 0 (hca/link/xsk, doc.go): received frames skip the stack and
	// the packet tap, sent ones the qdisc. Frames the socket cannot take
	// (longer than a UMEM chunk, such as a peer's GSO super-frame, or
	// received on another queue) still come through the packet socket.
	// It implies NoGSO and NoTxRing, waits outside the netpoller (as
	// BusyPoll) and needs an interface MTU of at most MaxXDPMTU.
	XDP bool
	// XDPNative attaches the XDP program in the driver's mode instead
	// of the generic one.
	XDPNative bool
}

// MaxXDPMTU is the largest interface MTU Config.XDP takes: a frame, with
// an 802.1Q tag, must fit a UMEM chunk.
const MaxXDPMTU = xsk.MaxFrame - ethHdr - 4

// Errors Open wraps; the message names the interface (and address).
var (
	ErrInterfaceDown      = errors.New("interface is down")
	ErrNotEthernet        = errors.New("not an Ethernet interface")
	ErrPermission         = errors.New("a packet socket needs CAP_NET_RAW (run as root)")
	ErrAddrNotOnInterface = errors.New("address is not on the interface")
)

// Stats are the endpoint's counters.
type Stats struct {
	RxFrames      uint64 // delivered by Read
	RxTooLarge    uint64 // dropped: larger than the caller's buffer
	RxRunt        uint64 // dropped: shorter than an Ethernet header
	RxKernelDrop  uint64 // dropped by the kernel: socket receive queue full (PACKET_STATISTICS)
	RxMalformed   uint64 // dropped: a GSO frame that cannot be segmented, or bad checksum offload offsets
	RxGSO         uint64 // UDP GSO frames (veth/bridge pass them unsegmented) split into segments
	RxGSOSegments uint64 // frames delivered from them
	RxRingFrames  uint64 // ring slots taken (frames delivered or dropped)
	RxCopies      uint64 // of which larger than a slot, read whole from the socket (TP_STATUS_COPY)
	RxSyscalls    uint64 // receive system calls made by Read and TryRead (recvmmsg; recvmsg for copies)
	TxFrames      uint64 // handed to the device
	TxGSO         uint64 // UDP GSO super-packets sent (one skb each)
	TxGSOSegments uint64 // frames sent in them
	TxICRCPatched uint64 // of which sent with an ICRC corrected for the IPv4 ID segmentation gives them
	TxDropped     uint64 // refused by the device queue (ENOBUFS): lost on the wire (a super-packet's whole run)
	TxRejected    uint64 // refused by Write: over the MTU or runt
	TxRingFrames  uint64 // of TxFrames, sent through the transmit ring
	TxRingFull    uint64 // sent by sendmmsg because every ring slot was still the kernel's
	TxRingKicks   uint64 // send system calls on the transmit ring
	TxRingSkipped uint64 // kicks in which the kernel skipped a slot as malformed (frames lost)
	HeldPorts     int    // addresses whose UDP port 4791 Open holds
	RingFrames    int    // receive ring slots (0: no ring, recvmmsg)
	RingFrameSize int    // bytes per slot (tp_frame_size)
	RingBytes     int    // bytes mapped for the ring
	TxRingSlots   int    // transmit ring slots (0: no ring, sendmmsg)
	TxRingSlotSz  int    // bytes per transmit slot (tp_frame_size)
	TxRingBytes   int    // bytes mapped for the transmit ring

	// With Config.XDP: frames received and sent through the AF_XDP
	// socket (of RxFrames and TxFrames), kicks, and what the kernel
	// dropped on its way to the socket (RX or fill ring full).
	XDPRxFrames, XDPTxFrames, XDPTxKicks, XDPKernelDrop uint64
	// XDPTxQueued: frames Write passed that are in the AF_XDP TX ring,
	// in neither TxFrames nor TxDropped, because the interface went
	// down before the kernel took them; they go out when it is up
	// again (hca/link/xsk, Send).
	XDPTxQueued uint64
}

// Endpoint is an AF_PACKET link on one interface. See link.Endpoint for
// the concurrency contract.
type Endpoint struct {
	cfg     Config
	ifname  string
	ifindex int
	mtu     int
	mac     net.HardwareAddr
	addrs   []netip.Addr

	file  *os.File // the packet socket
	rc    syscall.RawConn
	w     *sockpoll.Waiter // where the sockets wait (Config.BusyPoll); every operation on them
	holds []int            // UDP sockets holding port 4791
	held  int              // len(holds) after Open
	// sndbuf is the socket's SO_SNDBUF (as the kernel doubled it).
	sndbuf int

	rx rxState
	tx txState

	closed atomic.Bool
	once   sync.Once

	st struct {
		rxFrames, rxTooLarge, rxRunt, rxKernelDrop atomic.Uint64
		rxMalformed, rxGSO, rxGSOSegments          atomic.Uint64
		rxRingFrames, rxCopies, rxSyscalls         atomic.Uint64
		txFrames, txDropped, txRejected            atomic.Uint64
		txGSO, txGSOSegments, txICRCPatched        atomic.Uint64
		txRingFrames, txRingFull, txRingKicks      atomic.Uint64
		txRingSkipped                              atomic.Uint64
	}
	ringErr error       // why Open fell back from the ring to recvmmsg
	gso     atomic.Bool // send super-packets (until the kernel refuses one)
	statsMu sync.Mutex  // serialises PACKET_STATISTICS reads (they reset the kernel counter)

	txRingErr error // why Open fell back from the transmit ring to sendmmsg

	xsk *xsk.Socket // Config.XDP
}

var _ link.Endpoint = (*Endpoint)(nil)

// Open binds a packet socket to cfg.Interface. Errors are one line naming
// the interface: no such interface (netcfg.ErrNoInterface), down
// (ErrInterfaceDown), not Ethernet (ErrNotEthernet), no privilege
// (ErrPermission), an address in cfg.Addrs not on it
// (ErrAddrNotOnInterface).
func Open(cfg Config) (*Endpoint, error) {
	if cfg.Interface == "" {
		return nil, errors.New("afpacket: no interface given")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = link.IdealBatchSize
	}
	if cfg.BatchSize > 1024 {
		return nil, fmt.Errorf("afpacket: batch size %d over 1024", cfg.BatchSize)
	}
	if cfg.RecvBuf == 0 {
		cfg.RecvBuf = 4 << 20
	}
	if cfg.RingBytes < 0 || cfg.RingBytes > maxRingBytes {
		return nil, fmt.Errorf("afpacket: ring of %d bytes: want 0 to %d", cfg.RingBytes, maxRingBytes)
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.TxRingBytes < 0 || cfg.TxRingBytes > maxTxRingBytes {
		return nil, fmt.Errorf("afpacket: transmit ring of %d bytes: want 0 to %d", cfg.TxRingBytes, maxTxRingBytes)
	}
	if cfg.TxRingBytes == 0 {
		cfg.TxRingBytes = DefaultTxRingBytes
	}
	switch os.Getenv(txRingEnv) {
	case "0":
		cfg.NoTxRing = true
	case "1":
		cfg.NoTxRing = false
	}
	if cfg.XDP {
		cfg.NoGSO, cfg.NoTxRing = true, true
	}
	e := &Endpoint{cfg: cfg, ifname: cfg.Interface}
	// An AF_XDP socket cannot wait in the netpoller beside the packet
	// socket: a read waits in ppoll on both.
	w, err := sockpoll.NewWaiter(!cfg.BusyPoll && !cfg.XDP)
	if err != nil {
		return nil, fmt.Errorf("afpacket: eventfd: %w", err)
	}
	e.w = w
	if err := cfg.NetNS.Do(e.open); err != nil {
		e.w.Close()
		e.closeFDs()
		return nil, err
	}
	e.held = len(e.holds)
	if e.xsk != nil {
		e.w.WaitAlsoOn(e.xsk.FD())
	}
	e.gso.Store(!cfg.NoGSO)
	e.rx.init(e)
	e.tx.init(e)
	return e, nil
}

// open runs in the endpoint's namespace.
func (e *Endpoint) open() error {
	name := e.ifname
	l, err := netcfg.LinkByName(name)
	if err != nil {
		if errors.Is(err, netcfg.ErrNoInterface) {
			return fmt.Errorf("afpacket: interface %q: %w", name, netcfg.ErrNoInterface)
		}
		return fmt.Errorf("afpacket: %w", err)
	}
	if len(l.HardwareAddr) != 6 {
		return fmt.Errorf("afpacket: %s: %w (hardware address %q)", name, ErrNotEthernet, l.HardwareAddr)
	}
	if !l.Up {
		return fmt.Errorf("afpacket: %s: %w (ip link set %s up)", name, ErrInterfaceDown, name)
	}
	e.ifindex, e.mtu, e.mac = l.Index, l.MTU, l.HardwareAddr
	have, err := netcfg.Addrs(name)
	if err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	e.addrs = have
	if len(e.cfg.Addrs) > 0 {
		e.addrs = nil
		for _, a := range e.cfg.Addrs {
			a = a.Unmap()
			if !slices.Contains(have, a) {
				return fmt.Errorf("afpacket: %v: %w %s (it has %s)", a, ErrAddrNotOnInterface, name, listAddrs(have))
			}
			e.addrs = append(e.addrs, a)
		}
	}
	prog, err := roceFilter(e.addrs)
	if err != nil {
		return err
	}

	// Protocol 0: the socket receives nothing until bind, by which time
	// the filter is in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("afpacket: %s: %w", name, ErrPermission)
		}
		return fmt.Errorf("afpacket: %s: packet socket: %w", name, err)
	}
	if e.file, err = e.w.File(fd, "afpacket:"+name); err != nil {
		unix.Close(fd)
		return fmt.Errorf("afpacket: %s: packet socket: %w", name, err)
	}
	if err := attachFilter(fd, prog); err != nil {
		return fmt.Errorf("afpacket: %s: SO_ATTACH_FILTER: %w", name, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fmt.Errorf("afpacket: %s: PACKET_IGNORE_OUTGOING (Linux 4.20+): %w", name, err)
	}
	// Before bind, so every frame comes with its header (gso.go).
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fmt.Errorf("afpacket: %s: PACKET_VNET_HDR: %w", name, err)
	}
	// The ring, also before bind: a socket bound without it would queue
	// frames that a ring reader never looks at.
	if !e.cfg.NoRing {
		if err := e.setupRing(fd); err != nil {
			e.ringErr = fmt.Errorf("afpacket: %s: receive ring: %w", name, err)
		}
	}
	setBuffers(fd, e.cfg.RecvBuf, e.cfg.SendBuf)
	if e.sndbuf, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil {
		return fmt.Errorf("afpacket: %s: SO_SNDBUF: %w", name, err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		if errors.Is(err, unix.ENETDOWN) {
			return fmt.Errorf("afpacket: %s: %w", name, ErrInterfaceDown)
		}
		return fmt.Errorf("afpacket: %s: bind: %w", name, err)
	}
	if e.rc, err = e.file.SyscallConn(); err != nil {
		return fmt.Errorf("afpacket: %s: %w", name, err)
	}
	if !e.cfg.NoTxRing {
		if err := e.setupTxRing(); err != nil {
			e.txRingErr = fmt.Errorf("afpacket: %s: transmit ring: %w", name, err)
		}
	}
	for _, a := range e.addrs {
		if err := e.holdPort(a); err != nil {
			return err
		}
	}
	if e.cfg.XDP {
		if e.mtu > MaxXDPMTU {
			return fmt.Errorf("afpacket: %s: XDP: MTU %d is over the %d an AF_XDP frame holds (4 KiB UMEM chunks; Linux before 6.6 has no multi-buffer AF_XDP)", name, e.mtu, MaxXDPMTU)
		}
		if e.xsk, err = xsk.Open(xsk.Config{Ifindex: e.ifindex, MAC: e.mac, Native: e.cfg.XDPNative}); err != nil {
			return fmt.Errorf("afpacket: %s: XDP: %w", name, err)
		}
	}
	return nil
}

// holdPort binds UDP 4791 on a with a socket that drops everything, so the
// kernel IP stack does not answer our RoCEv2 packets with ICMP port
// unreachable. A port someone else holds is left to them.
func (e *Endpoint) holdPort(a netip.Addr) error {
	fam := unix.AF_INET
	var sa unix.Sockaddr
	if a.Is4() {
		sa = &unix.SockaddrInet4{Port: roceV2Port, Addr: a.As4()}
	} else {
		fam = unix.AF_INET6
		s6 := &unix.SockaddrInet6{Port: roceV2Port, Addr: a.As16()}
		if a.IsLinkLocalUnicast() {
			s6.ZoneId = uint32(e.ifindex)
		}
		sa = s6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("afpacket: %s: UDP socket to hold port %d on %v: %w", e.ifname, roceV2Port, a, err)
	}
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	// A UDP GSO skb (a peer's super-packet: veth passes it whole) reaching
	// a socket without UDP_GRO is segmented for it first, checksums and
	// all (udp_unexpected_gso), only for the filter to drop every segment.
	// With UDP_GRO the socket accepts it whole and drops it at once.
	if !holderNoGRO {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	}
	if err := attachFilter(fd, dropAll()); err != nil {
		unix.Close(fd)
		return fmt.Errorf("afpacket: %s: drop filter on the UDP %d holder: %w", e.ifname, roceV2Port, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return nil
		}
		return fmt.Errorf("afpacket: %s: holding UDP port %d on %v: %w", e.ifname, roceV2Port, a, err)
	}
	e.holds = append(e.holds, fd)
	return nil
}

// holderNoGRO leaves UDP_GRO off on the port holders (benchmarks
// measure what it saves).
var holderNoGRO bool

func listAddrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "no addresses"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func setBuffers(fd, rcv, snd int) {
	if rcv > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcv) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcv)
	}
	if snd > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, snd) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, snd)
	}
}

// GSO reports whether Write sends runs of equal-size RoCEv2 frames of one
// flow as UDP GSO super-packets: not with Config.NoGSO, nor after the
// kernel refused one.
func (e *Endpoint) GSO() bool { return e.gso.Load() }

// Ring reports whether frames are received from a PACKET_RX_RING (ring.go)
// rather than with recvmmsg: not with Config.NoRing, nor when the kernel
// refused the ring (RingErr).
func (e *Endpoint) Ring() bool { return e.rx.ring.mem != nil }

// RingErr is why Open fell back to recvmmsg, or nil (ring on, or
// Config.NoRing).
func (e *Endpoint) RingErr() error { return e.ringErr }

// Interface is the interface name.
func (e *Endpoint) Interface() string { return e.ifname }

// BatchSize implements link.Endpoint.
func (e *Endpoint) BatchSize() int { return e.cfg.BatchSize }

// MTU implements link.Endpoint: the interface MTU when Open ran (the
// largest IP packet; a frame may add its Ethernet header).
func (e *Endpoint) MTU() int { return e.mtu }

// Format implements link.Endpoint: frames start with an Ethernet header.
func (e *Endpoint) Format() link.Format { return link.FormatEthernet }

// Headroom implements link.Endpoint.
func (e *Endpoint) Headroom() int { return 0 }

// Addrs implements link.Endpoint: the interface's IP addresses at Open
// (or Config.Addrs).
func (e *Endpoint) Addrs() []netip.Addr { return e.addrs }

// HardwareAddr implements link.Endpoint: the interface MAC.
func (e *Endpoint) HardwareAddr() net.HardwareAddr { return e.mac }

// Close closes the sockets; a blocked Read or Write returns link.ErrClosed.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		// Outside the netpoller (Config.BusyPoll) this wakes blocked
		// Reads and Writes and returns once no operation runs on the
		// sockets or rings; in it, closing the Files does both. Only
		// then may the rings go.
		e.w.Close()
		e.closeFDs()
	})
	return nil
}

func (e *Endpoint) closeFDs() {
	if e.file != nil {
		e.file.Close()
	}
	e.rx.ring.unmap()
	e.tx.ring.close() // its socket, then its ring
	for _, fd := range e.holds {
		unix.Close(fd)
	}
	e.holds = nil
	if e.xsk != nil {
		e.xsk.Close()
	}
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	e.statsMu.Lock()
	if !e.closed.Load() && e.rc != nil {
		var ps unix.TpacketStats
		e.rc.Control(func(fd uintptr) {
			l := uint32(unsafe.Sizeof(ps))
			_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_PACKET, unix.PACKET_STATISTICS,
				uintptr(unsafe.Pointer(&ps)), uintptr(unsafe.Pointer(&l)), 0)
			if errno == 0 {
				e.st.rxKernelDrop.Add(uint64(ps.Drops))
			}
		})
	}
	e.statsMu.Unlock()
	c := &e.st
	var xs xsk.Stats
	if e.xsk != nil && e.w.Enter() {
		xs = e.xsk.Stats()
		e.w.Exit()
	}
	return Stats{
		RxFrames: c.rxFrames.Load(), RxTooLarge: c.rxTooLarge.Load(), RxRunt: c.rxRunt.Load(),
		RxKernelDrop: c.rxKernelDrop.Load(), RxMalformed: c.rxMalformed.Load(),
		RxGSO: c.rxGSO.Load(), RxGSOSegments: c.rxGSOSegments.Load(),
		RxRingFrames: c.rxRingFrames.Load(), RxCopies: c.rxCopies.Load(), RxSyscalls: c.rxSyscalls.Load(),
		TxFrames: c.txFrames.Load(), TxGSO: c.txGSO.Load(), TxGSOSegments: c.txGSOSegments.Load(),
		TxICRCPatched: c.txICRCPatched.Load(), TxDropped: c.txDropped.Load() + xs.TxDropped, TxRejected: c.txRejected.Load(),
		HeldPorts: e.held, RingFrames: e.rx.ring.frames, RingFrameSize: e.rx.ring.frameSize,
		RingBytes: len(e.rx.ring.mem),

		TxRingFrames: c.txRingFrames.Load(), TxRingFull: c.txRingFull.Load(),
		TxRingKicks: c.txRingKicks.Load(), TxRingSkipped: c.txRingSkipped.Load(),
		TxRingSlots: e.tx.ring.frames, TxRingSlotSz: e.tx.ring.frameSize, TxRingBytes: len(e.tx.ring.mem),

		XDPRxFrames: xs.RxFrames, XDPTxFrames: xs.TxFrames, XDPTxKicks: xs.TxKicks,
		XDPKernelDrop: xs.KernelRxDropped + xs.KernelRxRingFull + xs.KernelFillEmpty,
		XDPTxQueued:   xs.TxQueued,
	}
}

// closedErr maps an error from a closed file to link.ErrClosed.
func (e *Endpoint) closedErr(err error) error {
	if e.closed.Load() || errors.Is(err, os.ErrClosed) {
		return link.ErrClosed
	}
	return err
}
