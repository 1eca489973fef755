//go:build linux

package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// Mode is the kind of device.
type Mode uint8

// Device modes.
const (
	// TUN carries IP packets (link.FormatIP): RoCEv2 over IPv4 or IPv6.
	TUN Mode = iota
	// TAP carries Ethernet frames (link.FormatEthernet): RoCEv2 or RoCEv1.
	TAP
)

func (m Mode) String() string {
	switch m {
	case TUN:
		return "tun"
	case TAP:
		return "tap"
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// DefaultMTU is the device MTU when Config.MTU is 0: room for a 4096-byte
// IB MTU RoCEv2 packet over IPv6 (4096 + 40 + 8 + 12 + 16 + 28 + 4 bytes of
// headers and ICRC, rounded up), as rxe needs an interface MTU of at least
// 4200 for IB MTU 4096.
const DefaultMTU = 4200

// Config configures Open.
type Config struct {
	// Name is the interface name; "" lets the kernel choose (tun0, tap0...).
	Name string
	// Mode is TUN (default) or TAP.
	Mode Mode
	// Addr is the goroce host's address and the prefix of the subnet it is
	// on (required): Addrs returns Addr.Addr(), from which the HCA builds
	// its GIDs. It is not assigned to the kernel side of the device (see
	// the package documentation); TUN devices get a route to Addr.Masked()
	// through the device unless KernelAddr already implies it.
	Addr netip.Prefix
	// KernelAddr, when valid, is assigned to the kernel side of the device
	// (the "gateway" the goroce host sees). It must differ from Addr.Addr().
	KernelAddr netip.Prefix
	// MTU is the device MTU (default DefaultMTU): the largest IP packet.
	MTU int
	// Routes are further destinations the kernel routes into the device
	// (towards the goroce host).
	Routes []netip.Prefix
	// BatchSize is the largest batch of one Read or Write (default
	// link.IdealBatchSize).
	BatchSize int
	// HardwareAddr is the goroce host's MAC in TAP mode (default: a
	// locally administered unicast address derived from Addr). It is not
	// the TAP device's own MAC, which the kernel picks.
	HardwareAddr net.HardwareAddr
	// NoConfigure leaves the interface as Open created it: no address, MTU
	// or routes, and down. The caller configures it (Endpoint.Name gives
	// the interface); MTU still bounds Write.
	NoConfigure bool
	// NoOffload opens the device without IFF_VNET_HDR: no virtio-net
	// header, no checksum or segmentation offload, one packet per read(2)
	// and write(2). By default a TUN asks for TUN_F_CSUM, TUN_F_USO4 and
	// TUN_F_USO6 and falls back to what the kernel grants (Offloads). TAP
	// devices never use offloads.
	NoOffload bool
	// Attach opens the existing persistent device Name (made by `ip
	// tuntap add dev NAME mode tun|tap`, perhaps already on a bridge or
	// routed to) instead of creating one, and configures nothing (as
	// NoConfigure): whoever made it set its addresses, routes and state,
	// and it outlives the endpoint. MTU 0 means the device's MTU.
	Attach bool
}

// Stats are the endpoint's counters.
type Stats struct {
	TxFrames   uint64 // frames written to the device
	TxRejected uint64 // frames refused by Write: over the MTU, not IP (TUN), too short
	TxErrors   uint64 // frames the kernel refused (write error)

	RxFrames   uint64 // frames returned by Read
	RxTooLarge uint64 // dropped: larger than the caller's buffer
	RxNotRoCE  uint64 // dropped: not a RoCE frame (ARP, NDP, MLD, other UDP ports ...)
	RxErrors   uint64 // read errors other than EAGAIN (dropped frames)

	TxGSO         uint64 // super-packets written (gso_type UDP_L4), each holding TxGSOSegments/TxGSO frames
	TxGSOSegments uint64 // frames sent inside super-packets (also counted in TxFrames)
	TxICRCPatched uint64 // of those, frames whose ICRC was corrected for the IPv4 ID the kernel gives them
	RxGSO         uint64 // super-packets read and split
	RxGSOSegments uint64 // frames delivered from them (also counted in RxFrames)
	RxMalformed   uint64 // dropped: a virtio-net header the frame contradicts (unsplittable GSO, bad checksum offsets)
	RxCsumPartial uint64 // frames that came with a partial UDP checksum (NEEDS_CSUM), finished by Read
}

type counters struct {
	txFrames, txRejected, txErrors            atomic.Uint64
	rxFrames, rxTooLarge, rxNotRoCE, rxErrors atomic.Uint64
	txGSO, txGSOSegments, txICRCPatched       atomic.Uint64
	rxGSO, rxGSOSegments, rxMalformed         atomic.Uint64
	rxCsumPartial                             atomic.Uint64
}

// Offloads are what the kernel granted Open: the virtio-net header on the
// fd and the TUN_F_* offloads (TUNSETOFFLOAD).
type Offloads struct {
	VnetHdr bool // IFF_VNET_HDR: every read and write carries a struct virtio_net_hdr
	Csum    bool // TUN_F_CSUM: the kernel may hand over packets with a partial UDP checksum
	USO4    bool // TUN_F_USO4: UDP segmentation both ways for IPv4
	USO6    bool // TUN_F_USO6: same for IPv6
}

// Errors.
var (
	// ErrBadConfig is wrapped by Open for an invalid Config.
	ErrBadConfig = errors.New("tun: invalid configuration")
	// ErrBadFrame is wrapped by Write for a frame the device cannot carry:
	// shorter than a header, or (TUN) not IPv4 or IPv6.
	ErrBadFrame = errors.New("tun: frame is not a packet for this device")
)

// Endpoint is a TUN or TAP device. It implements link.Endpoint.
type Endpoint struct {
	cfg    Config
	name   string
	format link.Format
	mtu    int
	maxLen int // largest frame: MTU plus the Ethernet header (TAP)
	addrs  []netip.Addr
	mac    net.HardwareAddr

	f   *os.File // the device fd, non-blocking, in the Go netpoller
	rc  syscall.RawConn
	off Offloads
	gso atomic.Bool // Write builds super-packets (cleared for good if the kernel refuses one)

	closed atomic.Bool
	once   sync.Once
	st     counters
	rx     rxState // owned by the single reader
	tx     txState // owned by the single writer
}

var _ link.Endpoint = (*Endpoint)(nil)

// Open creates the device and configures it (unless cfg.NoConfigure), or
// attaches to an existing one (cfg.Attach). The device lives in the network
// namespace of the calling thread; one Open created disappears when the
// endpoint is closed.
func Open(cfg Config) (*Endpoint, error) {
	if cfg.Attach {
		if err := cfg.checkAttach(); err != nil {
			return nil, err
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	e := &Endpoint{cfg: cfg, mtu: cfg.MTU, maxLen: cfg.MTU, format: link.FormatIP,
		addrs: []netip.Addr{cfg.Addr.Addr()}}
	if cfg.Mode == TAP {
		e.format = link.FormatEthernet
		e.maxLen += wire.EthernetLen + wire.VLANLen
		e.mac = cfg.HardwareAddr
		if e.mac == nil {
			e.mac = DefaultHardwareAddr(cfg.Addr.Addr())
		}
	}
	if cfg.Name != "" && !cfg.Attach {
		// TUNSETIFF on an existing device of this kind attaches to it:
		// refuse a taken name.
		if _, err := netcfg.LinkByName(cfg.Name); err == nil {
			return nil, fmt.Errorf("tun: interface %q: %w", cfg.Name, netcfg.ErrExists)
		}
	}
	fd, name, off, err := openDevice(cfg.Name, cfg.Mode, !cfg.NoOffload && cfg.Mode == TUN)
	if err != nil {
		return nil, fmt.Errorf("tun: creating %s device %q: %w", cfg.Mode, cfg.Name, err)
	}
	e.name, e.off = name, off
	e.gso.Store(off.USO4 || off.USO6)
	// A non-blocking fd: os.NewFile registers it with the netpoller.
	e.f = os.NewFile(uintptr(fd), "/dev/net/tun")
	if e.rc, err = e.f.SyscallConn(); err != nil {
		e.f.Close()
		return nil, fmt.Errorf("tun: %w", err)
	}
	if cfg.Attach {
		waitOperUp(e.name)
	}
	if !cfg.NoConfigure && !cfg.Attach {
		if err := configure(e.name, &cfg, e.mac); err != nil {
			e.f.Close()
			return nil, err
		}
	}
	e.rx.init(e)
	e.tx.init(e)
	return e, nil
}

// waitOperUp waits, for at most a second, until an attached device that is
// up is operationally up. A persistent device set up with no fd attached
// has no carrier, so its queue discipline is the discard-everything noop;
// attaching turns the carrier on, but the kernel swaps the real qdisc in
// from its linkwatch work, up to a second later, and until then drops every
// frame routed into the device (measured: about one TestAttach run in three
// lost its frame). linkwatch sets the operational state (IFF_RUNNING) in
// the same step.
func waitOperUp(name string) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		l, err := netcfg.LinkByName(name)
		if err != nil || !l.Up || l.Running {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// checkAttach checks that c.Name is an existing TUN/TAP device of c.Mode
// and takes its MTU when c.MTU is 0.
func (c *Config) checkAttach() error {
	if c.Name == "" {
		return fmt.Errorf("%w: Attach needs the device Name", ErrBadConfig)
	}
	l, err := netcfg.LinkByName(c.Name)
	if err != nil {
		return fmt.Errorf("tun: attaching to %q: %w", c.Name, err)
	}
	if l.Kind != "tuntap" {
		return fmt.Errorf("%w: %q is a %s device, not TUN/TAP", ErrBadConfig, c.Name, l.Kind)
	}
	if isTAP := len(l.HardwareAddr) == 6; isTAP != (c.Mode == TAP) {
		other := TUN
		if isTAP {
			other = TAP
		}
		return fmt.Errorf("%w: %q is a %s device, not %s", ErrBadConfig, c.Name, other, c.Mode)
	}
	if c.MTU == 0 {
		c.MTU = l.MTU
	}
	return nil
}

func (c *Config) check() error {
	if c.Mode != TUN && c.Mode != TAP {
		return fmt.Errorf("%w: unknown mode %d", ErrBadConfig, c.Mode)
	}
	// Unmapped first, so that ::ffff:0.0.0.0 is refused as unspecified.
	if err := unmapPrefix("Addr", &c.Addr); err != nil {
		return err
	}
	if !c.Addr.IsValid() || c.Addr.Addr().IsUnspecified() {
		return fmt.Errorf("%w: Addr %v must be a specific IPv4 or IPv6 address with a prefix length", ErrBadConfig, c.Addr)
	}
	// KernelAddr too: compared with Addr below, and netcfg would be handed
	// an IPv4 address with an IPv6 prefix length (a panic in netlink).
	if err := unmapPrefix("KernelAddr", &c.KernelAddr); err != nil {
		return err
	}
	if c.KernelAddr.IsValid() && c.KernelAddr.Addr() == c.Addr.Addr() {
		return fmt.Errorf("%w: KernelAddr %v is the goroce host's own address; the kernel would keep the peer's packets for itself", ErrBadConfig, c.KernelAddr)
	}
	if len(c.Name) >= unix.IFNAMSIZ {
		return fmt.Errorf("%w: interface name %q longer than %d bytes", ErrBadConfig, c.Name, unix.IFNAMSIZ-1)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	minMTU := 576
	if c.Addr.Addr().Is6() {
		minMTU = 1280
	}
	if c.MTU < minMTU || c.MTU > 65535 {
		return fmt.Errorf("%w: MTU %d outside [%d, 65535]", ErrBadConfig, c.MTU, minMTU)
	}
	if c.BatchSize == 0 {
		c.BatchSize = link.IdealBatchSize
	}
	if c.BatchSize < 0 {
		return fmt.Errorf("%w: negative BatchSize", ErrBadConfig)
	}
	if c.HardwareAddr != nil && (len(c.HardwareAddr) != 6 || c.HardwareAddr[0]&1 != 0) {
		return fmt.Errorf("%w: HardwareAddr %v is not a unicast MAC-48", ErrBadConfig, c.HardwareAddr)
	}
	// A copy: the caller's slice is not ours to unmap in place.
	c.Routes = slices.Clone(c.Routes)
	for i := range c.Routes {
		if !c.Routes[i].IsValid() {
			return fmt.Errorf("%w: invalid route %v", ErrBadConfig, c.Routes[i])
		}
		// An IPv4-mapped route is meant for the IPv4 addresses it maps;
		// as given it would be an IPv6 route in ::ffff:0:0/96.
		if err := unmapPrefix("route", &c.Routes[i]); err != nil {
			return err
		}
	}
	return nil
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix into the IPv4 prefix it
// stands for; one shorter than the mapping's 96 bits covers more than IPv4
// addresses and has no IPv4 equivalent.
func unmapPrefix(name string, p *netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4In6() {
		return nil
	}
	if p.Bits() < 96 {
		return fmt.Errorf("%w: %s %v is an IPv4-mapped address with a prefix shorter than /96", ErrBadConfig, name, *p)
	}
	*p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	return nil
}

// DefaultHardwareAddr is the goroce host's MAC on a TAP device when
// Config.HardwareAddr is nil: 02:67:72 (locally administered, "gr")
// followed by the low 3 bytes of the address.
func DefaultHardwareAddr(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x02, 0x67, 0x72, b[13], b[14], b[15]}
}

// Name returns the interface name.
func (e *Endpoint) Name() string { return e.name }

// BatchSize implements link.Endpoint.
func (e *Endpoint) BatchSize() int { return e.cfg.BatchSize }

// MTU implements link.Endpoint: the device MTU, the largest IP packet.
func (e *Endpoint) MTU() int { return e.mtu }

// Format implements link.Endpoint: FormatIP for TUN, FormatEthernet for TAP.
func (e *Endpoint) Format() link.Format { return e.format }

// Headroom implements link.Endpoint.
func (e *Endpoint) Headroom() int { return 0 }

// Addrs implements link.Endpoint: the goroce host's address, Config.Addr.
func (e *Endpoint) Addrs() []netip.Addr { return e.addrs }

// HardwareAddr implements link.Endpoint: the goroce host's MAC (TAP), or nil.
func (e *Endpoint) HardwareAddr() net.HardwareAddr { return e.mac }

// Close implements link.Endpoint. The device disappears with its last fd.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		if e.cfg.Attach && (e.off.Csum || e.off.USO4) {
			// The device outlives us: leave it as a reader without a
			// virtio-net header can use it.
			_ = e.rc.Control(func(fd uintptr) { _ = setOffload(int(fd), 0) })
		}
		e.f.Close()
	})
	return nil
}

// Offloads returns what the kernel granted at Open.
func (e *Endpoint) Offloads() Offloads { return e.off }

// GSO reports whether Write currently builds super-packets: USO was
// granted and the kernel has not refused a super-packet since.
func (e *Endpoint) GSO() bool { return e.gso.Load() }

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	s := &e.st
	return Stats{
		TxFrames: s.txFrames.Load(), TxRejected: s.txRejected.Load(), TxErrors: s.txErrors.Load(),
		RxFrames: s.rxFrames.Load(), RxTooLarge: s.rxTooLarge.Load(), RxNotRoCE: s.rxNotRoCE.Load(),
		RxErrors: s.rxErrors.Load(),
		TxGSO:    s.txGSO.Load(), TxGSOSegments: s.txGSOSegments.Load(), TxICRCPatched: s.txICRCPatched.Load(),
		RxGSO: s.rxGSO.Load(), RxGSOSegments: s.rxGSOSegments.Load(), RxMalformed: s.rxMalformed.Load(),
		RxCsumPartial: s.rxCsumPartial.Load(),
	}
}

// closedErr maps the errors of a closed file to link.ErrClosed.
func (e *Endpoint) closedErr(err error) error {
	if e.closed.Load() || errors.Is(err, os.ErrClosed) {
		return link.ErrClosed
	}
	return err
}
