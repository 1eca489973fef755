//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/sockpoll"
)

// DefaultPort is the RoCEv2 UDP port.
const DefaultPort = 4791

// DefaultSocketBuffer is the default SO_RCVBUF/SO_SNDBUF request.
const DefaultSocketBuffer = 8 << 20

// Config configures Open.
type Config struct {
	// Addr is the local address: IPv4 or IPv6, not unspecified (required).
	Addr netip.Addr
	// Port is the local UDP port, the source port of every frame sent
	// (default DefaultPort). Decoders only accept RoCEv2 on port 4791, so
	// other values are for benchmarks and experiments.
	Port uint16
	// BatchSize is the largest batch of one Read or Write (default
	// link.IdealBatchSize).
	BatchSize int
	// RecvBuf and SendBuf are the socket buffer sizes in bytes (default
	// DefaultSocketBuffer). As root, SO_RCVBUFFORCE/SO_SNDBUFFORCE lift the
	// rmem_max/wmem_max cap.
	RecvBuf, SendBuf int
	// MTU caps the link MTU; 0 means the MTU of the interface that holds
	// Addr (65536 on loopback).
	MTU int
	// NoGSO disables UDP GSO on the send path; it is used when the kernel
	// supports UDP_SEGMENT unless this is set.
	NoGSO bool
	// GRO enables UDP GRO (UDP_GRO) on the receive path of an IPv6
	// endpoint: coalesced datagrams arrive in one read and are split with
	// the kernel-reported segment size. IPv6 has no IP ID, so this is exact.
	// It is ignored for IPv4, whose receive path is a raw socket.
	GRO bool
	// BusyPoll keeps the sockets out of the Go runtime's netpoller: set it
	// when the HCA on this link busy-polls (hca.Options.BusyPoll). The
	// netpoller wakes a thread for every packet received and every sent
	// packet freed, which a busy poller, reading the socket itself, never
	// needs; without it a Read or Write that must wait blocks in ppoll(2),
	// which costs an HCA that blocks more than the netpoller's parking
	// (hca/link/internal/sockpoll).
	BusyPoll bool
	// NoConnect sends every IPv4 frame through the one unconnected socket
	// instead of a connected socket per destination (conn.go), as every
	// IPv6 frame is sent; so does GOROCE_UDP_CONNECT=0 in the environment
	// (=1 turns connected sockets on even here), for A/B measurements with
	// programs whose flags do not reach Config.
	NoConnect bool
	// RxRing receives IPv4 from a packet socket's PACKET_RX_RING instead
	// of a raw socket (ring.go): a busy poll that finds nothing costs an
	// atomic load instead of a system call. The packet socket sees packets
	// before the IP layer, so the host's firewall does not apply to them.
	// GOROCE_UDP_RXRING=1 (or =0) in the environment overrides it. Ignored
	// for IPv6.
	RxRing bool
	// PlainIPv4 receives IPv4 on the UDP socket itself instead of a raw
	// socket, so that no CAP_NET_RAW is needed: an ordinary user's link.
	// The socket reports the addresses, ports, TOS and TTL of what it
	// receives but not the IPv4 identification and flags, which the ICRC
	// covers; Read rebuilds the header with the ID and DF flag that make
	// the ICRC verify (vnet.IDSolver) and counts the packets no ID explains
	// (Stats.RxIDUnsolved), which it passes on with ID 0 for the HCA to
	// drop on their ICRC. Frames go out through the one unconnected socket
	// (as with NoConnect): a connected one would take its peer's datagrams
	// from the socket that receives. The price: the ICRC spends 17 of its 32 bits on
	// the ID and flags, so a corrupted IPv4 packet goes undetected with a
	// chance of about 2^-15 instead of 2^-32, and every packet costs one
	// more CRC pass. No receive queues (SplitRx), no frame views
	// (ViewRead), no RxRing. Ignored for IPv6, which has no ID.
	// GOROCE_UDP_PLAIN=1 (or =0) in the environment overrides it.
	PlainIPv4 bool
}

// Stats are the endpoint's counters.
type Stats struct {
	TxFrames           uint64 // frames handed to the kernel
	TxCalls            uint64 // sendmmsg system calls made, those that failed or found the socket buffer full (EAGAIN) included
	TxGSOBatches       uint64 // UDP GSO super-datagrams sent
	TxGSOSegments      uint64 // frames sent inside them
	TxICRCPatched      uint64 // of TxFrames, those sent with an ICRC adjusted for the kernel's IP ID (GSO segments, connected sockets)
	TxConnected        uint64 // frames sent through connected sockets (IPv4, conn.go)
	ConnsOpened        uint64 // connected sockets opened
	ConnsFailed        uint64 // connected sockets that could not be opened (ConnErr says why)
	ConnFallbacks      uint64 // send errors on connected sockets: the socket set aside (until re-probed), its frames resent unconnected
	ConnsRevived       uint64 // connected sockets set aside, re-probed and carrying frames again
	ConnReprobesFailed uint64 // re-probes of a connected socket set aside that failed (it waits longer)
	TxRejected         uint64 // frames refused: bad header, not our source, over the MTU
	TxErrors           uint64 // frames the kernel refused (sendmmsg error)
	GSODisabled        uint64 // 1 once GSO was turned off for the link: the kernel has no UDP_SEGMENT, or a transmit queue met more than 16 destinations it refused GSO to
	GSORefused         uint64 // destinations GSO was turned off for after the kernel refused a super-datagram to them (EIO, EINVAL: the route's); each transmit queue learns its own

	RxFrames       uint64 // frames returned by Read
	RxAggregates   uint64 // GSO/GRO aggregates split into frames
	RxTooLarge     uint64 // dropped: larger than the caller's buffer, or truncated
	RxMalformed    uint64 // dropped: IP/UDP header not as expected
	RxWrongAddress uint64 // dropped: not addressed to Addr:Port
	RxRing         uint64 // IPv4 packets taken from the RX ring (Config.RxRing)
	RxIDSolved     uint64 // IPv4 packets whose ID and flags were found from their ICRC (Config.PlainIPv4)
	RxIDUnsolved   uint64 // IPv4 packets whose ICRC no ID explains, passed on with ID 0 (Config.PlainIPv4)
}

type counters struct {
	txFrames, txCalls, txGSOBatches, txGSOSegments, txICRCPatched, txRejected, txErrors, gsoDisabled atomic.Uint64
	txConnected, connOpened, connFailed, connFallbacks, gsoRefused                                   atomic.Uint64
	connRevived, connReprobeFailed                                                                   atomic.Uint64
	rxFrames, rxAggregates, rxTooLarge, rxMalformed, rxWrongAddress, rxRing                          atomic.Uint64
	rxIDSolved, rxIDUnsolved                                                                         atomic.Uint64
}

// Errors.
var (
	// ErrBadFrame: Write got a frame that is not an IP+UDP packet the kernel
	// would emit unchanged in the ICRC-covered fields (IPv4 options or
	// fragments, DF clear, IP ID not 0, lengths disagreeing with the frame,
	// UDP destination port 0).
	ErrBadFrame = errors.New("udp: frame is not an IP/UDP packet this socket can send unchanged")
	// ErrNotOurSource: Write got a frame whose source IP or UDP source port
	// is not the endpoint's; the kernel would rewrite it and break the ICRC.
	ErrNotOurSource = errors.New("udp: frame source address or port is not the endpoint's")
)

// Endpoint is a RoCEv2 link over kernel UDP sockets. It implements
// link.Endpoint and link.SourcePorter.
type Endpoint struct {
	cfg Config
	is6 bool
	// plain4: IPv4 received on the UDP socket (Config.PlainIPv4); gro4:
	// with UDP GRO (coalesced datagrams split by the reported size).
	plain4, gro4 bool
	mtu          int
	addrs        []netip.Addr

	udp    *os.File // bound UDP socket: sends; receives for IPv6
	udpRC  syscall.RawConn
	raw    *os.File // IPv4 raw receive socket (or packet socket with Config.RxRing); nil for IPv6
	ring   *rxRing  // its ring (Config.RxRing)
	rxRC   syscall.RawConn
	gso    atomic.Bool
	closed atomic.Bool
	once   sync.Once
	w      *sockpoll.Waiter // where the sockets wait (Config.BusyPoll); every operation on them

	st counters
	tx txState // owned by the single writer

	// sendFault, for tests, is called before each sendmmsg with the
	// socket and the messages left: an errno it returns stands for the
	// call's (nothing is sent), 0 lets the call go. Set before the first
	// Write.
	sendFault func(fd uintptr, msgs []unix.Mmsghdr) unix.Errno

	qmu     sync.Mutex
	queues  []*os.File // duplicates of udp behind NewTxQueue writers, SplitRx's raw sockets, connected sockets
	connFDs []int      // the connected sockets' descriptors (bindBeside)
	// spare holds connected sockets Prepare opened that no transmit
	// state has taken yet; prepared lists every destination Prepare
	// was asked for, so that each is prepared once.
	spare    []*conn
	prepared []connDst
	connErr  error     // why the first connected socket that failed to open did
	split    bool      // SplitRx was called
	netns    *os.File  // the network namespace Open ran in
	rings    []*rxRing // SplitRx's rings, unmapped once the files are closed
	rx       rxState   // owned by the single reader
}

var (
	_ link.Endpoint     = (*Endpoint)(nil)
	_ link.SourcePorter = (*Endpoint)(nil)
	_ link.TxQueuer     = (*Endpoint)(nil)
	_ link.RxQueuer     = (*Endpoint)(nil)
	_ link.Poller       = (*Endpoint)(nil)
	_ link.Poller       = (*rxQueue)(nil)
	_ link.Viewer       = (*Endpoint)(nil)
	_ link.Viewer       = (*rxQueue)(nil)
)

// Open creates the sockets and binds them to cfg.Addr:cfg.Port.
func Open(cfg Config) (*Endpoint, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() || cfg.Addr.Zone() != "" {
		return nil, fmt.Errorf("udp: local address %v must be a specific IPv4 or IPv6 address", cfg.Addr)
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.BatchSize < 0 || cfg.RecvBuf < 0 || cfg.SendBuf < 0 || cfg.MTU < 0 {
		return nil, errors.New("udp: negative BatchSize, buffer size or MTU")
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = link.IdealBatchSize
	}
	if cfg.RecvBuf == 0 {
		cfg.RecvBuf = DefaultSocketBuffer
	}
	if cfg.SendBuf == 0 {
		cfg.SendBuf = DefaultSocketBuffer
	}
	if on, ok := envSwitch(connectEnv); ok {
		cfg.NoConnect = !on
	}
	if on, ok := envSwitch(rxRingEnv); ok {
		cfg.RxRing = on
	}
	if on, ok := envSwitch(plainEnv); ok {
		cfg.PlainIPv4 = on
	}
	e := &Endpoint{cfg: cfg, is6: cfg.Addr.Is6(), addrs: []netip.Addr{cfg.Addr}}
	e.plain4 = !e.is6 && cfg.PlainIPv4
	if e.plain4 && cfg.RxRing {
		return nil, errors.New("udp: PlainIPv4 and RxRing exclude each other (a packet socket needs CAP_NET_RAW)")
	}
	if e.plain4 {
		// A socket connected to a peer would take that peer's datagrams
		// from the one socket that receives.
		e.cfg.NoConnect = true
	}
	mtu, err := interfaceMTU(cfg.Addr)
	if err != nil {
		return nil, err
	}
	if cfg.MTU > 0 && cfg.MTU < mtu {
		mtu = cfg.MTU
	}
	e.mtu = mtu
	if !e.is6 {
		// Remember the namespace for SplitRx's extra raw sockets.
		if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
			e.netns = f
		}
	}
	if e.w, err = sockpoll.NewWaiter(!cfg.BusyPoll); err != nil {
		return nil, fmt.Errorf("udp: eventfd: %w", err)
	}
	if err := e.openSockets(); err != nil {
		e.w.Close()
		e.closeFiles()
		return nil, err
	}
	e.tx.init(e, e.udpRC)
	e.rx.init(e, e.rxRC, e.ring)
	return e, nil
}

// envSwitch reads an A/B override from the environment: "1" is on, "0"
// off; ok is false for anything else (unset included).
func envSwitch(name string) (on, ok bool) {
	switch os.Getenv(name) {
	case "0":
		return false, true
	case "1":
		return true, true
	}
	return false, false
}

// interfaceMTU returns the MTU of the interface that holds a.
func interfaceMTU(a netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, fmt.Errorf("udp: listing interfaces: %w", err)
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, x := range as {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.MTU, nil
				}
			}
		}
		// 127.0.0.0/8 is all on lo although only 127.0.0.1 is listed.
		if a.Is4() && a.IsLoopback() && ifc.Flags&net.FlagLoopback != 0 {
			return ifc.MTU, nil
		}
	}
	return 0, fmt.Errorf("udp: no interface holds %v", a)
}

func (e *Endpoint) openSockets() error {
	fam := unix.AF_INET
	if e.is6 {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("udp: socket: %w", err)
	}
	if e.udp, err = e.w.File(fd, "udp"); err != nil {
		unix.Close(fd)
		return fmt.Errorf("udp: socket: %w", err)
	}
	setBuffers(fd, e.cfg.RecvBuf, e.cfg.SendBuf)
	if e.is6 {
		for _, o := range [][3]int{
			{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
			{unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1},
			// rxe sends RoCEv2 over IPv6 with UDP checksum 0 (the ICRC
			// covers the payload); without this the kernel drops every
			// such datagram before the socket (RFC 6935/6936 zero
			// checksums are opt-in per socket).
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1},
		} {
			if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
				return fmt.Errorf("udp: setsockopt %d/%d: %w", o[0], o[1], err)
			}
		}
		if e.cfg.GRO {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
				return fmt.Errorf("udp: UDP_GRO: %w: %w", err, link.ErrNotSupported)
			}
		}
		sa := &unix.SockaddrInet6{Port: int(e.cfg.Port), Addr: e.cfg.Addr.As16()}
		if err := unix.Bind(fd, sa); err != nil {
			return fmt.Errorf("udp: bind [%v]:%d: %w", e.cfg.Addr, e.cfg.Port, err)
		}
	} else if e.plain4 {
		for _, o := range [][3]int{
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
			{unix.IPPROTO_IP, unix.IP_PKTINFO, 1},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1},
			{unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
		} {
			if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
				return fmt.Errorf("udp: setsockopt %d/%d: %w", o[0], o[1], err)
			}
		}
		// A GSO super-datagram then arrives whole instead of segmented
		// by the kernel for this socket, and a receive returns more.
		e.gro4 = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
		sa := &unix.SockaddrInet4{Port: int(e.cfg.Port), Addr: e.cfg.Addr.As4()}
		if err := unix.Bind(fd, sa); err != nil {
			return fmt.Errorf("udp: bind %v:%d: %w", e.cfg.Addr, e.cfg.Port, err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("udp: IP_MTU_DISCOVER: %w", err)
		}
		// The raw socket receives; this one must only keep the port bound
		// (no ICMP port unreachable) without its queue filling up. UDP_GRO
		// spares the kernel segmenting GSO datagrams just to drop them.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		if err := attachFilter(fd, dropAll()); err != nil {
			return err
		}
		sa := &unix.SockaddrInet4{Port: int(e.cfg.Port), Addr: e.cfg.Addr.As4()}
		if err := unix.Bind(fd, sa); err != nil {
			return fmt.Errorf("udp: bind %v:%d: %w", e.cfg.Addr, e.cfg.Port, err)
		}
		if e.raw, e.ring, err = e.openRxQueue(acceptUDPTo(e.cfg.Addr.As4(), e.cfg.Port)); err != nil {
			return err
		}
	}
	if !e.cfg.NoGSO {
		if _, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err == nil {
			e.gso.Store(true)
		}
	}
	if e.udpRC, err = e.udp.SyscallConn(); err != nil {
		return err
	}
	e.rxRC = e.udpRC
	if e.raw != nil {
		if e.rxRC, err = e.raw.SyscallConn(); err != nil {
			return err
		}
	}
	return nil
}

func setBuffers(fd, rcv, snd int) {
	if rcv > 0 {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcv) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcv)
		}
	}
	if snd > 0 {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, snd) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, snd)
		}
	}
}

// GSO reports whether Write uses UDP GSO.
func (e *Endpoint) GSO() bool { return e.gso.Load() }

// SourcePort implements link.SourcePorter: the UDP source port of every
// frame this endpoint sends.
func (e *Endpoint) SourcePort() uint16 { return e.cfg.Port }

// BatchSize implements link.Endpoint.
func (e *Endpoint) BatchSize() int { return e.cfg.BatchSize }

// MTU implements link.Endpoint: the interface MTU, capped by Config.MTU.
func (e *Endpoint) MTU() int { return e.mtu }

// Format implements link.Endpoint: frames are IP packets.
func (e *Endpoint) Format() link.Format { return link.FormatIP }

// Headroom implements link.Endpoint.
func (e *Endpoint) Headroom() int { return 0 }

// Addrs implements link.Endpoint.
func (e *Endpoint) Addrs() []netip.Addr { return e.addrs }

// HardwareAddr implements link.Endpoint: nil, this is an IP link.
func (e *Endpoint) HardwareAddr() net.HardwareAddr { return nil }

// Close closes the sockets; a blocked Read or Write returns link.ErrClosed.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		e.w.Close() // outside the netpoller: wakes blocked Reads and Writes, waits for them
		e.closeFiles()
	})
	return nil
}

func (e *Endpoint) closeFiles() {
	e.qmu.Lock()
	if e.netns != nil {
		e.netns.Close()
	}
	for _, f := range e.queues {
		f.Close()
	}
	// A ring is unmapped only once its socket's file is closed: no RawConn
	// callback can touch it after that (ring.go).
	for _, g := range e.rings {
		g.unmap()
	}
	e.queues, e.connFDs, e.rings, e.spare = nil, nil, nil, nil
	e.qmu.Unlock()
	if e.udp != nil {
		e.udp.Close()
	}
	if e.raw != nil {
		e.raw.Close()
	}
	e.ring.unmap()
}

// ConnErr returns why the first connected socket that could not be opened
// failed (nil if none did); its destination is sent to unconnected.
func (e *Endpoint) ConnErr() error {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	return e.connErr
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	c := &e.st
	return Stats{
		TxFrames: c.txFrames.Load(), TxCalls: c.txCalls.Load(), TxGSOBatches: c.txGSOBatches.Load(), TxGSOSegments: c.txGSOSegments.Load(),
		TxICRCPatched: c.txICRCPatched.Load(), TxRejected: c.txRejected.Load(), TxErrors: c.txErrors.Load(),
		GSODisabled: c.gsoDisabled.Load(), GSORefused: c.gsoRefused.Load(), TxConnected: c.txConnected.Load(), ConnsOpened: c.connOpened.Load(),
		ConnsFailed: c.connFailed.Load(), ConnFallbacks: c.connFallbacks.Load(),
		ConnsRevived: c.connRevived.Load(), ConnReprobesFailed: c.connReprobeFailed.Load(),
		RxFrames: c.rxFrames.Load(), RxAggregates: c.rxAggregates.Load(), RxTooLarge: c.rxTooLarge.Load(),
		RxMalformed: c.rxMalformed.Load(), RxWrongAddress: c.rxWrongAddress.Load(), RxRing: c.rxRing.Load(),
		RxIDSolved: c.rxIDSolved.Load(), RxIDUnsolved: c.rxIDUnsolved.Load(),
	}
}

// closedErr maps an error from a closed file to link.ErrClosed.
func (e *Endpoint) closedErr(err error) error {
	if e.closed.Load() || errors.Is(err, os.ErrClosed) {
		return link.ErrClosed
	}
	return err
}

// SplitRx spreads IPv4 reception over n raw sockets by the BTH's DestQP
// (see link.RxQueuer): each socket's BPF filter keeps the residue of its
// reader, so the kernel, not a dispatcher goroutine, sorts the packets and
// each reader's buffers, splitting state and ICRC work are its own. A GSO
// super-datagram carries one QP's packets (Write aggregates no others), so
// it goes to one reader whole. IPv6 receives on the UDP socket itself and
// does not split.
func (e *Endpoint) SplitRx(n int) ([]link.Reader, error) {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	switch {
	case e.closed.Load():
		return nil, link.ErrClosed
	case e.is6:
		return nil, fmt.Errorf("udp: receive queues on IPv6: %w", link.ErrNotSupported)
	case e.plain4:
		return nil, fmt.Errorf("udp: receive queues without a raw socket (PlainIPv4): %w", link.ErrNotSupported)
	case e.split:
		return nil, errors.New("udp: SplitRx called twice")
	case n < 1 || n > 64:
		return nil, fmt.Errorf("udp: SplitRx(%d): want 1..64 queues", n)
	}
	a4 := e.cfg.Addr.As4()
	// The raw sockets must live in the endpoint's network namespace, which
	// need not be the calling thread's (tests and tools open links inside
	// a namespace on a locked thread and use them from anywhere).
	unlock, err := lockNetNS(e.netns)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var readers []link.Reader
	var files []*os.File
	var rings []*rxRing
	fail := func(err error) ([]link.Reader, error) {
		for _, f := range files {
			f.Close()
		}
		for _, g := range rings {
			g.unmap()
		}
		return nil, err
	}
	for i := 1; i < n; i++ {
		f, g, err := e.openRxQueue(acceptUDPToQP(a4, e.cfg.Port, uint32(n), uint32(i)))
		if err != nil {
			return fail(err)
		}
		files = append(files, f)
		if g != nil {
			rings = append(rings, g)
		}
		rc, err := f.SyscallConn()
		if err != nil {
			return fail(err)
		}
		r := &rxQueue{}
		r.init(e, rc, g)
		readers = append(readers, r)
	}
	// Narrow the endpoint's own socket last: until then it still sees
	// every packet (a packet may be read twice during the switch, never
	// lost; SplitRx runs before traffic).
	own := acceptUDPToQP(a4, e.cfg.Port, uint32(n), 0)
	if e.ring != nil {
		own = hostOnly(own)
	}
	var ferr error
	if err := e.rxRC.Control(func(s uintptr) {
		ferr = attachFilter(int(s), own)
	}); err != nil {
		return fail(err)
	}
	if ferr != nil {
		return fail(ferr)
	}
	e.queues = append(e.queues, files...)
	e.rings = append(e.rings, rings...)
	e.split = true
	return readers, nil
}

// openRxQueue opens the socket of an IPv4 receive queue with filter prog:
// a raw socket bound to Addr, or with Config.RxRing a packet socket and
// its ring.
func (e *Endpoint) openRxQueue(prog []unix.SockFilter) (*os.File, *rxRing, error) {
	if e.cfg.RxRing {
		fd, g, err := openRxRing(e.mtu, e.cfg.RecvBuf, prog)
		if err != nil {
			return nil, nil, err
		}
		f, err := e.w.File(fd, "udp-ring")
		if err != nil {
			unix.Close(fd)
			g.unmap()
			return nil, nil, fmt.Errorf("udp: packet socket: %w", err)
		}
		return f, g, nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: raw IPv4 socket (needs CAP_NET_RAW): %w", err)
	}
	f, err := e.w.File(fd, "udp-raw")
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("udp: raw socket: %w", err)
	}
	setBuffers(fd, e.cfg.RecvBuf, 0)
	if err := attachFilter(fd, prog); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: e.cfg.Addr.As4()}); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("udp: bind raw socket to %v: %w", e.cfg.Addr, err)
	}
	return f, nil, nil
}

// rxQueue is a receive queue of SplitRx: its own raw socket (or packet
// socket and ring) and state.
type rxQueue struct{ rxState }

// lockNetNS locks the calling goroutine to its thread and moves the thread
// into network namespace ns; unlock moves it back and unlocks it (a thread
// that cannot move back stays locked and dies with its goroutine).
func lockNetNS(ns *os.File) (unlock func(), err error) {
	goruntime.LockOSThread()
	restore, err := enterNetNS(ns)
	if err != nil {
		goruntime.UnlockOSThread()
		return nil, err
	}
	return func() {
		if restore() == nil {
			goruntime.UnlockOSThread()
		}
	}, nil
}

// enterNetNS moves the calling (locked) thread into network namespace ns
// unless it is there already, and returns how to move it back.
func enterNetNS(ns *os.File) (restore func() error, err error) {
	if ns == nil {
		return nil, fmt.Errorf("udp: the endpoint's network namespace is unknown: %w", link.ErrNotSupported)
	}
	cur, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	var a, b unix.Stat_t
	if unix.Fstat(int(cur.Fd()), &a) == nil && unix.Fstat(int(ns.Fd()), &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
		cur.Close()
		return func() error { return nil }, nil
	}
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		cur.Close()
		return nil, fmt.Errorf("udp: entering the endpoint's network namespace: %w", err)
	}
	return func() error {
		defer cur.Close()
		return unix.Setns(int(cur.Fd()), unix.CLONE_NEWNET)
	}, nil
}
