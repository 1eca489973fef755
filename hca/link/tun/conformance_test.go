//go:build linux

package tun

import (
	"testing"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
)

// TestConformance runs the link conformance suite over two TUNs in two
// namespaces routed through a veth: what one endpoint writes, the kernel
// forwards twice (TTL/hop limit and the IPv4 checksum change, which the
// suite and the ICRC mask) and hands to the other endpoint.
func TestConformance(t *testing.T) {
	for _, fam := range []struct {
		name string
		v6   bool
	}{{"IPv4", false}, {"IPv6", true}} {
		t.Run(fam.name, func(t *testing.T) {
			r := newRouted(t, fam.v6, DefaultMTU)
			for _, tc := range []struct {
				name string
				mod  func(*Config)
			}{
				{"queue", nil},
				{"batch8", func(c *Config) { c.BatchSize = 8 }},
				{"nooffload", func(c *Config) { c.NoOffload = true }},
				{"nooffload-batch8", func(c *Config) { c.NoOffload, c.BatchSize = true, 8 }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
						return r.open(t, tc.mod)
					})
				})
			}
		})
	}
}

// TestConformanceTAP runs the suite over two TAPs on one Linux bridge: the
// kernel bridges the Ethernet frames unchanged (the frames carry the
// endpoints' own MACs, which the bridge learns).
func TestConformanceTAP(t *testing.T) {
	ns := newNS(t)
	newBridge(t, ns, "br71")
	linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
		return openTAPs(t, ns, pfx("10.71.3.2/24"), pfx("10.71.3.3/24"))
	})
}
