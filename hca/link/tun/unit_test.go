//go:build linux

package tun

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

func TestConfigCheck(t *testing.T) {
	ok := Config{Addr: pfx("10.71.1.2/24")}
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for success
	}{
		{"defaults", func(*Config) {}, ""},
		{"ipv6", func(c *Config) { c.Addr = pfx("fd71:1::2/64"); c.MTU = 1280 }, ""},
		{"tap", func(c *Config) { c.Mode = TAP }, ""},
		{"no addr", func(c *Config) { c.Addr = netip.Prefix{} }, "Addr"},
		{"unspecified", func(c *Config) { c.Addr = pfx("0.0.0.0/0") }, "Addr"},
		{"kernel is host", func(c *Config) { c.KernelAddr = pfx("10.71.1.2/24") }, "KernelAddr"},
		{"mapped", func(c *Config) { c.Addr = pfx("::ffff:10.71.1.2/120") }, ""},
		{"mapped short prefix", func(c *Config) { c.Addr = pfx("::ffff:10.71.1.2/64") }, "Addr"},
		{"mapped unspecified", func(c *Config) { c.Addr = pfx("::ffff:0.0.0.0/120") }, "Addr"},
		{"kernel mapped", func(c *Config) { c.KernelAddr = pfx("::ffff:10.71.1.1/120") }, ""},
		{"kernel mapped is host", func(c *Config) { c.KernelAddr = pfx("::ffff:10.71.1.2/120") }, "KernelAddr"},
		{"kernel mapped short prefix", func(c *Config) { c.KernelAddr = pfx("::ffff:10.71.1.1/95") }, "KernelAddr"},
		{"mode", func(c *Config) { c.Mode = 7 }, "mode"},
		{"long name", func(c *Config) { c.Name = strings.Repeat("x", 16) }, "name"},
		{"mtu small", func(c *Config) { c.MTU = 575 }, "MTU"},
		{"mtu small v6", func(c *Config) { c.Addr = pfx("fd71:1::2/64"); c.MTU = 1279 }, "MTU"},
		{"mtu big", func(c *Config) { c.MTU = 65536 }, "MTU"},
		{"batch", func(c *Config) { c.BatchSize = -1 }, "BatchSize"},
		{"mac multicast", func(c *Config) { c.Mode = TAP; c.HardwareAddr = net.HardwareAddr{1, 2, 3, 4, 5, 6} }, "HardwareAddr"},
		{"mac short", func(c *Config) { c.Mode = TAP; c.HardwareAddr = net.HardwareAddr{2, 2, 3} }, "HardwareAddr"},
		{"route", func(c *Config) { c.Routes = []netip.Prefix{{}} }, "route"},
		{"route mapped", func(c *Config) { c.Routes = []netip.Prefix{pfx("::ffff:10.72.0.0/112")} }, ""},
		{"route mapped short prefix", func(c *Config) { c.Routes = []netip.Prefix{pfx("::ffff:10.72.0.0/90")} }, "route"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.check()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.MTU == 0 || c.BatchSize != link.IdealBatchSize {
					t.Errorf("defaults not applied: %+v", c)
				}
				// IPv4-mapped addresses are used as the IPv4 ones they
				// stand for (netcfg and the kernel get IPv4).
				if c.Addr.Addr().Is4In6() || c.KernelAddr.Addr().Is4In6() {
					t.Errorf("mapped addresses left: Addr %v, KernelAddr %v", c.Addr, c.KernelAddr)
				}
				for _, r := range c.Routes {
					if r.Addr().Is4In6() {
						t.Errorf("mapped route left: %v", r)
					}
				}
				return
			}
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check() = %v; want ErrBadConfig naming %q", err, tc.want)
			}
			// Open fails the same way, before touching /dev/net/tun.
			if _, err := Open(c); !errors.Is(err, ErrBadConfig) {
				t.Fatalf("Open = %v; want ErrBadConfig", err)
			}
		})
	}
}

func TestDefaultHardwareAddr(t *testing.T) {
	for _, tc := range []struct{ addr, mac string }{
		{"10.71.3.2", "02:67:72:47:03:02"},
		{"fd71:1::1:2", "02:67:72:01:00:02"},
	} {
		m := DefaultHardwareAddr(netip.MustParseAddr(tc.addr))
		if m.String() != tc.mac || m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("DefaultHardwareAddr(%s) = %v, want %s (unicast, locally administered)", tc.addr, m, tc.mac)
		}
	}
}

// roceFrame builds a valid RoCE frame with wire.Finish.
func roceFrame(t testing.TB, kind wire.Kind, framing wire.Framing) []byte {
	t.Helper()
	a := &wire.Addr{Kind: kind, HopLimit: 64, SrcPort: 0xC001, DontFragment: true}
	if kind == wire.KindRoCEv2IPv6 || kind == wire.KindRoCEv1 {
		a.SrcIP, a.DstIP = netip.MustParseAddr("fd71::1"), netip.MustParseAddr("fd71::2")
		a.SGID, a.DGID = wire.GIDFromAddr(a.SrcIP), wire.GIDFromAddr(a.DstIP)
	} else {
		a.SrcIP, a.DstIP = netip.MustParseAddr("10.71.1.2"), netip.MustParseAddr("10.71.2.2")
	}
	hr := a.Headroom(framing)
	buf := make([]byte, hr+bth.HeaderLen+16+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: 5})
	f, err := wire.Finish(buf, hr, bth.HeaderLen+16, framing, a)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestIsRoCE(t *testing.T) {
	v4 := roceFrame(t, wire.KindRoCEv2IPv4, wire.FramingIP)
	v6 := roceFrame(t, wire.KindRoCEv2IPv6, wire.FramingIP)
	e4 := roceFrame(t, wire.KindRoCEv2IPv4, wire.FramingEthernet)
	e1 := roceFrame(t, wire.KindRoCEv1, wire.FramingEthernet)
	mod := func(f []byte, i int, v byte) []byte { g := append([]byte(nil), f...); g[i] = v; return g }
	tagged := append(append(append([]byte(nil), e1[:12]...), 0x81, 0x00, 0x00, 0x05), e1[12:]...)
	tests := []struct {
		name   string
		f      []byte
		format link.Format
		want   bool
	}{
		{"ipv4", v4, link.FormatIP, true},
		{"ipv6", v6, link.FormatIP, true},
		{"eth ipv4", e4, link.FormatEthernet, true},
		{"eth roce v1", e1, link.FormatEthernet, true},
		{"eth vlan roce v1", tagged, link.FormatEthernet, true},
		{"empty", nil, link.FormatIP, false},
		{"ipv4 short", v4[:27], link.FormatIP, false},
		{"ipv4 tcp", mod(v4, 9, 6), link.FormatIP, false},
		{"ipv4 other port", mod(v4, 23, 0xB8), link.FormatIP, false},
		{"ipv4 MF", mod(v4, 6, 0x60), link.FormatIP, false},
		{"ipv4 frag offset", mod(v4, 7, 0x01), link.FormatIP, false},
		{"ipv4 ihl 4", mod(v4, 0, 0x44), link.FormatIP, false},
		{"ipv4 ihl past end", mod(v4[:40], 0, 0x4F), link.FormatIP, false},
		{"ipv6 short", v6[:47], link.FormatIP, false},
		{"ipv6 hop-by-hop", mod(v6, 6, 0), link.FormatIP, false},
		{"ipv6 other port", mod(v6, 43, 0xB8), link.FormatIP, false},
		{"version 5", mod(v4, 0, 0x55), link.FormatIP, false},
		{"ip on ethernet", v4, link.FormatEthernet, false},
		{"arp", mod(mod(e4, 12, 0x08), 13, 0x06), link.FormatEthernet, false},
		{"eth short", e4[:13], link.FormatEthernet, false},
		{"eth ipv4 truncated", e4[:14+20], link.FormatEthernet, false},
	}
	for _, tc := range tests {
		if got := isRoCE(tc.f, tc.format); got != tc.want {
			t.Errorf("%s: isRoCE = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzIsRoCE checks that the Read filter never panics and never drops a
// frame that wire decodes as RoCE.
func FuzzIsRoCE(f *testing.F) {
	for _, fr := range [][]byte{
		roceFrame(f, wire.KindRoCEv2IPv4, wire.FramingIP),
		roceFrame(f, wire.KindRoCEv2IPv6, wire.FramingIP),
		roceFrame(f, wire.KindRoCEv2IPv4, wire.FramingEthernet),
		roceFrame(f, wire.KindRoCEv2IPv6, wire.FramingEthernet),
		roceFrame(f, wire.KindRoCEv1, wire.FramingEthernet),
	} {
		f.Add(fr, false)
		f.Add(fr, true)
	}
	f.Add([]byte{0x45}, false)
	f.Add([]byte{0x60, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, fr []byte, eth bool) {
		format := link.FormatIP
		if eth {
			format = link.FormatEthernet
		}
		got := isRoCE(fr, format)
		var p wire.Packet
		if err := p.Decode(fr, wire.Framing(format)); err == nil && !got {
			t.Fatalf("wire decodes the frame, isRoCE drops it: %x", fr)
		}
	})
}
