package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image"
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "write"},
		{"bench", "write_bw", "h1", "h2"},
		{"bench", "write_bw", "-m", "1000"},
		{"bench", "write_bw", "-s", "-4"},
		{"bench", "write_bw", "-q", "0", "--loopback", "-n", "x"},
		{"bench", "write_bw", "--bogus"},
		{"bench", "write_bw", "--json", "--csv", "--loopback"},
		{"bench", "write_bw", "--loopback", "127.0.0.1"},
		{"bench", "write_bw", "--ceiling"},
		{"bench", "send_lat", "--loopback", "--ceiling"},
		{"bench", "atomic_bw", "-A", "SWAP"},
		{"bench", "atomic_bw", "-a"},
		{"bench", "write_bw", "-a", "-D", "1"},
		{"bench", "write_bw", "-D", "-1"},
		{"bench", "write_bw", "-u", "40"},
		{"bench", "write_bw", "-p", "70000"},
		{"bench", "send_lat", "-q", "2", "--loopback", "--max_size", "3"},
		{"bench", "write_bw", "--loopback", "--addr", "127.0.0.5"},
		{"bench", "write_bw", "--link", "carrier-pigeon"},
		{"bench", "write_bw", "-i", "2"},
		{"bench", "send_bw", "-c", "XRC"},
		{"bench", "read_bw", "-c", "UC"},
		{"bench", "write_lat", "-c", "UD"},
		{"bench", "send_lat", "-e", "--busy-poll"},
		{"bench", "write_bw", "-T", "256"},
		{"bench", "write_bw", "-S", "16"},
		{"bench", "read_bw", "-o", "-1"},
		{"bench", "send_lat", "--run_infinitely"},
		{"bench", "send_bw", "-b", "--run_infinitely"},
		{"bench", "write_bw", "-a", "--run_infinitely"},
		{"bench", "write_bw", "-l", "3", "-n", "1000"},
		{"bench", "send_lat", "-l", "2"},
		{"bench", "write_bw", "--output=latency"},
		{"bench", "send_lat", "--output=bandwidth"},
		{"bench", "send_bw", "--output=bytes"},
		{"bench", "write_bw", "--output=bandwidth", "--json"},
		{"bench", "write_bw", "-H"},
		{"bench", "write_bw", "-R"},
		{"bench", "send_bw", "--rdma_cm", "--loopback"},
		{"bench", "write_bw", "--rate_limit=5", "--rate_limit_type=HW"},
		{"bench", "write_bw", "--rate_limit=5", "--rate_limit_type=PP"},
		{"bench", "write_bw", "--rate_limit=5", "--rate_limit_type=sw"},
		{"bench", "write_bw", "--rate_limit_type=SW"},
		{"bench", "write_bw", "--burst_size", "4"},
		{"bench", "write_bw", "--rate_limit=5", "--rate_units", "G"},
		{"bench", "send_lat", "--rate_limit=5"},
		{"bench", "atomic_bw", "--rate_limit=5"},
		{"bench", "send_bw", "-b", "--rate_limit=5"},
		{"bench", "write_bw", "--pkey_index", "1"},
		{"bench", "send_lat", "-w", "10"},
		{"bench", "write_bw", "-y", "-1"},
		{"bench", "read_bw", "--report-unsorted"},
		// Flags perftest's parser refuses in the mode, which the run
		// would otherwise ignore (-n 10: a short run if it went ahead).
		{"bench", "write_bw", "--loopback", "-n", "10", "-A", "CMP_AND_SWAP"},
		{"bench", "send_lat", "--loopback", "-n", "10", "-A", "FETCH_AND_ADD"},
		{"bench", "write_bw", "--loopback", "-n", "10", "-o", "4"},
		{"bench", "send_bw", "--loopback", "-n", "10", "--outs", "2"},
		{"bench", "read_bw", "--loopback", "-n", "10", "-I", "64"},
		{"bench", "atomic_bw", "--loopback", "-n", "10", "--inline_size", "8"},
		{"bench", "send_lat", "--loopback", "-n", "10", "-N"},
		{"bench", "read_lat", "--loopback", "-n", "10", "--noPeak"},
		{"bench", "read_bw", "--loopback", "-n", "10", "-r", "64"},
		{"bench", "atomic_bw", "--loopback", "-n", "10", "-r", "2"},
		// Explicit zeros are refused, as perftest does, rather than read
		// as "the default".
		{"bench", "write_bw", "--loopback", "-s", "0"},
		{"bench", "write_bw", "--loopback", "-n", "0"},
		{"bench", "write_bw", "--loopback", "-q", "0"},
		{"bench", "write_bw", "--loopback", "-t", "0"},
		{"bench", "send_bw", "--loopback", "-r", "0"},
		{"bench", "write_bw", "--loopback", "-Q", "0"},
		{"bench", "write_bw", "--loopback", "-D", "0"},
		{"bench", "write_bw", "--loopback", "-x", "-1"},
	} {
		st, out, errOut := runCLI(args...)
		if st != exitUsage {
			t.Errorf("%q: status %d, want %d (usage)\nstdout: %s\nstderr: %s", args, st, exitUsage, out, errOut)
		}
		if errOut == "" {
			t.Errorf("%q: nothing on stderr", args)
		}
		if strings.Contains(errOut, "goroce bench: bench: ") {
			t.Errorf("%q: the package named twice: %s", args, errOut)
		}
	}
	if st, out, _ := runCLI("bench", "-V"); st != exitOK || out != "Version: 6.06\n" {
		t.Errorf("bench -V: status %d, %q", st, out)
	}
	// perftest's spellings are accepted: -c rc, -i 1, -e, -N.
	var o benchOpts
	fs := benchFlags(&o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"-c", "rc", "-i", "1", "-e", "-N", "-T", "104", "-S", "3", "--outs", "4"}); err != nil ||
		o.conn != "rc" || o.ibPort != 1 || !o.events || !o.p.NoPeak || o.tos != 104 || o.sl != 3 || o.p.OutReads != 4 {
		t.Errorf("perftest flags: %v, %+v", err, o)
	}
	st, out, _ := runCLI("bench", "--help")
	if st != exitOK || !strings.Contains(out, "MODE is one of: send_bw write_bw read_bw atomic_bw send_lat write_lat read_lat") ||
		!strings.Contains(out, "--link") || !strings.Contains(out, "-report_gbits") {
		t.Errorf("bench --help: status %d\n%s", st, out)
	}
}

// The values perftest's parser refuses (CHECK_VALUE_IN_RANGE and its
// bounds in perftest_parameters.h; -S and -i check by hand) goroce bench
// refuses too, naming the flag and the range, rather than run with them.
// --ceiling without --loopback is refused after the flags' values, so a
// value that slipped through ends in another usage message, not a run.
func TestBenchPerftestRanges(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-n", "4"}, "-n 4: Iteration num should be between 5 and 100000000"},
		{[]string{"-n", "100000001"}, "-n 100000001: Iteration num should be between 5 and 100000000"},
		{[]string{"-n", "0"}, "-n 0: Iteration num should be between 5 and 100000000"},
		{[]string{"-n", "-5"}, "-n -5: Iteration num should be between 5 and 100000000"},
		{[]string{"-t", "0"}, "-t 0: Tx depth should be between 1 and 15000"},
		{[]string{"-t", "15001"}, "-t 15001: Tx depth should be between 1 and 15000"},
		{[]string{"-r", "0"}, "-r 0: Rx depth should be between 1 and 16384"},
		{[]string{"-r", "16385"}, "-r 16385: Rx depth should be between 1 and 16384"},
		{[]string{"-Q", "0"}, "-Q 0: CQ moderation should be between 1 and 1024"},
		{[]string{"-Q", "1025"}, "-Q 1025: CQ moderation should be between 1 and 1024"},
		{[]string{"-x", "65"}, "-x 65: Gid index should be between 0 and 64"},
		{[]string{"-x", "-1"}, "-x -1: not a GID index"},
		{[]string{"-S", "-1"}, `-S -1: Service Level should be between 0 and 15 (perftest: "Only 15 Service levels")`},
		{[]string{"-S", "16"}, `-S 16: Service Level should be between 0 and 15 (perftest: "Only 15 Service levels")`},
		{[]string{"--sl", "16"}, `--sl 16: Service Level should be between 0 and 15 (perftest: "Only 15 Service levels")`},
		{[]string{"-T", "-1"}, "-T -1: TOS should be between 0 and 255"},
		{[]string{"-T", "256"}, "-T 256: TOS should be between 0 and 255"},
		{[]string{"--tos", "256"}, "--tos 256: TOS should be between 0 and 255"},
		{[]string{"-i", "0"}, "-i 0: IB Port can't be less than 1"},
		{[]string{"--ib-port", "0"}, "--ib-port 0: IB Port can't be less than 1"},
		{[]string{"-i", "4"}, "-i 4: goroce devices have one port, 1"},
	} {
		wantBenchUsage(t, append([]string{"bench", "send_bw", "--ceiling"}, c.args...), c.msg+"\n")
	}
}

// -e (sleep on CQ events) where perftest refuses it: in its parser on the
// WRITE verb, in force_dependecies with -D and --run_infinitely. goroce
// bench would otherwise run the test blocking in CQ.Wait. --ceiling
// without --loopback is refused later, as above.
func TestBenchEventsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"write_bw", "-e"}, "-e: Events feature not available on WRITE verb"},
		{[]string{"write_lat", "--events"}, "--events: Events feature not available on WRITE verb"},
		{[]string{"send_bw", "-e", "-D", "2"}, "-e with -D: Duration mode doesn't work with events."},
		{[]string{"send_lat", "--events", "-D", "2"}, "-e with -D: Duration mode doesn't work with events."},
		{[]string{"send_bw", "-e", "--run_infinitely"}, "-e with --run_infinitely: run_infinitely does not support events feature yet."},
		{[]string{"read_bw", "-e", "--run_infinitely", "-D", "2"}, "-e with -D: Duration mode doesn't work with events."},
	} {
		wantBenchUsage(t, append(append([]string{"bench"}, c.args...), "--ceiling"), c.msg+"\n")
	}
	// In the other modes perftest takes -e, and so does modeFlag.
	for _, m := range []bench.Mode{bench.ModeSendBW, bench.ModeSendLat, bench.ModeReadBW, bench.ModeReadLat, bench.ModeAtomicBW} {
		var o benchOpts
		fs := benchFlags(&o)
		fs.SetOutput(io.Discard)
		if err := fs.Parse([]string{"-e", "-n", "5"}); err != nil {
			t.Fatal(err)
		}
		if msg := modeFlag(fs, m); msg != "" {
			t.Errorf("%v -e refused: %s", m, msg)
		}
	}
}

// The bounds themselves pass the check of the flags' values (a run with
// them is left to the tests that run: -n 5 ... -x 64 need no network).
func TestBenchPerftestRangeBounds(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "5"}, {"-n", "100000000"},
		{"-t", "1"}, {"-t", "15000"},
		{"-r", "1"}, {"-r", "16384"},
		{"-Q", "1"}, {"-Q", "1024"},
		{"-x", "0"}, {"-x", "64"},
		{"-S", "0"}, {"-S", "15"}, {"--sl", "15"},
		{"-T", "0"}, {"-T", "255"}, {"--tos", "255"}, {"--tclass", "255"},
		{"-i", "1"}, {"--ib-port", "1"},
		{"-s", "1"}, {"-q", "1"}, {"-D", "1"},
	} {
		var o benchOpts
		fs := benchFlags(&o)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if msg := badValue(fs); msg != "" {
			t.Errorf("%q refused: %s", args, msg)
		}
	}
}

// runLoopbackCLI runs goroce with args in a fresh network namespace
// (inNetNS: root only) and fails the test unless it exits 0.
func runLoopbackCLI(t *testing.T, args ...string) (out, errOut string) {
	t.Helper()
	var st int
	inNetNS(t, func() { st, out, errOut = runCLI(args...) })
	if st != exitOK {
		t.Fatalf("status %d\n%s\n%s", st, out, errOut)
	}
	return out, errOut
}

// inNetNS runs f on a thread inside a fresh network namespace with lo up:
// goroce bench's sockets (UDP 4791 on 127.0.0.1/.2, TCP 18515) are created
// there, so the test neither disturbs nor is disturbed by the host. It
// skips unless root.
func inNetNS(t *testing.T, fs ...func()) {
	t.Helper()
	netcfg.SkipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatalf("network namespace: %v", err)
	}
	defer ns.Close()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() {
			if err := ns.Do(func() error { f(); return nil }); err != nil {
				t.Errorf("entering the namespace: %v", err)
			}
		})
	}
	wg.Wait()
}

func TestBenchLoopbackJSON(t *testing.T) {
	out, _ := runLoopbackCLI(t, "bench", "write_bw", "--loopback", "-n", "200", "-s", "16384", "-q", "2", "--json", "--ceiling")
	var j bench.JSONReport
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if j.Mode != "write_bw" || j.Role != "client" || j.QPs != 2 || len(j.Results) != 1 || j.MTU != 4096 {
		t.Fatalf("%+v", j)
	}
	r := j.Results[0]
	if r.Bytes != 16384 || r.Iterations != 200 || r.Messages != 400 || !(r.BWAvgMBps > 0) {
		t.Fatalf("result %+v", r)
	}
	if j.CeilingRatio == nil || !(*j.CeilingRatio > 0) || j.Ceiling == nil || j.Ceiling.Delivered == 0 || j.Ceiling.Payload != 4096 {
		t.Fatalf("ceiling %v %+v", j.CeilingRatio, j.Ceiling)
	}
	if j.LinkCeilingRatio == nil || !(*j.LinkCeilingRatio > 0) || j.LinkCeiling == nil || j.LinkCeiling.Method != "link" || j.Ceiling.Method != "udp-blast" {
		t.Fatalf("link ceiling %v %+v", j.LinkCeilingRatio, j.LinkCeiling)
	}
	if !strings.Contains(out, `"ceiling_ratio":`) {
		t.Fatal("no ceiling_ratio field")
	}
	// The shaped ceiling: the raw blast with the four packets of a 16 KiB
	// RDMA WRITE (the first with its RETH), counted in messages.
	sc := j.ShapedCeiling
	if sc == nil || sc.Method != "udp-blast-shaped" || !slices.Equal(sc.MessageShape, []int{4128, 4112, 4112, 4112}) ||
		sc.Payload != 16384 || sc.Delivered == 0 || sc.PacketBytes != 4128+3*4112+4*28 {
		t.Fatalf("shaped ceiling %+v", sc)
	}
	if j.ShapedCeilingRatio == nil || !(*j.ShapedCeilingRatio > 0) || j.ShapedOfRaw == nil ||
		*j.ShapedOfRaw != sc.PayloadBytesPerSec/j.Ceiling.PayloadBytesPerSec {
		t.Fatalf("shaped ratios %v %v", j.ShapedCeilingRatio, j.ShapedOfRaw)
	}
	// 200 WRITEs of 4 packets on each of 2 QPs, at least (retransmissions
	// count too).
	if j.TransportQPs != 2 || j.Transport["tx_packets"] < 1600 || len(j.Transport) != len((&bench.Report{}).TransportCounters()) {
		t.Errorf("transport counters over %d QPs: %v", j.TransportQPs, j.Transport)
	}
	if j.ICRC != wire.CRCImplementation() {
		t.Errorf("icrc_implementation %q, want this process's %q", j.ICRC, wire.CRCImplementation())
	}
	// The raw ceiling: the better of the blasts before and after the run,
	// each the median of its slices.
	c := j.Ceiling
	if len(c.Blasts) != 2 || c.PayloadBytesPerSec != max(c.Blasts[0], c.Blasts[1]) || c.Slices == 0 || !(c.AveragePacketsPerSec > 0) {
		t.Fatalf("raw ceiling %+v", c)
	}
}

// --qp-counters prints the side's transport counters on stderr, after the
// results on stdout.
func TestBenchQPCounters(t *testing.T) {
	out, errOut := runLoopbackCLI(t, "bench", "send_bw", "--loopback", "-n", "100", "-s", "4096", "--qp-counters")
	m := regexp.MustCompile(`transport counters \(1 QP\): tx_packets=(\d+) rx_packets=\d+ go_back_retries=\d+ local_ack_timeouts=\d+ `).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no counters line on stderr:\n%s", errOut)
	}
	if n, _ := strconv.Atoi(m[1]); n < 100 {
		t.Fatalf("tx_packets=%d, want at least the 100 SENDs", n)
	}
	if strings.Contains(out, "transport counters") {
		t.Fatal("counters on stdout, which carries perftest's layout")
	}
}

// --run_infinitely prints a line per -D interval until the client is
// told to stop (SIGINT; here the test's stand-in), then ends cleanly.
func TestBenchRunInfinitely(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	stop := make(chan struct{})
	old := stopOnSignal
	stopOnSignal = func() (<-chan struct{}, func()) { return stop, func() {} }
	defer func() { stopOnSignal = old }()
	timer := time.AfterFunc(2500*time.Millisecond, func() { close(stop) })
	defer timer.Stop()
	out, _ := runLoopbackCLI(t, "bench", "send_bw", "--loopback", "--run_infinitely", "-D", "1", "-s", "4096", "--csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	// A header, two whole seconds, the half second to the stop.
	if err != nil || len(rows) != 4 {
		t.Fatalf("csv %q: %v; want a header and 3 intervals", rows, err)
	}
	for _, r := range rows[1:] {
		if r[0] != "send_bw" || r[1] != "4096" || r[2] == "0" {
			t.Fatalf("interval row %q", r)
		}
	}
}

// --output=UNITS prints one figure per result and nothing else, as
// perftest's does: scripts read it with a plain float parse.
func TestBenchOutput(t *testing.T) {
	for _, c := range []struct {
		args  []string
		lines int
	}{
		{[]string{"write_bw", "-n", "200", "--output=bandwidth"}, 1},
		{[]string{"write_bw", "-n", "200", "--output=bandwidth", "--report_gbits"}, 1},
		{[]string{"send_bw", "-a", "--max_size", "64", "-n", "100", "--output=message_rate"}, 6},
		{[]string{"send_lat", "-n", "100", "-F", "--output=latency"}, 1},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, _ := runLoopbackCLI(t, append([]string{"bench"}, append(c.args, "--loopback")...)...)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != c.lines {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), c.lines, out)
			}
			for _, l := range lines {
				if !regexp.MustCompile(`^\d+\.\d{6}$`).MatchString(l) {
					t.Fatalf("line %q is not perftest's %%lf", l)
				}
				if v, _ := strconv.ParseFloat(l, 64); !(v > 0) {
					t.Fatalf("figure %q, want > 0", l)
				}
			}
		})
	}
}

// -U and -H print every sample before the result line, in the order
// measured and sorted without the two largest, then the table head again,
// as perftest's print_report_lat.
func TestBenchLatencySamples(t *testing.T) {
	out, _ := runLoopbackCLI(t, "bench", "send_lat", "--loopback", "-n", "40", "-F", "-U", "--report-histogram")
	parts := strings.Split(out, "#, usec\n")
	if len(parts) != 3 {
		t.Fatalf("want two sample lists:\n%s", out)
	}
	read := func(list string) []float64 {
		var v []float64
		for i, l := range strings.Split(strings.TrimSuffix(list, "\n"), "\n") {
			if strings.HasPrefix(l, "---") {
				break
			}
			n, x, ok := strings.Cut(l, ", ")
			f, err := strconv.ParseFloat(x, 64)
			if !ok || n != strconv.Itoa(i+1) || err != nil || !(f > 0) {
				t.Fatalf("sample line %q", l)
			}
			v = append(v, f)
		}
		return v
	}
	unsorted, sorted := read(parts[1]), read(parts[2])
	if len(unsorted) != 40 || len(sorted) != 38 {
		t.Fatalf("%d unsorted and %d sorted samples, want 40 and 38", len(unsorted), len(sorted))
	}
	if !slices.IsSorted(sorted) {
		t.Fatalf("-H samples not sorted: %v", sorted)
	}
	u := slices.Clone(unsorted)
	slices.Sort(u)
	if !slices.Equal(u[:38], sorted) {
		t.Fatalf("-H is not -U sorted without the two largest:\n%v\n%v", unsorted, sorted)
	}
	if !strings.Contains(parts[2], bench.ResultLine+"\n #bytes #iterations    t_min[usec]") || !regexp.MustCompile(`(?m)^ 2       40 `).MatchString(parts[2]) {
		t.Fatalf("no table head and result after the samples:\n%s", parts[2])
	}
}

// A perftest flag goroce bench does not implement is named as such, not
// reported as an unknown flag.
func TestBenchPerftestOnlyFlags(t *testing.T) {
	for _, args := range [][]string{{"-R"}, {"--rdma_cm"}, {"--typical_pkt_size", "64"}, {"--report-per-port"}, {"-M", "ff0e::1"}} {
		st, out, errOut := runCLI(append([]string{"bench", "send_bw", "--loopback"}, args...)...)
		if st != exitUsage || !strings.Contains(errOut, "is not implemented by goroce bench") || strings.Contains(errOut, "not defined") {
			t.Errorf("%v: status %d\n%s%s", args, st, out, errOut)
		}
	}
}

// --use-srq: the SEND tests receive through one SRQ, as the header says;
// another mode refuses it.
func TestBenchUseSRQ(t *testing.T) {
	var st int
	var out, errOut string
	inNetNS(t, func() {
		st, out, errOut = runCLI("bench", "send_bw", "--loopback", "--use-srq", "-q", "3", "-n", "200", "-s", "4096")
	})
	if st != exitOK || !strings.Contains(out, "Using SRQ      : ON") || !regexp.MustCompile(`(?m)^ 4096       600 `).MatchString(out) {
		t.Fatalf("send_bw --use-srq -q 3: status %d\n%s%s", st, out, errOut)
	}
	st, out, errOut = runCLI("bench", "write_bw", "--loopback", "--use-srq")
	if st == exitOK || !strings.Contains(errOut, "--use-srq: an SRQ is used only in the SEND tests") {
		t.Fatalf("write_bw --use-srq: status %d\n%s%s", st, out, errOut)
	}
}

// -f / --margin reaches the parameters: refusals name it.
func TestBenchMargin(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-D", "4", "-f", "2"}, "two margins leave nothing of -D 4s"},
		{[]string{"-D", "4", "--margin", "-1"}, "-f -1: margin must be greater than 0"},
	} {
		st, out, errOut := runCLI(append([]string{"bench", "write_bw", "--loopback"}, c.args...)...)
		if st == exitOK || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: status %d\n%s%s", c.args, st, out, errOut)
		}
	}
}

// -w and -y are perftest's limit verifiers: exit 1 with its message when
// no result reaches the limit.
func TestBenchLimits(t *testing.T) {
	for _, c := range []struct {
		args []string
		st   int
		msg  string
	}{
		{[]string{"-w", "1", "-y", "0.000001"}, exitOK, ""},
		{[]string{"-w", "1e9"}, exitFail, "Error: BW result is below bw limit\n"},
		{[]string{"--limit_bw", "1e6", "--report_gbits"}, exitFail, "Error: BW result is below bw limit\n"},
		{[]string{"--limit_msgrate", "1e6"}, exitFail, "Error: Msg rate  is below msg_rate limit\n"},
	} {
		var st int
		var out, errOut string
		inNetNS(t, func() {
			st, out, errOut = runCLI(append([]string{"bench", "write_bw", "--loopback", "-n", "100", "-s", "4096"}, c.args...)...)
		})
		if st != c.st || (c.msg != "" && !strings.HasSuffix(errOut, c.msg)) || (c.msg == "" && strings.Contains(errOut, "Error")) {
			t.Errorf("%v: status %d, want %d\n%s%s", c.args, st, c.st, out, errOut)
		}
	}
}

func TestBenchLoopbackText(t *testing.T) {
	dir := t.TempDir()
	plot := filepath.Join(dir, "lat.svg")
	out, _ := runLoopbackCLI(t, "bench", "send_lat", "--loopback", "-a", "--max_size", "256", "-n", "50", "-F", "--plot", plot)
	for _, want := range []string{"                    Send Latency Test\n", " Mtu             : 4096[B]\n", " local address: LID 0000 QPN 0x",
		" #bytes #iterations    t_min[usec]", "\n 256     50    "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^ \d+ +50 +\d`).FindAllString(out, -1)); n != 8 {
		t.Errorf("%d result lines, want 8 (2..256):\n%s", n, out)
	}
	for _, f := range []string{plot, strings.TrimSuffix(plot, ".svg") + ".png"} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".png") {
			if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		} else if !bytes.HasPrefix(b, []byte("<svg ")) {
			t.Fatalf("%s does not start with <svg", f)
		}
	}
}

// TestBenchClientServer runs two goroce bench commands against each other,
// as two hosts would: the server without HOST, the client with it.
func TestBenchClientServer(t *testing.T) {
	for _, mode := range []string{"read_bw", "send_bw", "write_lat", "read_lat"} {
		t.Run(mode, func(t *testing.T) {
			port := strconv.Itoa(20000 + int(mode[0])) // namespaces are fresh: any port is free
			var sst, cst int
			var sout, serr, cout, cerr string
			inNetNS(t, func() {
				sst, sout, serr = runCLI("bench", mode, "-p", port, "-n", "100", "--csv", "--addr", "127.0.0.1")
			}, func() {
				cst, cout, cerr = runCLI("bench", mode, "127.0.0.1", "-p", port, "-n", "100", "--csv", "--addr", "127.0.0.2")
			})
			if sst != exitOK || cst != exitOK {
				t.Fatalf("server %d: %s %s\nclient %d: %s %s", sst, sout, serr, cst, cout, cerr)
			}
			rows, err := csv.NewReader(strings.NewReader(cout)).ReadAll()
			if err != nil || len(rows) != 2 || rows[1][0] != mode || rows[1][2] != "100" {
				t.Fatalf("client csv %q: %v", rows, err)
			}
			if !strings.HasSuffix(mode, "_lat") { // latency servers print no result
				rows, err = csv.NewReader(strings.NewReader(sout)).ReadAll()
				if err != nil || len(rows) != 2 || rows[1][2] != "100" {
					t.Fatalf("server csv %q: %v", rows, err)
				}
			}
		})
	}
}

// The read_lat server measures nothing: --plot there is refused before
// the run, not a failure after it ("nothing to plot").
func TestBenchReadLatServerPlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "lat.svg")
	var sst int
	var serr string
	inNetNS(t, func() {
		sst, _, serr = runCLI("bench", "read_lat", "-p", "20001", "-n", "20", "--addr", "127.0.0.1", "--plot", plot)
	}, func() {
		runCLI("bench", "read_lat", "127.0.0.1", "-p", "20001", "-n", "20", "--addr", "127.0.0.2")
	})
	if sst != exitUsage || !strings.Contains(serr, "--plot") {
		t.Fatalf("read_lat server --plot: status %d, want %d (usage)\n%s", sst, exitUsage, serr)
	}
}

// --busy-poll is a boolean that knows whether it was given: unset, the
// mode decides (latency modes spin, bandwidth modes block).
func TestBenchBusyPollFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		def  bool
		want bool
	}{
		{nil, true, true},
		{nil, false, false},
		{[]string{"--busy-poll"}, false, true},
		{[]string{"--busy-poll=false"}, true, false},
		{[]string{"-busy-poll=true"}, false, true},
	} {
		var o benchOpts
		fs := benchFlags(&o)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got := o.busyPoll.or(c.def); got != c.want {
			t.Errorf("%q with default %v: %v, want %v", c.args, c.def, got, c.want)
		}
	}
	var o benchOpts
	fs := benchFlags(&o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"--busy-poll=maybe"}); err == nil {
		t.Error("--busy-poll=maybe accepted")
	}
}

// oneP: busy-polled latency runs and one-QP bandwidth runs go to one P,
// and a GOMAXPROCS in the environment wins.
func TestBenchOneP(t *testing.T) {
	for _, c := range []struct {
		busy bool
		mode bench.Mode
		qps  int
		env  string
		want bool
	}{
		{true, bench.ModeSendLat, 1, "", true},
		{true, bench.ModeWriteLat, 1, "", true},
		{true, bench.ModeReadLat, 1, "", true},
		{true, bench.ModeSendLat, 1, "2", false},
		{false, bench.ModeSendLat, 1, "", false},
		{true, bench.ModeWriteBW, 1, "", true},
		{false, bench.ModeSendBW, 1, "", true},
		{false, bench.ModeReadBW, 1, "", true},
		{false, bench.ModeAtomicBW, 1, "", true},
		{false, bench.ModeWriteBW, 1, "4", false},
		{false, bench.ModeWriteBW, 2, "", false},
		{true, bench.ModeSendBW, 16, "", false},
	} {
		if got := oneP(c.busy, c.mode, c.qps, c.env); got != c.want {
			t.Errorf("oneP(%v, %v, %d, %q) = %v, want %v", c.busy, c.mode, c.qps, c.env, got, c.want)
		}
	}
}

// --rate_limit: without a type goroce says, as perftest does on a device
// without a HW rate limit, that it falls back to the SW limiter; with
// --rate_limit_type=SW and no --burst_size the burst is the TX depth.
func TestBenchRateLimit(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		notice string
	}{
		{[]string{"--rate_limit=0.5"}, "The QP failed to accept HW rate limit, providing SW rate limit"},
		{[]string{"--rate_limit=100", "--rate_units=M", "--rate_limit_type=SW", "-t", "16"}, " Setting burst size to tx depth = 16\n"},
		{[]string{"--rate_limit=4000", "--rate_units=p", "--rate_limit_type=SW", "--burst_size=4"}, ""},
	} {
		var st int
		var out, errOut string
		inNetNS(t, func() {
			st, out, errOut = runCLI(append([]string{"bench", "write_bw", "--loopback", "-n", "64", "-s", "4096"}, tc.args...)...)
		})
		if st != exitOK || !regexp.MustCompile(`(?m)^ 4096       64 `).MatchString(out) || !strings.Contains(errOut, tc.notice) {
			t.Errorf("%v: status %d\n%s%s", tc.args, st, out, errOut)
		}
		if tc.notice == "" && strings.Contains(errOut, "rate limit") {
			t.Errorf("%v: an explicit SW limiter with a burst size needs no notice:\n%s", tc.args, errOut)
		}
	}
}

// --report-both: a -b run prints the sum of both directions, then each
// direction under its own head, as perftest does; the two add up to the
// sum. Without -b the flag changes nothing.
func TestBenchReportBoth(t *testing.T) {
	var st int
	var out, errOut string
	inNetNS(t, func() {
		st, out, errOut = runCLI("bench", "write_bw", "--loopback", "-b", "--report-both", "-n", "200", "-s", "16384")
	})
	line := regexp.MustCompile(`(?m)^ 16384      200 +([0-9.]+) +([0-9.]+)`)
	m := line.FindAllStringSubmatch(out, -1)
	if st != exitOK || len(m) != 3 {
		t.Fatalf("status %d, %d result lines, want 3 (sum, local, remote)\n%s%s", st, len(m), out, errOut)
	}
	local := strings.Index(out, "\n Local results: \n"+bench.ResultLine+"\n #bytes")
	remote := strings.Index(out, "\n Remote results: \n"+bench.ResultLine+"\n #bytes")
	if local < 0 || remote < local || !strings.HasSuffix(out, bench.ResultLine+"\n") {
		t.Fatalf("no Local then Remote block:\n%s", out)
	}
	avg := func(i int) float64 {
		v, err := strconv.ParseFloat(m[i][2], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if d := avg(1) + avg(2) - avg(0); d < -0.02 || d > 0.02 {
		t.Fatalf("local %.2f + remote %.2f MB/sec != the sum %.2f", avg(1), avg(2), avg(0))
	}
	inNetNS(t, func() {
		st, out, errOut = runCLI("bench", "write_bw", "--loopback", "--report-both", "-n", "200", "-s", "16384")
	})
	if st != exitOK || strings.Contains(out, "Local results") || len(line.FindAllString(out, -1)) != 1 {
		t.Fatalf("--report-both without -b: status %d\n%s%s", st, out, errOut)
	}
}

// perftest's long option names stand for the same flags as the short ones
// (perftest_parameters.c's long_options): a perftest command line written
// with them runs as it is, and their values are checked alike.
func TestBenchPerftestLongNames(t *testing.T) {
	var o benchOpts
	fs := benchFlags(&o)
	fs.SetOutput(io.Discard)
	for long, short := range perftestLong {
		lf, sf := fs.Lookup(long), fs.Lookup(short)
		if lf == nil || sf == nil {
			t.Fatalf("--%s or -%s not defined", long, short)
		}
	}
	err := fs.Parse([]string{"--size=64K", "--iters=7", "--tx-depth=9", "--rx-depth=11", "--cq-mod=3",
		"--qp=2", "--gid-index=1", "--port=18999", "--ib-dev=goroce7", "--mtu=1024", "--qp-timeout=16",
		"--all", "--CPU-freq", "--atomic_type=CMP_AND_SWAP", "--duration=3", "--report-histogrm"})
	if err != nil {
		t.Fatal(err)
	}
	p := o.p
	got := []int{p.Size, p.Iters, p.TxDepth, p.RxDepth, p.CQMod, p.QPs, p.GIDIndex, o.port, o.mtu, o.timeout, o.durSec}
	want := []int{65536, 7, 9, 11, 3, 2, 1, 18999, 1024, 16, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %d: got %d, want %d (all: %v)", i, got[i], want[i], got)
		}
	}
	if o.devName != "goroce7" || !p.All || !p.Histogram || o.atomic != "CMP_AND_SWAP" || fs.Lookup("F").Value.String() != "true" {
		t.Errorf("dev %q all %v histogram %v atomic %q F %s", o.devName, p.All, p.Histogram, o.atomic, fs.Lookup("F").Value)
	}
	// The checks know the long names, and name the flag as given.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"send_bw", "--iters", "4"}, "--iters 4: Iteration num should be between 5 and 100000000"},
		{[]string{"send_bw", "--tx-depth=15001"}, "--tx-depth 15001: Tx depth should be between 1 and 15000"},
		{[]string{"send_bw", "--cq-mod=0"}, "--cq-mod 0: CQ moderation should be between 1 and 1024"},
		{[]string{"send_bw", "--gid-index=-2"}, "--gid-index -2: not a GID index"},
		{[]string{"send_bw", "--size=0"}, "--size 0: the message size must be at least 1"},
		{[]string{"send_bw", "--qp=0"}, "--qp 0: the number of QPs must be at least 1"},
		{[]string{"write_bw", "--atomic_type=CMP_AND_SWAP"}, `--atomic_type CMP_AND_SWAP: the atomic operation is atomic_bw's`},
		{[]string{"read_bw", "--rx-depth=4"}, "--rx-depth 4: On RDMA verbs rx depth can be only 1"},
		{[]string{"write_bw", "--events"}, "--events: Events feature not available on WRITE verb"},
		{[]string{"read_bw", "--inline_size=8"}, "--inline_size 8: Inline feature not available on READ/Atomic verbs"},
		{[]string{"send_bw", "--outs=2"}, "--outs 2: outstanding reads apply to read_bw"},
	} {
		wantBenchUsage(t, append(append([]string{"bench"}, c.args...), "--ceiling"), c.msg)
	}
}

// -s takes perftest's K and M suffixes and strtol's number forms.
func TestBenchSizeSuffix(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"65536", 65536, true}, {"64K", 65536, true}, {"1M", 1 << 20, true}, {"8M", 8 << 20, true},
		{"0x100", 256, true}, {"0x10K", 16 << 10, true}, {"2", 2, true},
		{"K", 0, false}, {"64k", 0, false}, {"2x", 0, false}, {"-1", 0, false}, {"", 0, false},
		{"1G", 0, false}, {"99999999999999999999", 0, false}, {"9223372036854775807M", 0, false},
	} {
		var n int
		err := sizeValue{&n}.Set(c.in)
		if (err == nil) != c.ok || (c.ok && n != c.want) {
			t.Errorf("-s %q: got %d, %v; want %d, ok %v", c.in, n, err, c.want, c.ok)
		}
	}
	st, _, errOut := runCLI("bench", "write_bw", "-s", "2x")
	if st != exitUsage || !strings.Contains(errOut, `invalid value "2x" for flag -s: not a byte count`) {
		t.Errorf("-s 2x: status %d, stderr %s", st, errOut)
	}
}

// wantBenchUsage runs the CLI with args and wants the usage status and a
// stderr that starts "goroce bench: " + msg. The runs that should be
// refused carry --ceiling without --loopback, refused later: a value that
// slipped through gets that message instead, not a benchmark.
func wantBenchUsage(t *testing.T, args []string, msg string) {
	t.Helper()
	st, out, errOut := runCLI(args...)
	if st != exitUsage || !strings.HasPrefix(errOut, "goroce bench: "+msg) {
		t.Errorf("%q: status %d, want %d (usage) and %q\nstdout: %s\nstderr: %s", args, st, exitUsage, msg, out, errOut)
	}
}
