package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/udp"
)

func init() {
	register(&command{name: "bench", summary: "perftest-compatible RDMA benchmarks (ib_*_bw / ib_*_lat), against goroce or the real tools", run: runBench})
}

// benchOpts is what goroce bench's flags set beyond bench.Params.
type benchOpts struct {
	p        bench.Params
	mode     string
	host     string
	port     int
	devName  string
	loopback bool
	busyPoll optBool
	json     bool
	csv      bool
	counters bool // --qp-counters
	output   string
	cpuUtil  bool
	limitBW  float64
	limitMR  float64
	pkeyIdx  int
	notImpl  string // a perftest flag goroce bench does not implement, if given
	rateUnit string
	rateType string
	plot     string
	ceiling  bool
	mtu      int
	durSec   int
	margin   int
	atomic   string
	timeout  int
	events   bool
	ibPort   int
	conn     string
	tos      int
	sl       int
	version  bool
	lf       *linkFlags
}

const benchSynopsis = "goroce bench MODE [HOST] [flags]"

func benchFlags(o *benchOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("goroce bench", flag.ContinueOnError)
	p := &o.p
	fs.Var(sizeValue{&p.Size}, "s", "message `SIZE` in bytes, or KiB and MiB with a K or M suffix as perftest (-s 64K) (default 65536 for bw, 2 for lat, 8 for atomic)")
	fs.IntVar(&p.Iters, "n", 0, "`ITERS` messages per QP, 5 to 100000000 as perftest (default 5000 for write/read/atomic bw, 1000 otherwise)")
	fs.BoolVar(&p.All, "a", false, "run every size from 2 to 2^23 bytes")
	fs.IntVar(&p.MaxSize, "max_size", 0, "largest size of -a (goroce extension; default 2^23)")
	fs.IntVar(&p.QPs, "q", 1, "number of QPs")
	fs.IntVar(&o.durSec, "D", 0, "run each size for `SECONDS` instead of -n messages (with --run_infinitely: the report interval, default 5)")
	fs.IntVar(&o.margin, "f", 0, "with -D: measure only between `SECONDS` after the start and as long before the end (default a quarter of -D, whole seconds, as perftest)")
	fs.IntVar(&o.margin, "margin", 0, "same as -f")
	fs.BoolVar(&o.p.Infinite, "run_infinitely", false, "bandwidth modes: run until interrupted (Ctrl-C on the client ends the run cleanly), printing the bandwidth of every -D seconds")
	fs.IntVar(&o.mtu, "m", 0, "path MTU in bytes: 256, 512, 1024, 2048, 4096 (default: the port's active MTU)")
	fs.IntVar(&p.GIDIndex, "x", -1, "source GID `INDEX` (default: the first IPv4 GID)")
	fs.IntVar(&o.port, "p", bench.DefaultPort, "TCP `PORT` of the perftest exchange")
	fs.Bool("F", false, "accepted for perftest compatibility (no CPU frequency check here)")
	fs.Bool("mr_per_qp", false, "accepted for perftest compatibility: goroce bench always registers one MR per QP (perftest's --mr_per_qp layout)")
	fs.BoolVar(&p.ReportGbits, "report_gbits", false, "report Gb/sec instead of MB/sec")
	fs.BoolVar(&p.Duplex, "b", false, "bidirectional: both sides send at once, each reports the sum (bandwidth modes; both sides need -b)")
	fs.BoolVar(&p.Duplex, "bidirectional", false, "same as -b")
	fs.StringVar(&o.atomic, "A", "FETCH_AND_ADD", "atomic_bw operation: FETCH_AND_ADD or CMP_AND_SWAP")
	fs.IntVar(&p.TxDepth, "t", 0, "TX `DEPTH` (default 128 for bw, 1 for lat)")
	fs.IntVar(&p.RxDepth, "r", 0, "RX `DEPTH` of send tests (default 512)")
	fs.IntVar(&p.CQMod, "Q", 0, "CQ moderation: one signaled WR in `N` (default 100, capped at the TX depth; 1 for messages over 8 KiB without -a, as perftest)")
	fs.BoolVar(&p.Histogram, "H", false, "latency modes: print every sample, sorted, before the result (perftest's --report-histogram)")
	fs.BoolVar(&p.Histogram, "report-histogram", false, "same as -H")
	fs.BoolVar(&p.Unsorted, "U", false, "latency modes: print every sample in the order measured before the result (perftest's --report-unsorted)")
	fs.BoolVar(&p.Unsorted, "report-unsorted", false, "same as -U")
	fs.IntVar(&p.PostList, "l", 0, "post WRs in chained lists of `N` (bandwidth modes; the CQ moderation becomes N unless -Q is given)")
	fs.IntVar(&p.PostList, "post_list", 0, "same as -l")
	fs.IntVar(&p.InlineSize, "I", 0, "post SENDs and WRITEs of at most `SIZE` bytes inline (default 0, as perftest on a device it does not know)")
	fs.IntVar(&p.InlineSize, "inline_size", 0, "same as -I")
	fs.IntVar(&p.OutReads, "o", 0, "`N` outstanding RDMA READs or atomics per QP, read and atomic modes (default: the device's max_qp_rd_atom)")
	fs.IntVar(&p.OutReads, "outs", 0, "same as -o")
	fs.BoolVar(&p.NoPeak, "N", false, "print no peak bandwidth (perftest's --noPeak; always with -D, as perftest)")
	fs.BoolVar(&p.NoPeak, "noPeak", false, "same as -N")
	fs.BoolVar(&o.events, "e", false, "sleep on CQ events instead of polling (same as --busy-poll=false); as in perftest, not in the write modes nor with -D or --run_infinitely")
	fs.BoolVar(&o.events, "events", false, "same as -e")
	fs.IntVar(&o.ibPort, "i", 1, "`PORT` of the device (goroce devices have one, port 1)")
	fs.IntVar(&o.ibPort, "ib-port", 1, "same as -i")
	fs.StringVar(&o.conn, "c", "RC", "connection `TYPE`: RC, UC (send and write modes) or UD (send modes, messages up to the MTU)")
	fs.StringVar(&o.conn, "connection", "RC", "same as -c")
	fs.IntVar(&o.tos, "T", -1, "`TOS`: the traffic class of the QPs' address vector (IPv4 TOS / IPv6 traffic class)")
	fs.IntVar(&o.tos, "tos", -1, "same as -T")
	fs.IntVar(&o.tos, "tclass", -1, "same as -T (perftest's GRH traffic class)")
	fs.IntVar(&o.pkeyIdx, "pkey_index", 0, "P_Key `INDEX` (goroce devices have one P_Key, index 0)")
	fs.Float64Var(&o.limitBW, "w", 0, "bandwidth modes: fail (exit 1) unless a result's average bandwidth reaches `LIMIT` (MB/sec, Gb/sec with --report_gbits), as perftest's verifier")
	fs.Float64Var(&o.limitBW, "limit_bw", 0, "same as -w")
	fs.Float64Var(&o.limitMR, "y", 0, "bandwidth modes: fail (exit 1) unless a result's message rate reaches `LIMIT` Mpps")
	fs.Float64Var(&o.limitMR, "limit_msgrate", 0, "same as -y")
	fs.BoolVar(&p.WarmUp, "perform_warm_up", false, "write, read and atomic bw: before measuring, each QP posts TX depth WRs and waits for them (perftest's warm-up)")
	fs.BoolVar(&p.IPv6, "ipv6", false, "without -x: use the device's first IPv6 GID (perftest's --ipv6; default the first IPv4 one)")
	fs.BoolVar(&p.ReportBoth, "report-both", false, "with -b: also print each direction's result (perftest's --report-both)")
	fs.BoolVar(&p.Reversed, "reversed", false, "bandwidth modes: the server (no HOST) runs the test and the client is passive (perftest's --reversed; give it to both sides)")
	fs.Float64Var(&p.RateLimit, "rate_limit", 0, "write, read and send bw: post at most `RATE` (--rate_units; perftest's SW rate limiter)")
	fs.StringVar(&o.rateUnit, "rate_units", "g", "`UNIT` of --rate_limit: M (MB/sec), g (Gb/sec) or p (messages/sec)")
	fs.StringVar(&o.rateType, "rate_limit_type", "", "`TYPE` of rate limiter: SW (goroce QPs have no HW or PP rate limit; --rate_limit alone falls back to SW, as perftest does)")
	fs.IntVar(&p.BurstSize, "burst_size", 0, "rate limiter: `WRS` posted per burst (default: the TX depth)")
	fs.BoolVar(&p.UseSRQ, "use-srq", false, "SEND modes: the QPs share one receive queue of the RX depth (-r), each QP's buffers posted to it (perftest's --use-srq)")
	addPerftestOnly(fs, &o.notImpl)
	fs.IntVar(&o.sl, "S", 0, "service `LEVEL` of the QPs' address vector")
	fs.IntVar(&o.sl, "sl", 0, "same as -S")
	fs.BoolVar(&o.version, "V", false, "print the perftest version goroce bench speaks and exit")
	fs.BoolVar(&o.version, "version", false, "same as -V")
	fs.IntVar(&o.timeout, "u", bench.DefaultTimeout, "local ACK timeout code (4.096 us * 2^`N`)")
	fs.StringVar(&o.devName, "d", "", "HCA `NAME` (default goroce0)")
	fs.BoolVar(&o.loopback, "loopback", false, "run both sides in this process on 127.0.0.1 (server) and 127.0.0.2 (client) over the udp link")
	fs.Var(&o.busyPoll, "busy-poll", "spin on the CQ, receiving in the polling goroutine, as perftest spins on ibv_poll_cq; --busy-poll=false blocks in CQ.Wait instead (goroce extension; default: latency modes spin, bandwidth modes block, since there most polls find nothing and an empty poll is a system call; never with --loopback; a spinning latency run and a one-QP bandwidth run use one P, GOMAXPROCS=1, as perftest uses one thread, unless GOMAXPROCS is set or with --loopback)")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.BoolVar(&o.counters, "qp-counters", false, "after the run, print this side's transport counters, summed over its QPs, on stderr: packets, go-back-N retries, local ACK timeouts (and those found spurious), NAKs sent and received, duplicates, drops (goroce extension; --json always carries them as \"transport\")")
	fs.BoolVar(&o.csv, "csv", false, "print the results as CSV")
	fs.BoolVar(&o.cpuUtil, "cpu_util", false, "add perftest's CPU_Util[%] column: the busy share of the machine's CPU time during each result (user, system, irq and softirq time; perftest counts user time only); with -D or --run_infinitely")
	fs.StringVar(&o.output, "output", "", "print only one figure per result, as perftest's --output=`UNITS`: bandwidth (MB/sec, Gb/sec with --report_gbits) or message_rate (Mpps) in bandwidth modes, latency (t_avg, usec) in latency modes")
	fs.StringVar(&o.plot, "plot", "", "draw the results to `FILE`.svg and FILE.png (bandwidth or latency percentiles against size)")
	fs.BoolVar(&o.ceiling, "ceiling", false, "with --loopback: also measure the raw UDP path ceiling (and the same blast shaped as the mode's RoCE packets) and print goroce's bandwidth as a ratio of each")
	o.lf = addLinkFlags(fs)
	for long, short := range perftestLong {
		f := fs.Lookup(short)
		fs.Var(f.Value, long, "same as -"+short+" (perftest's long name)")
	}
	fs.Usage = func() {
		w := fs.Output()
		usageFunc(fs, benchSynopsis)()
		fmt.Fprintf(w, "\nMODE is one of: %s\n", strings.Join(modeNames(), " "))
		fmt.Fprintln(w, "Without HOST goroce bench is the server (it waits on -p); with HOST it is the client.")
		fmt.Fprintln(w, "Either side may be the real perftest tool (ib_write_bw, ...) on another host.")
		fmt.Fprintln(w, "\n"+linkUsage)
	}
	return fs
}

// perftestLong are perftest's long names (perftest_parameters.c's
// long_options) of the flags above that have none of their own here, so
// that a perftest command line written with them (--size=65536
// --iters=1000 --gid-index=1) runs as it is. "report-histogrm" is
// perftest's own spelling.
var perftestLong = map[string]string{
	"size": "s", "iters": "n", "tx-depth": "t", "rx-depth": "r", "cq-mod": "Q",
	"qp": "q", "gid-index": "x", "port": "p", "ib-dev": "d", "mtu": "m",
	"qp-timeout": "u", "all": "a", "CPU-freq": "F", "atomic_type": "A",
	"duration": "D", "report-histogrm": "H",
}

// benchLong are goroce bench's other long names of its short flags.
var benchLong = map[string]string{
	"outs": "o", "inline_size": "I", "events": "e", "noPeak": "N",
	"ib-port": "i", "tos": "T", "sl": "S", "post_list": "l",
	"bidirectional": "b", "report-histogram": "H", "report-unsorted": "U",
	"connection": "c", "limit_bw": "w", "limit_msgrate": "y", "margin": "f",
	"version": "V",
}

// shortName returns the short flag a long alias stands for, or name.
func shortName(name string) string {
	if s, ok := perftestLong[name]; ok {
		return s
	}
	if s, ok := benchLong[name]; ok {
		return s
	}
	return name
}

// sizeValue is -s: a byte count, with perftest's K (KiB) or M (MiB)
// suffix; the number is read as perftest's strtol(optarg, NULL, 0) reads
// it (0x for hex).
type sizeValue struct{ p *int }

func (v sizeValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v sizeValue) Set(s string) error {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errors.New("not a byte count (a number, or one with a K or M suffix)")
	}
	if n < 0 || n > (1<<62)/mul {
		return errors.New("out of range")
	}
	*v.p = int(n * mul)
	return nil
}

// perftestRanges are the bounds perftest's parser puts on goroce bench's
// count and index flags (CHECK_VALUE_IN_RANGE with perftest_parameters.h's
// MIN_ITER / MAX_ITER, MIN_TX / MAX_TX, ...) and the name its message
// gives each value. Where perftest prints other words (it checks -S by
// hand: " Only 15 Service levels"), perftest holds them, quoted after the
// range. Long names are goroce bench's aliases of the short ones.
var perftestRanges = map[string]perftestRange{
	"n": {"Iteration num", 5, 100000000, ""},
	"t": {"Tx depth", 1, 15000, ""},
	"r": {"Rx depth", 1, 16384, ""},
	"Q": {"CQ moderation", 1, 1024, ""},
	"x": {"Gid index", 0, 64, ""},
	"T": {"TOS", 0, 255, ""},
	"S": {"Service Level", 0, 15, "Only 15 Service levels"},
}

type perftestRange struct {
	name     string
	min, max int
	perftest string
}

// badValue names a flag given a value perftest's parser refuses, so that
// goroce bench refuses it too instead of running with it: a value outside
// perftestRanges, an explicit 0 of -s, -q or -D (CHECK_VALUE_IN_RANGE with
// a minimum of 1, CHECK_VALUE_POSITIVE for -D; Params reads 0 as
// "perftest's default", so `-q 0` would silently run the default), an IB
// port below 1 ("IB Port can't be less than 1"), or a negative GID index
// (-x's default, -1, means the device's first IPv4 GID; given, it is no
// index). These are the command line's bounds, as they are perftest's:
// bench.Params keeps its own, wider ones (Iters from 1, depths to 16384).
func badValue(fs *flag.FlagSet) string {
	what := map[string]string{"s": "message size", "q": "number of QPs", "D": "duration"}
	var msg string
	fs.Visit(func(f *flag.Flag) {
		if msg != "" {
			return
		}
		v := f.Value.String()
		n, err := strconv.Atoi(v)
		short := shortName(f.Name)
		r, ranged := perftestRanges[short]
		switch {
		case short == "x" && strings.HasPrefix(v, "-"):
			msg = fmt.Sprintf("%s %s: not a GID index", flagName(f.Name), v)
		case ranged && err == nil && (n < r.min || n > r.max):
			msg = fmt.Sprintf("%s %s: %s should be between %d and %d", flagName(f.Name), v, r.name, r.min, r.max)
			if r.perftest != "" {
				msg += fmt.Sprintf(" (perftest: %q)", r.perftest)
			}
		case what[short] != "" && v == "0":
			msg = fmt.Sprintf("%s 0: the %s must be at least 1", flagName(f.Name), what[short])
		case short == "i" && err == nil && n < 1:
			msg = fmt.Sprintf("%s %s: IB Port can't be less than 1", flagName(f.Name), v)
		}
	})
	return msg
}

// modeFlag names a flag given in a mode whose perftest tool refuses it in
// its parser: without this check goroce bench would run the test as if the
// flag had not been given (-A in write_bw, -o in send_bw, -I in read_bw;
// -e in write_bw would block in CQ.Wait where ib_write_bw refuses it).
func modeFlag(fs *flag.FlagSet, m bench.Mode) string {
	readOrAtomic := m == bench.ModeReadBW || m == bench.ModeReadLat || m == bench.ModeAtomicBW
	var msg string
	fs.Visit(func(f *flag.Flag) {
		if msg != "" {
			return
		}
		name := flagName(f.Name) // as given: -A, --atomic_type
		switch shortName(f.Name) {
		case "A":
			if m != bench.ModeAtomicBW {
				msg = fmt.Sprintf("%s %s: the atomic operation is atomic_bw's (perftest: \"You are not running the atomic_lat/bw test!\")", name, f.Value)
			}
		case "o":
			if !readOrAtomic {
				msg = fmt.Sprintf("%s %s: outstanding reads apply to read_bw, read_lat and atomic_bw (perftest: \"Setting Outstanding reads only available on READ verb\")", name, f.Value)
			}
		case "I":
			if readOrAtomic {
				msg = fmt.Sprintf("%s %s: Inline feature not available on READ/Atomic verbs", name, f.Value)
			}
		case "e":
			if m == bench.ModeWriteBW || m == bench.ModeWriteLat {
				msg = name + ": Events feature not available on WRITE verb"
			}
		case "N":
			if !m.IsBW() {
				msg = name + ": NoPeak only valid for BW tests"
			}
		case "r":
			if readOrAtomic && f.Value.String() != "1" {
				msg = fmt.Sprintf("%s %s: On RDMA verbs rx depth can be only 1 (%v posts no receives)", name, f.Value, m)
			}
		}
	})
	return msg
}

// flagName is a flag as a user writes it: -s, --size.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func modeNames() []string {
	var s []string
	for _, m := range bench.Modes {
		s = append(s, m.String())
	}
	return s
}

// parseInterleaved parses flags and positional arguments in any order, as
// perftest's getopt does (goroce bench write_bw -s 64 HOST -n 10).
func parseInterleaved(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, status int, ok bool) {
	for {
		if st, ok := parseFlags(fs, args, stdout, stderr); !ok {
			return nil, st, false
		}
		if fs.NArg() == 0 {
			return pos, exitOK, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runBench(args []string, stdout, stderr io.Writer) int {
	var o benchOpts
	fs := benchFlags(&o)
	pos, st, ok := parseInterleaved(fs, args, stdout, stderr)
	if !ok {
		return st
	}
	usageErr := func(format string, a ...any) int {
		// bench's errors name their package; after "goroce bench: " that
		// would read twice.
		msg := strings.TrimPrefix(fmt.Sprintf(format, a...), "bench: ")
		fmt.Fprintf(stderr, "goroce bench: %s\n", msg)
		fmt.Fprintf(stderr, "Usage: %s (goroce bench --help for the flags)\n", benchSynopsis)
		return exitUsage
	}
	if o.version {
		fmt.Fprintf(stdout, "Version: %s\n", exchange.DefaultVersion)
		return exitOK
	}
	if msg := badValue(fs); msg != "" {
		return usageErr("%s", msg)
	}
	if o.notImpl != "" {
		return usageErr("%s", o.notImpl)
	}
	if len(pos) == 0 {
		return usageErr("missing MODE (%s)", strings.Join(modeNames(), " "))
	}
	if len(pos) > 2 {
		return usageErr("unexpected argument %q", pos[2])
	}
	m, err := bench.ParseMode(pos[0])
	if err != nil {
		return usageErr("%v", err)
	}
	o.p.Mode = m
	if msg := modeFlag(fs, m); msg != "" {
		return usageErr("%s", msg)
	}
	if len(pos) == 2 {
		o.host = pos[1]
	}
	if o.p.Atomic, err = bench.ParseAtomicOp(o.atomic); err != nil {
		return usageErr("%v", err)
	}
	if o.mtu != 0 {
		if o.p.MTU = bth.MTUFromBytes(o.mtu); o.p.MTU == 0 {
			return usageErr("-m %d is not an IB MTU (256, 512, 1024, 2048, 4096)", o.mtu)
		}
	}
	if o.durSec < 0 {
		return usageErr("-D %d: negative duration", o.durSec)
	}
	o.p.Duration = time.Duration(o.durSec) * time.Second
	if o.margin < 0 {
		// perftest: " margin must be greater than 0."
		return usageErr("-f %d: margin must be greater than 0", o.margin)
	}
	o.p.Margin = time.Duration(o.margin) * time.Second
	if o.timeout < 0 || o.timeout > 31 {
		return usageErr("-u %d: want 0..31", o.timeout)
	}
	o.p.Timeout = uint8(o.timeout)
	if o.ibPort != 1 {
		return usageErr("-i %d: goroce devices have one port, 1", o.ibPort)
	}
	conn, err := bench.ParseConn(o.conn)
	if err != nil {
		return usageErr("%v", err)
	}
	o.p.Conn = conn
	if o.tos < -1 || o.tos > 255 {
		// -T and --tos are checked with the flags' values; this is
		// --tclass, which perftest checks against no range.
		return usageErr("--tclass %d: want 0..255", o.tos)
	}
	if o.tos >= 0 {
		o.p.TrafficClass = uint8(o.tos)
	}
	o.p.SL = uint8(o.sl) // 0..15: badValue
	if o.events && o.busyPoll.set && o.busyPoll.v {
		return usageErr("-e (sleep on CQ events) and --busy-poll are exclusive")
	}
	// force_dependecies, in its words: neither timed mode waits on events.
	switch {
	case o.events && o.durSec > 0:
		return usageErr("-e with -D: Duration mode doesn't work with events.")
	case o.events && o.p.Infinite:
		return usageErr("-e with --run_infinitely: run_infinitely does not support events feature yet.")
	}
	if o.events {
		o.busyPoll = optBool{set: true, v: false}
	}
	if o.pkeyIdx != 0 {
		return usageErr("--pkey_index %d: goroce devices have one P_Key, at index 0", o.pkeyIdx)
	}
	if o.limitBW < 0 || o.limitMR < 0 {
		return usageErr("-w / -y: a negative limit")
	}
	if (o.limitBW > 0 || o.limitMR > 0) && !o.p.Mode.IsBW() {
		return usageErr("-w and -y verify bandwidth tests")
	}
	if o.port < 1 || o.port > 65535 {
		return usageErr("-p %d: not a TCP port", o.port)
	}
	if o.json && o.csv {
		return usageErr("--json and --csv are exclusive")
	}
	if o.output != "" {
		if o.json || o.csv {
			return usageErr("--output prints one figure: not with --json or --csv")
		}
		if err := bench.CheckOutput(o.p.Mode, o.output); err != nil {
			return usageErr("%v", err)
		}
	}
	if o.loopback && o.host != "" {
		return usageErr("--loopback runs both sides here: no HOST")
	}
	if o.ceiling && !o.loopback {
		return usageErr("--ceiling needs --loopback (the raw blast needs both endpoints in this process)")
	}
	if o.ceiling && !o.p.Mode.IsBW() {
		return usageErr("--ceiling compares bandwidth: use a *_bw mode")
	}
	if o.plot != "" && o.p.Mode == bench.ModeReadLat && o.host == "" && !o.loopback {
		// Its HCA alone answers the client's READs: it measures nothing,
		// and the run would end, once over, in a plot of no result.
		return usageErr("--plot: the read_lat server measures nothing to plot (the client does)")
	}
	if o.plot != "" && strings.HasSuffix(o.plot, ".png") {
		o.plot = strings.TrimSuffix(o.plot, ".png") + ".svg"
	}
	if o.plot != "" && !strings.HasSuffix(o.plot, ".svg") {
		o.plot += ".svg"
	}
	if o.cpuUtil {
		if o.p.Duration > 0 || o.p.Infinite {
			o.p.CPUUtil = true
		} else if !o.json && !o.csv && o.output == "" {
			// force_dependecies goes on without it.
			fmt.Fprintln(stdout, bench.ResultLine)
			fmt.Fprintln(stderr, " CPU Utilization works only with Duration mode.")
		}
	}
	rateNotice, err := o.rateLimiter()
	if err != nil {
		return usageErr("%v", err)
	}
	burstDefault := o.p.BurstSize == 0
	notices := o.p.Notices()
	if err := o.p.Normalize(); err != nil {
		return usageErr("%v", err)
	}
	if rateNotice != "" {
		fmt.Fprintln(stderr, rateNotice)
	}
	if o.p.RateLimit > 0 && o.rateType == "SW" && burstDefault {
		fmt.Fprintf(stderr, " Setting burst size to tx depth = %d\n", o.p.BurstSize) // force_dependecies
	}
	if !o.json && !o.csv {
		for _, n := range notices { // force_dependecies prints them first
			fmt.Fprintf(stdout, "%s\n%s\n", bench.ResultLine, n)
		}
	}
	ls, err := o.lf.settings()
	if err != nil {
		return linkExit(stderr, "goroce bench", err)
	}
	if o.loopback && (ls.Addr.IsValid() || ls.Dev != "") {
		return usageErr("--loopback chooses the addresses (127.0.0.1 and 127.0.0.2): no --addr or --dev")
	}
	// perftest spins on ibv_poll_cq; goroce bench spins on CQ.Poll, which
	// then receives in the polling goroutine (no wake-up per message).
	// By default only in the latency modes. In a bandwidth mode most
	// polls find the CQ empty while the packets are still moving, and
	// each empty poll is a non-blocking recvmmsg that finds nothing: in
	// the TCG guest of bench-vs-rxe, where a system call is emulated,
	// write_bw 64 KiB at IB MTU 1024 fell from 68-74 to 41-58 MB/s
	// spinning (one P; on this 2-core host it rose, 0.021-0.024 to
	// 0.025-0.034 Mpps; docs/performance.md, session 11). Never with
	// --loopback: both sides live in this process, and two spinners
	// would take the cores from each other's device goroutines.
	ls.busyPoll = o.busyPoll.or(!o.p.Mode.IsBW()) && !o.loopback
	if ownProcess && !o.loopback && oneP(ls.busyPoll, o.p.Mode, o.p.QPs, os.Getenv("GOMAXPROCS")) {
		runtime.GOMAXPROCS(1)
	}

	if o.loopback {
		if code, done := privateLoopback("goroce bench", loopbackAddrs[:], stderr); done {
			return code
		}
	}
	out := newBenchOutput(&o, stdout)
	var stop <-chan struct{}
	if o.p.Infinite && (o.loopback || o.host != "") {
		var release func()
		stop, release = stopOnSignal()
		defer release()
	}
	var rep *bench.Report
	if o.loopback {
		rep, err = benchLoopback(&o, ls, out, stderr, stop)
	} else {
		rep, err = benchPeer(&o, ls, out, stderr, stop)
	}
	if err != nil {
		var le *linkError
		if errors.As(err, &le) {
			return linkExit(stderr, "goroce bench", err)
		}
		fmt.Fprintf(stderr, "goroce bench: %v\n", err)
		return exitFail
	}
	if err := out.finish(rep); err != nil {
		fmt.Fprintf(stderr, "goroce bench: %v\n", err)
		return exitFail
	}
	if o.counters {
		bench.PrintTransportCounters(stderr, rep)
	}
	if msg := verifyLimits(rep, o.limitBW, o.limitMR); msg != "" {
		fmt.Fprintln(stderr, msg)
		return exitFail
	}
	return exitOK
}

// verifyLimits is perftest's limit verifier (-w, -y): the run passes when
// one of the results it printed reaches the limit (print_full_bw_report
// ORs each result into is_bw_limit_passed); it returns perftest's message
// when it does not.
func verifyLimits(rep *bench.Report, bw, mr float64) string {
	if rep == nil || (bw == 0 && mr == 0) {
		return ""
	}
	unit := rep.Params.BWUnit()
	bwOK, mrOK := bw == 0, mr == 0
	for _, r := range rep.Results {
		bwOK = bwOK || r.BW.BytesPerSec/unit >= bw
		mrOK = mrOK || r.BW.MsgPerSec/1e6 >= mr
	}
	switch {
	case !bwOK:
		return "Error: BW result is below bw limit"
	case !mrOK:
		return "Error: Msg rate  is below msg_rate limit"
	}
	return ""
}

// ownProcess is set by main: the command owns its process and may set
// process-wide runtime settings (GOMAXPROCS); callers of run in a shared
// process (tests) leave them alone.
var ownProcess bool

// oneP reports whether a bench run of qps QPs uses one P (GOMAXPROCS 1),
// unless the environment sets GOMAXPROCS: a busy-polled latency run, and a
// bandwidth run of one QP. Either is then single-threaded, as perftest is.
//
// Latency: with one P the device's goroutines (a reader standing aside,
// timers) run when the poller yields, on its thread; with an idle second P
// the runtime wakes threads for them, which take a CPU from the spinner or
// from its peer. 6.1 TCG guest, send_lat -s 2 -n 5000, 4 alternating
// pairs: t_avg 143 / 116 / 145 / 151 -> 97 / 94 / 124 / 92 µs, p99.9
// 5.1-6.8 -> 2.1-3.6 ms; host, two processes, -n 20000: p99 27-29 -> 17-21
// µs, t_typical unchanged (docs/performance.md, session 8).
//
// Bandwidth, one QP: its packets go through one shard, whose work is serial
// under the shard lock, so a second P adds no parallelism, only hand-offs
// between threads (the reader waking the worker or the poller) and idle Ps
// spinning for work on the CPUs the peer needs. Two processes on this
// 2-core host, 64 KiB at IB MTU 1024, 3 alternating rounds: write_bw
// 990 / 963 / 951 -> 1049 / 1054 / 1284 MB/s, send_bw 726 / 812 / 901 ->
// 1217 / 1386 / 1468, read_bw 803 / 1071 / 1069 -> 1202 / 1249 / 1155;
// 6.1 TCG guest: 8 of 9 pairs faster (docs/performance.md, session 11).
// Several QPs keep every P (-q 16, same host: 1403 / 1268 MB/s with two Ps,
// 981 / 1322 with one), and so does --loopback, whose one process runs
// both sides.
func oneP(busyPoll bool, mode bench.Mode, qps int, gomaxprocsEnv string) bool {
	if gomaxprocsEnv != "" {
		return false
	}
	if mode.IsBW() {
		return qps <= 1
	}
	return busyPoll
}

// benchOutput prints in the chosen format: perftest's text as the run goes,
// or JSON/CSV at the end; and the plot files.
type benchOutput struct {
	o *benchOpts
	w io.Writer
}

func newBenchOutput(o *benchOpts, w io.Writer) *benchOutput { return &benchOutput{o: o, w: w} }

// text reports whether perftest's full report is printed: not with --json,
// --csv or --output.
func (b *benchOutput) text() bool { return !b.o.json && !b.o.csv && b.o.output == "" }

func (b *benchOutput) hooks(progress io.Writer, stop <-chan struct{}) bench.Hooks {
	h := bench.Hooks{Progress: progress, Notice: progress, Stop: stop}
	switch {
	case b.text():
		var cpu cpuMeter
		h.Connected = func(r *bench.Report) {
			bench.PrintHeader(b.w, r)
			if r.Params.CPUUtil {
				cpu.mark()
			}
		}
		h.Result = func(r *bench.Report, res bench.Result) {
			if r.Params.CPUUtil {
				var err error
				if res.CPUUtil, err = cpu.next(); err != nil && progress != nil {
					fmt.Fprintf(progress, "goroce bench: %v\n", err)
				}
			}
			bench.PrintResult(b.w, r, res)
		}
	case b.o.output != "":
		h.Result = func(r *bench.Report, res bench.Result) { bench.PrintValue(b.w, r, res, b.o.output) }
	}
	return h
}

func (b *benchOutput) finish(r *bench.Report) error {
	switch {
	case b.o.json:
		if err := bench.WriteJSON(b.w, r); err != nil {
			return err
		}
	case b.o.csv:
		if err := bench.WriteCSV(b.w, r); err != nil {
			return err
		}
	case b.text():
		bench.PrintFooter(b.w, r)
	}
	if b.o.plot == "" {
		return nil
	}
	ch, err := bench.Plot(r)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{{b.o.plot, ch.WriteSVG}, {strings.TrimSuffix(b.o.plot, ".svg") + ".png", ch.WritePNG}} {
		if err := writePlotFile(f.name, f.write); err != nil {
			return err
		}
		if b.text() {
			fmt.Fprintf(b.w, " plot written to %s\n", f.name)
		}
	}
	return nil
}

func writePlotFile(name string, write func(io.Writer) error) error {
	if dir := filepath.Dir(name); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return err
		}
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loopbackAddrs are the two sides of --loopback: server, client.
var loopbackAddrs = [2]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}

func benchLoopback(o *benchOpts, ls linkSettings, out *benchOutput, stderr io.Writer, stop <-chan struct{}) (*bench.Report, error) {
	ss, cs := ls, ls
	ss.Addr, cs.Addr = loopbackAddrs[0], loopbackAddrs[1]
	// Both devices are in this process, so each receives what the other
	// sends inline, and runs more shards than Ps for enough QPs
	// (hca.PeerShards).
	ss.shards = hca.PeerShards(o.p.QPs)
	cs.shards = ss.shards
	cs.Pcap = "" // one capture (the server's link) sees both directions
	name, cname := o.devName, o.devName+"-client"
	if name == "" {
		name, cname = "goroce0", "goroce1"
	}
	var pre *bench.Ceiling
	if o.ceiling {
		// A first raw blast before the run, on the MTU the run will agree
		// (the port's, or -m's if lower): the server device opens only to
		// tell it, then lets go of the address for the blast.
		probe := ss
		probe.Pcap = "" // the run's capture starts with the run
		d, err := openDevice(probe, "", name)
		if err != nil {
			return nil, err
		}
		mtu := d.Dev.QueryPort().ActiveMTU
		d.Close()
		if o.p.MTU != 0 {
			mtu = min(o.p.MTU, mtu)
		}
		if pre, err = rawCeiling(o, ss, cs, mtu); err != nil {
			return nil, err
		}
	}
	srv, err := openDevice(ss, "", name)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	cli, err := openDevice(cs, "", cname)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rep, srep, err := bench.RunLoopback(context.Background(), cli.Dev, srv.Dev, o.p, out.hooks(stderr, stop))
	if o.p.Reversed {
		rep = srep // the side that ran the test (RunLoopback gave it the hooks)
	}
	if err != nil {
		return rep, err
	}
	if o.ceiling {
		// The devices must let go of the sockets first; the blast uses the
		// same addresses, port and socket options.
		cli.Close()
		srv.Close()
		if err := measureCeiling(o, ss, cs, rep, pre); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// measureCeiling runs the blasts of --ceiling on the loopback pair's
// addresses once the devices have let go of the sockets: plain UDP
// datagrams (udp.Blast, the ratio the brief asks for), the same blast with
// the datagrams RoCE makes of the run's messages (shapedCeiling: what the
// packet shape alone leaves of the raw ceiling), and full-MTU packets
// through the link endpoints (what the link itself costs). The raw ceiling
// is the better of this blast and pre, the one before the run (if it ran
// at the MTU the run agreed): a host busy elsewhere for seconds during one
// blast then does not set the ceiling.
func measureCeiling(o *benchOpts, ss, cs linkSettings, rep *bench.Report, pre *bench.Ceiling) error {
	dur := ceilingDuration(o)
	post, err := rawCeiling(o, ss, cs, rep.MTU)
	if err != nil {
		return err
	}
	rep.Ceiling = post
	if pre != nil && pre.Payload == post.Payload {
		rep.Ceiling = bench.BestCeiling(pre, post)
	}
	if rep.ShapedCeiling, err = shapedCeiling(o, ss, cs, rep); err != nil {
		return err
	}
	if ss.Link == linkUDP || ss.Link == "" {
		ss.Pcap, cs.Pcap = "", ""
		dst, err := openLink(ss)
		if err != nil {
			return err
		}
		src, err := openLink(cs)
		if err != nil {
			dst.Close()
			return err
		}
		if rep.LinkCeiling, err = bench.MeasureCeiling(context.Background(), src, dst, rep.MTU, dur); err != nil {
			return fmt.Errorf("link ceiling: %w", err)
		}
	}
	rep.Ratios()
	return nil
}

// ceilingDuration is each --ceiling blast's: the run's -D, at most 5 s.
func ceilingDuration(o *benchOpts) time.Duration {
	if o.p.Duration > 0 {
		return min(o.p.Duration, 5*time.Second)
	}
	return time.Second
}

// rawCeiling runs one raw UDP blast of path-MTU mtu packets from the
// client's address to the server's: the median of its slices' rates.
func rawCeiling(o *benchOpts, ss, cs linkSettings, mtu bth.MTU) (*bench.Ceiling, error) {
	size := bench.RoCEPacketBytes(mtu)
	res, err := udp.Blast(context.Background(), udp.BlastConfig{Src: cs.Addr, Dst: ss.Addr, Size: size, Duration: ceilingDuration(o)})
	if err != nil {
		return nil, fmt.Errorf("raw UDP ceiling: %w", err)
	}
	c := bench.NewCeiling("udp-blast", size+ipUDPHeaderLen(cs.Addr), mtu.Bytes(), res.Sent, res.Received, res.Duration)
	c.MedianOf(res.Rates)
	return c, nil
}

// shapedCeiling runs the raw UDP blast again with the datagrams IBA makes
// of one message of the run's best size (bench.MessageShape), the median
// of its slices' rates in messages; nil for a mode without a data shape.
func shapedCeiling(o *benchOpts, ss, cs linkSettings, rep *bench.Report) (*bench.Ceiling, error) {
	size := rep.BestSize()
	shape, ok := bench.MessageShape(o.p.Mode, o.p.Conn, size, rep.MTU)
	if !ok {
		return nil, nil
	}
	// An RDMA READ's data flows from the server to the client.
	src, dst := cs.Addr, ss.Addr
	if o.p.Mode == bench.ModeReadBW {
		src, dst = dst, src
	}
	res, err := udp.Blast(context.Background(), udp.BlastConfig{Src: src, Dst: dst, Shape: shape, Duration: ceilingDuration(o)})
	if err != nil {
		return nil, fmt.Errorf("shaped UDP ceiling: %w", err)
	}
	bytes := 0
	for _, sz := range shape {
		bytes += sz + ipUDPHeaderLen(cs.Addr)
	}
	c := bench.NewCeiling("udp-blast-shaped", bytes, size, res.Sent, res.Received, res.Duration)
	c.MessageShape = shape
	c.MedianOf(res.Rates)
	return c, nil
}

// ipUDPHeaderLen is the IP and UDP header bytes of a datagram from a.
func ipUDPHeaderLen(a netip.Addr) int {
	if a.Is6() {
		return 40 + 8
	}
	return 20 + 8
}

// benchPeer runs one side against a peer process (goroce bench or perftest).
func benchPeer(o *benchOpts, ls linkSettings, out *benchOutput, stderr io.Writer, stop <-chan struct{}) (*bench.Report, error) {
	port := strconv.Itoa(o.port)
	var conn net.Conn
	if o.host == "" {
		ln, err := net.Listen("tcp", net.JoinHostPort("", port))
		if err != nil {
			return nil, fmt.Errorf("listening on TCP port %s: %w", port, err)
		}
		if out.text() && !o.p.Reversed {
			bench.PrintWaiting(out.w, o.p.Mode)
		}
		conn, err = ln.Accept()
		ln.Close()
		if err != nil {
			return nil, err
		}
		// Without --addr or --dev, speak RoCE on the address the client
		// reached us on, as a perftest server on that host would.
		if !ls.Addr.IsValid() && ls.Dev == "" {
			if ap, err := netip.ParseAddrPort(conn.LocalAddr().String()); err == nil {
				ls.Addr = ap.Addr().Unmap()
			}
		}
	} else {
		if out.text() && o.p.Reversed {
			// perftest prints its banner by test role, which --reversed
			// swaps: the side that dials prints it (interop logs).
			bench.PrintWaiting(out.w, o.p.Mode)
		}
		var err error
		if conn, err = dialRetry(net.JoinHostPort(o.host, port), 3*time.Second); err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", net.JoinHostPort(o.host, port), err)
		}
	}
	defer conn.Close()
	od, err := openDevice(ls, o.host, o.devName)
	if err != nil {
		return nil, err
	}
	defer od.Close()
	return bench.RunPeer(context.Background(), od.Dev, conn, o.host != "", o.p, out.hooks(stderr, stop))
}

// stopOnSignal returns a channel that the first SIGINT or SIGTERM closes
// (the end of a --run_infinitely run), after which the signals kill the
// process again as usual; release undoes it. Tests replace it.
var stopOnSignal = signalStop

func signalStop() (stop <-chan struct{}, release func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	c, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-sig:
			signal.Stop(sig)
			close(c)
		case <-done:
		}
	}()
	return c, func() {
		signal.Stop(sig)
		close(done)
	}
}

// dialRetry dials addr, retrying a refused connection for up to wait (the
// server may still be starting).
func dialRetry(addr string, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, wait)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// optBool is a boolean flag that knows whether it was given.
type optBool struct{ set, v bool }

func (b *optBool) IsBoolFlag() bool { return true }

func (b *optBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.set, b.v = true, v
	return nil
}

// or is the flag's value, or def when it was not given.
func (b optBool) or(def bool) bool {
	if b.set {
		return b.v
	}
	return def
}

// rateLimiter applies --rate_units and --rate_limit_type to o.p. goroce's
// QPs have no static rate (HW) and no packet pacing (PP), so only perftest's
// SW limiter runs; --rate_limit without a type falls back to it as perftest
// does when the QP refuses the HW rate, and the returned notice says so.
func (o *benchOpts) rateLimiter() (notice string, err error) {
	if o.p.RateUnits, err = bench.ParseRateUnit(o.rateUnit); err != nil {
		return "", err
	}
	switch o.rateType {
	case "":
		if o.p.RateLimit > 0 {
			return " The QP failed to accept HW rate limit, providing SW rate limit", nil
		}
	case "SW":
		if o.p.RateLimit == 0 {
			return "", fmt.Errorf("--rate_limit_type=SW: no --rate_limit given")
		}
	case "HW":
		return "", fmt.Errorf("--rate_limit_type=HW: goroce QPs have no HW rate limit (static rate); use --rate_limit_type=SW")
	case "PP":
		return "", fmt.Errorf("--rate_limit_type=PP: Packet Pacing is only supported for Raw Ethernet")
	default:
		return "", fmt.Errorf("--rate_limit_type=%s: Invalid rate limit type flag. Please use HW, SW or PP", o.rateType)
	}
	return "", nil
}
