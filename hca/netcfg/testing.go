package netcfg

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

// SkipUnlessRoot skips the test unless it runs as root, which network
// namespaces, veth pairs and packet sockets need.
func SkipUnlessRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN for network namespaces, CAP_NET_ADMIN/CAP_NET_RAW for links)")
	}
}

// TwoHostsOptions configures TwoHosts.
type TwoHostsOptions struct {
	// MTU of both veth ends; 0 keeps 1500.
	MTU int
	// IPv6 also assigns fd99::1/64 and fd99::2/64 (no DAD).
	IPv6 bool
	// Loss, in percent, drops that share of RoCE frames in both
	// directions with AddLoss; the test skips when nft is missing.
	Loss int
}

// Host is one end of TwoHosts.
type Host struct {
	NS     *NetNS
	Ifname string
	Prefix netip.Prefix // IPv4 address with its /24
	Addr   netip.Addr   // Prefix.Addr()
	Addr6  netip.Addr   // IPv6 address, when TwoHostsOptions.IPv6
	MAC    net.HardwareAddr
}

// Do runs f inside the host's namespace (NetNS.Do) and fails the test on
// error.
func (h *Host) Do(t testing.TB, f func() error) {
	t.Helper()
	if err := h.NS.Do(f); err != nil {
		t.Fatal(err)
	}
}

// Hosts is what TwoHosts builds.
type Hosts struct{ A, B Host }

// Addresses TwoHosts assigns (private, inside the test's own namespaces).
var (
	HostAPrefix = netip.MustParsePrefix("10.99.0.1/24")
	HostBPrefix = netip.MustParsePrefix("10.99.0.2/24")
	HostAAddr6  = netip.MustParsePrefix("fd99::1/64")
	HostBAddr6  = netip.MustParsePrefix("fd99::2/64")
)

// TwoHosts creates two fresh anonymous namespaces joined by a veth pair
// (veth-a in A, veth-b in B) with 10.99.0.1/24 and 10.99.0.2/24 (and
// fd99::1/64, fd99::2/64 with IPv6), both ends up, and registers cleanup.
// It skips when not root, and when Loss is asked for without nft.
func TwoHosts(t testing.TB, opts TwoHostsOptions) *Hosts {
	t.Helper()
	SkipUnlessRoot(t)
	h := &Hosts{
		A: Host{Ifname: "veth-a", Prefix: HostAPrefix, Addr: HostAPrefix.Addr()},
		B: Host{Ifname: "veth-b", Prefix: HostBPrefix, Addr: HostBPrefix.Addr()},
	}
	for _, x := range []*Host{&h.A, &h.B} {
		ns, err := NewNetNS("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		x.NS = ns
		// No duplicate address detection: link-local addresses are usable
		// at once, so the first neighbour solicitation is answered instead
		// of being retransmitted a second later.
		for _, k := range []string{"all", "default"} {
			if err := SetSysctl(ns, "net/ipv6/conf/"+k+"/accept_dad", "0"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := VethPair(h.A.Ifname, h.B.Ifname, h.A.NS, h.B.NS, opts.MTU); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		h  *Host
		p6 netip.Prefix
	}{{&h.A, HostAAddr6}, {&h.B, HostBAddr6}} {
		if err := AddAddr(x.h.NS, x.h.Ifname, x.h.Prefix); err != nil {
			t.Fatal(err)
		}
		if opts.IPv6 {
			if err := AddAddr(x.h.NS, x.h.Ifname, x.p6); err != nil {
				t.Fatal(err)
			}
			x.h.Addr6 = x.p6.Addr()
		}
		x.h.Do(t, func() (err error) {
			x.h.MAC, err = HardwareAddr(x.h.Ifname)
			return err
		})
	}
	if opts.Loss > 0 {
		for _, x := range []*Host{&h.A, &h.B} {
			if err := AddLoss(x.NS, x.Ifname, opts.Loss); err != nil {
				if errorsIsNoNFT(err) {
					t.Skipf("random loss needs nftables: %v", err)
				}
				t.Fatal(err)
			}
		}
	}
	return h
}
