//go:build linux

package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/netcfg"
)

func skipUnlessRoot(t testing.TB) {
	t.Helper()
	netcfg.SkipUnlessRoot(t)
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN/TAP support: %v", err)
	}
}

// newNS creates a fresh network namespace (lo up), closed at cleanup.
func newNS(t testing.TB) *netcfg.NetNS {
	t.Helper()
	skipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// sysctl sets a net sysctl (slash-separated key) inside ns.
func sysctl(t testing.TB, ns *netcfg.NetNS, key, value string) {
	t.Helper()
	if err := netcfg.SetSysctl(ns, key, value); err != nil {
		t.Fatal(err)
	}
}

// openIn opens a device inside ns; it is closed at cleanup.
func openIn(t testing.TB, ns *netcfg.NetNS, cfg Config) *Endpoint {
	t.Helper()
	var e *Endpoint
	if err := ns.Do(func() (err error) { e, err = Open(cfg); return err }); err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// routed is the two-host topology of the package documentation: host A's
// TUN in namespace A, host B's in namespace B, the namespaces joined by a
// veth and forwarding IP. A's packets: fd → tunA → nsA routes → veth → nsB
// routes → tunB → fd.
type routed struct {
	A, B         *netcfg.NetNS
	vethA, vethB netip.Addr // the veth ends
	CA, CB       Config     // device configurations (Addr: the goroce host)
}

// plan holds the addresses of one family.
type plan struct {
	hostA, kernelA netip.Prefix // goroce host A, kernel side of tunA
	hostB, kernelB netip.Prefix
}

var plans = map[bool]plan{
	false: {
		hostA: pfx("10.71.1.2/24"), kernelA: pfx("10.71.1.1/24"),
		hostB: pfx("10.71.2.2/24"), kernelB: pfx("10.71.2.1/24"),
	},
	true: {
		hostA: pfx("fd71:1::2/64"), kernelA: pfx("fd71:1::1/64"),
		hostB: pfx("fd71:2::2/64"), kernelB: pfx("fd71:2::1/64"),
	},
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// newRouted builds the namespaces and the veth with netcfg.TwoHosts (with
// the given MTU), turns on forwarding and adds the routes to the other
// host's TUN subnet; the TUNs are opened per test with CA and CB.
func newRouted(t testing.TB, v6 bool, mtu int) *routed {
	t.Helper()
	skipUnlessRoot(t)
	p := plans[v6]
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{MTU: mtu, IPv6: v6})
	r := &routed{A: h.A.NS, B: h.B.NS, vethA: h.A.Addr, vethB: h.B.Addr}
	if v6 {
		r.vethA, r.vethB = h.A.Addr6, h.B.Addr6
	}
	for _, ns := range []*netcfg.NetNS{r.A, r.B} {
		if v6 {
			sysctl(t, ns, "net/ipv6/conf/all/forwarding", "1")
		} else {
			sysctl(t, ns, "net/ipv4/ip_forward", "1")
			sysctl(t, ns, "net/ipv4/conf/all/rp_filter", "0")
			sysctl(t, ns, "net/ipv4/conf/default/rp_filter", "0")
		}
	}
	must(t, netcfg.AddRoute(r.A, p.hostB.Masked(), r.vethB, ""))
	must(t, netcfg.AddRoute(r.B, p.hostA.Masked(), r.vethA, ""))
	r.CA = Config{Addr: p.hostA, KernelAddr: p.kernelA, MTU: mtu}
	r.CB = Config{Addr: p.hostB, KernelAddr: p.kernelB, MTU: mtu}
	r.warm(t)
	return r
}

// open opens both TUNs (with mod applied to both configurations).
func (r *routed) open(t testing.TB, mod func(*Config)) (a, b *Endpoint) {
	t.Helper()
	ca, cb := r.CA, r.CB
	if mod != nil {
		mod(&ca)
		mod(&cb)
	}
	return openIn(t, r.A, ca), openIn(t, r.B, cb)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// warm resolves the neighbours on the veth both ways before a test sends
// RoCE frames: while a neighbour is unresolved the kernel queues only a few
// packets per neighbour and drops the rest, which a lossless-link test must
// not see. A UDP datagram to the discard port of the other end comes back
// as ICMP port unreachable only after both ends resolved each other.
func (r *routed) warm(t testing.TB) {
	t.Helper()
	for _, w := range []struct {
		ns  *netcfg.NetNS
		dst netip.Addr
	}{{r.A, r.vethB}, {r.B, r.vethA}} {
		err := w.ns.Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(w.dst, 9)))
			if err != nil {
				return err
			}
			defer c.Close()
			buf := make([]byte, 16)
			for range 50 {
				if _, err := c.Write(buf); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
					return err
				}
				c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := c.Read(buf); errors.Is(err, syscall.ECONNREFUSED) {
					return nil
				}
			}
			return fmt.Errorf("no ICMP port unreachable from %v in 5 s", w.dst)
		})
		if err != nil {
			t.Fatalf("resolving the veth neighbours: %v", err)
		}
	}
}

// newBridge creates a Linux bridge in ns and brings it up. netcfg has no
// bridge (yet), so this uses the bridge ioctls (SIOCBRADDBR), which need no
// netlink; the bridge (STP off) forwards from the moment a port joins.
func newBridge(t testing.TB, ns *netcfg.NetNS, name string) {
	t.Helper()
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var n [unix.IFNAMSIZ]byte
		copy(n[:], name)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCBRADDBR, uintptr(unsafe.Pointer(&n[0]))); errno != 0 {
			return fmt.Errorf("SIOCBRADDBR %s: %w", name, errno)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, netcfg.SetUp(ns, name))
}

// enslave adds port to the bridge (SIOCBRADDIF); a closed TAP leaves the
// bridge by itself.
func enslave(t testing.TB, ns *netcfg.NetNS, bridge, port string) {
	t.Helper()
	err := ns.Do(func() error {
		l, err := netcfg.LinkByName(port)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(bridge)
		if err != nil {
			return err
		}
		ifr.SetUint32(uint32(l.Index))
		if err := unix.IoctlIfreq(fd, unix.SIOCBRADDIF, ifr); err != nil {
			return fmt.Errorf("SIOCBRADDIF %s to %s: %w", port, bridge, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
