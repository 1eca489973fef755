package udp

import (
	"net/netip"
	"os"
	"testing"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
)

func skipUnlessRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (raw IPv4 socket, network namespaces)")
	}
}

// openPair opens endpoints on addresses a and b inside ns.
func openPair(t testing.TB, ns *netNS, a, b string, mod func(*Config)) (x, y *Endpoint) {
	t.Helper()
	ns.do(t, func() { x, y = openPair0(t, a, b, mod) })
	return x, y
}

func openPair0(t testing.TB, a, b string, mod func(*Config)) (*Endpoint, *Endpoint) {
	t.Helper()
	ca := Config{Addr: netip.MustParseAddr(a)}
	cb := Config{Addr: netip.MustParseAddr(b)}
	if mod != nil {
		mod(&ca)
		mod(&cb)
	}
	x, err := Open(ca)
	if err != nil {
		t.Fatalf("Open(%v): %v", ca.Addr, err)
	}
	y, err := Open(cb)
	if err != nil {
		x.Close()
		t.Fatalf("Open(%v): %v", cb.Addr, err)
	}
	return x, y
}

func TestConformanceIPv4(t *testing.T) {
	ns := newNetNS(t)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"gso", nil},
		{"sendmmsg", func(c *Config) { c.NoGSO = true }},
		{"mtu1500", func(c *Config) { c.MTU = 1500; c.BatchSize = 8 }},
		{"busypoll", func(c *Config) { c.BusyPoll = true }}, // outside the netpoller
		{"rxring", func(c *Config) { c.RxRing = true }},
		{"rxring-busypoll", func(c *Config) { c.RxRing = true; c.BusyPoll = true }},
		{"rxring-mtu1500", func(c *Config) { c.RxRing = true; c.MTU = 1500; c.BatchSize = 8 }},
		{"plain", func(c *Config) { c.PlainIPv4 = true }},
		{"plain-sendmmsg", func(c *Config) { c.PlainIPv4 = true; c.NoGSO = true }},
		{"plain-mtu1500", func(c *Config) { c.PlainIPv4 = true; c.MTU = 1500; c.BatchSize = 8 }},
		{"plain-busypoll", func(c *Config) { c.PlainIPv4 = true; c.BusyPoll = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				return openPair(t, ns, "127.0.0.1", "127.0.0.2", tc.mod)
			})
		})
	}
}

// TestConformanceIPv6 runs two endpoints on two IPv6 addresses of lo in a
// fresh namespace: both must use port 4791 (wire.Decode accepts RoCEv2 on
// 4791 only), so ::1 alone cannot hold two endpoints.
func TestConformanceIPv6(t *testing.T) {
	ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"gso", nil},
		{"sendmmsg", func(c *Config) { c.NoGSO = true }},
		{"gro", func(c *Config) { c.GRO = true }},
		{"busypoll", func(c *Config) { c.BusyPoll = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				return openPair(t, ns, "fd00::1", "fd00::2", tc.mod)
			})
		})
	}
}
