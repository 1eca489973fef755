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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bench/pingpong"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
)

func init() {
	register(&command{name: "pingpong", summary: "ibv_rc/uc/ud/srq_pingpong, interoperable with rdma-core's tools", run: runPingpong})
}

const pingpongSynopsis = "goroce pingpong [flags] [HOST]"

// pingpongHelp follows the tools' usage text, then goroce's additions.
const pingpongHelp = `Without HOST, start a server and wait for a connection; with HOST, connect
to the server at HOST. Flags may come before or after HOST, as with getopt.

Same flags and behaviour as rdma-core's ibv_rc_pingpong (--qp uc: ibv_uc_pingpong,
--qp ud: ibv_ud_pingpong, --srq N: ibv_srq_pingpong -q N), same TCP exchange
and output. Differences: -g defaults to the GID of the link's address (the
tools default to no GID, which cannot work on RoCE); every message's data is
checked (the tools check nothing, or page starts with -c); exit status 1 with a
one-line cause on any failure.

`

// pingpongOpts is what the command line sets.
type pingpongOpts struct {
	port     int
	devName  string
	ibPort   int
	size     int
	mtu      int
	rxDepth  int
	iters    int
	sl       int
	events   bool
	gidIndex int
	check    bool
	qp       string
	srq      int
}

func runPingpong(args []string, stdout, stderr io.Writer) int {
	const name = "goroce pingpong"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var o pingpongOpts
	intVar := func(p *int, short, long string, def int, usage string) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, "same as -"+short)
	}
	intVar(&o.port, "p", "port", exchange.DefaultPort, "listen on/connect to TCP `port`")
	fs.StringVar(&o.devName, "d", hca.DefaultName, "name of the goroce `device`")
	fs.StringVar(&o.devName, "ib-dev", hca.DefaultName, "same as -d")
	intVar(&o.ibPort, "i", "ib-port", 1, "use `port` of the device")
	intVar(&o.size, "s", "size", 0, "`size` of message to exchange (default 4096; ud 2048)")
	intVar(&o.mtu, "m", "mtu", 1024, "path MTU in `bytes`")
	intVar(&o.rxDepth, "r", "rx-depth", pingpong.DefaultRxDepth, "number of receives to post at a time")
	intVar(&o.iters, "n", "iters", pingpong.DefaultIters, "number of exchanges (srq: in total over all QPs)")
	intVar(&o.sl, "l", "sl", 0, "service `level` value")
	fs.BoolVar(&o.events, "e", false, "sleep on CQ events (default poll)")
	fs.BoolVar(&o.events, "events", false, "same as -e")
	intVar(&o.gidIndex, "g", "gid-idx", -1, "local port GID `index` (default: the link address's GID)")
	fs.BoolVar(&o.check, "c", false, "server: check page starts of the received buffer as rdma-core's -c does")
	fs.BoolVar(&o.check, "chk", false, "same as -c")
	fs.StringVar(&o.qp, "qp", "rc", "QP type: rc, uc or ud (ibv_rc/uc/ud_pingpong)")
	fs.IntVar(&o.srq, "srq", 0, "behave as ibv_srq_pingpong with `N` RC QPs on one SRQ")
	var notImpl string
	addPingpongOnly(fs, &notImpl)
	lf := addLinkFlags(fs)
	fs.Usage = func() {
		usageFunc(fs, pingpongSynopsis)()
		fmt.Fprintln(fs.Output())
		fmt.Fprint(fs.Output(), pingpongHelp)
		fmt.Fprintln(fs.Output(), linkUsage)
	}
	pos, status, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	if notImpl != "" {
		fmt.Fprintf(stderr, "%s: %s\n", name, notImpl)
		return exitUsage
	}
	// o.size 0 means "the tool's default" to pingpong.Config, so an explicit
	// -s 0 would otherwise run 4096-byte messages the user did not ask for.
	sizeZero := false
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "s" || f.Name == "size") && f.Value.String() == "0" {
			sizeZero = true
		}
	})
	if sizeZero {
		fmt.Fprintf(stderr, "%s: -s 0: goroce pingpong sends messages of at least 1 byte\n", name)
		return exitUsage
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "%s: more than one HOST (%s)\n", name, strings.Join(pos, " "))
		return exitUsage
	}
	host := ""
	if len(pos) == 1 {
		host = pos[0]
	}
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	ls, err := lf.settings()
	if err != nil {
		return linkExit(stderr, name, err)
	}
	// Polling (no -e), as the tools poll ibv_poll_cq: the device receives
	// in the polling goroutine (hca.Options.BusyPoll on the udp and
	// afpacket links), on one P unless GOMAXPROCS is set, as goroce bench's
	// latency modes run. Two processes on a 2-core host, 4096-byte RC
	// messages, -n 20000: 114-140 usec/iter sleeping in CQ.Wait after a
	// short spin with every P, 24-27 polling inline on one P; 6.1 TCG
	// guest: 1700-2000 -> 370-534, rxe 257-336 (docs/performance.md,
	// session 11).
	ls.busyPoll = !o.events
	if ownProcess && ls.busyPoll && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pingpongMain(ctx, ls, host, o, cfg, stdout, stderr); err != nil {
		var le *linkError
		if errors.As(err, &le) {
			return linkExit(stderr, name, err)
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if errors.Is(err, pingpong.ErrConfig) {
			return exitUsage
		}
		return exitFail
	}
	return exitOK
}

// config checks the tool flags and builds the pingpong.Config (without the
// GID index, which needs the device).
func (o *pingpongOpts) config() (pingpong.Config, error) {
	var c pingpong.Config
	if o.port < 0 || o.port > 65535 {
		return c, fmt.Errorf("-p %d: not a TCP port", o.port)
	}
	mtu := bth.MTUFromBytes(o.mtu)
	if mtu == 0 {
		return c, fmt.Errorf("-m %d: not an IB MTU (256, 512, 1024, 2048 or 4096)", o.mtu)
	}
	switch o.qp {
	case "rc":
		c.Type = hca.RC
	case "uc":
		c.Type = hca.UC
	case "ud":
		c.Type = hca.UD
	default:
		return c, fmt.Errorf("--qp %q: want rc, uc or ud", o.qp)
	}
	if o.srq < 0 || o.srq > exchange.SRQRecords {
		return c, fmt.Errorf("--srq %d: want 1..%d QPs", o.srq, exchange.SRQRecords)
	}
	if o.srq > 0 && c.Type != hca.RC {
		return c, fmt.Errorf("--srq needs --qp rc (ibv_srq_pingpong uses RC QPs)")
	}
	if o.ibPort < 1 {
		return c, fmt.Errorf("-i %d: IB ports start at 1", o.ibPort)
	}
	if o.size < 0 || o.iters < 1 || o.rxDepth < 1 {
		return c, fmt.Errorf("-s, -n and -r must be positive")
	}
	if o.sl < 0 || o.sl > 15 {
		return c, fmt.Errorf("-l %d: service levels are 0..15", o.sl)
	}
	c.SRQ, c.Size, c.Iters, c.RxDepth, c.MTU = o.srq, o.size, o.iters, o.rxDepth, mtu
	c.SL, c.Port, c.Events, c.Check = uint8(o.sl), o.ibPort, o.events, o.check
	return c, nil
}

// pingpongMain opens the device, runs the exchange and the traffic.
func pingpongMain(ctx context.Context, ls linkSettings, host string, o pingpongOpts, cfg pingpong.Config, stdout, stderr io.Writer) (err error) {
	od, err := openDevice(ls, host, o.devName)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := od.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
	}()
	cfg.GIDIndex = o.gidIndex
	if cfg.GIDIndex < 0 {
		cfg.GIDIndex = defaultGIDIndex(od.Dev, od.Settings.Addr)
	}
	// The server listens before it prints its address, so a client started
	// once the lines appear always finds it (the tools listen after).
	var ln net.Listener
	if host == "" {
		ln, err = net.Listen("tcp", ":"+strconv.Itoa(o.port))
		if err != nil {
			return fmt.Errorf("couldn't listen to port %d: %w", o.port, err)
		}
		defer ln.Close()
	}
	cfg.Out = stdout
	s, err := pingpong.New(od.Dev, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	var conn net.Conn
	if host == "" {
		conn, err = accept(ctx, ln)
		ln.Close()
		if err != nil {
			return err
		}
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(o.port)))
		if err != nil {
			return fmt.Errorf("couldn't connect to %s:%d: %w", host, o.port, err)
		}
	}
	stopClose := context.AfterFunc(ctx, func() { conn.Close() })
	if host == "" {
		err = s.Serve(conn)
	} else {
		err = s.Dial(conn)
	}
	stopClose()
	conn.Close()
	if err != nil {
		return err
	}
	res, err := s.Run(ctx)
	if err == nil && res.LastSendUnacked {
		fmt.Fprintf(stderr, "goroce pingpong: no ACK for the last SEND within %v; finishing without it (the peer exits once its own counts are done, so a lost last ACK is never sent again)\n", pingpong.LastAckGrace.Round(time.Millisecond))
	}
	return err
}

// accept waits for one connection, or ctx.
func accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for a client: %w", ctx.Err())
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return c, nil
}

// defaultGIDIndex is the GID of addr, else the first IPv4 GID, else 0.
func defaultGIDIndex(d *hca.Device, addr netip.Addr) int {
	if addr.IsValid() {
		if i, err := d.GIDIndex(addr); err == nil {
			return i
		}
	}
	for _, g := range d.GIDs() {
		if g.GID.Addr().Is4() {
			return g.Index
		}
	}
	return 0
}

// parseInterspersed parses flags that may come before, between and after
// positional arguments, as getopt_long (which permutes argv) lets the C
// tools do; "--" ends the flags. It returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, status int, ok bool) {
	for {
		if status, ok := parseFlags(fs, args, stdout, stderr); !ok {
			return nil, status, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		// flag.Parse consumed a "--" if it stopped there.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
