package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/transport"
)

// Session is one side of a perftest-style test: the QPs, CQs and memory of
// one device, set up as perftest's ctx_init and ctx_connect do, and the
// traffic loops of run_iter_bw, run_iter_bw_server and run_iter_lat_*.
// The exchange with the peer (TCP, or in memory for Go benchmarks) is the
// caller's: Dests gives what to send, Connect takes what came back.
//
// A Session is used by one goroutine.
type Session struct {
	p        Params
	client   bool
	dev      *hca.Device
	pd       *hca.PD
	scq, rcq *hca.CQ
	srq      *hca.SRQ // --use-srq: every QP's receive queue
	// srqPosted counts the receives posted to srq for this size.
	srqPosted int
	qps       []*qpRes
	remote    []exchange.PerftestDest
	gidIndex  int
	gid       hca.GID
	mtu       bth.MTU
	outReads  int
	bufSize   int // bytes in each half of a QP's buffer
	inline    int // the QPs' max_inline_data: sizes up to it are posted inline
	wcs       []hca.WC
	samples   []sample
	lat       []time.Duration

	// Progress, when set, receives a progress line about every second once
	// a size has run for more than two seconds.
	Progress io.Writer

	// Stop ends an infinite run (Params.Infinite): the client stops
	// posting when it closes, and the send_bw server stops polling. Nil
	// never closes.
	Stop <-chan struct{}
	// Interval receives each interval's result of an infinite client run
	// (perftest prints one every -D seconds).
	Interval func(BWResult)

	// spinStop and spinDone run a passive server's busy-poll goroutine
	// (spinPassive); nil when none runs.
	spinStop, spinDone chan struct{}

	// progress counts the polls that found completions and the RDMA
	// WRITEs a write_lat side saw arrive, for watchStall.
	progress atomic.Uint64
}

// qpRes is one QP and its buffer: [0, bufSize) is the local source of
// sends and writes and the target of reads; [bufSize, 2*bufSize) is what
// the peer writes into, reads from or sends into (the advertised VAddr).
type qpRes struct {
	qp     *hca.QP
	mr     *hca.MR
	ah     *hca.AH // UD: the peer's address (ctx->ah[i])
	psn    bth.PSN
	wr     hca.SendWR
	sgl    [1]hca.SGE
	rwr    hca.RecvWR
	rsgl   [1]hca.SGE
	list   []hca.SendWR        // one post list's WRs (Params.PostList > 1)
	flags  transport.SendFlags // SendInline when the size is inlined, else 0
	scnt   int                 // posted sends
	ccnt   int                 // sends known complete
	rcnt   int                 // receives completed
	posted int                 // receives posted
}

type sample struct {
	t    time.Duration
	msgs int
}

// NewSession creates p.QPs QPs of p.Conn on dev with their CQs and memory (ctx_init).
// client selects perftest's client role (the side given a server name).
func NewSession(dev *hca.Device, p Params, client bool) (*Session, error) {
	if err := p.Normalize(); err != nil {
		return nil, err
	}
	s := &Session{p: p, client: client, dev: dev}
	gi, err := pickGID(dev, p.GIDIndex, p.IPv6)
	if err != nil {
		return nil, err
	}
	s.gidIndex = gi
	if s.gid, err = dev.QueryGID(gi); err != nil {
		return nil, err
	}
	s.outReads = 1
	if p.Mode.usesRd() {
		maxRd := dev.Query().MaxQPRdAtom
		s.outReads = maxRd // perftest's default -o: the device's max_qp_rd_atom
		if p.OutReads > maxRd {
			return nil, fmt.Errorf("%w: -o %d: the device allows at most %d outstanding reads per QP (max_qp_rd_atom)", ErrParams, p.OutReads, maxRd)
		}
		if p.OutReads > 0 {
			s.outReads = p.OutReads
		}
	}
	s.bufSize = (max(p.maxSize(), defaultCycleBuf) + 63) &^ 63
	if p.Conn == hca.UD {
		s.bufSize += defaultCacheLine // alloc_ctx: room for the GRH a UD receive starts with
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	inline := 0
	if p.Mode.isSend() || p.Mode == ModeWriteBW || p.Mode == ModeWriteLat {
		inline = p.InlineSize // perftest inlines SENDs and WRITEs only
	}
	if maxInline := dev.Query().MaxInlineData; inline > maxInline {
		return nil, fmt.Errorf("%w: -I %d: the device takes at most %d bytes inline (max_inline_data)", ErrParams, inline, maxInline)
	}
	sq, rq := p.TxDepth, 1
	if p.Mode.isSend() {
		rq = p.RxDepth
	}
	if p.Duplex && p.Mode.isSend() {
		// Both directions on one CQ, so that one (blocking) poll waits
		// for either; the completions' opcodes tell them apart.
		if s.scq, err = dev.CreateCQ((sq + rq) * p.QPs); err != nil {
			return nil, err
		}
		s.rcq = s.scq
	} else {
		if s.scq, err = dev.CreateCQ(sq * p.QPs); err != nil {
			return nil, err
		}
		if s.rcq, err = dev.CreateCQ(rq * p.QPs); err != nil {
			return nil, err
		}
	}
	if p.UseSRQ {
		// ctx_init: one SRQ of rx_depth WRs of one SGE for every QP.
		if s.srq, err = s.pd.CreateSRQ(hca.SRQAttr{MaxWR: p.RxDepth, MaxSGE: 1}); err != nil {
			return nil, err
		}
	}
	access := hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
	for range p.QPs {
		r := &qpRes{psn: bth.PSN(rand.Uint32() & 0xFFFFFF)}
		r.qp, err = s.pd.CreateQP(hca.QPInitAttr{Type: p.Conn, SendCQ: s.scq, RecvCQ: s.rcq, SRQ: s.srq,
			Cap: hca.QPCap{MaxSendWR: sq, MaxRecvWR: rq, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}})
		if err != nil {
			return nil, err
		}
		s.qps = append(s.qps, r)
		if r.mr, err = s.pd.RegMR(make([]byte, 2*s.bufSize), access); err != nil {
			return nil, err
		}
	}
	s.inline = inline
	s.wcs = make([]hca.WC, max(64, min((sq+rq)*p.QPs, 1024)))
	if err := s.toInit(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// pickGID returns idx when valid, else the first IPv4 (RoCEv2) GID, else
// the first GID. With ipv6 (perftest's --ipv6) and no idx it returns the
// first IPv6 GID that is not link-local, else the first link-local one.
func pickGID(dev *hca.Device, idx int, ipv6 bool) (int, error) {
	gids := dev.GIDs()
	if len(gids) == 0 {
		return 0, errors.New("bench: device has no GID")
	}
	if idx >= 0 {
		if _, err := dev.QueryGID(idx); err != nil {
			return 0, fmt.Errorf("%w: GID index %d: %w", ErrParams, idx, err)
		}
		return idx, nil
	}
	if ipv6 {
		linkLocal := -1
		for _, g := range gids {
			a := netip.AddrFrom16(g.GID)
			switch {
			case a.Is4In6():
			case a.IsLinkLocalUnicast():
				if linkLocal < 0 {
					linkLocal = g.Index
				}
			default:
				return g.Index, nil
			}
		}
		if linkLocal >= 0 {
			return linkLocal, nil
		}
		return 0, fmt.Errorf("%w: --ipv6: %s has no IPv6 GID (give its link an IPv6 address)", ErrParams, dev.Name())
	}
	for _, g := range gids {
		if g.GID[10] == 0xFF && g.GID[11] == 0xFF && [10]byte(g.GID[:10]) == [10]byte{} {
			return g.Index, nil
		}
	}
	return gids[0].Index, nil
}

// Params returns the normalized parameters.
func (s *Session) Params() Params { return s.p }

// GIDIndex is the source GID index in use.
func (s *Session) GIDIndex() int { return s.gidIndex }

// MTU is the path MTU after Connect.
func (s *Session) MTU() bth.MTU { return s.mtu }

// Dests returns each QP's keys as perftest's hand-shake carries them.
func (s *Session) Dests() []exchange.PerftestDest {
	d := make([]exchange.PerftestDest, len(s.qps))
	for i, r := range s.qps {
		d[i] = exchange.PerftestDest{OutReads: uint16(s.outReads), QPN: r.qp.QPN(), PSN: r.psn,
			RKey: r.mr.RKey(), VAddr: r.mr.Addr() + uint64(s.bufSize), GID: s.gid}
	}
	return d
}

// toInit is ctx_modify_qp_to_init: P_Key index 0, port 1, and the remote
// access the test needs (a UD QP takes perftest's Q_Key instead).
func (s *Session) toInit() error {
	var a hca.QPAttr
	a.State, a.Port, a.PKeyIndex = hca.StateInit, 1, 0
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	if s.p.Conn == hca.UD {
		a.QKey = qkey
		mask |= transport.AttrQKey
	} else {
		a.AccessFlags = hca.AccessRemoteWrite | hca.AccessLocalWrite
		switch {
		case s.p.Mode.isRead():
			a.AccessFlags |= hca.AccessRemoteRead
		case s.p.Mode.atomic():
			a.AccessFlags |= hca.AccessRemoteAtomic
		}
		mask |= transport.AttrAccessFlags
	}
	for _, r := range s.qps {
		if err := r.qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("bench: QP 0x%06x to INIT: %w", uint32(r.qp.QPN()), err)
		}
	}
	return nil
}

// Connect is ctx_connect: every QP to RTR toward remote[i] and to RTS with
// perftest's attributes (hop limit 0xFF, min_rnr_timer 12, timeout -u,
// retry_cnt and rnr_retry 7, max_dest_rd_atomic our out_reads,
// max_rd_atomic the peer's). mtu is the agreed path MTU. UC takes only the
// path, UD only its states and an address handle per QP, as perftest's
// ctx_modify_qp_to_rtr and _rts do for them.
func (s *Session) Connect(remote []exchange.PerftestDest, mtu bth.MTU) error {
	if len(remote) != len(s.qps) {
		return fmt.Errorf("bench: %d remote QPs for %d local ones", len(remote), len(s.qps))
	}
	if !mtu.Valid() {
		return fmt.Errorf("%w: path MTU enum %d", ErrParams, uint8(mtu))
	}
	for i, rd := range remote {
		if err := exchange.CheckDataQPN(rd.QPN); err != nil {
			return fmt.Errorf("bench: remote QP %d: %w", i, err)
		}
	}
	s.mtu = mtu
	s.remote = remote
	for i, r := range s.qps {
		rd := remote[i]
		av := hca.AHAttr{DGID: rd.GID, SGIDIndex: s.gidIndex, HopLimit: hopLimit,
			TrafficClass: s.p.TrafficClass, SL: s.p.SL}
		a := hca.QPAttr{AH: av, Port: 1}
		a.State = hca.StateRTR
		mask := transport.AttrState
		if s.p.Conn != hca.UD {
			a.PathMTU, a.DestQPN, a.RQPSN = mtu, rd.QPN, rd.PSN
			mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		}
		if s.p.Conn == hca.RC {
			a.MaxDestRdAtomic, a.MinRNRTimer = s.outReads, minRNRTimer
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
		if err := r.qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("bench: QP 0x%06x to RTR: %w", uint32(r.qp.QPN()), err)
		}
		a = hca.QPAttr{}
		a.State, a.SQPSN = hca.StateRTS, r.psn
		mask = transport.AttrState | transport.AttrSQPSN
		if s.p.Conn == hca.RC {
			a.Timeout, a.RetryCnt, a.RNRRetry = s.p.Timeout, retryCount, retryCount
			a.MaxRdAtomic = max(1, int(rd.OutReads))
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		if err := r.qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("bench: QP 0x%06x to RTS: %w", uint32(r.qp.QPN()), err)
		}
		if s.p.Conn == hca.UD {
			// ctx_connect: one address handle per QP, from the RTR
			// attributes an RC QP would have taken.
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("bench: QP 0x%06x: address handle to %v: %w", uint32(r.qp.QPN()), rd.GID, err)
			}
			r.ah = ah
		}
		s.prepare(r, i, rd)
	}
	return nil
}

// prepare fills the QP's reusable work requests (ctx_set_send_wqes).
func (s *Session) prepare(r *qpRes, i int, rd exchange.PerftestDest) {
	r.wr = hca.SendWR{RemoteAddr: rd.VAddr, RKey: rd.RKey}
	if r.ah != nil {
		r.wr.AH, r.wr.RemoteQPN, r.wr.RemoteQKey = r.ah.Handle(), rd.QPN, qkey
	}
	switch s.p.Mode {
	case ModeSendBW, ModeSendLat:
		r.wr.Opcode = transport.WRSend
	case ModeWriteBW, ModeWriteLat:
		r.wr.Opcode = transport.WRRDMAWrite
	case ModeReadBW, ModeReadLat:
		r.wr.Opcode = transport.WRRDMARead
	case ModeAtomicBW:
		r.wr.Opcode = transport.WRAtomicFetchAndAdd
		r.wr.CompareAdd = 1
		if s.p.Atomic == CmpAndSwap {
			r.wr.Opcode = transport.WRAtomicCmpAndSwp
			r.wr.CompareAdd, r.wr.Swap = 0, 0 // perftest compares and swaps zeros
		}
	}
	r.rwr.ID = uint64(i) << 32
}

// setSize points the work requests at size bytes.
func (s *Session) setSize(size int) {
	for _, r := range s.qps {
		r.sgl[0] = r.mr.SGE(0, size)
		r.wr.SGL = r.sgl[:]
		// ctx_set_send_reg_wqes: IBV_SEND_INLINE when the size fits.
		r.flags, r.wr.Inline = 0, nil
		if size <= s.inline {
			r.flags, r.wr.Inline = transport.SendInline, r.mr.Bytes()[:size]
		}
		if s.p.Conn == hca.UD {
			// ctx_set_recv_wqes: the 40-byte GRH first, placed so that
			// the payload starts on a cache line.
			r.rsgl[0] = r.mr.SGE(s.bufSize+defaultCacheLine-udGRH, size+udGRH)
		} else {
			r.rsgl[0] = r.mr.SGE(s.bufSize, size)
		}
		r.rwr.SGL = r.rsgl[:]
		r.scnt, r.ccnt, r.rcnt, r.posted = 0, 0, 0, 0
	}
	s.srqPosted = 0
}

// Ready is what perftest does before the start barrier for one size: the
// receives of SEND tests (ctx_set_recv_wqes: the bw server and both lat
// sides post up to rx_depth), nothing otherwise.
func (s *Session) Ready(size int) error {
	s.stopPassive()
	if size < 1 || size > s.bufSize {
		return fmt.Errorf("%w: size %d outside the %d-byte buffer", ErrParams, size, s.bufSize)
	}
	s.setSize(size)
	if !s.p.Mode.isSend() || (s.p.Mode == ModeSendBW && s.client && !s.p.Duplex) {
		return nil
	}
	depth := s.p.RxDepth
	if s.srq != nil {
		// ctx_set_recv_wqes: each QP's buffer gets its share of the SRQ.
		depth /= len(s.qps)
	}
	for i, r := range s.qps {
		for r.posted < depth && s.wantRecv(r) {
			if err := s.postRecv(r, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// wantRecv reports whether another receive is due for QP r's buffer: a
// run of -n iterations posts exactly one per message, so that none is
// left over for the next size of -a (which may be larger); a duration run
// posts on. The receives of an SRQ are counted over all its QPs, since
// any QP may take any buffer's.
func (s *Session) wantRecv(r *qpRes) bool {
	switch {
	case s.p.Duration > 0:
		return true
	case s.srq != nil:
		return s.srqPosted < s.p.Iters*len(s.qps)
	}
	return r.posted < s.p.Iters
}

// postRecv posts a receive into the buffer of QP i (to the SRQ with
// --use-srq, where any QP may take it; the WR ID still names the buffer's
// QP, whose count it then advances, as perftest's wr_id does).
func (s *Session) postRecv(r *qpRes, i int) error {
	r.rwr.ID = uint64(i)<<32 | uint64(uint32(r.posted))
	if s.srq == nil {
		if err := r.qp.PostRecv(&r.rwr); err != nil {
			return err
		}
	} else {
		if err := s.srq.PostRecv(&r.rwr); err != nil {
			return err
		}
		s.srqPosted++
	}
	r.posted++
	return nil
}

// TransportStats returns the transport counters of the session's QPs,
// summed, and how many QPs they cover.
func (s *Session) TransportStats() (transport.Stats, int) {
	var sum transport.Stats
	n := 0
	for _, r := range s.qps {
		if r.qp != nil {
			st := r.qp.Stats()
			sum.Add(&st)
			n++
		}
	}
	return sum, n
}

// Close destroys the QPs and their resources (not the device).
func (s *Session) Close() {
	s.stopPassive()
	for _, r := range s.qps {
		if r.qp != nil {
			r.qp.Destroy()
		}
		if r.ah != nil {
			r.ah.Destroy()
		}
		if r.mr != nil {
			r.mr.Dereg()
		}
	}
	s.qps = nil
	if s.srq != nil {
		s.srq.Destroy()
	}
	if s.scq != nil {
		s.scq.Destroy()
	}
	if s.rcq != nil && s.rcq != s.scq {
		s.rcq.Destroy()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
	s.scq, s.rcq, s.srq, s.pd = nil, nil, nil, nil
}

// ErrStalled is wrapped by the error of a run whose messages stopped
// arriving before the last one: a UC or UD bandwidth server, either side
// of a latency test, an RC run that made no progress for rcStall, or a
// timed or infinite run whose WRs did not complete within drainWait of its
// end.
var ErrStalled = errors.New("bench: messages stopped arriving")

// drainWait bounds how long an infinite run's client waits, once stopped,
// for the WRs it posted to complete.
var drainWait = 5 * time.Second

// unreliableStall is how long a UC or UD run waits for the next message
// before it gives up (perftest's check_alive: 60 s).
var unreliableStall = 60 * time.Second

// rcStall is how long an RC run goes without a completion (or, in
// write_lat, an arriving RDMA WRITE) before it gives up: perftest's retry
// count 7 retries forever, as rxe's does, so a peer that died or stopped
// answering never fails the WRs and the run would wait for good (perftest
// on rxe does). The same minute as perftest's check_alive.
var rcStall = 60 * time.Second

// watchStall returns ctx, canceled with an error wrapping ErrStalled when
// an RC run makes no progress (Session.progress) for rcStall, or for a
// rate-limited run four of its bursts' gaps if that is longer; stop ends
// the watch. UC and UD runs have their own deadlines (unreliableStall).
func (s *Session) watchStall(ctx context.Context, size int) (context.Context, func()) {
	if s.p.Conn != hca.RC {
		return ctx, func() {}
	}
	limit := rcStall
	if rl := newRateLimiter(&s.p, size); rl != nil {
		limit = max(limit, 4*rl.gap)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(max(limit/8, time.Millisecond))
		defer t.Stop()
		last, since := s.progress.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case now := <-t.C:
				if n := s.progress.Load(); n != last {
					last, since = n, now
				} else if now.Sub(since) >= limit {
					cancel(fmt.Errorf("%w: no completion for %v: the peer stopped answering (an RC QP with perftest's retry count 7 retries forever, as rxe's does)",
						ErrStalled, limit.Round(time.Millisecond)))
					return
				}
			}
		}
	}()
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}

// Result is one size's measurement: BW for bandwidth tests, Lat for
// latency tests. Passive sides (the server of write/read/atomic bw and
// read_lat) return a zero Result with Passive set.
type Result struct {
	BW      BWResult
	Lat     LatResult
	Passive bool
	// CPUUtil is the share of the machine's CPU time that was busy while
	// the result was measured, in percent (Params.CPUUtil; set by the
	// caller).
	CPUUtil float64
}

// Run runs one size's traffic in this side's role (Ready must have been
// called with the same size).
func (s *Session) Run(ctx context.Context, size int) (Result, error) {
	if s.remote == nil {
		return Result{}, errors.New("bench: session not connected")
	}
	if len(s.qps) == 0 || s.qps[0].wr.SGL == nil || int(s.qps[0].sgl[0].Length) != size {
		return Result{}, fmt.Errorf("bench: Run(%d) without Ready(%d)", size, size)
	}
	if s.passive() {
		s.spinPassive()
		return Result{Passive: true}, nil
	}
	wctx, stop := s.watchStall(ctx, size)
	defer stop()
	r, err := s.run(wctx, size)
	if err != nil && ctx.Err() == nil {
		if c := context.Cause(wctx); errors.Is(c, ErrStalled) {
			err = c
		}
	}
	return r, err
}

// passive reports whether this side posts nothing and polls no CQ while
// its peer runs: the server of write/read/atomic bw (unless -b) and of
// read_lat, whose HCA alone answers.
func (s *Session) passive() bool {
	if s.client {
		return false
	}
	switch s.p.Mode {
	case ModeWriteBW, ModeReadBW, ModeAtomicBW:
		return !s.p.Duplex
	case ModeReadLat:
		return true
	}
	return false
}

// run is Run's switch over the modes of an active side.
func (s *Session) run(ctx context.Context, size int) (Result, error) {
	switch s.p.Mode {
	case ModeSendBW:
		if s.p.Duplex {
			r, err := s.sendBidir(ctx, size)
			return Result{BW: r}, err
		}
		if s.client {
			r, err := s.bwClient(ctx, size)
			return Result{BW: r}, err
		}
		r, err := s.sendServer(ctx, size)
		return Result{BW: r}, err
	case ModeWriteBW, ModeReadBW, ModeAtomicBW:
		if s.p.WarmUp {
			if err := s.warmUp(ctx); err != nil {
				return Result{}, err
			}
		}
		r, err := s.bwClient(ctx, size)
		return Result{BW: r}, err
	case ModeSendLat:
		r, err := s.latPingPong(ctx, size, s.waitRecv)
		return Result{Lat: r}, err
	case ModeWriteLat:
		r, err := s.latPingPong(ctx, size, s.waitWrite)
		return Result{Lat: r}, err
	default: // ModeReadLat
		r, err := s.latRead(ctx, size)
		return Result{Lat: r}, err
	}
}

// spinPassive starts, on a busy-polling device, a goroutine that polls the
// link until the next Ready or Close: a passive server (read_lat, and the
// bandwidth modes given --busy-poll) posts nothing and polls no CQ while
// the client runs, yet its HCA, software in this process, answers every
// request. Without it each READ request waited for the device's reader
// goroutine to be woken (6.1 TCG guest, read_lat: ~200-450 us typical
// against rxe's 32-51, whose requests are answered in the kernel's softirq).
func (s *Session) spinPassive() {
	if s.spinStop != nil || !s.dev.BusyPolling() {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	s.spinStop, s.spinDone = stop, done
	cq := s.scq
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			cq.PollLink()
			if n%8 == 7 {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
			}
		}
	}()
}

// stopPassive stops spinPassive's goroutine, if it runs, and waits for it.
func (s *Session) stopPassive() {
	if s.spinStop == nil {
		return
	}
	close(s.spinStop)
	<-s.spinDone
	s.spinStop, s.spinDone = nil, nil
}

func (s *Session) opName() string {
	switch s.p.Mode {
	case ModeSendBW, ModeSendLat:
		return "SEND"
	case ModeWriteBW, ModeWriteLat:
		return "RDMA_WRITE"
	case ModeReadBW, ModeReadLat:
		return "RDMA_READ"
	}
	return s.p.Atomic.String()
}

// poll fills s.wcs from cq, blocking until at least one completion arrives
// and checking every status. Mirrors perftest's ibv_poll_cq loop, which
// aborts the test on the first error completion.
func (s *Session) poll(ctx context.Context, cq *hca.CQ) ([]hca.WC, error) {
	busy := s.dev.BusyPolling()
	for spins := 1; ; spins++ {
		if wcs, err := s.pollOnce(cq); wcs != nil || err != nil {
			return wcs, err
		}
		if busy {
			// Spin as perftest does on ibv_poll_cq: each empty Poll
			// receives in this goroutine. Yield now and then so that
			// the device's own goroutines (timers, a reader taking
			// over) run, on this thread when nothing else is ready.
			// Every 8 empty polls, not 32: in the TCG guest of
			// bench-vs-rxe that cut send_lat's t_avg by a quarter and
			// its p99.9 by half (docs/performance.md, session 6); every
			// poll gained nothing more.
			if spins%8 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("bench: waiting for completions: %w", err)
				}
				runtime.Gosched()
			}
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			return nil, fmt.Errorf("bench: waiting for completions: %w", err)
		}
	}
}

// spinBelow is how close to a deadline pollUntil stops blocking and spins:
// a Go timer of an idle process fires about a millisecond late (epoll's
// millisecond timeout), longer than a rate limiter's gap between bursts
// of small messages.
const spinBelow = 2 * time.Millisecond

// pollUntil polls cq until completions arrive or the time at passes; then
// it returns none and no error.
func (s *Session) pollUntil(ctx context.Context, cq *hca.CQ, at time.Time) ([]hca.WC, error) {
	for {
		if wcs, err := s.pollOnce(cq); wcs != nil || err != nil {
			return wcs, err
		}
		left := time.Until(at)
		if left <= 0 {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: waiting for completions: %w", err)
		}
		if left <= spinBelow || s.dev.BusyPolling() {
			runtime.Gosched()
			continue
		}
		wctx, cancel := context.WithDeadline(ctx, at.Add(-spinBelow))
		err := cq.Wait(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("bench: waiting for completions: %w", err)
		}
	}
}

// pollOnce polls cq once: the completions it holds, every status checked,
// or none.
func (s *Session) pollOnce(cq *hca.CQ) ([]hca.WC, error) {
	n, err := cq.Poll(s.wcs)
	if err != nil || n == 0 {
		return nil, err
	}
	s.progress.Add(1)
	if err := s.checkWCs(s.wcs[:n]); err != nil {
		return nil, err
	}
	return s.wcs[:n], nil
}

// checkWCs returns an error for the first completion in wcs that failed.
func (s *Session) checkWCs(wcs []hca.WC) error {
	for i := range wcs {
		if wc := &wcs[i]; wc.Status != transport.StatusSuccess {
			return fmt.Errorf("bench: completion with error: status %q (%d), WR ID %#x, QP 0x%06x",
				wc.Status, wc.Status, wc.WRID, uint32(s.qps[min(len(s.qps)-1, int(wc.WRID>>32))].qp.QPN()))
		}
	}
	return nil
}

// drain takes what cq holds without waiting, checking every status, and
// returns how many completions it took.
func (s *Session) drain(cq *hca.CQ) (int, error) {
	n := 0
	for {
		k, err := cq.Poll(s.wcs)
		if err != nil || k == 0 {
			return n, err
		}
		if err := s.checkWCs(s.wcs[:k]); err != nil {
			return n, err
		}
		n += k
	}
}

// progress prints a progress line about every second after the first two.
type progress struct {
	w     io.Writer
	size  int
	last  time.Duration
	lastN int
}

func (pr *progress) tick(el time.Duration, msgs int) {
	if pr.w == nil || el < 2*time.Second || el-pr.last < time.Second {
		return
	}
	rate := float64(msgs-pr.lastN) * float64(pr.size) / (el - pr.last).Seconds() / (1 << 20)
	fmt.Fprintf(pr.w, "goroce bench: size %d B, %.1f s elapsed, %.2f MB/sec now, %d messages\n", pr.size, el.Seconds(), rate, msgs)
	pr.last, pr.lastN = el, msgs
}

// bwClient is run_iter_bw: each QP keeps up to TxDepth WRs posted,
// signaling one in CQMod (and the last); the send CQ is polled for the
// signaled ones. With a Duration it posts until the deadline, finishing
// the current moderation group so that every WR is accounted for.
func (s *Session) bwClient(ctx context.Context, size int) (BWResult, error) {
	return s.bwLoop(ctx, size, false)
}

// sendBidir is run_iter_bi, ib_send_bw -b: bwClient's sends, while the
// peer's SENDs arrive on the same CQ and their receives are reposted as
// sendServer does. The result counts this side's sends. It ends when every
// send completed and every expected SEND arrived; with a Duration, at the
// deadline plus the grace second sendServer also gives, reposting
// receives until then (the peer's last SENDs need them to complete).
func (s *Session) sendBidir(ctx context.Context, size int) (BWResult, error) {
	return s.bwLoop(ctx, size, true)
}

func (s *Session) bwLoop(ctx context.Context, size int, recv bool) (BWResult, error) {
	p := &s.p
	total := p.Iters * len(s.qps)
	s.samples = s.samples[:0]
	pr := progress{w: s.Progress, size: size}
	done, posting := 0, true
	rdone, rtotal := 0, 0
	if recv && p.Duration == 0 {
		rtotal = total
	}
	start := time.Now()
	var el time.Duration
	// An infinite run reports every p.Duration from ivStart, when ivDone
	// messages had completed, and keeps no samples (no peak, no end).
	ivStart, ivDone := start, 0
	var stoppedAt time.Time
	if p.Infinite {
		pr.w = nil // the interval lines say it
	}
	rl := newRateLimiter(p, size)
	// untilStop is ctx, done when a timed run's time is up or an infinite
	// run is stopped: a wait for completions that never come (the peer
	// gone, the TX depth full) must still see the end of the run.
	untilStop := ctx
	switch {
	case p.Infinite && s.Stop != nil:
		c, cancel := s.untilStopped(ctx)
		defer cancel()
		untilStop = c
	case !p.Infinite && p.Duration > 0:
		c, cancel := context.WithDeadline(ctx, start.Add(p.Duration))
		defer cancel()
		untilStop = c
	}
	for {
		throttled := false // the rate limiter held a WR back
		if posting {
			var stop bool
			if p.Infinite {
				stop = s.stopped()
			} else {
				stop = p.Duration > 0 && time.Since(start) >= p.Duration
			}
			pl := p.PostList
			for i, r := range s.qps {
				// perftest's run_iter_bw posts whole lists only.
				for r.scnt-r.ccnt+pl <= p.TxDepth {
					if p.Duration == 0 && r.scnt >= p.Iters {
						break
					}
					if stop && r.scnt%p.CQMod == 0 {
						break
					}
					if rl != nil && !rl.allow(time.Now()) {
						throttled = true
						break
					}
					if err := s.postBW(r, i, pl); err != nil {
						return BWResult{}, err
					}
					if rl != nil {
						rl.posted(pl)
					}
				}
			}
			if stop {
				if stoppedAt.IsZero() {
					stoppedAt = time.Now()
				}
				// Stop once every QP has posted a whole moderation group,
				// whose last WR is signaled.
				posting, total = false, 0
				for _, r := range s.qps {
					total += r.scnt
					if r.scnt%p.CQMod != 0 {
						posting = true
					}
				}
			}
		}
		if done >= total && (!posting || p.Duration == 0) {
			if el == 0 {
				el = time.Since(start) // the sends' time, not the grace's
			}
			// A timed run's receives have no count to reach: they are
			// reposted until the grace deadline below ends the loop.
			if rdone >= rtotal && (!recv || p.Duration == 0) {
				break
			}
		}
		wctx, cancel := ctx, context.CancelFunc(nil)
		grace, untilStopped := false, false
		switch {
		case p.Infinite && !stoppedAt.IsZero():
			wctx, cancel = context.WithDeadline(ctx, stoppedAt.Add(drainWait))
		case recv && p.Duration > 0 && done >= total && !posting:
			wctx, cancel = context.WithDeadline(ctx, start.Add(p.Duration+time.Second))
			grace = true
		case p.Duration > 0 && !stoppedAt.IsZero():
			// The time is up: what is outstanding has drainWait to
			// complete (with the TX depth full and no completions, the
			// last moderation group cannot even be posted whole).
			wctx, cancel = context.WithDeadline(ctx, stoppedAt.Add(drainWait))
		case posting && untilStop != ctx:
			wctx, untilStopped = untilStop, true
		}
		var wcs []hca.WC
		var err error
		if throttled { // (posting: none of the deadlines above applies)
			// Poll until the next burst is due, no longer: with
			// nothing outstanding no completion would end the wait.
			wcs, err = s.pollUntil(ctx, s.scq, rl.next)
		} else {
			wcs, err = s.poll(wctx, s.scq)
		}
		if cancel != nil {
			cancel()
			if err != nil && ctx.Err() == nil && wctx.Err() != nil {
				if grace {
					break // the grace second passed
				}
				// perftest's retry count 7 retries forever (as rxe's
				// does): a peer gone for good never fails the WRs.
				return BWResult{}, fmt.Errorf("%w: %d WRs still outstanding %v after the stop: the peer stopped answering",
					ErrStalled, s.outstanding(), drainWait)
			}
		}
		if err != nil && untilStopped && ctx.Err() == nil && untilStop.Err() != nil {
			continue // the run's end: stop posting, then drain
		}
		if err != nil {
			return BWResult{}, err
		}
		for i := range wcs {
			qi := int(wcs[i].WRID >> 32)
			r := s.qps[qi]
			if wcs[i].Opcode&transport.WCRecv != 0 {
				r.rcnt++
				rdone++
				if s.wantRecv(r) {
					if err := s.postRecv(r, qi); err != nil {
						return BWResult{}, err
					}
				}
				continue
			}
			c := sentThrough(r.ccnt, wcs[i].WRID)
			done += c - r.ccnt
			r.ccnt = c
		}
		if p.Infinite {
			if now := time.Now(); now.Sub(ivStart) >= p.Duration && posting {
				if s.Interval != nil {
					s.Interval(s.bwResult(size, done-ivDone, now.Sub(ivStart)))
				}
				ivStart, ivDone = now, done
			}
			continue
		}
		if el == 0 { // the sends' progress (not the grace's receives)
			t := time.Since(start)
			s.samples = append(s.samples, sample{t, done})
			pr.tick(t, done)
		}
	}
	if p.Infinite {
		// What ran since the last interval line: the run's last line.
		return s.bwResult(size, done-ivDone, time.Since(ivStart)), nil
	}
	if el == 0 {
		el = time.Since(start)
	}
	done, el = s.sampled(done, el)
	return s.bwResult(size, done, el), nil
}

// untilStopped returns ctx, also done once Stop closes (an infinite run
// stopped), and its cancel.
func (s *Session) untilStopped(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.Stop:
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// outstanding is how many WRs the QPs posted that have not completed.
func (s *Session) outstanding() int {
	n := 0
	for _, r := range s.qps {
		n += r.scnt - r.ccnt
	}
	return n
}

// sampled narrows a Duration run's count and time to perftest's sample
// window (catch_alarm's SAMPLE_STATE): from Margin after the start to
// Margin before the end of the duration, by the completion samples
// taken there. Without a margin (or samples) it returns done and el.
func (s *Session) sampled(done int, el time.Duration) (int, time.Duration) {
	m := s.p.Margin
	if s.p.Duration == 0 || m == 0 || len(s.samples) == 0 {
		return done, el
	}
	var a, b sample // the last samples at or before each edge
	for _, x := range s.samples {
		if x.t <= m {
			a = x
		}
		if x.t <= s.p.Duration-m {
			b = x
		}
	}
	if b.t <= a.t {
		return done, el
	}
	return b.msgs - a.msgs, b.t - a.t
}

// postBW posts the next n WRs of QP i, signaling one in CQMod and the
// run's last: one at a time, or as one post list.
func (s *Session) postBW(r *qpRes, i, n int) error {
	p := &s.p
	wr := func(k int) hca.SendWR {
		w := r.wr
		w.ID = uint64(i)<<32 | uint64(uint32(k))
		w.Flags = r.flags
		if (k+1)%p.CQMod == 0 || (p.Duration == 0 && k+1 == p.Iters) {
			w.Flags |= transport.SendSignaled
		}
		return w
	}
	if n == 1 {
		r.wr = wr(r.scnt)
		if err := r.qp.PostSend(&r.wr); err != nil {
			return fmt.Errorf("bench: post %s: %w", s.opName(), err)
		}
		r.scnt++
		return nil
	}
	if len(r.list) != n {
		r.list = make([]hca.SendWR, n)
	}
	for k := range r.list {
		r.list[k] = wr(r.scnt + k)
	}
	posted, err := r.qp.PostSendList(r.list)
	r.scnt += posted
	if err != nil {
		return fmt.Errorf("bench: post %s list: %w", s.opName(), err)
	}
	return nil
}

// warmUp is perform_warm_up: each QP in turn posts TxDepth of the run's
// WRs (PostList of them with a post list: perftest's warmupsession), every
// one signaled, and waits for their completions, before the clock starts.
// The run's own counts are untouched.
func (s *Session) warmUp(ctx context.Context) error {
	n := s.p.TxDepth
	if s.p.PostList > 1 {
		n = s.p.PostList // warmupsession with a post list
	}
	for i, r := range s.qps {
		for k := range n {
			w := r.wr
			w.ID = uint64(i)<<32 | uint64(uint32(k))
			w.Flags = r.flags | transport.SendSignaled
			if err := r.qp.PostSend(&w); err != nil {
				return fmt.Errorf("bench: warm-up: post %s on QP %d: %w", s.opName(), i, err)
			}
		}
		for got := 0; got < n; {
			wcs, err := s.poll(ctx, s.scq)
			if err != nil {
				return fmt.Errorf("bench: warm-up on QP %d: %w", i, err)
			}
			got += len(wcs)
		}
	}
	return nil
}

// sentThrough is the number of sends through the one whose completion
// carries wrid, given ccnt known complete before it. The WR ID holds only
// the low 32 bits of that count (its high bits name the QP), and an
// infinite run passes 2^32 sends; fewer than 2^32 are ever outstanding.
func sentThrough(ccnt int, wrid uint64) int {
	return ccnt + int(uint32(wrid)+1-uint32(ccnt))
}

// stopped reports whether Stop has closed.
func (s *Session) stopped() bool {
	select {
	case <-s.Stop:
		return true
	default:
		return false
	}
}

// sendServer is run_iter_bw_server: count receives, reposting while more
// are expected. With a Duration it runs until the deadline plus a grace
// second, so that the client's last messages still find receives.
func (s *Session) sendServer(ctx context.Context, size int) (BWResult, error) {
	p := &s.p
	total := p.Iters * len(s.qps)
	s.samples = s.samples[:0]
	pr := progress{w: s.Progress, size: size}
	done := 0
	// The clock starts with the run (just after the start barrier), not at
	// the first receive, so that a size whose messages all arrive in one
	// poll still has a duration.
	start := time.Now()
	var deadline time.Time
	var last time.Duration // an infinite run's time to its last receive
	// UC and UD resend nothing: a message lost on the way never arrives.
	// perftest's check_alive gives up when no message came for a while;
	// so does this server, saying how many did.
	unreliable := p.Conn != hca.RC && p.Duration == 0
	if p.Infinite {
		pr.w = nil // perftest's server is silent until the end
	}
	// An infinite run serves until Stop closes (the client went on to the
	// closing exchange, or away), then takes what its CQ still holds.
	runCtx := ctx
	if p.Infinite {
		var cancel context.CancelFunc
		runCtx, cancel = s.untilStopped(ctx)
		defer cancel()
	}
	for p.Duration > 0 || done < total {
		wctx := runCtx
		var cancel context.CancelFunc
		switch {
		case p.Infinite:
		case p.Duration > 0:
			if deadline.IsZero() {
				deadline = time.Now().Add(p.Duration + time.Second)
			}
			wctx, cancel = context.WithDeadline(ctx, deadline)
		case unreliable:
			wctx, cancel = context.WithTimeout(ctx, unreliableStall)
		}
		wcs, err := s.poll(wctx, s.rcq)
		if cancel != nil {
			cancel()
		}
		if err != nil {
			if p.Infinite && ctx.Err() == nil && s.stopped() {
				n, err := s.drain(s.rcq)
				if err != nil {
					return BWResult{}, err
				}
				if n > 0 {
					done += n
					last = time.Since(start)
				}
				break
			}
			if p.Duration > 0 && ctx.Err() == nil && time.Now().After(deadline) {
				break
			}
			if unreliable && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return BWResult{}, fmt.Errorf("%w: no message for %v: received %d of %d (%v does not resend a lost message)",
					ErrStalled, unreliableStall, done, total, p.Conn)
			}
			return BWResult{}, err
		}
		for i := range wcs {
			qi := int(wcs[i].WRID >> 32)
			r := s.qps[qi]
			r.rcnt++
			done++
			if s.wantRecv(r) {
				if err := s.postRecv(r, qi); err != nil {
					return BWResult{}, err
				}
			}
		}
		el := time.Since(start)
		if p.Infinite {
			last = el
			continue
		}
		s.samples = append(s.samples, sample{el, done})
		pr.tick(el, done)
	}
	if p.Infinite {
		// perftest's server prints nothing; this one sums up the run.
		return s.bwResult(size, done, last), nil
	}
	if len(s.samples) == 0 {
		return BWResult{Op: s.opName(), Size: size}, nil
	}
	done, el := s.sampled(done, s.samples[len(s.samples)-1].t)
	r := s.bwResult(size, done, el)
	// run_iter_bw_server times no posts, so perftest's send_bw server
	// prints a BW peak of 0.00 (interop: ib_send_bw -q 4's server).
	r.PeakBytesPerSec = 0
	return r, nil
}

func (s *Session) bwResult(size, done int, el time.Duration) BWResult {
	r := BWResult{Op: s.opName(), Size: size, Iters: done / len(s.qps), QPs: len(s.qps), Messages: done, Duration: el}
	if el > 0 {
		r.BytesPerSec = float64(done) * float64(size) / el.Seconds()
		r.MsgPerSec = float64(done) / el.Seconds()
	}
	if s.p.NoPeak {
		return r
	}
	r.PeakBytesPerSec = peakRate(s.samples, el) * float64(size)
	if r.PeakBytesPerSec < r.BytesPerSec {
		r.PeakBytesPerSec = r.BytesPerSec
	}
	return r
}

// peakRate is the best message rate over any window of at least a tenth of
// the run between two completion samples (perftest's peak is the best
// per-WR interval, which a software HCA's batched completions make
// meaningless; a window keeps the figure honest).
func peakRate(ss []sample, el time.Duration) float64 {
	win := el / 10
	best := 0.0
	j := 0
	for k := range ss {
		for j < k && ss[k].t-ss[j+1].t >= win {
			j++
		}
		if dt := ss[k].t - ss[j].t; k > j && dt >= win && dt > 0 {
			best = max(best, float64(ss[k].msgs-ss[j].msgs)/dt.Seconds())
		}
	}
	return best
}

// resetLat empties s.lat with room for every sample of an -n run (up to
// 4 Mi samples, 32 MiB; perftest allocates its timestamps likewise), so
// that no append in a timed loop grows the slice: a copy, and GC work on
// the P that polls.
func (s *Session) resetLat() {
	want := min(s.p.Iters, 1<<22)
	if s.p.Duration > 0 {
		want = 1 << 16
	}
	if cap(s.lat) < want {
		s.lat = make([]time.Duration, 0, want)
	}
	s.lat = s.lat[:0]
}

// latPingPong is run_iter_lat_send / run_iter_lat_write: one side posts
// message 1, then each side waits for the peer's message i before posting
// its own message i (the first poster waits after posting). Who posts first
// differs: ib_send_lat's client (run_iter_lat_send), but ib_write_lat's
// SERVER, since run_iter_lat_write skips the first poll only when
// `scnt < 1 && machine == SERVER`; the golden write_lat.pcap shows the
// server's WRITE (payload 00 01) first and the client's after it. Both
// sides starting would leave each one WRITE ahead: the peer's counter byte
// is overwritten with i+1 before the peer polls for i, and both spin.
// Both sides measure and report, as perftest's do; a sample is half the
// round trip: from a side's post of i to the peer's next message (i for the
// first poster, i+1 for the other).
func (s *Session) latPingPong(ctx context.Context, size int, wait func(context.Context, *qpRes, int, time.Time) (bool, error)) (LatResult, error) {
	r := s.qps[0]
	p := &s.p
	s.resetLat()
	first := s.client
	if p.Mode == ModeWriteLat {
		first = !s.client
	}
	// The first poster stops posting at the deadline; both wait one more
	// second for the answer to the last message.
	var stop, wd time.Time
	if p.Duration > 0 {
		stop = time.Now().Add(p.Duration)
		wd = stop.Add(time.Second)
	}
	// One clock read per iteration, when the answer is in: it ends one
	// sample and starts the next, so the samples tile the run with no
	// gap, as perftest's deltas of tposted (one get_cycles per post) do.
	// A second read per iteration costs ~200 ns in a TCG guest.
	var tPost time.Time
	done := 0
	win := marginWindow{lo: -1, hi: -1}
	t0 := time.Now()
	tNow := t0
	// A UC or UD message lost on the way is never resent, and its
	// answer never comes: give up as the bandwidth server does.
	unreliable := p.Conn != hca.RC && p.Duration == 0
	for i := 1; p.Duration > 0 || i <= p.Iters; i++ {
		if first {
			if !stop.IsZero() && tNow.After(stop) {
				break
			}
			tPost = tNow
			if err := s.postLat(ctx, r, i, size); err != nil {
				return LatResult{}, err
			}
		}
		if unreliable {
			wd = time.Now().Add(unreliableStall)
		}
		ok, err := wait(ctx, r, i, wd)
		if err != nil {
			return LatResult{}, err
		}
		if !ok && unreliable {
			return LatResult{}, fmt.Errorf("%w: no message %d of %d for %v (%v does not resend a lost message)",
				ErrStalled, i, p.Iters, unreliableStall, p.Conn)
		}
		if !ok {
			break
		}
		tNow = time.Now()
		if first || i > 1 {
			s.lat = append(s.lat, tNow.Sub(tPost)/2)
		}
		if p.Margin > 0 {
			win.note(tNow.Sub(t0), len(s.lat), p.Margin, p.Duration)
		}
		if !first {
			tPost = tNow
			if err := s.postLat(ctx, r, i, size); err != nil {
				return LatResult{}, err
			}
		}
		done++
	}
	// Collect the last send completion so the next size starts clean. A
	// timed run gives it drainWait past the end, as a timed bandwidth run
	// its outstanding WRs: sent to a peer gone for good it never fails
	// (retry count 7 retries forever), and the run would go on to rcStall.
	for r.ccnt < r.scnt {
		if _, err := s.pollTimed(ctx, stop); err != nil {
			return LatResult{}, err
		}
		r.ccnt = r.scnt
	}
	// The second poster has one sample fewer than iterations (its last
	// message gets no answer), as perftest's iters-1 deltas of tposted;
	// like perftest it reports the iterations run.
	if p.Margin > 0 {
		s.lat = win.cut(s.lat)
		done = len(s.lat)
	}
	res := s.latResult(size)
	res.Iters = done
	return res, nil
}

// marginWindow finds a latency Duration run's samples between its margins
// (-f): lo indexes the first sample taken once Margin had passed, hi the
// first taken once only Margin was left; -1 until then.
type marginWindow struct{ lo, hi int }

// note is called after each iteration, since the run started, with n
// samples taken so far (the last of them in this iteration, if any).
func (w *marginWindow) note(since time.Duration, n int, margin, dur time.Duration) {
	if w.lo < 0 && since >= margin && n > 0 {
		w.lo = n - 1
	}
	if w.hi < 0 && since >= dur-margin && n > 0 {
		w.hi = n - 1
	}
}

// cut returns the samples of the window (all of them when the run ended
// before the first margin passed).
func (w *marginWindow) cut(lat []time.Duration) []time.Duration {
	lo, hi := w.lo, w.hi
	if lo < 0 {
		return lat
	}
	if hi < 0 {
		hi = len(lat)
	}
	return lat[lo:max(lo, hi)]
}

// postLat posts message i: the previous send must have completed (TX depth
// 1); for RDMA WRITE the last byte carries i, which the peer polls for.
func (s *Session) postLat(ctx context.Context, r *qpRes, i, size int) error {
	for r.ccnt < r.scnt {
		if _, err := s.poll(ctx, s.scq); err != nil {
			return err
		}
		r.ccnt = r.scnt
	}
	if s.p.Mode == ModeWriteLat {
		r.mr.Bytes()[size-1] = byte(i)
	}
	r.wr.ID = uint64(i)
	r.wr.Flags = r.flags | transport.SendSignaled
	if err := r.qp.PostSend(&r.wr); err != nil {
		return fmt.Errorf("bench: post %s: %w", s.opName(), err)
	}
	r.scnt++
	return nil
}

// waitRecv waits for the next receive completion and reposts.
func (s *Session) waitRecv(ctx context.Context, r *qpRes, i int, deadline time.Time) (bool, error) {
	wctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if _, err := s.poll(wctx, s.rcq); err != nil {
		if !deadline.IsZero() && ctx.Err() == nil && time.Now().After(deadline) {
			return false, nil
		}
		return false, err
	}
	r.rcnt++
	if s.wantRecv(r) {
		if err := s.postRecv(r, 0); err != nil {
			return false, err
		}
	}
	return true, nil
}

// waitWrite polls the last byte of the peer's RDMA WRITE target until it
// holds byte(i), as ib_write_lat spins on its buffer. It reads through
// QP.ReadMR, under the lock with which the HCA places incoming data, so
// that the poll is not a data race.
func (s *Session) waitWrite(ctx context.Context, r *qpRes, i int, deadline time.Time) (bool, error) {
	off := s.bufSize + int(r.rsgl[0].Length) - 1
	busy := s.dev.BusyPolling()
	var b [1]byte
	for n := 0; ; n++ {
		if err := r.qp.ReadMR(r.mr, off, b[:]); err != nil {
			return false, err
		}
		if b[0] == byte(i) {
			s.progress.Add(1)
			return true, nil
		}
		if n&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("bench: waiting for RDMA WRITE %d: %w", i, err)
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return false, nil
			}
			if st := r.qp.State(); st == hca.StateErr {
				return false, fmt.Errorf("bench: QP 0x%06x in error state waiting for RDMA WRITE %d", uint32(r.qp.QPN()), i)
			}
		}
		if busy {
			// Receive in this goroutine, as a busy-polled CQ does: the
			// WRITE brings no completion to poll for, and the reader
			// goroutine stands aside while this side polls its send CQ
			// (write_lat between two processes on this host: t_typical
			// 584 us without it). Yield now and then, as poll does.
			s.rcq.PollLink()
			if n%8 == 7 {
				runtime.Gosched()
			}
			continue
		}
		// Spin politely first (the HCA's goroutines need the CPU to place
		// the data), then back off: on a machine with few cores two
		// spinning sides starve the HCA until the scheduler preempts them
		// (10 ms), which is what a busy-poll costs perftest on rxe as well.
		if n < 256 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Duration(min(n-255, 20)) * time.Microsecond)
		}
	}
}

// latRead is run_iter_lat (READ): one RDMA READ at a time; a sample is the
// whole round trip, as perftest reports for reads.
func (s *Session) latRead(ctx context.Context, size int) (LatResult, error) {
	r := s.qps[0]
	p := &s.p
	s.resetLat()
	start := time.Now()
	for i := 1; p.Duration > 0 || i <= p.Iters; i++ {
		if p.Duration > 0 && time.Since(start) >= p.Duration {
			break
		}
		t0 := time.Now()
		if err := s.postLat(ctx, r, i, size); err != nil {
			return LatResult{}, err
		}
		var end time.Time
		if p.Duration > 0 {
			end = start.Add(p.Duration)
		}
		if _, err := s.pollTimed(ctx, end); err != nil {
			return LatResult{}, err
		}
		r.ccnt = r.scnt
		s.lat = append(s.lat, time.Since(t0))
	}
	return s.latResult(size), nil
}

// pollTimed polls the send CQ of a latency run; a timed run's (end set)
// for at most drainWait past its end, after which it fails with
// ErrStalled.
func (s *Session) pollTimed(ctx context.Context, end time.Time) ([]hca.WC, error) {
	if end.IsZero() {
		return s.poll(ctx, s.scq)
	}
	wctx, cancel := context.WithDeadline(ctx, end.Add(drainWait))
	defer cancel()
	wcs, err := s.poll(wctx, s.scq)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, fmt.Errorf("%w: a send still outstanding %v after the end of the run: the peer stopped answering", ErrStalled, drainWait)
	}
	return wcs, err
}

// latResult computes the statistics of this size's samples, keeping a copy
// in the order measured when -H or -U will print them.
func (s *Session) latResult(size int) LatResult {
	var keep []time.Duration
	if (s.p.Histogram || s.p.Unsorted) && s.p.Duration == 0 {
		keep = append([]time.Duration(nil), s.lat...)
	}
	r := latStats(s.opName(), size, s.lat)
	r.Samples = keep
	return r
}

// atomicValue reads the 8-byte atomic target of QP i (for tests).
func (s *Session) atomicValue(i int) uint64 {
	r := s.qps[i]
	var b [8]byte
	r.qp.ReadMR(r.mr, s.bufSize, b[:])
	return binary.NativeEndian.Uint64(b[:])
}
