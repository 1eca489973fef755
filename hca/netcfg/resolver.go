package netcfg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ResolverConfig configures NewResolver.
type ResolverConfig struct {
	// NetNS is the namespace whose routes and neighbours are used; nil
	// means the namespace of the goroutine calling Resolve (the process's,
	// unless called inside another NetNS.Do).
	NetNS *NetNS
	// Interface, when set, is the interface frames leave through (the
	// AF_PACKET or TAP link): a route to a destination through another
	// interface is an error rather than a MAC that would be wrong there.
	Interface string
	// Timeout bounds how long Resolve waits for ARP/NDP; default 1s.
	Timeout time.Duration
	// TTL is how long a resolved MAC is cached; default 30s.
	TTL time.Duration
}

// Resolver finds the MAC of the next hop towards an IP address through the
// kernel: the route (RTM_GETROUTE, like `ip route get`) gives the outgoing
// interface and gateway, the neighbour table gives the gateway's (or the
// destination's) MAC. When the table has no usable entry the Resolver asks
// the kernel to resolve it (a neighbour request with NTF_USE, the netlink
// form of "a packet wants to go there", falling back to a one-byte UDP
// datagram to the discard port) and polls the table until the answer
// arrives or Timeout passes. Results are cached for TTL.
//
// It implements hca.Resolver. Resolve is safe for concurrent use; it is
// called when address handles are built, never per packet.
type Resolver struct {
	cfg ResolverConfig

	mu    sync.Mutex // protects cache
	cache map[netip.Addr]resolved
}

type resolved struct {
	mac     net.HardwareAddr
	expires time.Time
}

// ErrNoNeighbour is wrapped by Resolve when ARP/NDP did not answer in time.
var ErrNoNeighbour = errors.New("no neighbour")

// NewResolver returns a Resolver with cfg's defaults filled in.
func NewResolver(cfg ResolverConfig) *Resolver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	return &Resolver{cfg: cfg, cache: make(map[netip.Addr]resolved)}
}

// Flush empties the cache.
func (r *Resolver) Flush() {
	r.mu.Lock()
	clear(r.cache)
	r.mu.Unlock()
}

// Resolve returns the MAC of the next hop towards dst.
func (r *Resolver) Resolve(dst netip.Addr) (net.HardwareAddr, error) {
	dst = dst.Unmap()
	if !dst.IsValid() {
		return nil, fmt.Errorf("netcfg: resolving an invalid address")
	}
	now := time.Now()
	r.mu.Lock()
	e, ok := r.cache[dst]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.mac, nil
	}
	var mac net.HardwareAddr
	err := r.cfg.NetNS.Do(func() (err error) {
		mac, err = r.resolve(dst)
		return err
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cache[dst] = resolved{mac: mac, expires: time.Now().Add(r.cfg.TTL)}
	r.mu.Unlock()
	return mac, nil
}

// resolve runs in the resolver's namespace.
func (r *Resolver) resolve(dst netip.Addr) (net.HardwareAddr, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return nil, fmt.Errorf("netcfg: no route to %v", dst)
		}
		return nil, fmt.Errorf("netcfg: route to %v: %w", dst, permErr(err))
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("netcfg: no route to %v", dst)
	}
	rt := routes[0]
	if rt.Type == unix.RTN_LOCAL {
		return nil, fmt.Errorf("netcfg: %v is a local address (no next hop)", dst)
	}
	if rt.Type != unix.RTN_UNICAST {
		return nil, fmt.Errorf("netcfg: no unicast route to %v (route type %d)", dst, rt.Type)
	}
	l, err := netlink.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return nil, fmt.Errorf("netcfg: route to %v: interface %d: %w", dst, rt.LinkIndex, permErr(err))
	}
	ifname := l.Attrs().Name
	if r.cfg.Interface != "" && ifname != r.cfg.Interface {
		return nil, fmt.Errorf("netcfg: the route to %v leaves through %s, not %s", dst, ifname, r.cfg.Interface)
	}
	if l.Attrs().Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("netcfg: %v is reached through loopback %s (no MAC)", dst, ifname)
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		hop = gw.Unmap()
	}
	if mac, ok := lookupNeigh(rt.LinkIndex, hop); ok {
		return mac, nil
	}
	solicit(rt.LinkIndex, ifname, hop)
	deadline := time.Now().Add(r.cfg.Timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
		if mac, ok := lookupNeigh(rt.LinkIndex, hop); ok {
			return mac, nil
		}
	}
	proto := "ARP"
	if hop.Is6() {
		proto = "NDP"
	}
	return nil, fmt.Errorf("netcfg: %w for %v on %s (%s did not answer within %v)", ErrNoNeighbour, hop, ifname, proto, r.cfg.Timeout)
}

const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// lookupNeigh finds a usable neighbour entry for hop on the interface.
func lookupNeigh(index int, hop netip.Addr) (net.HardwareAddr, bool) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := netlink.NeighList(index, family)
	if err != nil {
		return nil, false
	}
	for _, n := range list {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || ip.Unmap() != hop || n.State&usableNUD == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		return net.HardwareAddr(append([]byte(nil), n.HardwareAddr...)), true
	}
	return nil, false
}

// solicit makes the kernel send an ARP request or neighbour solicitation
// for hop: NTF_USE on a neighbour request triggers resolution exactly as an
// outgoing packet would (neigh_event_send); if the kernel refuses it, a
// zero-length UDP datagram to the discard port does the same.
func solicit(index int, ifname string, hop netip.Addr) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	err := netlink.NeighSet(&netlink.Neigh{
		LinkIndex: index, Family: family, IP: hop.AsSlice(),
		State: netlink.NUD_NONE, Flags: netlink.NTF_USE,
	})
	if err == nil {
		return
	}
	dom := unix.AF_INET
	if hop.Is6() {
		dom = unix.AF_INET6
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	unix.BindToDevice(fd, ifname)
	var sa unix.Sockaddr
	if hop.Is4() {
		sa = &unix.SockaddrInet4{Port: 9, Addr: hop.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: 9, Addr: hop.As16(), ZoneId: uint32(index)}
	}
	unix.Sendto(fd, nil, 0, sa)
}
