package interop

import (
	"bytes"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca/link/tun"
)

func TestMatrixWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Matrix {
		if seen[c.Name] {
			t.Errorf("duplicate case %q", c.Name)
		}
		seen[c.Name] = true
		if c.Subcommand != "pingpong" && c.Subcommand != "bench" {
			t.Errorf("%s: subcommand %q", c.Name, c.Subcommand)
		}
		if !strings.HasPrefix(c.Goroce, c.Subcommand+" ") {
			t.Errorf("%s: goroce command %q does not start with its subcommand", c.Name, c.Goroce)
		}
		if c.MTU != 1024 && c.MTU != 4096 {
			t.Errorf("%s: MTU %d", c.Name, c.MTU)
		}
		if len(c.Opcodes) == 0 {
			t.Errorf("%s: no expected opcodes", c.Name)
		}
		for _, d := range Directions {
			if !c.Applies(d) {
				continue
			}
			srv, cli := c.Commands(d, "/x.pcap")
			for _, e := range []Endpoint{srv, cli} {
				if e.Where != "guest" && e.Where != "host" {
					t.Errorf("%s %s: where %q", c.Name, d, e.Where)
				}
				if e.Where == "host" && !strings.HasPrefix(e.Cmd, "goroce ") {
					t.Errorf("%s %s: host command %q is not goroce", c.Name, d, e.Cmd)
				}
				if e.Where == "guest" && !strings.HasPrefix(e.Cmd, "timeout ") {
					t.Errorf("%s %s: guest command %q not under timeout(1)", c.Name, d, e.Cmd)
				}
			}
		}
	}
	for _, n := range SmokeCases {
		if !seen[n] {
			t.Errorf("smoke case %q is not in Matrix", n)
		}
	}
}

// TestMatrixCoverage pins what the issue asks the matrix to cover.
func TestMatrixCoverage(t *testing.T) {
	var tools, goroce, all strings.Builder
	mtu := map[int]bool{}
	loss := map[string]bool{}
	for _, c := range Matrix {
		tools.WriteString(c.Tool + "\n")
		goroce.WriteString(c.Goroce + " --link " + c.link() + "\n")
		mtu[c.MTU] = true
		if c.Loss {
			loss[c.Subcommand] = true
		}
		all.WriteString(strings.Join(c.Opcodes, " ") + "\n")
	}
	for _, want := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong",
		"ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw -A FETCH_AND_ADD", "ib_atomic_bw -A CMP_AND_SWAP",
		"ib_send_lat", "ib_write_lat", "ib_read_lat", "-s 1 ", "-s 1048576"} {
		if !strings.Contains(tools.String(), want) {
			t.Errorf("no tool command contains %q", want)
		}
	}
	for _, want := range []string{"--qp rc", "--qp uc", "--qp ud", "--srq 4", "--link udp", "--link afpacket",
		"--link tun", "--link tap", " -p ", " -i ", " -s ", " -n ", " -g ", " -m ", " -l ", " -e", " -r ",
		"bench send_bw", "bench write_bw", "bench read_bw", "bench atomic_bw", "bench send_lat", "bench write_lat", "bench read_lat"} {
		if !strings.Contains(goroce.String(), want) {
			t.Errorf("no goroce command contains %q", want)
		}
	}
	if !mtu[1024] || !mtu[4096] {
		t.Errorf("MTUs covered: %v, want 1024 and 4096", mtu)
	}
	if !loss["pingpong"] || !loss["bench"] {
		t.Errorf("loss cases for %v, want pingpong and bench", loss)
	}
	for _, op := range []string{"_FIRST", "_MIDDLE", "_LAST", "RC_FETCH_ADD", "RC_COMPARE_SWAP", "UD_SEND_ONLY"} {
		if !strings.Contains(all.String(), op) {
			t.Errorf("no case expects %s packets", op)
		}
	}
}

func TestCommands(t *testing.T) {
	var rc, bw Case
	for _, c := range Matrix {
		switch c.Name {
		case "rc_pingpong_4k":
			rc = c
		case "write_bw_1M":
			bw = c
		}
	}
	tests := []struct {
		c        Case
		d        Direction
		srv, cli Endpoint
	}{
		{rc, GoroceToRxe,
			Endpoint{"guest", "timeout 120 ibv_rc_pingpong -n 100 -s 4096 -m 1024 -d rxe0 -g 1", 0},
			Endpoint{"host", "goroce pingpong --qp rc -n 100 -s 4096 -m 1024 --link udp --addr 10.66.0.1 --pcap /p 10.66.0.2", 0}},
		{rc, RxeToGoroce,
			Endpoint{"host", "goroce pingpong --qp rc -n 100 -s 4096 -m 1024 --link udp --addr 10.66.0.1 --pcap /p", 0},
			Endpoint{"guest", "timeout 120 ibv_rc_pingpong -n 100 -s 4096 -m 1024 -d rxe0 -g 1 10.66.0.1", 0}},
		{rc, RxeToRxe,
			Endpoint{"guest", "timeout 120 ibv_rc_pingpong -n 100 -s 4096 -m 1024 -d rxev2 -g 1", 0},
			Endpoint{"guest", "timeout 120 ibv_rc_pingpong -n 100 -s 4096 -m 1024 -d rxev1 -g 1 10.99.0.2", 0}},
		{bw, GoroceToRxe,
			Endpoint{"guest", "timeout 120 ib_write_bw -s 1048576 -n 50 -d rxe0 -x 1 -F", 0},
			Endpoint{"host", "goroce bench write_bw -s 1048576 -n 50 --link udp --addr 10.66.0.1 --pcap /p 10.66.0.2", 0}},
	}
	for _, tt := range tests {
		srv, cli := tt.c.Commands(tt.d, "/p")
		if srv != tt.srv || cli != tt.cli {
			t.Errorf("%s %s:\n got %+v\n     %+v\nwant %+v\n     %+v", tt.c.Name, tt.d, srv, cli, tt.srv, tt.cli)
		}
	}
	tap := Case{Name: "x", Tool: "ibv_rc_pingpong", Goroce: "pingpong --qp rc", Link: "tap"}
	srv, cli := tap.Commands(RxeToGoroce, "")
	// The tool's TCP exchange goes to the netns kernel; the RDMA traffic to goroce's GID.
	if srv.Cmd != "goroce pingpong --qp rc --link tap --dev gritap1 --addr 10.66.0.3" || !strings.HasSuffix(cli.Cmd, " 10.66.0.1") {
		t.Errorf("tap link: %q / %q", srv.Cmd, cli.Cmd)
	}
	tun := Case{Name: "x", Tool: "ibv_rc_pingpong", Goroce: "pingpong --qp rc", Link: "tun"}
	srv, cli = tun.Commands(RxeToGoroce, "")
	if srv.Cmd != "goroce pingpong --qp rc --link tun --dev gritun1 --addr 10.66.1.3" || !strings.HasSuffix(cli.Cmd, " 10.66.0.1") {
		t.Errorf("tun link: %q / %q", srv.Cmd, cli.Cmd)
	}
	srv, cli = tun.Commands(GoroceToRxe, "")
	if cli.Cmd != "goroce pingpong --qp rc --link tun --dev gritun1 --addr 10.66.1.3 10.66.0.2" {
		t.Errorf("tun link, goroce client: %q", cli.Cmd)
	}
	if tap.Applies(RxeToRxe) {
		t.Error("a non-UDP link case must not repeat the rxe↔rxe baseline")
	}
	// IPv6: the tools use the IPv6 GID index and goroce the IPv6 address; the TCP
	// exchange stays on the IPv4 addresses.
	v6 := Case{Name: "x", Tool: "ib_write_bw -s 65536", Goroce: "bench write_bw -s 65536", Perftest: true, IPv6: true}
	srv, cli = v6.Commands(GoroceToRxe, "")
	if srv.Cmd != "timeout 120 ib_write_bw -s 65536 -d rxe0 -x 2 -F" || cli.Cmd != "goroce bench write_bw -s 65536 --link udp --addr fd66::1 10.66.0.2" {
		t.Errorf("IPv6: %q / %q", srv.Cmd, cli.Cmd)
	}
	v6.Link = "afpacket"
	srv, _ = v6.Commands(RxeToGoroce, "")
	if srv.Cmd != "goroce bench write_bw -s 65536 --link afpacket --dev gribr0 --addr fd66::1" {
		t.Errorf("IPv6 afpacket: %q", srv.Cmd)
	}
	x := Case{Name: "x", Tool: "ib_send_lat -s 2", Goroce: "bench send_lat -s 2", Perftest: true}
	withXDP(&x)
	srv, _ = x.Commands(RxeToGoroce, "")
	if srv.Cmd != "goroce bench send_lat -s 2 --link afpacket --dev gribr0 --addr 10.66.0.1 --xdp generic" || x.Applies(RxeToRxe) {
		t.Errorf("XDP: %q (rxe↔rxe baseline %v)", srv.Cmd, x.Applies(RxeToRxe))
	}
	v6.Link = ""
	if v6.Applies(RxeToRxe) {
		t.Error("an IPv6 case has no rxe↔rxe baseline (the veth pair is IPv4 only)")
	}
	// --run_infinitely: the client is interrupted, goroce by the harness, the tool by
	// timeout(1), whose --preserve-status passes on the tool's own death by SIGINT.
	inf := Case{Name: "x", Tool: "ib_write_bw --run_infinitely", Goroce: "bench write_bw --run_infinitely", Perftest: true, Interrupt: 5}
	srv, cli = inf.Commands(GoroceToRxe, "")
	if srv.Interrupt != 0 || cli.Interrupt != 5 || cli.Where != "host" || srv.Cmd != "timeout 120 ib_write_bw --run_infinitely -d rxe0 -x 1 -F" {
		t.Errorf("interrupted goroce client: %+v / %+v", srv, cli)
	}
	srv, cli = inf.Commands(RxeToGoroce, "")
	if srv.Interrupt != 0 || cli.Cmd != "timeout --preserve-status -s INT 5 ib_write_bw --run_infinitely -d rxe0 -x 1 -F 10.66.0.1" {
		t.Errorf("interrupted tool client: %+v / %+v", srv, cli)
	}
	if inf.Applies(RxeToRxe) {
		t.Error("an interrupted case has no rxe↔rxe baseline (the tool's server fails when its client dies)")
	}
}

func TestSubcommands(t *testing.T) {
	help := "Usage: goroce <command> [flags] [arguments]\n\nCommands:\n  pcap       verify RoCE/IB captures\n" +
		"             continuation line\n  pingpong   like ibv_rc_pingpong\n  help       show this list\n\nRun `goroce <command> --help`.\n  notacommand here\n"
	got := Subcommands(help)
	for _, w := range []string{"pcap", "pingpong", "help"} {
		if !got[w] {
			t.Errorf("missing %q in %v", w, got)
		}
	}
	if got["bench"] || got["continuation"] || got["notacommand"] || len(got) != 3 {
		t.Errorf("Subcommands = %v, want exactly pcap pingpong help", got)
	}
	if len(Subcommands("")) != 0 {
		t.Error("empty help must yield no subcommands")
	}
}

func TestResultsRoundTripAndExitCode(t *testing.T) {
	rows := []Row{
		{"boot", "-", Pass, 43.8, "tcg"},
		{"rc_pingpong_4k", GoroceToRxe.String(), NotRun, 0, "not run: goroce has no `pingpong` subcommand yet"},
		{"rc_pingpong_4k", RxeToRxe.String(), Pass, 7.25, "a\tb\nc"},
	}
	var buf bytes.Buffer
	if err := WriteTSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].Detail != "a b c" || got[2].Seconds != 7.2 && got[2].Seconds != 7.3 || got[1].Result != NotRun {
		t.Fatalf("round trip: %+v", got)
	}
	baseFail := Row{"write_bw_64k", RxeToRxe.String(), Fail, 12, "server exit 1"}
	baseNotRun := Row{"write_bw_64k", RxeToRxe.String(), NotRun, 0, "not run: GOROCE_INTEROP_BASELINE=0"}
	goroceFail := Row{"write_bw_64k", RxeToGoroce.String(), Fail, 12, "server exit 1"}
	tests := []struct {
		name string
		rows []Row
		want int
	}{
		{"all pass", rows[:1], ExitPass},
		{"not run", rows, ExitNotRun},
		{"fail wins", append(append([]Row(nil), rows...), Row{Case: "x", Result: Fail}), ExitFail},
		{"nothing", nil, ExitHarness},
		{"baseline fail is informational", []Row{rows[0], baseFail}, ExitPass},
		{"baseline not run is informational", []Row{rows[0], baseNotRun}, ExitPass},
		{"baseline fail, goroce not run", []Row{rows[0], baseFail, rows[1]}, ExitNotRun},
		{"goroce fail with baseline pass", []Row{rows[0], rows[2], goroceFail}, ExitFail},
		{"goroce fail with baseline fail", []Row{rows[0], baseFail, goroceFail}, ExitFail},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.rows); got != tt.want {
			t.Errorf("%s: ExitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
	if _, err := ReadTSV(strings.NewReader("a\tb\tmaybe\t1\tx\n")); err == nil {
		t.Error("unknown result must be an error")
	}
	if _, err := ReadTSV(strings.NewReader("a\tb\n")); err == nil {
		t.Error("short line must be an error")
	}
	table := FormatTable(rows)
	for _, w := range []string{"case", "direction", "result", "seconds", "goroce→rxe", "not run", "1 passed, 0 failed, 1 not run",
		"[baseline, informational] a b c", "rxe↔rxe baseline, informational (kernel against kernel, not in the exit code): 1 passed, 0 failed, 0 not run"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	// columns line up although the arrows are multi-byte
	lines := strings.Split(table, "\n")
	bar := strings.IndexRune(lines[0], '|')
	for _, l := range lines[2:5] {
		if i := strings.IndexRune(l, '|'); len([]rune(l[:i])) != bar {
			t.Errorf("misaligned row %q", l)
		}
	}
}

// TestBaselineTable: a failed rxe↔rxe row shows as "fail" in the table, marked informational,
// and is counted apart from the goroce rows.
func TestBaselineTable(t *testing.T) {
	rows := []Row{
		{"write_bw_64k", GoroceToRxe.String(), Pass, 5, "ok"},
		{"write_bw_64k", RxeToGoroce.String(), Pass, 5, "ok"},
		{"write_bw_64k", RxeToRxe.String(), Fail, 9, "server exit 1, client exit 0"},
	}
	table := FormatTable(rows)
	for _, w := range []string{"| fail   |", "[baseline, informational] server exit 1", "2 passed, 0 failed, 0 not run\n",
		"(kernel against kernel, not in the exit code): 0 passed, 1 failed, 0 not run\n"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	if strings.Contains(FormatTable(rows[:2]), BaselineLabel) {
		t.Error("a table without baseline rows must not mention them")
	}
	if got := ExitCode(rows); got != ExitPass {
		t.Errorf("ExitCode = %d, want %d (baseline informational)", got, ExitPass)
	}
}

// TestTapMAC: the guest's static neighbour for the tap host must be the MAC goroce's tap link
// really uses (hca/link/tun.DefaultHardwareAddr), or the guest's frames never reach goroce.
func TestTapMAC(t *testing.T) {
	if got := tun.DefaultHardwareAddr(netip.MustParseAddr(TapIP)).String(); got != TapMAC {
		t.Errorf("tun.DefaultHardwareAddr(%s) = %s, TapMAC = %s", TapIP, got, TapMAC)
	}
}

// TestScriptsAgreeWithMatrix keeps lib.sh and the guest overlay in step with the constants
// the driver uses.
func TestScriptsAgreeWithMatrix(t *testing.T) {
	lib, err := os.ReadFile("lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	veth, err := os.ReadFile("guest/usr/local/bin/rxe-veth-pair")
	if err != nil {
		t.Fatal(err)
	}
	up, err := os.ReadFile("up.sh")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		file []byte
		re   string
	}{
		{lib, `NETNS=\$\{GOROCE_INTEROP_NETNS:-` + NetNS + `\}`},
		{lib, `BR=\$\{GOROCE_INTEROP_BRIDGE:-` + Bridge + `\}`},
		{lib, `NET_PREFIX=\$\{GOROCE_INTEROP_NET:-10\.66\.0\}`},
		{veth, `A=` + regexp.QuoteMeta(VethCliIP) + ` B=` + regexp.QuoteMeta(VethSrvIP)},
		// the per-case gritap1 must not change the bridge's MAC under the guest's ARP entry
		{up, `(?m)^ip -n "\$NETNS" link set "\$BR" address "\$BR_MAC"$`},
		{lib, `(?m)^BR_MAC=\$\{GOROCE_INTEROP_BRIDGE_MAC:-02:[0-9a-f:]{14}\}`},
	}
	for _, c := range checks {
		if !regexp.MustCompile(c.re).Match(c.file) {
			t.Errorf("script does not match %s", c.re)
		}
	}
	if !strings.HasPrefix(HostIP, "10.66.0.") || !strings.HasPrefix(GuestIP, "10.66.0.") || !strings.HasPrefix(TapIP, "10.66.0.") {
		t.Error("HostIP/GuestIP/TapIP must be in lib.sh's NET_PREFIX")
	}
}
