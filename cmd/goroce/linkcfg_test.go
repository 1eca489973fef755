package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/link/tun"
	"github.com/goroce/goroce/hca/link/udp"
)

// Loopback addresses these tests bind UDP 4791 on; distinct from the
// 127.0.0.1/127.0.0.2 pair other packages' tests use.
var (
	testAddrA = netip.MustParseAddr("127.0.77.1")
	testAddrB = netip.MustParseAddr("127.0.77.2")
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func parseLinkArgs(t *testing.T, args ...string) (linkSettings, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lf := addLinkFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return lf.settings()
}

func TestLinkSettings(t *testing.T) {
	good := writeFile(t, "good.conf", "# goroce link\nlink = udp\naddr=127.0.77.1\n\nmtu=1500\npcap=/tmp/x.pcap\n")
	tests := []struct {
		name string
		args []string
		want linkSettings
		kind error // nil: no error
		msg  string
	}{
		{name: "defaults", want: linkSettings{Link: "udp", Encap: "roce2"}},
		{name: "flags", args: []string{"--addr", "::1", "--link-mtu", "9000", "--pcap", "a.pcap"},
			want: linkSettings{Link: "udp", Encap: "roce2", Addr: netip.MustParseAddr("::1"), MTU: 9000, Pcap: "a.pcap"}},
		{name: "mapped addr unmapped", args: []string{"--addr", "::ffff:10.0.0.1"},
			want: linkSettings{Link: "udp", Encap: "roce2", Addr: netip.MustParseAddr("10.0.0.1")}},
		{name: "config file", args: []string{"--config", good},
			want: linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA, MTU: 1500, Pcap: "/tmp/x.pcap"}},
		{name: "flag beats file", args: []string{"--config", good, "--link-mtu", "2000", "--addr", "127.0.77.2"},
			want: linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrB, MTU: 2000, Pcap: "/tmp/x.pcap"}},
		{name: "afpacket roce1", args: []string{"--link", "afpacket", "--dev", "veth0", "--encap", "roce1"},
			want: linkSettings{Link: "afpacket", Dev: "veth0", Encap: "roce1"}},
		{name: "rx-ring flag", args: []string{"--rx-ring"}, want: linkSettings{Link: "udp", Encap: "roce2", RxRing: true}},
		{name: "rx-ring in file", args: []string{"--config", writeFile(t, "r.conf", "rx-ring=true\n")},
			want: linkSettings{Link: "udp", Encap: "roce2", RxRing: true}},
		{name: "rx-ring flag beats file", args: []string{"--config", writeFile(t, "r0.conf", "rx-ring=true\n"), "--rx-ring=false"},
			want: linkSettings{Link: "udp", Encap: "roce2"}},
		{name: "rx-ring bad value", args: []string{"--config", writeFile(t, "rb.conf", "rx-ring=yes\n")}, kind: errLinkConfig, msg: `rx-ring "yes" is not true or false`},
		{name: "rx-ring on IPv6", args: []string{"--addr", "::1", "--rx-ring"}, kind: errLinkConfig, msg: "rx-ring needs an IPv4 address"},
		{name: "rx-ring on afpacket", args: []string{"--link", "afpacket", "--dev", "veth0", "--rx-ring"}, kind: errLinkConfig,
			msg: "rx-ring applies to the udp link only"},
		{name: "plain-ipv4 flag", args: []string{"--plain-ipv4"}, want: linkSettings{Link: "udp", Encap: "roce2", PlainIPv4: true}},
		{name: "plain-ipv4 in file", args: []string{"--config", writeFile(t, "p.conf", "plain-ipv4=true\n")},
			want: linkSettings{Link: "udp", Encap: "roce2", PlainIPv4: true}},
		{name: "plain-ipv4 bad value", args: []string{"--config", writeFile(t, "pb.conf", "plain-ipv4=1x\n")}, kind: errLinkConfig,
			msg: `plain-ipv4 "1x" is not true or false`},
		{name: "plain-ipv4 on IPv6", args: []string{"--addr", "::1", "--plain-ipv4"}, kind: errLinkConfig, msg: "plain-ipv4 needs an IPv4 address"},
		{name: "plain-ipv4 with rx-ring", args: []string{"--plain-ipv4", "--rx-ring"}, kind: errLinkConfig, msg: "plain-ipv4 and rx-ring exclude each other"},
		{name: "plain-ipv4 on tap", args: []string{"--link", "tap", "--addr", "10.9.0.2/24", "--plain-ipv4"}, kind: errLinkConfig,
			msg: "plain-ipv4 applies to the udp link only"},
		{name: "xdp flag", args: []string{"--link", "afpacket", "--dev", "veth0", "--xdp", "native"},
			want: linkSettings{Link: "afpacket", Dev: "veth0", Encap: "roce2", XDP: "native"}},
		{name: "xdp in file", args: []string{"--config", writeFile(t, "x.conf", "link=afpacket\ndev=veth0\nxdp=generic\n")},
			want: linkSettings{Link: "afpacket", Dev: "veth0", Encap: "roce2", XDP: "generic"}},
		{name: "xdp bad value", args: []string{"--link", "afpacket", "--dev", "veth0", "--xdp", "yes"}, kind: errLinkConfig,
			msg: `xdp "yes" is not generic or native`},
		{name: "xdp on udp", args: []string{"--xdp", "generic"}, kind: errLinkConfig, msg: "xdp applies to the afpacket link only"},
		{name: "unknown link", args: []string{"--link", "rdma"}, kind: errLinkConfig, msg: `unknown link "rdma"`},
		{name: "unknown encap", args: []string{"--encap", "roce3"}, kind: errLinkConfig, msg: `unknown encap "roce3"`},
		{name: "roce1 on udp", args: []string{"--encap", "roce1"}, kind: errLinkConfig, msg: "needs an Ethernet link"},
		{name: "afpacket without dev", args: []string{"--link", "afpacket"}, kind: errLinkConfig, msg: "needs --dev"},
		{name: "bad addr", args: []string{"--addr", "10.0.0"}, kind: errLinkConfig, msg: "not an IPv4 or IPv6 address"},
		{name: "unspecified addr", args: []string{"--addr", "0.0.0.0"}, kind: errLinkConfig, msg: "unicast"},
		{name: "tiny mtu", args: []string{"--link-mtu", "100"}, kind: errLinkConfig, msg: "too small"},
		{name: "negative mtu", args: []string{"--link-mtu", "-1"}, kind: errLinkConfig, msg: "not a byte count"},
		{name: "missing config", args: []string{"--config", filepath.Join(t.TempDir(), "none")}, kind: errLinkConfig, msg: "config file"},
		{name: "unknown key", args: []string{"--config", writeFile(t, "k.conf", "link=udp\nspeed=10\n")}, kind: errLinkConfig, msg: `k.conf:2: unknown key "speed"`},
		{name: "no equals", args: []string{"--config", writeFile(t, "e.conf", "udp\n")}, kind: errLinkConfig, msg: "e.conf:1: want key=value"},
		{name: "duplicate key", args: []string{"--config", writeFile(t, "d.conf", "mtu=1500\nmtu=9000\n")}, kind: errLinkConfig, msg: `d.conf:2: key "mtu" given twice`},
		{name: "huge line", args: []string{"--config", writeFile(t, "h.conf", "link=udp\naddr="+strings.Repeat("1", 70000)+"\n")},
			kind: errLinkConfig, msg: "h.conf:2: line of 64 KiB or more"},
		{name: "long line without equals", args: []string{"--config", writeFile(t, "l.conf", strings.Repeat("x", 60000)+"\n")},
			kind: errLinkConfig, msg: `l.conf:1: want key=value, got "` + strings.Repeat("x", 64) + `..."`},
		{name: "bad value in file", args: []string{"--config", writeFile(t, "v.conf", "mtu=big\n")}, kind: errLinkConfig, msg: `mtu "big"`},
		{name: "tun", args: []string{"--link", "tun", "--dev", "gtun0", "--addr", "10.99.1.2/24", "--kernel-addr", "10.99.1.1/24",
			"--routes", "10.99.2.0/24, 10.99.3.7/24", "--link-mtu", "9000"},
			want: linkSettings{Link: "tun", Dev: "gtun0", Encap: "roce2", Addr: netip.MustParseAddr("10.99.1.2"), AddrBits: 24, MTU: 9000,
				KernelAddr: netip.MustParsePrefix("10.99.1.1/24"), Routes: []netip.Prefix{netip.MustParsePrefix("10.99.2.0/24"), netip.MustParsePrefix("10.99.3.0/24")}}},
		{name: "tap roce1 kernel-named", args: []string{"--link", "tap", "--addr", "fd00::2/64", "--encap", "roce1"},
			want: linkSettings{Link: "tap", Encap: "roce1", Addr: netip.MustParseAddr("fd00::2"), AddrBits: 64}},
		{name: "tap attach without length", args: []string{"--link", "tap", "--dev", "gritap1", "--addr", "10.66.0.3"},
			want: linkSettings{Link: "tap", Dev: "gritap1", Encap: "roce2", Addr: netip.MustParseAddr("10.66.0.3")}},
		{name: "tun config file", args: []string{"--config", writeFile(t, "tun.conf", "link=tun\naddr=10.99.1.2/30\nkernel-addr=10.99.1.1/30\nroutes=10.9.0.0/16\n")},
			want: linkSettings{Link: "tun", Encap: "roce2", Addr: netip.MustParseAddr("10.99.1.2"), AddrBits: 30,
				KernelAddr: netip.MustParsePrefix("10.99.1.1/30"), Routes: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}},
		{name: "prefix on udp", args: []string{"--addr", "10.0.0.1/24"}, kind: errLinkConfig, msg: "prefix length belongs to --link tun or tap"},
		{name: "tun without addr", args: []string{"--link", "tun", "--dev", "gtun0"}, kind: errLinkConfig, msg: "link tun needs --addr"},
		{name: "bad tun prefix", args: []string{"--link", "tun", "--addr", "10.0.0.1/33"}, kind: errLinkConfig, msg: "not an IPv4 or IPv6 address"},
		{name: "zero prefix", args: []string{"--link", "tun", "--addr", "10.0.0.1/0"}, kind: errLinkConfig, msg: "prefix length 0"},
		{name: "mapped addr with a short prefix", args: []string{"--link", "tun", "--addr", "::ffff:10.0.0.1/64"}, kind: errLinkConfig,
			msg: `addr "::ffff:10.0.0.1/64": an IPv4-mapped address with a prefix length shorter than /96`},
		{name: "mapped addr prefix", args: []string{"--link", "tun", "--addr", "::ffff:10.0.0.1/120"},
			want: linkSettings{Link: "tun", Encap: "roce2", Addr: netip.MustParseAddr("10.0.0.1"), AddrBits: 24}},
		{name: "kernel-addr on udp", args: []string{"--kernel-addr", "10.0.0.1/24"}, kind: errLinkConfig, msg: "kernel-addr applies to --link tun or tap only"},
		// These were dropped without a word (an invalid Prefix reads as unset)
		// or, for /0, would route every address into the device.
		{name: "mapped kernel-addr with a short prefix", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "::ffff:10.0.0.1/64"},
			kind: errLinkConfig, msg: `kernel-addr "::ffff:10.0.0.1/64": an IPv4-mapped address with a prefix length shorter than /96`},
		{name: "zero kernel-addr prefix", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "10.0.0.1/0"},
			kind: errLinkConfig, msg: `kernel-addr "10.0.0.1/0": prefix length 0`},
		{name: "zero mapped kernel-addr prefix", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "::ffff:10.0.0.1/96"},
			kind: errLinkConfig, msg: `kernel-addr "::ffff:10.0.0.1/96": prefix length 0`},
		{name: "mapped kernel-addr", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "::ffff:10.0.0.1/120"},
			want: linkSettings{Link: "tun", Encap: "roce2", Addr: netip.MustParseAddr("10.0.0.2"), AddrBits: 24, KernelAddr: netip.MustParsePrefix("10.0.0.1/24")}},
		{name: "kernel-addr without length", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "10.0.0.1"},
			kind: errLinkConfig, msg: `kernel-addr "10.0.0.1" is not an address with a prefix length`},
		{name: "kernel-addr is addr", args: []string{"--link", "tap", "--addr", "10.0.0.2/24", "--kernel-addr", "10.0.0.2/24"},
			kind: errLinkConfig, msg: "goroce host's own address"},
		{name: "kernel-addr family", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--kernel-addr", "fd00::1/64"},
			kind: errLinkConfig, msg: "different IP versions"},
		{name: "bad route", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--routes", "10.1.0.0/16,10.2"},
			kind: errLinkConfig, msg: `route "10.2" is not a prefix`},
		{name: "routes on afpacket", args: []string{"--link", "afpacket", "--dev", "veth0", "--routes", "10.1.0.0/16"},
			kind: errLinkConfig, msg: "routes apply to --link tun or tap only"},
		{name: "roce1 on tun", args: []string{"--link", "tun", "--addr", "10.0.0.2/24", "--encap", "roce1"}, kind: errLinkConfig, msg: "needs an Ethernet link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLinkArgs(t, tc.args...)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want kind %v containing %q", err, tc.kind, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestResolveAddr(t *testing.T) {
	lo := loopbackName(t)
	tests := []struct {
		name string
		s    linkSettings
		peer string
		want netip.Addr
		kind error
		msg  string
	}{
		{name: "default loopback", s: linkSettings{Link: "udp"}, want: netip.MustParseAddr("127.0.0.1")},
		{name: "explicit", s: linkSettings{Link: "udp", Addr: testAddrA}, want: testAddrA},
		{name: "towards peer", s: linkSettings{Link: "udp"}, peer: "127.0.77.9", want: netip.MustParseAddr("127.0.0.1")},
		{name: "dev first address", s: linkSettings{Link: "udp", Dev: lo}, want: netip.MustParseAddr("127.0.0.1")},
		{name: "dev and addr", s: linkSettings{Link: "udp", Dev: lo, Addr: testAddrB}, want: testAddrB},
		{name: "bad interface", s: linkSettings{Link: "udp", Dev: "nosuchif0"}, kind: errLinkNoInterface, msg: `interface "nosuchif0" does not exist`},
		{name: "addr not on dev", s: linkSettings{Link: "udp", Dev: lo, Addr: netip.MustParseAddr("192.0.2.1")}, kind: errLinkAddr,
			msg: "address 192.0.2.1 is not assigned to interface " + lo},
		{name: "addr not on host", s: linkSettings{Link: "udp", Addr: netip.MustParseAddr("192.0.2.1")}, kind: errLinkAddr,
			msg: "address 192.0.2.1 is not assigned to any interface"},
		{name: "unresolvable peer", s: linkSettings{Link: "udp"}, peer: "no-such-host.invalid", kind: errLinkAddr, msg: "no local address towards no-such-host.invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveAddr(tc.s, tc.peer)
			if tc.kind == nil {
				if err != nil || got.Addr != tc.want {
					t.Fatalf("got %v, %v; want %v", got.Addr, err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want kind %v containing %q", err, tc.kind, tc.msg)
			}
		})
	}
}

func loopbackName(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

// needRawSocket skips tests that open the udp link, whose IPv4 receive
// path is a raw socket.
func needRawSocket(t *testing.T) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
	if err != nil {
		t.Skipf("the udp link needs CAP_NET_RAW for its IPv4 raw socket: %v", err)
	}
	syscall.Close(fd)
}

func TestOpenDeviceBusyPort(t *testing.T) {
	needRawSocket(t)
	addr := netip.MustParseAddr("127.0.77.3")
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, udp.DefaultPort)))
	if err != nil {
		t.Skipf("cannot hold %s:4791 for the test: %v", addr, err)
	}
	defer c.Close()
	_, err = openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: addr}, "", "")
	if !errors.Is(err, errLinkBusy) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("error %v, want errLinkBusy wrapping EADDRINUSE", err)
	}
	if !strings.Contains(err.Error(), "127.0.77.3 port 4791") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("message %q does not name the address, port and cause", err)
	}
}

func TestOpenDevicePrivilege(t *testing.T) {
	orig := openUDPLink
	defer func() { openUDPLink = orig }()
	openUDPLink = func(cfg udp.Config) (link.Endpoint, error) {
		// What udp.Open returns for an unprivileged user.
		return nil, fmt.Errorf("udp: raw IPv4 socket (needs CAP_NET_RAW): %w", syscall.EPERM)
	}
	_, err := openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA}, "", "")
	if !errors.Is(err, errLinkPrivilege) || !strings.Contains(err.Error(), "CAP_NET_RAW") {
		t.Fatalf("error %v, want errLinkPrivilege naming CAP_NET_RAW", err)
	}
	var out strings.Builder
	if st := linkExit(&out, "goroce devinfo", err); st != exitFail {
		t.Fatalf("exit %d, want %d", st, exitFail)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.HasPrefix(out.String(), "goroce devinfo: ") {
		t.Fatalf("stderr %q, want one line", out.String())
	}
}

// A busy-polling HCA gets a udp link whose sockets are outside the Go
// netpoller (udp.Config.BusyPoll); a blocking one keeps the netpoller.
func TestOpenDeviceBusyPollLink(t *testing.T) {
	orig := openUDPLink
	defer func() { openUDPLink = orig }()
	for _, busy := range []bool{false, true} {
		var got *udp.Config
		openUDPLink = func(cfg udp.Config) (link.Endpoint, error) {
			got = &cfg
			return nil, errors.New("not opened in this test")
		}
		if _, err := openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA, busyPoll: busy}, "", ""); err == nil {
			t.Fatal("openDevice succeeded without a link")
		}
		if got == nil || got.BusyPoll != busy {
			t.Fatalf("busy-polling HCA %v: udp.Config %+v, want BusyPoll %v", busy, got, busy)
		}
	}
	// --rx-ring reaches udp.Config, and needs IPv4.
	var got *udp.Config
	openUDPLink = func(cfg udp.Config) (link.Endpoint, error) {
		got = &cfg
		return nil, errors.New("not opened in this test")
	}
	openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA, RxRing: true}, "", "")
	if got == nil || !got.RxRing {
		t.Fatalf("--rx-ring: udp.Config %+v, want RxRing", got)
	}
	// --plain-ipv4 reaches udp.Config.
	got = nil
	openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA, PlainIPv4: true}, "", "")
	if got == nil || !got.PlainIPv4 {
		t.Fatalf("--plain-ipv4: udp.Config %+v, want PlainIPv4", got)
	}
	// Refused the raw socket, the link is opened again with PlainIPv4
	// (TestPingpongUnprivileged sees the notice it then prints).
	var cfgs []udp.Config
	openUDPLink = func(cfg udp.Config) (link.Endpoint, error) {
		cfgs = append(cfgs, cfg)
		if !cfg.PlainIPv4 {
			return nil, fmt.Errorf("udp: raw IPv4 socket (needs CAP_NET_RAW): %w", syscall.EPERM)
		}
		return nil, errors.New("not opened in this test")
	}
	openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: testAddrA}, "", "")
	if len(cfgs) != 2 || cfgs[0].PlainIPv4 || !cfgs[1].PlainIPv4 {
		t.Fatalf("after EPERM: opened %+v, want the same config again with PlainIPv4", cfgs)
	}
}

// TestOpenTunErrors covers the tun/tap open failures that need no device:
// the configuration checks before tun.Open and the mapping of its errors.
func TestOpenTunErrors(t *testing.T) {
	lo := loopbackName(t)
	a := netip.MustParseAddr("10.99.1.2")
	for _, tc := range []struct {
		name    string
		s       linkSettings
		openErr error // what the fake tun.Open returns; nil: the real one
		kind    error
		msg     string
	}{
		{"create without prefix length", linkSettings{Link: linkTUN, Dev: "gnosuch0", Addr: a}, nil, errLinkConfig,
			"creating the tun device gnosuch0: --addr needs a prefix length (e.g. 10.99.1.2/24)"},
		{"kernel-addr on an existing device", linkSettings{Link: linkTAP, Dev: lo, Addr: a, KernelAddr: netip.MustParsePrefix("10.99.1.1/24")},
			nil, errLinkConfig, "exists: --kernel-addr and --routes configure a device goroce creates"},
		{"attach to a non-TUN device", linkSettings{Link: linkTUN, Dev: lo, Addr: a}, nil, errLinkConfig, "not TUN/TAP"},
		{"privileges", linkSettings{Link: linkTUN, Addr: a, AddrBits: 24},
			fmt.Errorf("tun: creating tun device \"\": %w", os.ErrPermission), errLinkPrivilege, "CAP_NET_ADMIN"},
		{"no tun module", linkSettings{Link: linkTAP, Addr: a, AddrBits: 24},
			fmt.Errorf("tun: creating tap device \"\": open /dev/net/tun: %w", syscall.ENOENT), errLinkUnavailable, "/dev/net/tun"},
		{"busy", linkSettings{Link: linkTAP, Dev: "gnosuch0", Addr: a, AddrBits: 24},
			fmt.Errorf("tun: creating tap device: %w", syscall.EBUSY), errLinkBusy, "in use by another process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.openErr != nil {
				orig := openTunLink
				defer func() { openTunLink = orig }()
				openTunLink = func(cfg tun.Config) (*tun.Endpoint, error) { return nil, tc.openErr }
			}
			_, err := openDevice(tc.s, "", "")
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want kind %v containing %q", err, tc.kind, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestOpenDeviceWithCapture(t *testing.T) {
	needRawSocket(t)
	capName := filepath.Join(t.TempDir(), "dev.pcap")
	od, err := openDevice(linkSettings{Link: "udp", Encap: "roce2", Addr: netip.MustParseAddr("127.0.77.4"), MTU: 1500, Pcap: capName}, "", "goroce9")
	if err != nil {
		t.Fatal(err)
	}
	if od.Dev.Name() != "goroce9" {
		t.Errorf("name %q", od.Dev.Name())
	}
	if i, err := od.Dev.GIDIndex(netip.MustParseAddr("127.0.77.4")); err != nil || i != 0 {
		t.Errorf("GID index of the link address: %d, %v", i, err)
	}
	if got := od.Dev.QueryPort().ActiveMTU.Bytes(); got != 1024 {
		t.Errorf("active MTU %d with a 1500-byte link, want 1024 (rxe's 80-byte reserve)", got)
	}
	if err := od.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(capName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pcap.NewReader(f); err != nil {
		t.Fatalf("capture file header: %v", err)
	}
}

// A bad value in a --config file is an error naming the file and the line
// of the key at fault, as a bad key or a line without '=' already was: the
// value errors named only the key ("mtu \"abc\" is not a byte count"),
// leaving the user to find which file (flag or config) and which line. A
// value from a flag names no file, --config or not.
func TestLinkConfigValueErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string // the file, as writeFile(t, "links.conf", text)
		args []string
		msg  string // "links.conf:" + msg prefixes the error; "" for no file line
		flag string // with msg "": what the error says instead
	}{
		{name: "mtu not a number", text: "# link\nlink=udp\n\nmtu = abc\n", msg: `4: mtu "abc" is not a byte count`},
		{name: "mtu too small", text: "mtu=100\n", msg: "1: mtu 100 is too small for RoCE"},
		{name: "bad addr", text: "link=udp\naddr=10.0.0\n", msg: `2: addr "10.0.0" is not an IPv4 or IPv6 address`},
		{name: "multicast addr", text: "addr=224.0.0.1\n", msg: "1: addr 224.0.0.1: need a unicast address"},
		{name: "prefix on udp", text: "\naddr=10.0.0.1/24\n", msg: `2: addr "10.0.0.1/24": a prefix length belongs to --link tun or tap`},
		{name: "unknown link", text: "dev=eth0\nlink=rdma\n", msg: `2: unknown link "rdma"`},
		{name: "unknown encap", text: "encap=roce3\n", msg: `1: unknown encap "roce3"`},
		{name: "roce1 on udp", text: "link=udp\nencap=roce1\n", msg: "2: encap roce1 needs an Ethernet link"},
		{name: "rx-ring not a bool", text: "mtu=1500\nrx-ring=yes\n", msg: `2: rx-ring "yes" is not true or false`},
		{name: "plain-ipv4 on tap", text: "link=tap\naddr=10.9.0.2/24\nplain-ipv4=true\n", msg: "3: plain-ipv4 applies to the udp link only"},
		{name: "xdp not a mode", text: "link=afpacket\ndev=veth0\nxdp=yes\n", msg: `3: xdp "yes" is not generic or native`},
		{name: "afpacket without dev", text: "link=afpacket\n", msg: "1: link afpacket needs --dev"},
		{name: "bad kernel-addr", text: "link=tun\naddr=10.99.1.2/24\nkernel-addr=10.99.1.1\n", msg: `3: kernel-addr "10.99.1.1" is not an address with a prefix length`},
		{name: "kernel-addr is addr", text: "link=tun\naddr=10.99.1.2/24\nkernel-addr=10.99.1.2/24\n", msg: "3: kernel-addr 10.99.1.2 is the goroce host's own address"},
		{name: "bad route", text: "link=tun\naddr=10.99.1.2/24\nroutes=10.1.0.0/16, 10.2\n", msg: `3: route " 10.2" is not a prefix`},
		{name: "routes on udp", text: "routes=10.1.0.0/16\n", msg: "1: routes apply to --link tun or tap only"},
		{name: "tun without addr", text: "\n\nlink=tun\n", msg: "3: link tun needs --addr"},
		// The value at fault came from a flag: no file line, though the
		// file is read.
		{name: "bad flag beside a good file", text: "link=udp\nmtu=1500\n", args: []string{"--addr", "10.0.0"}, flag: `addr "10.0.0" is not an IPv4 or IPv6 address`},
		{name: "flag beats the file's bad value", text: "mtu=abc\n", args: []string{"--link-mtu", "100"}, flag: "mtu 100 is too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, "links.conf", tc.text)
			_, err := parseLinkArgs(t, append([]string{"--config", file}, tc.args...)...)
			if !errors.Is(err, errLinkConfig) {
				t.Fatalf("error %v, want a configuration error", err)
			}
			if tc.msg != "" {
				if want := file + ":" + tc.msg; !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("error\n %q\nwant it to start with\n %q", err, want)
				}
			} else if !strings.HasPrefix(err.Error(), tc.flag) {
				t.Fatalf("error %q, want it to start with %q (no file line)", err, tc.flag)
			}
			// What a command prints: one line, "goroce CMD: FILE:LINE: ...".
			var stderr strings.Builder
			if status := linkExit(&stderr, "goroce pingpong", err); status != exitUsage || strings.Count(stderr.String(), "\n") != 1 {
				t.Fatalf("linkExit: status %d, %q", status, stderr.String())
			}
		})
	}
}
