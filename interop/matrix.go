package interop

import (
	"fmt"
	"regexp"
	"strings"
)

// Topology constants; they must match lib.sh (checked by TestScriptsAgreeWithMatrix).
const (
	NetNS   = "goroce-interop"
	Bridge  = "gribr0"
	HostIP  = "10.66.0.1" // the bridge address inside NetNS; goroce's UDP link binds it
	GuestIP = "10.66.0.2" // VM eth0, rxe0
	TapDev  = "gritap1"   // extra tap on the bridge for goroce --link tap
	TapIP   = "10.66.0.3" // goroce's own address behind TapDev
	// TapMAC is the MAC of the goroce host behind TapDev: hca/link/tun's DefaultHardwareAddr
	// of TapIP (02:67:72 + the address's last three bytes; checked by TestTapMAC). goroce
	// answers no ARP, so the guest gets it as a permanent neighbour for the tap cases.
	TapMAC    = "02:67:72:42:00:03"
	TunDev    = "gritun1"   // tun for goroce --link tun (routed via HostIP)
	TunIP     = "10.66.1.3" // goroce's address behind TunDev
	TunNet    = "10.66.1.0/24"
	VethSrvIP = "10.99.0.2" // rxev2 inside the VM (rxe-veth-pair), server of rxe↔rxe runs
	VethCliIP = "10.99.0.1" // rxev1, client of rxe↔rxe runs; captured on vp1
	GIDIndex  = 1           // IPv4-mapped RoCEv2 GID with IPv6 disabled
	// The IPv6 cases enable IPv6 on the VM's eth0 and the bridge for their run only and give
	// them these ULA addresses; rxe0 then lists GuestIP6 at GIDIndex6 (0 is the MAC-derived
	// link-local GID, 1 the IPv4 one; the harness checks the table before each run). The
	// tools' TCP exchange stays on IPv4.
	HostIP6   = "fd66::1"
	GuestIP6  = "fd66::2"
	GIDIndex6 = 2
	OOBPort   = 18515 // TCP port of ibv_*_pingpong and perftest
	// ToolTimeout bounds every tool run in the guest (timeout(1)): a forgotten server
	// busy-polls a vCPU and keeps rdma link del in D state until it exits.
	ToolTimeout = 120
)

// Direction says who plays which role in one run of a case.
type Direction int

const (
	// GoroceToRxe: goroce on the host (in NetNS) is the client, the rdma-core/perftest tool
	// in the VM (kernel rxe0) is the server.
	GoroceToRxe Direction = iota
	// RxeToGoroce: goroce serves on HostIP, the tool in the VM is the client.
	RxeToGoroce
	// RxeToRxe: both ends are the tool in the VM, rxev1 -> rxev2 over a veth pair (baseline
	// that proves the exact tool command line and the capture path work).
	RxeToRxe
)

// Directions lists every direction in table order.
var Directions = []Direction{GoroceToRxe, RxeToGoroce, RxeToRxe}

func (d Direction) String() string {
	switch d {
	case GoroceToRxe:
		return "goroce→rxe"
	case RxeToGoroce:
		return "rxe→goroce"
	case RxeToRxe:
		return "rxe↔rxe"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Slug is the direction's name as a subtest / file name.
func (d Direction) Slug() string {
	switch d {
	case GoroceToRxe:
		return "goroce-to-rxe"
	case RxeToGoroce:
		return "rxe-to-goroce"
	case RxeToRxe:
		return "rxe-to-rxe"
	}
	return "unknown"
}

// Case is one row of the interop matrix: a tool in the VM against the equivalent goroce
// subcommand, run in every applicable direction.
type Case struct {
	Name string
	// Tool is the rdma-core/perftest command in the VM without device, GID index and peer:
	// those are added per direction (-d rxe0 -g 1 / -x 1 ...).
	Tool string
	// Goroce is the goroce command line without --link/--dev/--addr/--pcap and peer.
	Goroce string
	// Subcommand is the goroce subcommand the case needs (from `goroce help`).
	Subcommand string
	Perftest   bool   // perftest tool (-x GID, -F) rather than ibv_*_pingpong (-g GID)
	Link       string // goroce --link: udp (default), afpacket, tap, tun
	MTU        int    // rxe active MTU: 1024 (link 1500) or 4096 (link 9000)
	Loss       bool   // 1% random loss of UDP 4791 (nft in NetNS; netem on the veth for rxe↔rxe)
	IPv6       bool   // RoCEv2 over IPv6: GIDs GuestIP6 / HostIP6 (udp and afpacket links)
	XDP        bool   // afpacket link with --xdp generic: RoCE frames through an AF_XDP socket on the bridge
	// Plain: goroce's udp link with --plain-ipv4, receiving on its UDP socket as an ordinary
	// user's does, each IP ID (rxe picks them at random) found from the packet's ICRC.
	Plain bool
	// Opcodes that the capture of the run must contain (goroce pcap verify names).
	Opcodes []string
	Note    string
	// Interrupt sends the client SIGINT this many seconds after it starts: the only end
	// of a --run_infinitely run. goroce's client ends the run cleanly (exit 0); the real
	// tool dies of it, and the case accepts that (exit 130) from it alone. No rxe↔rxe
	// baseline: a perftest server whose client died fails its closing exchange.
	Interrupt int
}

func (c Case) link() string {
	if c.Link == "" {
		return "udp"
	}
	return c.Link
}

// Applies reports whether the case runs in direction d. The rxe↔rxe baseline is only run
// for the UDP link over IPv4 (the other links and IPv6 change goroce's side only).
func (c Case) Applies(d Direction) bool {
	return d != RxeToRxe || c.link() == "udp" && !c.IPv6 && c.Interrupt == 0 && !c.Plain
}

// LinkMTU is the Ethernet MTU that gives rxe the case's active MTU (rxe keeps 80 bytes of
// headroom: 1500 -> 1024, 9000 -> 4096).
func (c Case) LinkMTU() int {
	if c.MTU == 4096 {
		return 9000
	}
	return 1500
}

// Commands returns the exact command lines of a run: the server's and the client's, and
// where each runs ("guest" or "host"; host commands run inside NetNS). pcap is the file
// goroce writes its own capture to (host side only).
func (c Case) Commands(d Direction, pcap string) (server, client Endpoint) {
	gid, hostIP := GIDIndex, HostIP
	if c.IPv6 {
		gid, hostIP = GIDIndex6, HostIP6
	}
	toolFlags := func(dev string) string {
		if c.Perftest {
			return fmt.Sprintf("%s -d %s -x %d -F", c.Tool, dev, gid)
		}
		return fmt.Sprintf("%s -d %s -g %d", c.Tool, dev, gid)
	}
	timeout := fmt.Sprintf("timeout %d ", ToolTimeout)
	cliTimeout := timeout
	if c.Interrupt > 0 {
		// --preserve-status: the tool's own status (130 when SIGINT killed it), not 124.
		cliTimeout = fmt.Sprintf("timeout --preserve-status -s INT %d ", c.Interrupt)
	}
	goroce := func(peer string) string {
		s := "goroce " + c.Goroce + " --link " + c.link()
		switch c.link() {
		case "udp":
			s += " --addr " + hostIP
		case "afpacket":
			s += " --dev " + Bridge + " --addr " + hostIP
			if c.XDP {
				s += " --xdp generic"
			}
		case "tap":
			s += " --dev " + TapDev + " --addr " + TapIP
		case "tun":
			s += " --dev " + TunDev + " --addr " + TunIP
		}
		if pcap != "" {
			s += " --pcap " + pcap
		}
		if peer != "" {
			s += " " + peer
		}
		return s
	}
	switch d {
	case GoroceToRxe:
		return Endpoint{"guest", timeout + toolFlags("rxe0"), 0}, Endpoint{"host", goroce(GuestIP), c.Interrupt}
	case RxeToGoroce:
		// The tool's TCP exchange always goes to the netns kernel (HostIP; goroce has no TCP
		// stack of its own: `goroce pingpong|bench` listen on the netns's sockets). Its RDMA
		// traffic then goes to the GID goroce sent, which is TapIP/TunIP on those links.
		return Endpoint{"host", goroce(""), 0}, Endpoint{"guest", cliTimeout + toolFlags("rxe0") + " " + HostIP, 0}
	default:
		return Endpoint{"guest", timeout + toolFlags("rxev2"), 0}, Endpoint{"guest", cliTimeout + toolFlags("rxev1") + " " + VethSrvIP, 0}
	}
}

// Endpoint is one side of a run.
type Endpoint struct {
	Where string // "guest" or "host"
	Cmd   string
	// Interrupt: the harness sends a host command SIGINT after this many seconds (a guest
	// command carries its timeout(1) in Cmd).
	Interrupt int
}

var (
	sendFML  = []string{"RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST"}
	writeFML = []string{"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"}
	readFML  = []string{"RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST"}
)

func pp(name, tool, goroce string, opcodes []string, mods ...func(*Case)) Case {
	c := Case{Name: name, Tool: tool, Goroce: goroce, Subcommand: "pingpong", MTU: 1024, Opcodes: opcodes}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func pt(name, tool, mode, flags string, opcodes []string, mods ...func(*Case)) Case {
	c := Case{Name: name, Tool: tool + " " + flags, Goroce: "bench " + mode + " " + flags,
		Subcommand: "bench", Perftest: true, MTU: 1024, Opcodes: opcodes}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func withLink(l string) func(*Case) { return func(c *Case) { c.Link = l } }
func withXDP(c *Case)               { c.Link, c.XDP = "afpacket", true }
func mtu4096(c *Case)               { c.MTU = 4096 }
func lossy(c *Case)                 { c.Loss = true }
func ipv6(c *Case)                  { c.IPv6 = true }
func plainIPv4(c *Case)             { c.Plain = true; c.Goroce += " --plain-ipv4" }
func note(n string) func(*Case)     { return func(c *Case) { c.Note = n } }
func interrupt(sec int) func(*Case) { return func(c *Case) { c.Interrupt = sec } }

// Matrix is the whole interop matrix of the issue. Pingpong cases: goroce pingpong takes the
// ibv_*_pingpong flags (-p -d -i -s -n -g -m -l -e -r) plus --qp, --srq, --link, --dev,
// --addr, --pcap. Perftest cases: goroce bench MODE takes the perftest flags.
//
// GID indices are per device: the tools in the VM use rxe0's index 1 (the IPv4-mapped GID;
// index 0 is the MAC-derived one), while goroce's table holds only its link address's GID,
// so goroce gets no -g/-x (it defaults to that GID), except -g 0 in rc_pingpong_flags.
var Matrix = []Case{
	pp("rc_pingpong_1B", "ibv_rc_pingpong -n 100 -s 1", "pingpong --qp rc -n 100 -s 1",
		[]string{"RC_SEND_ONLY", "RC_ACKNOWLEDGE"}),
	pp("rc_pingpong_4k", "ibv_rc_pingpong -n 100 -s 4096 -m 1024", "pingpong --qp rc -n 100 -s 4096 -m 1024",
		sendFML, note("4 KiB at path MTU 1024: SEND FIRST/MIDDLE/LAST")),
	pp("rc_pingpong_flags", "ibv_rc_pingpong -p 18515 -i 1 -s 2000 -n 50 -m 1024 -l 0 -r 100 -e",
		"pingpong --qp rc -p 18515 -i 1 -g 0 -s 2000 -n 50 -m 1024 -l 0 -r 100 -e",
		[]string{"RC_SEND_FIRST", "RC_SEND_LAST"}, note("every pingpong flag; -e = completion events")),
	pp("rc_pingpong_afpacket", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, withLink("afpacket")),
	pp("rc_pingpong_xdp", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, withXDP, note("goroce's frames through an AF_XDP socket on the bridge, steered by generic XDP")),
	pp("rc_pingpong_tap", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, withLink("tap"), note("goroce at 10.66.0.3 behind gritap1 on the bridge; TCP via 10.66.0.1")),
	pp("rc_pingpong_tun", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, withLink("tun"), note("routed: VM -> 10.66.0.1 -> gritun1 -> goroce at 10.66.1.3; TCP via 10.66.0.1")),
	pp("uc_pingpong", "ibv_uc_pingpong -n 100 -s 4096", "pingpong --qp uc -n 100 -s 4096",
		[]string{"UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST"}),
	pp("ud_pingpong", "ibv_ud_pingpong -n 100 -s 512", "pingpong --qp ud -n 100 -s 512",
		[]string{"UD_SEND_ONLY"}, note("UD payload must fit the 1024 path MTU")),
	pp("ud_pingpong_1024", "ibv_ud_pingpong -n 100 -s 1024", "pingpong --qp ud -n 100 -s 1024",
		[]string{"UD_SEND_ONLY"}, note("UD payload = path MTU")),
	pp("srq_pingpong", "ibv_srq_pingpong -n 100 -s 4096 -q 4", "pingpong --qp rc --srq 4 -n 100 -s 4096",
		sendFML, note("4 RC QPs sharing an SRQ")),
	pp("rc_pingpong_mtu4096", "ibv_rc_pingpong -n 100 -s 16384 -m 4096", "pingpong --qp rc -n 100 -s 16384 -m 4096",
		sendFML, mtu4096),
	pp("ud_pingpong_mtu4096", "ibv_ud_pingpong -n 100 -s 4096", "pingpong --qp ud -n 100 -s 4096",
		[]string{"UD_SEND_ONLY"}, mtu4096),
	pp("rc_pingpong_loss", "ibv_rc_pingpong -n 500 -s 4096", "pingpong --qp rc -n 500 -s 4096",
		sendFML, lossy, note("1% loss: NAK / retransmission")),

	pp("rc_pingpong_loss_plain", "ibv_rc_pingpong -n 500 -s 4096", "pingpong --qp rc -n 500 -s 4096",
		sendFML, lossy, plainIPv4, note("goroce without a raw socket (as an ordinary user), 1% loss")),
	pp("ud_pingpong_plain", "ibv_ud_pingpong -n 100 -s 512", "pingpong --qp ud -n 100 -s 512",
		[]string{"UD_SEND_ONLY"}, plainIPv4, note("goroce without a raw socket (as an ordinary user)")),

	pp("rc_pingpong_ipv6", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, ipv6, note("RoCEv2 over IPv6; rxe sends UDP checksum 0")),
	pp("ud_pingpong_ipv6", "ibv_ud_pingpong -n 100 -s 512", "pingpong --qp ud -n 100 -s 512",
		[]string{"UD_SEND_ONLY"}, ipv6),
	pp("rc_pingpong_ipv6_afpacket", "ibv_rc_pingpong -n 100 -s 4096", "pingpong --qp rc -n 100 -s 4096",
		sendFML, ipv6, withLink("afpacket")),
	pt("send_bw_1B", "ib_send_bw", "send_bw", "-s 1 -n 1000", []string{"RC_SEND_ONLY"}),
	pt("send_bw_64k", "ib_send_bw", "send_bw", "-s 65536 -n 500", sendFML),
	pt("send_bw_1M", "ib_send_bw", "send_bw", "-s 1048576 -n 50", sendFML),
	pt("write_bw_1B", "ib_write_bw", "write_bw", "-s 1 -n 1000", []string{"RC_RDMA_WRITE_ONLY"}),
	pt("write_bw_64k", "ib_write_bw", "write_bw", "-s 65536 -n 500", writeFML),
	pt("write_bw_xdp", "ib_write_bw", "write_bw", "-s 65536 -n 500", writeFML, withXDP),
	pt("write_bw_1M", "ib_write_bw", "write_bw", "-s 1048576 -n 50", writeFML),
	pt("read_bw_64", "ib_read_bw", "read_bw", "-s 64 -n 1000", []string{"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_ONLY"}),
	pt("read_bw_1M", "ib_read_bw", "read_bw", "-s 1048576 -n 50", readFML),
	pt("atomic_bw_fadd", "ib_atomic_bw", "atomic_bw", "-A FETCH_AND_ADD -n 500", []string{"RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"}),
	pt("atomic_bw_cswap", "ib_atomic_bw", "atomic_bw", "-A CMP_AND_SWAP -n 500", []string{"RC_COMPARE_SWAP", "RC_ATOMIC_ACKNOWLEDGE"}),
	pt("send_lat", "ib_send_lat", "send_lat", "-s 2 -n 1000", []string{"RC_SEND_ONLY"}),
	pt("send_lat_xdp", "ib_send_lat", "send_lat", "-s 2 -n 1000", []string{"RC_SEND_ONLY"}, withXDP),
	pt("send_lat_4k", "ib_send_lat", "send_lat", "-s 4096 -n 200", sendFML),
	pt("write_lat", "ib_write_lat", "write_lat", "-s 2 -n 1000", []string{"RC_RDMA_WRITE_ONLY"}),
	pt("read_lat", "ib_read_lat", "read_lat", "-s 2 -n 1000", []string{"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_ONLY"}),
	pt("write_lat_4k", "ib_write_lat", "write_lat", "-s 4096 -n 200", writeFML),
	pt("read_lat_4k", "ib_read_lat", "read_lat", "-s 4096 -n 200", readFML),
	pt("send_bw_64k_mtu4096", "ib_send_bw", "send_bw", "-s 65536 -n 500", sendFML, mtu4096),
	pt("write_bw_1M_mtu4096", "ib_write_bw", "write_bw", "-s 1048576 -n 50", writeFML, mtu4096),
	pt("read_bw_64k_mtu4096", "ib_read_bw", "read_bw", "-s 65536 -n 500", readFML, mtu4096),
	pt("write_bw_64k_loss", "ib_write_bw", "write_bw", "-s 65536 -n 500", writeFML, lossy),
	pt("send_bw_64k_loss", "ib_send_bw", "send_bw", "-s 65536 -n 500", sendFML, lossy),
	pt("read_bw_64k_loss", "ib_read_bw", "read_bw", "-s 65536 -n 500", readFML, lossy),
	pt("write_bw_64k_loss_plain", "ib_write_bw", "write_bw", "-s 65536 -n 500", writeFML, lossy, plainIPv4,
		note("goroce without a raw socket (as an ordinary user)")),
	pt("read_bw_64k_plain", "ib_read_bw", "read_bw", "-s 65536 -n 500", readFML, plainIPv4,
		note("goroce without a raw socket (as an ordinary user)")),
	pt("read_bw_xdp_loss", "ib_read_bw", "read_bw", "-s 65536 -n 500", readFML, lossy, withXDP,
		note("loss on the VM's tap, which goroce's AF_XDP frames cross too")),
	pt("write_bw_64k_ipv6", "ib_write_bw", "write_bw", "-s 65536 -n 500", writeFML, ipv6),
	pt("atomic_bw_fadd_loss", "ib_atomic_bw", "atomic_bw", "-A FETCH_AND_ADD -n 2000",
		[]string{"RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"}, lossy,
		note("a repeated atomic is answered from the responder's replay, not executed twice")),
	pt("write_bw_q4", "ib_write_bw", "write_bw", "-q 4 -s 65536 -n 200 --report_gbits", writeFML,
		note("4 QPs: one perftest exchange record per QP")),
	pt("send_bw_q4", "ib_send_bw", "send_bw", "-q 4 -s 16384 -n 200 -t 32 -r 64", sendFML,
		note("4 QPs, TX depth 32, RX depth 64")),
	pt("send_bw_srq", "ib_send_bw", "send_bw", "--use-srq -q 4 -s 16384 -n 200", sendFML,
		note("--use-srq: the receiving side's 4 QPs share one SRQ (local to each side: the wire is plain RC SEND)")),
	pt("write_bw_rate_limit", "ib_write_bw", "write_bw", "--rate_limit=0.05 --rate_limit_type=SW --burst_size=8 -s 16384 -n 400", writeFML,
		note("perftest's SW rate limiter on the sending side: bursts of 8 WRs at 0.05 Gb/s (5.96 MB/sec)")),
	pt("write_bw_reversed", "ib_write_bw", "write_bw", "--reversed -s 65536 -n 300", writeFML,
		note("--reversed: the TCP server writes, the side that dialed is passive and prints the writer's report")),
	pt("send_bw_reversed", "ib_send_bw", "send_bw", "--reversed -q 2 -s 16384 -n 300", sendFML,
		note("--reversed with 2 QPs: the TCP server sends, the side that dialed receives")),
	pt("send_bw_report_both", "ib_send_bw", "send_bw", "-b --report-both -s 4096 -n 300", sendFML,
		note("--report-both: after the sum of -b, each side's own result and the peer's")),
	pt("read_bw_q8", "ib_read_bw", "read_bw", "-q 8 -s 16384 -n 100 -o 2", readFML,
		note("8 QPs of READs, two outstanding each: every QP's responses at once (with perftest's default -o, rxe's responder in the TCG guest drops most of them: 1.3-1.9 MB/s, rxe against rxe too)")),
	pt("send_bw_all", "ib_send_bw", "send_bw", "-a -q 2 -n 5", sendFML,
		note("-a with 2 QPs: every size 2..2^23, a barrier between sizes")),
	pt("read_lat_all", "ib_read_lat", "read_lat", "-a -n 5", readFML,
		note("-a: every size 2..2^23")),
	pt("write_bw_D2", "ib_write_bw", "write_bw", "-D 2 -s 65536", writeFML,
		note("-D: duration mode, the peers end on their own clocks")),
	pt("read_bw_outs2", "ib_read_bw", "read_bw", "-o 2 -s 16384 -n 300", readFML,
		note("-o 2: two outstanding READs per QP, advertised in the exchange")),
	pt("send_bw_bidir", "ib_send_bw", "send_bw", "-b -s 16384 -n 300", sendFML,
		note("-b: both sides send at once and exchange reports")),
	pt("write_bw_bidir", "ib_write_bw", "write_bw", "-b -q 2 -s 65536 -n 200", writeFML,
		note("-b with 2 QPs: both sides write at once")),
	pt("read_bw_bidir", "ib_read_bw", "read_bw", "-b -s 16384 -n 300", readFML,
		note("-b: both sides read at once")),
	pt("atomic_bw_bidir", "ib_atomic_bw", "atomic_bw", "-b -n 500",
		[]string{"RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"}, note("-b: both sides fetch-and-add at once")),
	pt("write_bw_bidir_all", "ib_write_bw", "write_bw", "-b -a -n 5", writeFML,
		note("-b -a: per size a start and an end hand-shake, then the reports")),
	pt("send_bw_bidir_all", "ib_send_bw", "send_bw", "-b -a -n 5", sendFML,
		note("-b -a: per size the receives, a hand-shake, the reports, a hand-shake")),
	pt("send_bw_ud", "ib_send_bw", "send_bw", "-c UD -s 1024 -n 200", []string{"UD_SEND_ONLY"},
		note("-c UD: the GRH scattered first; a burst the guest can queue (what it drops is gone)")),
	pt("send_bw_ud_all", "ib_send_bw", "send_bw", "-c UD -a -n 20", []string{"UD_SEND_ONLY"},
		note("-c UD -a: sizes 2..MTU; perftest shrinks the default size to the MTU")),
	pt("send_lat_ud", "ib_send_lat", "send_lat", "-c UD -s 2 -n 500", []string{"UD_SEND_ONLY"}),
	pt("send_bw_ud_bidir_q2", "ib_send_bw", "send_bw", "-c UD -b -q 2 -s 512 -n 100", []string{"UD_SEND_ONLY"},
		note("-c UD -b -q 2: an address handle per QP, both sides sending")),
	pt("send_bw_uc", "ib_send_bw", "send_bw", "-c UC -s 16384 -n 20",
		[]string{"UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST"},
		note("-c UC: no ACKs; 320 packets, a burst the guest queues: with -n 300 goroce outran rxe, whose server then waited for dropped messages nothing resends")),
	pt("write_bw_uc", "ib_write_bw", "write_bw", "-c UC -s 65536 -n 200",
		[]string{"UC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_LAST"}),
	pt("write_lat_uc", "ib_write_lat", "write_lat", "-c UC -s 2 -n 500", []string{"UC_RDMA_WRITE_ONLY"}),
	pt("send_lat_uc", "ib_send_lat", "send_lat", "-c UC -s 2 -n 500", []string{"UC_SEND_ONLY"}),
	pt("send_lat_D2", "ib_send_lat", "send_lat", "-D 2", []string{"RC_SEND_ONLY"},
		note("-D: latency by duration; both sides print t_avg and round trips per second")),
	pt("read_lat_D2", "ib_read_lat", "read_lat", "-D 2", []string{"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_ONLY"}),
	pt("send_lat_inline", "ib_send_lat", "send_lat", "-s 64 -I 64 -n 500", []string{"RC_SEND_ONLY"},
		note("-I 64: goroce posts inline (the data copied at post time); perftest on rxe says \"Device not recognized to implement inline feature. Disabling it\" and runs with 0; the wire is the same")),
	pt("write_bw_inline", "ib_write_bw", "write_bw", "-s 128 -I 128 -n 2000", []string{"RC_RDMA_WRITE_ONLY"}),
	pt("write_bw_postlist", "ib_write_bw", "write_bw", "-s 4096 -n 2000 -l 4", writeFML,
		note("-l 4: chained lists of 4 WRs (hca.QP.PostSendList), CQ moderation 4; perftest's header says \"Post List\"")),
	pt("send_bw_postlist", "ib_send_bw", "send_bw", "-s 65536 -n 400 -l 8 -Q 4", sendFML),
	pt("write_bw_infinite", "ib_write_bw", "write_bw", "--run_infinitely -D 1", writeFML, interrupt(5),
		note("--run_infinitely: a line a second until SIGINT at 5 s; goroce's client then ends the exchange, so the real server reports; the real client dies of it and goroce's server says so")),
}

// SmokeCases are the cases `make interop-smoke` runs.
var SmokeCases = []string{"rc_pingpong_4k", "ud_pingpong", "write_bw_64k"}

// Subcommands parses `goroce help` output: the words indented under "Commands:".
func Subcommands(help string) map[string]bool {
	subs := map[string]bool{}
	in := false
	re := regexp.MustCompile(`^  ([a-z][a-z0-9-]*)(\s|$)`) // exactly two spaces: deeper lines continue a description
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "Commands:"):
			in = true
		case in && strings.TrimSpace(line) == "":
			if len(subs) > 0 {
				in = false
			}
		case in:
			if m := re.FindStringSubmatch(line); m != nil {
				subs[m[1]] = true
			}
		}
	}
	return subs
}
