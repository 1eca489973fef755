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

func openPair(t testing.TB, a, b string, mod func(*Config)) (*Endpoint, *Endpoint) {
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
	skipUnlessRoot(t)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"gso", nil},
		{"sendmmsg", func(c *Config) { c.NoGSO = true }},
		{"mtu1500", func(c *Config) { c.MTU = 1500; c.BatchSize = 8 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				return openPair(t, "127.0.0.1", "127.0.0.2", tc.mod)
			})
		})
	}
}
