package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/transport"
)

// Report is everything one side learned in a run: the agreed parameters,
// both sides' keys and a result per message size.
type Report struct {
	Params   Params
	Client   bool
	Device   string
	LinkType string
	MTU      bth.MTU
	GIDIndex int
	// RemoteVersion is the peer's perftest version string.
	RemoteVersion string
	Local, Remote []exchange.PerftestDest
	// Results holds one entry per size. On the passive server of
	// write/read/atomic bw they come from the client's report
	// (xchg_bw_reports), as perftest's server prints them.
	Results []Result
	// Sides are the two directions of a -b run whose reports were
	// exchanged (one size): this side's and the peer's, which Results
	// holds summed. perftest's --report-both prints them.
	Sides *DuplexSides
	// Ceiling is the raw path ceiling of the same run (--ceiling): plain
	// UDP datagrams of the path-MTU packet size between the same addresses
	// with the link's socket options, batching and GSO. CeilingRatio is
	// goroce's best bandwidth over its payload rate (0 when not measured).
	Ceiling      *Ceiling
	CeilingRatio float64
	// ShapedCeiling is the raw blast again with the datagrams IBA makes
	// of one message of the run's best size (MessageShape) instead of
	// uniform full-MTU ones: what a sender and receiver that cost nothing
	// could move with RoCE's packets. ShapedCeilingRatio is goroce's share
	// of it, ShapedCeiling/Ceiling what the packet shape alone leaves.
	ShapedCeiling      *Ceiling
	ShapedCeilingRatio float64
	// LinkCeiling is the same blast through the link endpoints themselves
	// (MeasureCeiling: the link's own per-packet work included), and
	// LinkCeilingRatio goroce's share of it: what the HCA costs on top.
	LinkCeiling      *Ceiling
	LinkCeilingRatio float64
	// Transport is the transport counters of this side's QPs, summed, at
	// the end of the run (retransmissions, timeouts, NAKs, duplicates:
	// what explains a slow run), and TransportQPs how many QPs they cover.
	Transport    transport.Stats
	TransportQPs int
}

// DuplexSides are the two directions of a bidirectional run.
type DuplexSides struct{ Local, Remote Result }

// Hooks let a caller print as the run progresses, as perftest does: the
// header once the QPs are connected, each size's line when it is done.
type Hooks struct {
	Connected func(*Report)
	Result    func(*Report, Result)
	// Progress receives the progress line of long sizes.
	Progress io.Writer
	// Notice receives what perftest prints on stderr about a parameter it
	// changed (a UD size shrunk to the MTU).
	Notice io.Writer
	// Stop ends an infinite run (Params.Infinite) on the client side:
	// once it closes, the client completes what it posted, reports the
	// last interval and ends the exchange as a timed run does. Each
	// interval's result goes to Result as it is measured.
	Stop <-chan struct{}
}

// closingWait bounds the closing exchange of an infinite client: the real
// ib_send_bw server of --run_infinitely never leaves its receive loop to
// answer it.
const closingWait = 5 * time.Second

// RunPeer runs the test of p against a peer (goroce bench or the real
// perftest tool) over conn, perftest's TCP exchange: client is the side
// that dialed, which runs the test unless p.Reversed makes it the passive
// side. dev is the HCA to use. Cancel ctx (or set deadlines on
// conn) to bound the run.
func RunPeer(ctx context.Context, dev *hca.Device, conn io.ReadWriter, client bool, p Params, h Hooks) (*Report, error) {
	if err := p.Normalize(); err != nil {
		return nil, err
	}
	role := exchange.Server
	if client {
		role = exchange.Client
	}
	// The TCP exchange keeps the roles of who dialed (perftest's
	// servername); the test's roles (perftest's machine: who sends, who
	// prints what) are swapped by --reversed. From here on client is
	// the test's role.
	client = client != p.Reversed
	// The server of an infinite send_bw learns that the run ended when
	// the client's closing exchange arrives (or the connection closes):
	// watch.Peek waits for it while the receives are polled.
	netConn, _ := conn.(net.Conn)
	var watch *bufio.Reader
	if p.Infinite && !client && p.Mode.isSend() {
		watch = bufio.NewReader(conn)
		conn = struct {
			io.Reader
			io.Writer
		}{watch, conn}
	}
	sess, err := exchange.NewPerftestSession(conn, exchange.PerftestConfig{Role: role})
	if err != nil {
		return nil, err
	}
	if netConn != nil {
		// Unblock the exchange when ctx ends.
		stop := context.AfterFunc(ctx, func() { netConn.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	port := dev.QueryPort()
	localMTU := port.ActiveMTU
	if p.MTU != 0 {
		localMTU = min(p.MTU, port.ActiveMTU)
	}
	rep := &Report{Params: p, Client: client, Device: dev.Name(), LinkType: port.LinkLayer}
	add := func(r Result) {
		rep.Results = append(rep.Results, r)
		if h.Result != nil && !r.Passive {
			h.Result(rep, r)
		}
	}
	var s *Session
	// sizes is set by steps.Setup: a UD run's depend on the agreed MTU.
	var sizes []int
	defer func() {
		if s != nil {
			rep.Transport, rep.TransportQPs = s.TransportStats()
			s.Close()
		}
	}()
	steps := exchange.Steps{
		LocalMTU: localMTU,
		Sys:      exchange.SysData{CycleBuffer: defaultCycleBuf, CacheLineSize: defaultCacheLine},
		Setup: func(ep exchange.Params) ([]exchange.PerftestDest, error) {
			rep.MTU = ep.MTU
			rep.RemoteVersion = ep.RemoteVersion.String()
			notice, err := p.FitUD(ep.MTU)
			if err != nil {
				return nil, err
			}
			if notice != "" && h.Notice != nil {
				io.WriteString(h.Notice, notice)
			}
			sizes = p.Sizes()
			if s, err = NewSession(dev, p, client); err != nil {
				return nil, err
			}
			s.Progress = h.Progress
			if p.Infinite && client {
				s.Stop = h.Stop
				s.Interval = func(r BWResult) { add(Result{BW: r}) }
			}
			rep.Params = s.Params()
			rep.GIDIndex = s.GIDIndex()
			rep.Local = s.Dests()
			return rep.Local, nil
		},
		Connect: func(remote []exchange.PerftestDest) error {
			rep.Remote = remote
			if err := s.Connect(remote, rep.MTU); err != nil {
				return err
			}
			if h.Connected != nil {
				h.Connected(rep)
			}
			return nil
		},
	}
	// A duplex result is printed once the peer's report is in (the sum
	// of both directions), except a timed send_bw's, which exchanges none.
	sumLater := p.Duplex && !(p.Mode.isSend() && p.Duration > 0)
	var local Result
	// ran: the traffic is over; an infinite run's peer may now end it by
	// going away.
	ran := false
	runSize := func(size int) (Result, error) {
		if watch != nil {
			stop := make(chan struct{})
			s.Stop = stop
			go func() {
				watch.Peek(1) // the closing exchange, or the end of the connection
				close(stop)
			}()
		}
		r, err := s.Run(ctx, size)
		if err != nil {
			return r, err
		}
		ran = true
		if p.Infinite && client && netConn != nil {
			netConn.SetDeadline(time.Now().Add(closingWait))
		}
		if sumLater {
			local = r
		} else {
			add(r)
		}
		return r, nil
	}
	// sum is print_full_bw_report(my, rem): the rates add up; size and
	// iterations are this side's.
	sum := func(my Result, rr exchange.BWReport) error {
		r, err := remoteResult(rep.Params, rr)
		if err != nil {
			return err
		}
		b := my.BW
		b.BytesPerSec += r.BW.BytesPerSec
		b.PeakBytesPerSec += r.BW.PeakBytesPerSec
		b.MsgPerSec += r.BW.MsgPerSec
		if !p.All {
			r.CPUUtil = my.CPUUtil
			rep.Sides = &DuplexSides{Local: my, Remote: r}
		}
		add(Result{BW: b})
		return nil
	}
	tool := p.Mode.Tool()
	// s is set by steps.Setup, later: not a method value here.
	ready := func(size int) error { return s.Ready(size) }
	if p.All && (p.Duplex || p.Mode.isSend()) {
		return rep, runAll(sess, steps, func() []int { return sizes }, p.Mode, p.Duplex, ready, func(size int) (exchange.BWReport, error) {
			r, err := runSize(size)
			return bwReport(rep.Params, r.BW), err
		}, func(rr exchange.BWReport) error { return sum(local, rr) })
	}
	steps.Ready = func() error {
		if p.Mode.isSend() {
			return s.Ready(sizes[0])
		}
		return nil
	}
	steps.Run = func() (exchange.BWReport, error) {
		var last Result
		for _, size := range sizes {
			if !p.Mode.isSend() { // SEND receives were posted by Ready
				if err := s.Ready(size); err != nil {
					return exchange.BWReport{}, err
				}
			}
			r, err := runSize(size)
			if err != nil {
				return exchange.BWReport{}, err
			}
			last = r
			if r.Passive {
				break
			}
		}
		return bwReport(rep.Params, last.BW), nil
	}
	steps.Duplex, steps.Duration = p.Duplex, p.Duration > 0
	res, err := sess.Run(tool, steps)
	if err != nil && ran && p.Infinite && ctx.Err() == nil {
		// An infinite run has no natural end: the real tools are killed,
		// and then the closing exchange finds no peer.
		if h.Notice != nil {
			fmt.Fprintf(h.Notice, " The peer did not take part in the closing exchange (%v): the run ended there.\n", err)
		}
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	switch {
	case sumLater:
		if err := sum(local, res.RemoteReport); err != nil {
			return rep, err
		}
	case tool.ExchangesReports() && !client:
		// The passive server prints the client's report.
		r, err := remoteResult(rep.Params, res.RemoteReport)
		if err != nil {
			return rep, err
		}
		rep.Results = rep.Results[:0]
		add(r)
	}
	return rep, nil
}

// ErrPeerReport: a figure of the peer's bandwidth report that this side
// prints or adds up is NaN, infinite or negative. (Reports a side does
// not use are not checked: perftest's passive server sends an
// uninitialized one.)
var ErrPeerReport = errors.New("bench: the peer's report holds a figure that is not a finite, non-negative number")

// remoteResult is the result the peer reported (xchg_bw_reports).
func remoteResult(p Params, rr exchange.BWReport) (Result, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"bw_peak", rr.BWPeak}, {"bw_avg", rr.BWAvg}, {"msgRate_avg", rr.MsgRateAvg}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return Result{}, fmt.Errorf("%w: %s %v", ErrPeerReport, f.name, f.v)
		}
	}
	f := mbFactor(p.ReportGbits)
	r := Result{BW: BWResult{Op: opName(p), Size: int(rr.Size), QPs: p.QPs,
		BytesPerSec: rr.BWAvg * f, PeakBytesPerSec: rr.BWPeak * f, MsgPerSec: rr.MsgRateAvg * 1e6}}
	// The report counts what reportIters does.
	qps := max(1, r.BW.QPs)
	if p.Duration > 0 {
		r.BW.Iters = int(rr.Iters)
		r.BW.Messages = r.BW.Iters * qps
	} else {
		r.BW.Messages = int(rr.Iters)
		r.BW.Iters = r.BW.Messages / qps
	}
	if r.BW.MsgPerSec > 0 {
		r.BW.Duration = time.Duration(float64(r.BW.Messages) / r.BW.MsgPerSec * 1e9)
	}
	return r, nil
}

// runAll is -a where bench/exchange.Run does not cover it: ib_send_bw and
// ib_send_lat (send_bw.c, send_lat.c RUN_ALL), and -b (duplex) of the
// bandwidth tools (write_bw.c, read_bw.c, send_bw.c RUN_ALL with duplex).
// After the connection hand-shakes (exchange's Establish), per size:
// ready (the receives of SEND tests), a hand-shake that starts the size,
// the traffic (run), then
//
//	send_bw, send_lat:  a hand-shake that ends the size (send_bw only)
//	send_bw -b:         the reports swapped, then that hand-shake
//	write/read_bw -b:   a hand-shake (perftest >= 4.6), the reports swapped
//
// and ctx_close_connection after the last size. report receives the
// peer's report of each size (-b only).
func runAll(sess *exchange.PerftestSession, st exchange.Steps, sizes func() []int, mode Mode, duplex bool, ready func(int) error,
	run func(int) (exchange.BWReport, error), report func(exchange.BWReport) error) error {
	res, err := sess.Establish(mode.Tool(), st)
	if err != nil {
		return err
	}
	local := res.Local
	for _, size := range sizes() { // known once Establish ran Setup
		if err := ready(size); err != nil {
			return err
		}
		if _, err := sess.HandShake(local[0]); err != nil {
			return err
		}
		my, err := run(size)
		if err != nil {
			return err
		}
		if duplex && !mode.isSend() {
			if _, err := sess.HandShake(local[0]); err != nil {
				return err
			}
		}
		if duplex {
			rr, err := sess.XchgBWReports(my)
			if err != nil {
				return err
			}
			if err := report(rr); err != nil {
				return err
			}
		}
		if mode == ModeSendBW {
			if _, err := sess.HandShake(local[0]); err != nil {
				return err
			}
		}
	}
	_, err = sess.CloseConnection(local[0])
	return err
}

// mbFactor converts perftest's reported unit to bytes per second: MB is
// 2^20 bytes (perftest's MBS format factor), Gb/s is 125e6 bytes.
func mbFactor(gbits bool) float64 {
	if gbits {
		return 125e6
	}
	return 1 << 20
}

// BWUnit is the bytes per second of one unit of the bandwidth p reports:
// a MB (2^20 bytes), or a Gb with --report_gbits (125e6 bytes).
func (p Params) BWUnit() float64 { return mbFactor(p.ReportGbits) }

func bwReport(p Params, r BWResult) exchange.BWReport {
	f := mbFactor(p.ReportGbits)
	return exchange.BWReport{Size: uint64(r.Size), Iters: uint64(reportIters(p, r)), BWPeak: r.PeakBytesPerSec / f,
		BWAvg: r.BytesPerSec / f, MsgRateAvg: r.MsgPerSec / 1e6}
}

func opName(p Params) string {
	s := Session{p: p}
	return s.opName()
}

// RunLoopback runs the test with both sides in this process: a server on
// devServer and a client on devClient, connected by perftest's TCP exchange
// over a loopback TCP connection, exactly as two goroce bench processes
// would. It returns the client's report and the server's. h is the hooks
// of the side that runs the test: the client's, or with p.Reversed the
// server's (the side that dials is then the passive one).
func RunLoopback(ctx context.Context, devClient, devServer *hca.Device, p Params, h Hooks) (client, server *Report, err error) {
	hc, hs := h, Hooks{}
	if p.Reversed {
		hc, hs = hs, hc
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type out struct {
		rep *Report
		err error
	}
	srv := make(chan out, 1)
	// srvFailed: the server failed first and cancelled the client, whose
	// error (a dead exchange) is then only the consequence.
	var srvFailed atomic.Bool
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srv <- out{nil, err}
			return
		}
		defer c.Close()
		r, err := RunPeer(ctx, devServer, c, false, p, hs)
		if err != nil {
			srvFailed.Store(true)
			cancel() // unblock the client
		}
		srv <- out{r, err}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-srv
		return nil, nil, err
	}
	client, cerr := RunPeer(ctx, devClient, c, true, p, hc)
	if cerr != nil {
		cancel()
	}
	c.Close()
	so := <-srv
	if cerr != nil && srvFailed.Load() && so.err != nil && !errors.Is(so.err, context.Canceled) {
		return client, so.rep, fmt.Errorf("server: %w", so.err)
	}
	if cerr != nil {
		return client, so.rep, fmt.Errorf("client: %w", cerr)
	}
	if so.err != nil && !errors.Is(so.err, context.Canceled) {
		return client, so.rep, fmt.Errorf("server: %w", so.err)
	}
	return client, so.rep, so.err
}
