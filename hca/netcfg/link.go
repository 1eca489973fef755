package netcfg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Errors, matched with errors.Is; the returned errors name the interface,
// address or namespace involved.
var (
	// ErrNoInterface: the named interface does not exist (in the
	// namespace asked about).
	ErrNoInterface = errors.New("no such network interface")
	// ErrPermission: the operation needs CAP_NET_ADMIN (or CAP_SYS_ADMIN
	// for namespaces); run as root.
	ErrPermission = errors.New("permission denied (needs root: CAP_NET_ADMIN/CAP_SYS_ADMIN)")
	// ErrExists: the interface, address or route already exists.
	ErrExists = errors.New("already exists")
)

var errEINVAL = unix.EINVAL

// permErr maps EPERM/EACCES to ErrPermission and EEXIST to ErrExists,
// keeping the original error in the chain.
func permErr(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

// Link describes a network interface.
type Link struct {
	Index        int
	Name         string
	Kind         string // "veth", "tun", "device", ...
	Alias        string
	MTU          int
	HardwareAddr net.HardwareAddr // nil for interfaces without one (tun)
	Up           bool             // administratively up (IFF_UP)
	Running      bool             // operationally up (IFF_RUNNING: carrier)
}

func linkByName(ifname string) (netlink.Link, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("netcfg: interface %q: %w", ifname, ErrNoInterface)
		}
		return nil, fmt.Errorf("netcfg: interface %q: %w", ifname, permErr(err))
	}
	return l, nil
}

// LinkByName describes the interface ifname in the calling thread's
// namespace (call it inside NetNS.Do for another).
func LinkByName(ifname string) (Link, error) {
	l, err := linkByName(ifname)
	if err != nil {
		return Link{}, err
	}
	a := l.Attrs()
	out := Link{
		Index: a.Index, Name: a.Name, Kind: l.Type(), Alias: a.Alias, MTU: a.MTU,
		Up:      a.Flags&net.FlagUp != 0,
		Running: a.RawFlags&unix.IFF_RUNNING != 0,
	}
	if len(a.HardwareAddr) > 0 {
		out.HardwareAddr = slices.Clone(a.HardwareAddr)
	}
	return out, nil
}

// HardwareAddr is ifname's MAC address (nil when it has none), in the
// calling thread's namespace.
func HardwareAddr(ifname string) (net.HardwareAddr, error) {
	l, err := LinkByName(ifname)
	return l.HardwareAddr, err
}

// InterfaceMTU is ifname's MTU, in the calling thread's namespace.
func InterfaceMTU(ifname string) (int, error) {
	l, err := LinkByName(ifname)
	return l.MTU, err
}

// Addrs returns the usable IP addresses of ifname in the calling thread's
// namespace: IPv4 first, then IPv6, each in kernel order. IPv6 addresses
// still in (or failed) duplicate address detection are left out because
// nothing can bind to them yet. Link-local IPv6 addresses are included
// without a zone.
func Addrs(ifname string) ([]netip.Addr, error) {
	l, err := linkByName(ifname)
	if err != nil {
		return nil, err
	}
	list, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("netcfg: addresses of %q: %w", ifname, permErr(err))
	}
	var v4, v6 []netip.Addr
	for _, a := range list {
		if a.IPNet == nil || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...), nil
}

// VethPair creates a veth pair: nameA in nsA and its peer nameB in nsB
// (nil means the calling thread's namespace), both with the given MTU (0
// keeps the kernel default of 1500), and brings both ends up.
func VethPair(nameA, nameB string, nsA, nsB *NetNS, mtu int) error {
	if err := checkName(nameA); err != nil {
		return err
	}
	if err := checkName(nameB); err != nil {
		return err
	}
	if mtu < 0 || mtu > 65535 {
		return fmt.Errorf("netcfg: veth %s/%s: MTU %d out of range", nameA, nameB, mtu)
	}
	peerFD := -1
	if nsB != nil {
		nsB.mu.Lock()
		closed, fd := nsB.closed, int(nsB.h)
		nsB.mu.Unlock()
		if closed {
			return ErrNetNSClosed
		}
		peerFD = fd
	}
	err := nsA.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.NewLinkAttrs(), PeerName: nameB}
		v.Name = nameA
		v.MTU = mtu
		v.PeerMTU = uint32(mtu)
		if peerFD >= 0 {
			v.PeerNamespace = netlink.NsFd(peerFD)
		}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("netcfg: creating veth %s/%s: %w", nameA, nameB, permErr(err))
		}
		return setUp(nameA)
	})
	if err != nil {
		return err
	}
	return nsB.Do(func() error { return setUp(nameB) })
}

func checkName(name string) error {
	if name == "" || len(name) >= unix.IFNAMSIZ {
		return fmt.Errorf("netcfg: invalid interface name %q (1 to %d bytes)", name, unix.IFNAMSIZ-1)
	}
	return nil
}

func setUp(ifname string) error {
	l, err := linkByName(ifname)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("netcfg: setting %q up: %w", ifname, permErr(err))
	}
	return nil
}

// SetUp brings ifname up in ns (nil: the calling thread's namespace).
func SetUp(ns *NetNS, ifname string) error {
	return ns.Do(func() error { return setUp(ifname) })
}

// SetDown brings ifname down in ns.
func SetDown(ns *NetNS, ifname string) error {
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("netcfg: setting %q down: %w", ifname, permErr(err))
		}
		return nil
	})
}

// SetMTU sets ifname's MTU in ns.
func SetMTU(ns *NetNS, ifname string, mtu int) error {
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("netcfg: setting the MTU of %q to %d: %w", ifname, mtu, permErr(err))
		}
		return nil
	})
}

// SetAlias sets ifname's alias (ifalias) in ns; the lab marks what it made
// with it.
func SetAlias(ns *NetNS, ifname, alias string) error {
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetAlias(l, alias); err != nil {
			return fmt.Errorf("netcfg: setting the alias of %q: %w", ifname, permErr(err))
		}
		return nil
	})
}

// DeleteLink deletes ifname in ns (for a veth, both ends go).
func DeleteLink(ns *NetNS, ifname string) error {
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("netcfg: deleting %q: %w", ifname, permErr(err))
		}
		return nil
	})
}

// AddAddr adds prefix (address and prefix length, e.g. 10.99.0.1/24) to
// ifname in ns. IPv6 addresses skip duplicate address detection
// (IFA_F_NODAD), and on an interface that is up AddAddr returns only once
// the address's local route exists: the kernel installs it from the
// address's DAD work item, asynchronously even with NODAD, and until then
// the address can be bound but not reached (datagrams to it are dropped
// as Ip6OutNoRoutes; 15 of 200 fresh namespaces lacked the route right
// after RTM_NEWADDR was acknowledged).
func AddAddr(ns *NetNS, ifname string, prefix netip.Prefix) error {
	if !prefix.IsValid() {
		return fmt.Errorf("netcfg: adding an address to %q: invalid prefix %v", ifname, prefix)
	}
	if prefix.Addr().Is4In6() {
		// The IPv4 address it maps, with the IPv4 prefix length: the
		// mask of an unmapped address with the IPv6 length is nil, on
		// which netlink panics.
		if prefix.Bits() < 96 {
			return fmt.Errorf("netcfg: adding %v to %q: an IPv4-mapped prefix shorter than /96 has no IPv4 equivalent", prefix, ifname)
		}
		prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()-96)
	}
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		a := prefix.Addr()
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(prefix.Bits(), a.BitLen())}}
		if a.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("netcfg: adding %v to %q: %w", prefix, ifname, permErr(err))
		}
		if a.Is6() && l.Attrs().Flags&net.FlagUp != 0 {
			return WaitLocalRoute(a, 5*time.Second)
		}
		return nil
	})
}

// WaitLocalRoute polls the local routing table of the calling thread's
// namespace (run it inside NetNS.Do) until it holds a route for a, for at
// most limit. AddAddr does this itself; it is for addresses added by other
// means.
func WaitLocalRoute(a netip.Addr, limit time.Duration) error {
	fam := netlink.FAMILY_V6
	if a.Is4() {
		fam = netlink.FAMILY_V4
	}
	deadline := time.Now().Add(limit)
	for {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("netcfg: listing local routes: %w", permErr(err))
		}
		if slices.ContainsFunc(rs, func(r netlink.Route) bool {
			if r.Type != unix.RTN_LOCAL || r.Dst == nil {
				return false
			}
			d, ok := netip.AddrFromSlice(r.Dst.IP)
			return ok && d.Unmap() == a
		}) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netcfg: no local route for %v %v after adding it", a, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// AddRoute adds a route to dst in ns: through gateway via when via is
// valid, otherwise directly on ifname. ifname may be "" when via is given.
func AddRoute(ns *NetNS, dst netip.Prefix, via netip.Addr, ifname string) error {
	if !dst.IsValid() {
		return fmt.Errorf("netcfg: adding a route: invalid destination %v", dst)
	}
	if !via.IsValid() && ifname == "" {
		return fmt.Errorf("netcfg: adding a route to %v: need a gateway or an interface", dst)
	}
	return ns.Do(func() error {
		d := dst.Masked()
		r := &netlink.Route{Dst: &net.IPNet{IP: d.Addr().AsSlice(), Mask: net.CIDRMask(d.Bits(), d.Addr().BitLen())}}
		if ifname != "" {
			l, err := linkByName(ifname)
			if err != nil {
				return err
			}
			r.LinkIndex = l.Attrs().Index
		}
		if via.IsValid() {
			r.Gw = via.Unmap().AsSlice()
		}
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("netcfg: adding a route to %v: %w", dst, permErr(err))
		}
		return nil
	})
}

// SetSysctl writes value to /proc/sys/KEY (KEY with slashes, e.g.
// "net/ipv6/conf/default/accept_dad") inside ns; net.* keys are per
// namespace.
func SetSysctl(ns *NetNS, key, value string) error {
	if strings.Contains(key, "..") {
		return fmt.Errorf("netcfg: invalid sysctl key %q", key)
	}
	return ns.Do(func() error {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0); err != nil {
			return fmt.Errorf("netcfg: sysctl %s=%s in %s: %w", key, value, ns, permErr(err))
		}
		return nil
	})
}

// AddNeighbour adds a permanent neighbour entry (ip neigh replace ... lladdr
// mac nud permanent) for ip on ifname in ns: how the kernel reaches a host
// that answers no ARP/NDP, such as a goroce HCA behind a TAP device.
func AddNeighbour(ns *NetNS, ifname string, ip netip.Addr, mac net.HardwareAddr) error {
	if !ip.IsValid() || len(mac) != 6 {
		return fmt.Errorf("netcfg: neighbour %v lladdr %v on %q: need an IP address and a MAC-48", ip, mac, ifname)
	}
	return ns.Do(func() error {
		l, err := linkByName(ifname)
		if err != nil {
			return err
		}
		ip := ip.Unmap()
		family := netlink.FAMILY_V4
		if ip.Is6() {
			family = netlink.FAMILY_V6
		}
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: family, State: netlink.NUD_PERMANENT,
			IP: ip.AsSlice(), HardwareAddr: mac}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("netcfg: neighbour %v lladdr %v on %q: %w", ip, mac, ifname, permErr(err))
		}
		return nil
	})
}
