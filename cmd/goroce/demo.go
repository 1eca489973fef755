package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/link/udp"
)

func init() {
	register(&command{name: "demo", summary: "two soft HCAs on 127.0.0.1 and 127.0.0.2 doing real RDMA over UDP, with a capture", run: runDemo})
}

// demoConfig is what the demo's flags set.
type demoConfig struct {
	pcapFile     string
	addrA, addrB netip.Addr
	mtu          int
	size         int
	dur          time.Duration
	latIters     int
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goroce demo", flag.ContinueOnError)
	var c demoConfig
	var a, b string
	fs.StringVar(&c.pcapFile, "pcap", "goroce-demo.pcap", "write every packet of device A's link to `FILE` (\"\" for none)")
	fs.StringVar(&a, "addr-a", "127.0.0.1", "address of device A (loopback)")
	fs.StringVar(&b, "addr-b", "127.0.0.2", "address of device B (loopback)")
	fs.IntVar(&c.mtu, "m", 4096, "path MTU in bytes (256, 512, 1024, 2048, 4096)")
	fs.IntVar(&c.size, "s", 65536, "message size of the bandwidth test")
	fs.DurationVar(&c.dur, "D", time.Second, "duration of the bandwidth test")
	fs.IntVar(&c.latIters, "n", 1000, "iterations of the latency test")
	fs.Usage = usageFunc(fs, "goroce demo [--pcap FILE] [-m MTU] [-s SIZE] [-D DURATION] [-n ITERS]")
	if st, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return st
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "goroce demo: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	var err error
	if c.addrA, err = netip.ParseAddr(a); err != nil {
		fmt.Fprintf(stderr, "goroce demo: --addr-a: %v\n", err)
		return exitUsage
	}
	if c.addrB, err = netip.ParseAddr(b); err != nil {
		fmt.Fprintf(stderr, "goroce demo: --addr-b: %v\n", err)
		return exitUsage
	}
	for _, ad := range []netip.Addr{c.addrA, c.addrB} {
		if !ad.IsLoopback() {
			fmt.Fprintf(stderr, "goroce demo: %s is not a loopback address; the demo only talks to itself\n", ad)
			return exitUsage
		}
	}
	if bth.MTUFromBytes(c.mtu) == 0 {
		fmt.Fprintf(stderr, "goroce demo: -m %d is not an IB MTU (256, 512, 1024, 2048, 4096)\n", c.mtu)
		return exitUsage
	}
	if code, done := privateLoopback("goroce demo", []netip.Addr{c.addrA, c.addrB}, stderr); done {
		return code
	}
	if err := demo(c, stdout); err != nil {
		fmt.Fprintf(stderr, "goroce demo: %v\n", err)
		return exitFail
	}
	return exitOK
}

func demo(c demoConfig, out io.Writer) (err error) {
	epA, err := openUDPFallback(udp.Config{Addr: c.addrA})
	if err != nil {
		return fmt.Errorf("device A link on %s: %w", c.addrA, explainLinkErr(err))
	}
	epB, err := openUDPFallback(udp.Config{Addr: c.addrB})
	if err != nil {
		epA.Close()
		return fmt.Errorf("device B link on %s: %w", c.addrB, explainLinkErr(err))
	}
	var epAL link.Endpoint = epA
	var capFile *os.File
	if c.pcapFile != "" {
		capFile, err = os.Create(c.pcapFile)
		if err != nil {
			epA.Close()
			epB.Close()
			return err
		}
		defer capFile.Close()
		tap, err := pcap.NewTap(epA, capFile, pcap.WithLossless())
		if err != nil {
			epA.Close()
			epB.Close()
			return err
		}
		epAL = tap
	}
	da, err := hca.Open(epAL, hca.Options{Name: "goroce0"})
	if err != nil {
		epAL.Close()
		epB.Close()
		return err
	}
	db, err := hca.Open(epB, hca.Options{Name: "goroce1"})
	if err != nil {
		da.Close()
		epB.Close()
		return err
	}
	closed := false
	closeAll := func() {
		if !closed {
			closed = true
			da.Close()
			db.Close()
		}
	}
	defer closeAll()

	ga, _ := da.QueryGID(0)
	gb, _ := db.QueryGID(0)
	fmt.Fprintf(out, "device goroce0: udp %s, GID[0] %s, active_mtu %s\n", c.addrA, ga, da.QueryPort().ActiveMTU)
	fmt.Fprintf(out, "device goroce1: udp %s, GID[0] %s, active_mtu %s\n", c.addrB, gb, db.QueryPort().ActiveMTU)
	p, err := bench.NewPair(da, db, bench.PairConfig{Type: hca.RC, BufSize: max(1<<20, 2*c.size), MTU: bth.MTUFromBytes(c.mtu), Depth: 128})
	if err != nil {
		return fmt.Errorf("connecting RC QPs: %w", err)
	}
	fmt.Fprintf(out, "RC QP 0x%06x <-> RC QP 0x%06x, path MTU %d\n\n", uint32(p.A.QP.QPN()), uint32(p.B.QP.QPN()), c.mtu)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failed := 0
	for _, ch := range bench.RunChecks(ctx, p) {
		if ch.Err != nil {
			failed++
			fmt.Fprintf(out, "  FAIL  %-28s %v\n", ch.Name, ch.Err)
		} else {
			fmt.Fprintf(out, "  ok    %-28s data verified\n", ch.Name)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d operation checks failed", failed)
	}

	fmt.Fprintf(out, "\nRDMA_WRITE bandwidth, %d-byte messages, %s:\n", c.size, c.dur)
	bw, err := bench.WriteBW(ctx, p, c.size, 1<<30, 64, c.dur)
	if err != nil {
		return fmt.Errorf("bandwidth test: %w", err)
	}
	bench.PrintBW(out, bw)
	fmt.Fprintf(out, "\nSEND latency, 2-byte messages, %d iterations:\n", c.latIters)
	lat, err := bench.SendLat(ctx, p, 2, c.latIters)
	if err != nil {
		return fmt.Errorf("latency test: %w", err)
	}
	bench.PrintLat(out, lat)

	cnt := &da.Counters
	closeAll() // flushes the capture
	fmt.Fprintf(out, "\ngoroce0: %d frames sent, %d received, %d ICRC errors, %d malformed\n",
		cnt.TxFrames.Load(), cnt.RxFrames.Load(), cnt.RxICRCErrors.Load(), cnt.RxMalformed.Load())
	if cnt.RxICRCErrors.Load() != 0 {
		return errors.New("ICRC errors on a loopback link")
	}
	if capFile == nil {
		return nil
	}
	if _, err := capFile.Seek(0, io.SeekStart); err != nil {
		return err
	}
	counts, err := pcap.Verify(capFile, io.Discard, pcap.VerifyOptions{Quiet: true})
	if err != nil {
		return fmt.Errorf("reading back %s: %w", c.pcapFile, err)
	}
	fmt.Fprintf(out, "capture %s: %s\n", c.pcapFile, counts)
	if counts.Bad > 0 || counts.OK == 0 {
		return fmt.Errorf("capture %s does not verify: %s", c.pcapFile, counts)
	}
	return nil
}

// explainLinkErr turns the common setup failures into one-line causes.
func explainLinkErr(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w (the UDP link reads IPv4 through a raw socket to verify every ICRC over the real IP header: run as root or with CAP_NET_RAW)", err)
	}
	return err
}
