package main

// The link configuration shared by every command that opens a soft HCA
// (devinfo, pingpong, bench, demo): which link backend carries the frames,
// on which interface and address, with which encapsulation, MTU cap and
// optional capture file. It comes from flags and/or a small key=value file
// (--config); a flag given on the command line wins over the file.
//
// Defaults (documented in linkUsage): link udp, encapsulation RoCEv2, MTU of
// the interface. The local address of a udp link is, in order: --addr; the
// first address of --dev; the source address the kernel would use to reach
// the peer HOST (a UDP connect, which sends nothing); 127.0.0.1. A server
// without --addr therefore listens for RoCE on loopback only, which is what
// a local try-out wants; talking to another host needs --addr or --dev.
//
// The tun and tap links put the goroce host behind a TUN or TAP device (see
// hca/link/tun's documentation for the topology): --addr is the host's own
// address, which is not on any kernel interface. With --dev naming an
// existing persistent device (ip tuntap add) goroce attaches to it and
// configures nothing; otherwise it creates the device (named --dev, or by
// the kernel), and --addr needs a prefix length (the subnet routed into a
// TUN), --kernel-addr optionally gives the kernel's own address on the
// device and --routes further prefixes routed into it. On a TAP, next hops
// are the kernel's side of the device when --kernel-addr is set (the kernel
// routes); otherwise the kernel's neighbour table (a TAP on a bridge with
// the peers) resolves them.
//
// Every failure to open a link is a *linkError whose Kind is one of the
// errLink* sentinels, printed as one line naming the cause.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/afpacket"
	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/link/tun"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
)

// Link backends and encapsulations accepted by --link and --encap.
const (
	linkUDP      = "udp"
	linkAFPacket = "afpacket"
	linkTUN      = "tun"
	linkTAP      = "tap"

	encapRoCE2 = "roce2"
	encapRoCE1 = "roce1"
)

// Kinds of link setup failure (errors.Is on a *linkError).
var (
	errLinkConfig      = errors.New("bad link configuration")
	errLinkNoInterface = errors.New("no such interface")
	errLinkAddr        = errors.New("address not on the interface")
	errLinkBusy        = errors.New("port already in use")
	errLinkPrivilege   = errors.New("insufficient privileges")
	errLinkUnavailable = errors.New("link backend not available")
	errLinkOpen        = errors.New("cannot open the device")
)

// linkError is a link setup failure: Kind says which, Msg says it for the
// user in one line, Err is the underlying error (may be nil).
type linkError struct {
	Kind error
	Msg  string
	Err  error
}

func (e *linkError) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *linkError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func linkErrf(kind, err error, format string, args ...any) error {
	return &linkError{Kind: kind, Msg: fmt.Sprintf(format, args...), Err: err}
}

// linkSettings is one device's link configuration.
type linkSettings struct {
	Link  string     // linkUDP (default), linkAFPacket, linkTUN, linkTAP
	Dev   string     // network interface; "" lets the address choose (udp)
	Addr  netip.Addr // local IP address; invalid: see the package comment
	Encap string     // encapRoCE2 (default) or encapRoCE1
	MTU   int        // caps the link MTU in bytes; 0: the interface's
	Pcap  string     // capture file; "" for none
	// RxRing receives the udp link's IPv4 packets from a packet socket's
	// RX ring (udp.Config.RxRing).
	RxRing bool
	// PlainIPv4 receives the udp link's IPv4 packets on its UDP socket,
	// IP IDs found from the ICRCs (udp.Config.PlainIPv4): what an
	// ordinary user's link does anyway.
	PlainIPv4 bool
	// XDP moves the afpacket link's RoCE frames through an AF_XDP socket
	// (afpacket.Config.XDP): "" off, "generic" or "native" XDP.
	XDP string

	// tun and tap only.
	AddrBits   int            // prefix length given with Addr; 0: none
	KernelAddr netip.Prefix   // the kernel's address on a created device
	Routes     []netip.Prefix // more prefixes routed into a created device

	// busyPoll opens the HCA with hca.Options.BusyPoll (goroce bench,
	// which spins on its CQs as perftest does) and the udp or afpacket
	// link with Config.BusyPoll (its sockets outside the netpoller); not
	// a flag.
	busyPoll bool
	// shards is hca.Options.Shards (goroce bench --loopback: PeerShards);
	// not a flag.
	shards int
}

// linkFlags holds the link flags registered on a FlagSet.
type linkFlags struct {
	fs     *flag.FlagSet
	config string
	link   string
	dev    string
	addr   string
	encap  string
	mtu    int
	pcap   string
	kaddr  string
	routes string
	rxRing bool
	plain  bool
	xdp    string
}

// linkUsage documents the link flags and the config file for a command's
// help text.
const linkUsage = `Link configuration (flags win over --config):
  --link udp|afpacket|tun|tap   backend (default udp: RoCEv2 over kernel UDP
                                sockets on port 4791; IPv4 without CAP_NET_RAW
                                finds each packet's IP ID from its ICRC)
  --dev IFNAME                  network interface; tun/tap: the device to create,
                                or an existing persistent one to attach to
  --addr IP                     local address; default: --dev's first address,
                                else the source address towards HOST, else 127.0.0.1;
                                tun/tap: IP/LEN, the goroce host behind the device
                                (the length may be left out when attaching)
  --kernel-addr IP/LEN          tun/tap: the kernel's address on a created device
  --routes PREFIX[,PREFIX...]   tun/tap: more prefixes routed into a created device
  --encap roce2|roce1           encapsulation (roce1 needs an Ethernet link)
  --link-mtu BYTES              cap the link MTU (--mtu is the tools' path MTU);
                                tun/tap: the MTU of a created device (default 4200)
  --pcap FILE                   capture every frame of the link to FILE
  --rx-ring                     udp link over IPv4: receive from a packet socket's RX
                                ring instead of a raw socket (a busy poll reads memory,
                                no system call; the host firewall does not see what
                                the ring receives)
  --plain-ipv4                  udp link over IPv4: receive on the UDP socket, each
                                packet's IP ID found from its ICRC, as without
                                CAP_NET_RAW (a corrupt packet escapes the ICRC check
                                with a chance of ~2^-15 instead of 2^-32)
  --xdp generic|native          afpacket link: receive and send RoCE frames through an
                                AF_XDP socket on the interface's queue 0, steered by an
                                XDP program in generic (skb) or the driver's mode: no
                                IP stack, packet tap or qdisc on the way (interface MTU
                                at most 3822; needs root)
  --config FILE                 key=value lines: link, dev, addr, kernel-addr, routes,
                                encap, mtu, pcap, rx-ring, plain-ipv4, xdp (a line
                                starting with '#' is a comment)`

// addLinkFlags registers --link, --dev, --addr, --encap, --link-mtu, --pcap
// and --config on fs. The link MTU flag is not --mtu because the tools that
// goroce mirrors (ibv_*_pingpong, perftest) use --mtu for the path MTU.
func addLinkFlags(fs *flag.FlagSet) *linkFlags {
	lf := &linkFlags{fs: fs}
	fs.StringVar(&lf.config, "config", "", "read the link configuration from `FILE` (key=value lines)")
	fs.StringVar(&lf.link, "link", linkUDP, "link backend: udp, afpacket, tun or tap")
	fs.StringVar(&lf.dev, "dev", "", "network interface `IFNAME`")
	fs.StringVar(&lf.addr, "addr", "", "local `IP` address goroce uses (tun/tap: IP/LEN)")
	fs.StringVar(&lf.kaddr, "kernel-addr", "", "tun/tap: the kernel's address `IP/LEN` on the device goroce creates")
	fs.StringVar(&lf.routes, "routes", "", "tun/tap: `PREFIXES` (comma-separated) routed into the device goroce creates")
	fs.StringVar(&lf.encap, "encap", encapRoCE2, "encapsulation: roce2 or roce1")
	fs.IntVar(&lf.mtu, "link-mtu", 0, "cap the link MTU to `BYTES` (0: the interface's; config key mtu)")
	fs.StringVar(&lf.pcap, "pcap", "", "capture the link's frames to `FILE`")
	fs.BoolVar(&lf.rxRing, "rx-ring", false, "udp link over IPv4: receive from a packet socket's RX ring, not a raw socket (the host firewall does not see those packets)")
	fs.BoolVar(&lf.plain, "plain-ipv4", false, "udp link over IPv4: receive on the UDP socket, each packet's IP ID found from its ICRC, as without CAP_NET_RAW")
	fs.StringVar(&lf.xdp, "xdp", "", "afpacket link: RoCE frames through an AF_XDP socket, the XDP program in `MODE` generic or native")
	return lf
}

// settings merges the config file (if any) with the flags set on the
// command line and validates the result. It does no network I/O.
func (lf *linkFlags) settings() (linkSettings, error) {
	var cfg linkConfig
	if lf.config != "" {
		var err error
		if cfg, err = readLinkConfig(lf.config); err != nil {
			return linkSettings{}, err
		}
	}
	set := map[string]bool{}
	lf.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// where says, for each value taken from the file, its file and line
	// ("links.conf:7: "), which an error about it starts with.
	where := map[string]string{}
	pickAs := func(key, flagName, flagVal string) string {
		if v, ok := cfg.kv[key]; ok && !set[flagName] {
			where[key] = fmt.Sprintf("%s:%d: ", cfg.name, cfg.line[key])
			return v
		}
		return flagVal
	}
	pick := func(name, flagVal string) string { return pickAs(name, name, flagVal) }
	mtu := strconv.Itoa(lf.mtu)
	return parseLinkSettings(map[string]string{
		"link":        pick("link", lf.link),
		"dev":         pick("dev", lf.dev),
		"addr":        pick("addr", lf.addr),
		"kernel-addr": pick("kernel-addr", lf.kaddr),
		"routes":      pick("routes", lf.routes),
		"encap":       pick("encap", lf.encap),
		"mtu":         pickAs("mtu", "link-mtu", mtu),
		"pcap":        pick("pcap", lf.pcap),
		"rx-ring":     pick("rx-ring", strconv.FormatBool(lf.rxRing)),
		"plain-ipv4":  pick("plain-ipv4", strconv.FormatBool(lf.plain)),
		"xdp":         pick("xdp", lf.xdp),
	}, where)
}

// linkConfigKeys are the keys a config file may hold.
var linkConfigKeys = map[string]bool{"link": true, "dev": true, "addr": true, "kernel-addr": true, "routes": true,
	"encap": true, "mtu": true, "pcap": true, "rx-ring": true, "plain-ipv4": true, "xdp": true}

// linkConfig is what a config file says: its name as given, its values by
// key and the line of each.
type linkConfig struct {
	name string
	kv   map[string]string
	line map[string]int
}

// readLinkConfig reads key=value lines. Blank lines and lines starting with
// '#' are skipped; an unknown key, a line without '=' or a key given twice
// is an error naming the line. (A bad value is parseLinkSettings' error,
// which names the line too.)
func readLinkConfig(name string) (linkConfig, error) {
	f, err := os.Open(name)
	if err != nil {
		return linkConfig{}, linkErrf(errLinkConfig, err, "config file")
	}
	defer f.Close()
	kv, lineOf := map[string]string{}, map[string]int{}
	sc := bufio.NewScanner(f)
	n := 1
	for ; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return linkConfig{}, linkErrf(errLinkConfig, nil, "%s:%d: want key=value, got %q", name, n, clip(line))
		case !linkConfigKeys[k]:
			return linkConfig{}, linkErrf(errLinkConfig, nil, "%s:%d: unknown key %q (want link, dev, addr, kernel-addr, routes, encap, mtu, pcap, rx-ring, plain-ipv4 or xdp)", name, n, clip(k))
		}
		if _, dup := kv[k]; dup {
			return linkConfig{}, linkErrf(errLinkConfig, nil, "%s:%d: key %q given twice", name, n, k)
		}
		kv[k], lineOf[k] = v, n
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return linkConfig{}, linkErrf(errLinkConfig, nil, "%s:%d: line of 64 KiB or more (not a link configuration file?)", name, n)
		}
		return linkConfig{}, linkErrf(errLinkConfig, err, "reading config file %s", name)
	}
	return linkConfig{name: name, kv: kv, line: lineOf}, nil
}

// clip shortens what an error quotes from a config file to a readable
// length: a binary file or a huge line would otherwise fill the terminal.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// parseLinkSettings validates the textual settings. where[key] is the
// "FILE:LINE: " of a value from a config file, "" for one from a flag: an
// error about the value starts with it.
func parseLinkSettings(kv, where map[string]string) (linkSettings, error) {
	bad := func(key, format string, args ...any) error {
		return linkErrf(errLinkConfig, nil, "%s"+format, append([]any{where[key]}, args...)...)
	}
	var s linkSettings
	s.Link = kv["link"]
	if s.Link == "" {
		s.Link = linkUDP
	}
	switch s.Link {
	case linkUDP, linkAFPacket, linkTUN, linkTAP:
	default:
		return s, bad("link", "unknown link %q (want udp, afpacket, tun or tap)", s.Link)
	}
	s.Dev = kv["dev"]
	behind := s.Link == linkTUN || s.Link == linkTAP // the goroce host is behind a device
	if a := kv["addr"]; a != "" {
		ip, err := netip.ParseAddr(a)
		if strings.Contains(a, "/") {
			if !behind {
				return s, bad("addr", "addr %q: a prefix length belongs to --link tun or tap (the %s link uses the interface's address)", a, s.Link)
			}
			var p netip.Prefix
			if p, err = netip.ParsePrefix(a); err == nil {
				ip, s.AddrBits = p.Addr(), p.Bits()
				if ip.Is4In6() {
					if s.AddrBits < 96 {
						return s, bad("addr", "addr %q: an IPv4-mapped address with a prefix length shorter than /96 has no IPv4 equivalent", a)
					}
					s.AddrBits -= 96
				}
				if s.AddrBits == 0 {
					return s, bad("addr", "addr %q: prefix length 0", a)
				}
			}
		}
		if err != nil || ip.Zone() != "" {
			return s, bad("addr", "addr %q is not an IPv4 or IPv6 address", a)
		}
		if ip.IsUnspecified() || ip.IsMulticast() {
			return s, bad("addr", "addr %s: need a unicast address", ip)
		}
		s.Addr = ip.Unmap()
	}
	s.Encap = kv["encap"]
	if s.Encap == "" {
		s.Encap = encapRoCE2
	}
	switch s.Encap {
	case encapRoCE2:
	case encapRoCE1:
		if s.Link == linkUDP || s.Link == linkTUN {
			return s, bad("encap", "encap roce1 needs an Ethernet link (afpacket or tap), not %s", s.Link)
		}
	default:
		return s, bad("encap", "unknown encap %q (want roce2 or roce1)", s.Encap)
	}
	if m := kv["mtu"]; m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 {
			return s, bad("mtu", "mtu %q is not a byte count", m)
		}
		if n != 0 && n < 576 {
			return s, bad("mtu", "mtu %d is too small for RoCE (at least 576 bytes: IB MTU 256 plus headers)", n)
		}
		s.MTU = n
	}
	s.Pcap = kv["pcap"]
	if r := kv["rx-ring"]; r != "" {
		b, err := strconv.ParseBool(r)
		if err != nil {
			return s, bad("rx-ring", "rx-ring %q is not true or false", r)
		}
		if b && s.Link != linkUDP {
			return s, bad("rx-ring", "rx-ring applies to the udp link only (the %s link has no raw socket to replace)", s.Link)
		}
		if b && s.Addr.Is6() {
			return s, bad("rx-ring", "rx-ring needs an IPv4 address (IPv6 receives on the UDP socket itself), not %s", s.Addr)
		}
		s.RxRing = b
	}
	if r := kv["plain-ipv4"]; r != "" {
		b, err := strconv.ParseBool(r)
		if err != nil {
			return s, bad("plain-ipv4", "plain-ipv4 %q is not true or false", r)
		}
		if b && s.Link != linkUDP {
			return s, bad("plain-ipv4", "plain-ipv4 applies to the udp link only, not to the %s link", s.Link)
		}
		if b && s.Addr.Is6() {
			return s, bad("plain-ipv4", "plain-ipv4 needs an IPv4 address (IPv6 always receives on the UDP socket), not %s", s.Addr)
		}
		if b && s.RxRing {
			return s, bad("plain-ipv4", "plain-ipv4 and rx-ring exclude each other (the ring is a packet socket, which needs CAP_NET_RAW)")
		}
		s.PlainIPv4 = b
	}
	switch x := kv["xdp"]; x {
	case "":
	case "generic", "native":
		if s.Link != linkAFPacket {
			return s, bad("xdp", "xdp applies to the afpacket link only (AF_XDP takes Ethernet frames off an interface), not to the %s link", s.Link)
		}
		s.XDP = x
	default:
		return s, bad("xdp", "xdp %q is not generic or native", x)
	}
	if s.Dev == "" && s.Link == linkAFPacket {
		return s, bad("link", "link %s needs --dev", s.Link)
	}
	if k := kv["kernel-addr"]; k != "" {
		if !behind {
			return s, bad("kernel-addr", "kernel-addr applies to --link tun or tap only")
		}
		p, err := netip.ParsePrefix(k)
		if err != nil || p.Addr().Zone() != "" {
			return s, bad("kernel-addr", "kernel-addr %q is not an address with a prefix length (e.g. 10.99.1.1/24)", k)
		}
		// An unmapped prefix shorter than /0 would be an invalid Prefix,
		// which reads as no kernel-addr at all.
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return s, bad("kernel-addr", "kernel-addr %q: an IPv4-mapped address with a prefix length shorter than /96 has no IPv4 equivalent", k)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		// As for addr: /0 would route every address into the device.
		if p.Bits() == 0 {
			return s, bad("kernel-addr", "kernel-addr %q: prefix length 0", k)
		}
		s.KernelAddr = p
	}
	if r := kv["routes"]; r != "" {
		if !behind {
			return s, bad("routes", "routes apply to --link tun or tap only")
		}
		for _, x := range strings.Split(r, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(x))
			if err != nil {
				return s, bad("routes", "route %q is not a prefix (e.g. 10.99.2.0/24)", x)
			}
			s.Routes = append(s.Routes, p.Masked())
		}
	}
	if behind {
		if !s.Addr.IsValid() {
			return s, bad("link", "link %s needs --addr: the goroce host's address behind the device (e.g. 10.99.1.2/24)", s.Link)
		}
		if s.KernelAddr.IsValid() {
			if s.KernelAddr.Addr() == s.Addr {
				return s, bad("kernel-addr", "kernel-addr %s is the goroce host's own address: the kernel would keep the peer's packets", s.KernelAddr.Addr())
			}
			if s.KernelAddr.Addr().Is4() != s.Addr.Is4() {
				return s, bad("kernel-addr", "kernel-addr %s and addr %s are of different IP versions", s.KernelAddr, s.Addr)
			}
		}
	}
	return s, nil
}

// resolveAddr fills in s.Addr (see the package comment); peer is the HOST
// argument of a client, "" for a server or a local command.
func resolveAddr(s linkSettings, peer string) (linkSettings, error) {
	if s.Link == linkTUN || s.Link == linkTAP {
		return s, nil // Addr is required and belongs to no kernel interface
	}
	if s.Dev != "" {
		ifc, err := net.InterfaceByName(s.Dev)
		if err != nil {
			return s, linkErrf(errLinkNoInterface, nil, "interface %q does not exist", s.Dev)
		}
		addrs := interfaceAddrs(ifc)
		if s.Addr.IsValid() {
			if !holds(ifc, addrs, s.Addr) {
				return s, linkErrf(errLinkAddr, nil, "address %s is not assigned to interface %s", s.Addr, s.Dev)
			}
			return s, nil
		}
		if s.Link != linkUDP {
			return s, nil // the backend takes the interface's addresses
		}
		if a, ok := preferredAddr(addrs); ok {
			s.Addr = a
			return s, nil
		}
		return s, linkErrf(errLinkAddr, nil, "interface %s has no usable IP address", s.Dev)
	}
	if s.Addr.IsValid() {
		if _, ok := interfaceHolding(s.Addr); !ok {
			return s, linkErrf(errLinkAddr, nil, "address %s is not assigned to any interface", s.Addr)
		}
		return s, nil
	}
	if peer != "" {
		a, err := sourceAddrFor(peer)
		if err != nil {
			return s, linkErrf(errLinkAddr, err, "no local address towards %s (give --addr)", peer)
		}
		s.Addr = a
		return s, nil
	}
	s.Addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	return s, nil
}

// sourceAddrFor returns the source address the kernel picks to reach host:
// connecting a UDP socket runs the route lookup and sends nothing.
func sourceAddrFor(host string) (netip.Addr, error) {
	c, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(udp.DefaultPort)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, err
	}
	return ap.Addr().Unmap(), nil
}

func interfaceAddrs(ifc *net.Interface) []netip.Addr {
	as, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// holds reports whether a is an address of ifc. All of 127.0.0.0/8 is on
// the loopback interface although only 127.0.0.1/8 is listed.
func holds(ifc *net.Interface, addrs []netip.Addr, a netip.Addr) bool {
	for _, x := range addrs {
		if x == a {
			return true
		}
	}
	return a.Is4() && a.IsLoopback() && ifc.Flags&net.FlagLoopback != 0
}

func interfaceHolding(a netip.Addr) (*net.Interface, bool) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, false
	}
	for i := range ifs {
		if holds(&ifs[i], interfaceAddrs(&ifs[i]), a) {
			return &ifs[i], true
		}
	}
	return nil, false
}

// preferredAddr picks an interface's address for RoCE: IPv4 first (its GID
// is what rxe users pass with -g), then a global IPv6 address.
func preferredAddr(addrs []netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() {
			return a, true
		}
	}
	for _, a := range addrs {
		if a.Is6() && !a.IsLinkLocalUnicast() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// linkNotice is where openLink says how it had to open a link (os.Stderr;
// tests replace it).
var linkNotice io.Writer = os.Stderr

// openUDPLink is udp.Open; tests replace it to inject kernel failures.
var openUDPLink = func(cfg udp.Config) (link.Endpoint, error) { return udp.Open(cfg) }

// openUDPFallback opens a udp link with cfg; when the kernel refuses the
// raw socket of an IPv4 link (no CAP_NET_RAW), it opens the link again
// receiving on the UDP socket, each packet's IP ID found from its ICRC
// (udp.Config.PlainIPv4), and says so on linkNotice. It returns the first
// error if that fails too.
func openUDPFallback(cfg udp.Config) (link.Endpoint, error) {
	ep, err := openUDPLink(cfg)
	if err == nil || !errors.Is(err, os.ErrPermission) || !cfg.Addr.Is4() || cfg.RxRing || cfg.PlainIPv4 {
		return ep, err
	}
	cfg.PlainIPv4 = true
	pep, perr := openUDPLink(cfg)
	if perr != nil {
		return nil, err
	}
	fmt.Fprintf(linkNotice, "goroce: udp link on %s: no CAP_NET_RAW for a raw socket, so IPv4 is received on the UDP socket and each packet's IP ID is found from its ICRC (a corrupt packet then escapes the ICRC check with a chance of about 2^-15 instead of 2^-32; run as root for the full check)\n", cfg.Addr)
	return pep, nil
}

// openAFPacketLink is afpacket.Open, replaceable by tests.
var openAFPacketLink = func(cfg afpacket.Config) (link.Endpoint, error) { return afpacket.Open(cfg) }

// openTunLink is tun.Open, replaceable by tests.
var openTunLink = func(cfg tun.Config) (*tun.Endpoint, error) { return tun.Open(cfg) }

// openLink opens the endpoint for s (s.Addr already resolved).
func openLink(s linkSettings) (link.Endpoint, error) {
	switch s.Link {
	case linkUDP:
		if s.RxRing && !s.Addr.Is4() {
			return nil, linkErrf(errLinkConfig, nil, "--rx-ring needs an IPv4 address (IPv6 receives on the UDP socket itself), not %s", s.Addr)
		}
		if s.PlainIPv4 && !s.Addr.Is4() {
			return nil, linkErrf(errLinkConfig, nil, "--plain-ipv4 needs an IPv4 address (IPv6 always receives on the UDP socket), not %s", s.Addr)
		}
		// GRO over IPv6: a GSO run arrives in one receive and is split
		// exactly (no IP ID); write_bw 64 KiB between two processes on
		// loopback 1.6-1.9x faster than without (docs/performance.md,
		// session 27).
		ep, err := openUDPFallback(udp.Config{Addr: s.Addr, MTU: s.MTU, BusyPoll: s.busyPoll, RxRing: s.RxRing,
			PlainIPv4: s.PlainIPv4, GRO: s.Addr.Is6()})
		if err != nil {
			return nil, classifyOpenErr(err, fmt.Sprintf("udp link on %s port %d", s.Addr, udp.DefaultPort))
		}
		return ep, nil
	case linkAFPacket:
		if s.MTU != 0 {
			return nil, linkErrf(errLinkConfig, nil, "--link-mtu applies to the udp link only (an afpacket link has its interface's MTU)")
		}
		cfg := afpacket.Config{Interface: s.Dev, BusyPoll: s.busyPoll, XDP: s.XDP != "", XDPNative: s.XDP == "native"}
		if s.Addr.IsValid() {
			cfg.Addrs = []netip.Addr{s.Addr}
		}
		ep, err := openAFPacketLink(cfg)
		if err != nil {
			what := "afpacket link on " + s.Dev
			switch {
			case errors.Is(err, afpacket.ErrPermission):
				return nil, linkErrf(errLinkPrivilege, err, "%s: permission denied (packet sockets need root or CAP_NET_RAW)", what)
			case errors.Is(err, afpacket.ErrAddrNotOnInterface):
				return nil, linkErrf(errLinkAddr, err, "%s", what)
			case errors.Is(err, netcfg.ErrNoInterface):
				return nil, linkErrf(errLinkNoInterface, err, "%s", what)
			}
			return nil, classifyOpenErr(err, what)
		}
		return ep, nil
	case linkTUN, linkTAP:
		ep, err := openTun(s)
		if err != nil {
			return nil, err
		}
		return ep, nil
	}
	return nil, linkErrf(errLinkUnavailable, nil, "link %s is not built into this goroce yet", s.Link)
}

// openTun creates or attaches to the TUN/TAP device of s.
func openTun(s linkSettings) (*tun.Endpoint, error) {
	cfg := tun.Config{Name: s.Dev, MTU: s.MTU, KernelAddr: s.KernelAddr, Routes: s.Routes}
	if s.Link == linkTAP {
		cfg.Mode = tun.TAP
	}
	bits := s.AddrBits
	what := s.Link + " device"
	if s.Dev != "" {
		what += " " + s.Dev
	}
	if s.Dev != "" {
		if _, err := netcfg.LinkByName(s.Dev); err == nil {
			// A persistent device someone made: use it as it is.
			if s.KernelAddr.IsValid() || len(s.Routes) > 0 {
				return nil, linkErrf(errLinkConfig, nil, "%s exists: --kernel-addr and --routes configure a device goroce creates (configure an existing one with ip)", what)
			}
			cfg.Attach = true
			if bits == 0 {
				bits = s.Addr.BitLen()
			}
		}
	}
	if bits == 0 {
		return nil, linkErrf(errLinkConfig, nil, "creating the %s: --addr needs a prefix length (e.g. %s/24): the goroce host's subnet is routed into the device", what, s.Addr)
	}
	cfg.Addr = netip.PrefixFrom(s.Addr, bits)
	ep, err := openTunLink(cfg)
	if err == nil {
		return ep, nil
	}
	switch {
	case errors.Is(err, tun.ErrBadConfig):
		return nil, linkErrf(errLinkConfig, err, "%s", what)
	case errors.Is(err, netcfg.ErrPermission), errors.Is(err, os.ErrPermission):
		return nil, linkErrf(errLinkPrivilege, err, "%s: permission denied (TUN/TAP devices need root or CAP_NET_ADMIN)", what)
	case errors.Is(err, netcfg.ErrExists):
		return nil, linkErrf(errLinkBusy, err, "%s: an address or route it needs exists already", what)
	case errors.Is(err, syscall.EBUSY):
		return nil, linkErrf(errLinkBusy, err, "%s: in use by another process", what)
	case errors.Is(err, os.ErrNotExist):
		return nil, linkErrf(errLinkUnavailable, err, "%s: no /dev/net/tun (load the tun module)", what)
	}
	return nil, classifyOpenErr(err, what)
}

// gatewayResolver answers every next hop with one MAC: the kernel's side
// of a TAP device with an address, which routes for the goroce host.
type gatewayResolver net.HardwareAddr

func (g gatewayResolver) Resolve(netip.Addr) (net.HardwareAddr, error) {
	return net.HardwareAddr(g), nil
}

// classifyOpenErr turns a backend's open error into a *linkError of the
// right kind, with the likely cause spelled out.
func classifyOpenErr(err error, what string) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return linkErrf(errLinkBusy, err, "%s: the port is already in use (another goroce, or kernel rdma_rxe, holds it)", what)
	case errors.Is(err, os.ErrPermission):
		return linkErrf(errLinkPrivilege, err, "%s: permission denied (raw and packet sockets need root or CAP_NET_RAW)", what)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return linkErrf(errLinkAddr, err, "%s: the address is not on this host", what)
	case errors.Is(err, syscall.ENODEV):
		return linkErrf(errLinkNoInterface, err, "%s: no such device", what)
	}
	return linkErrf(errLinkOpen, err, "%s", what)
}

// openedDevice is an HCA on a configured link, with its capture.
type openedDevice struct {
	Dev      *hca.Device
	Settings linkSettings
	tap      *pcap.Tap
	capFile  *os.File
}

// openDevice resolves s's address (peer as for resolveAddr), opens the link,
// wraps it in a pcap tap when s.Pcap is set, and opens an HCA named name
// ("" for hca.DefaultName) on it.
func openDevice(s linkSettings, peer, name string) (*openedDevice, error) {
	s, err := resolveAddr(s, peer)
	if err != nil {
		return nil, err
	}
	ep, err := openLink(s)
	if err != nil {
		return nil, err
	}
	// Next hops come from the kernel's routes and neighbour table.
	var resolver hca.Resolver
	switch e := ep.(type) {
	case *tun.Endpoint:
		s.Dev = e.Name()
		if e.Format() == link.FormatEthernet {
			if s.KernelAddr.IsValid() {
				mac, err := netcfg.HardwareAddr(e.Name())
				if err != nil {
					ep.Close()
					return nil, linkErrf(errLinkOpen, err, "tap device %s", e.Name())
				}
				resolver = gatewayResolver(mac)
			} else {
				// A TAP on a bridge: the peers are on the bridge's segment,
				// which the kernel resolves through the bridge.
				resolver = netcfg.NewResolver(netcfg.ResolverConfig{})
			}
		}
	default:
		if ep.Format() == link.FormatEthernet {
			resolver = netcfg.NewResolver(netcfg.ResolverConfig{Interface: s.Dev})
		}
	}
	od := &openedDevice{Settings: s}
	if s.Pcap != "" {
		f, err := os.Create(s.Pcap)
		if err != nil {
			ep.Close()
			return nil, linkErrf(errLinkOpen, err, "capture file")
		}
		tap, err := pcap.NewTap(ep, f, pcap.WithLossless())
		if err != nil {
			ep.Close()
			f.Close()
			return nil, linkErrf(errLinkOpen, err, "capture on %s", s.Pcap)
		}
		od.tap, od.capFile, ep = tap, f, tap
	}
	opts := hca.Options{Name: name, RoCEv1: s.Encap == encapRoCE1, BusyPoll: s.busyPoll, Shards: s.shards}
	if resolver != nil {
		opts.Resolver = resolver
	}
	d, err := hca.Open(ep, opts)
	if err != nil {
		ep.Close()
		if od.capFile != nil {
			od.capFile.Close()
		}
		return nil, linkErrf(errLinkOpen, err, "opening the HCA")
	}
	od.Dev = d
	return od, nil
}

// Close closes the HCA (and with it the link and the tap, which flushes the
// capture), then the capture file.
func (od *openedDevice) Close() error {
	err := od.Dev.Close()
	if od.capFile != nil {
		if cerr := od.capFile.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// linkExit reports err on stderr as one line prefixed by cmd and returns
// the exit status: exitUsage for configuration mistakes, exitFail for the
// environment (interface, address, port, privileges).
func linkExit(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	if errors.Is(err, errLinkConfig) {
		return exitUsage
	}
	return exitFail
}
