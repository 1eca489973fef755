package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/transport"
)

// Defaults of the C tools.
const (
	DefaultSize    = 4096 // rc, uc, srq
	DefaultUDSize  = 2048 // ud_pingpong
	DefaultIters   = 1000
	DefaultRxDepth = 500
	// maxSlotBytes bounds the receive slots of an SRQ session (see New).
	maxSlotBytes = 64 << 20
	DefaultMTU   = bth.MTU1024
	UDQKey       = bth.QKey(0x11111111)
	// GRHRoom is what a UD receive buffer reserves for the GRH.
	GRHRoom = 40
)

// Config is what the tools' flags set.
type Config struct {
	// Type is RC (the zero value means RC), UC or UD.
	Type hca.QPType
	// SRQ, when > 0, behaves as ibv_srq_pingpong with that many RC QPs
	// sharing one SRQ (its -q). Type must be RC.
	SRQ int
	// Size is the message size (-s); 0: DefaultSize, or DefaultUDSize for UD.
	Size int
	// Iters is the number of exchanges (-n); 0: DefaultIters.
	Iters int
	// RxDepth is the number of receives kept posted (-r); 0: DefaultRxDepth.
	RxDepth int
	// MTU is the path MTU (-m); 0: DefaultMTU. Unused by UD.
	MTU bth.MTU
	// SL is the service level (-l).
	SL uint8
	// GIDIndex is the index of our GID (-g).
	GIDIndex int
	// Port is the IB port (-i); 0 means 1.
	Port int
	// Events sleeps on completion events instead of polling (-e).
	Events bool
	// Check runs rc_pingpong's -c test on the server at the end.
	Check bool
	// PSN, when set, gives the start PSN of each QP (tests); otherwise
	// PSNs are random as lrand48() & 0xffffff.
	PSN func(qp int) bth.PSN
	// Out receives the tools' lines; nil discards them.
	Out io.Writer
}

// Errors.
var (
	ErrConfig   = errors.New("pingpong: bad configuration")
	ErrPeer     = errors.New("pingpong: unusable peer address")
	ErrStatus   = errors.New("pingpong: completion with error status")
	ErrData     = errors.New("pingpong: data mismatch")
	ErrProtocol = errors.New("pingpong: unexpected completion")
)

// Result is a finished run.
type Result struct {
	Bytes   int64   // size * iters * 2, as the tools print
	Usec    float32 // elapsed microseconds (the C program's float)
	Iters   int
	Sends   int // send completions seen
	Recvs   int // receive completions seen, every one checked
	Local   []exchange.PingpongDest
	Remote  []exchange.PingpongDest
	Summary [2]string // the two summary lines, without newlines
	// LastSendUnacked is set when the run finished with its last SEND
	// still unacknowledged after LastAckGrace (see Run).
	LastSendUnacked bool
}

// LastAckGrace is how long an RC run waits, once every receive is done,
// for the ACK of its last SEND before it finishes without it. The pingpong
// protocol has a race the C tools lose too: the peer exits as soon as its
// own counts are done, so if the ACK of a side's last SEND is lost, nobody
// answers that SEND's retransmissions, and with retry_cnt 7 (infinite in
// rxe, and here) the side would retransmit forever. The last SEND did
// arrive: the client's is proven by the server's last message (the server
// sends it only after receiving), and the server's by the client's exit.
// (The other half, answering a peer that lost our last ACK, is Close's
// linger.) Eight local ACK timeouts at the tools' timeout 14 (67 ms).
const LastAckGrace = 8 * (4096 * time.Nanosecond << 14)

// wr_id layout: the low byte is the C programs' PINGPONG_RECV_WRID (1) or
// PINGPONG_SEND_WRID (2); receives carry their buffer slot above it.
// pollSpins is how many empty polls the polling loop makes before it
// blocks in CQ.Wait.
const pollSpins = 64

const (
	recvWRID = 1
	sendWRID = 2
	poison   = 0xEE
)

// Session is one pingpong run on a device: New creates the resources and
// posts the receives, Serve or Dial exchanges addresses over TCP and
// connects, Run does the traffic, Close frees everything.
type Session struct {
	cfg  Config
	dev  *hca.Device
	pd   *hca.PD
	cq   *hca.CQ
	srq  *hca.SRQ
	qps  []*hca.QP
	ah   *hca.AH
	mr   *hca.MR
	buf  []byte
	sgid hca.GID

	sendBuf  []byte // the send region: size bytes
	recvOff  int    // offset of slot 0 in buf
	slotSize int    // size, or size+GRHRoom for UD
	slots    int
	nextSlot int   // round-robin slot use (no free list)
	free     []int // free-list slot use: slots not posted; a slot is posted again only after its check
	poison   bool  // checked slots are poisoned, so a message that never arrived cannot pass
	recvSGL  [1]hca.SGE
	sendSGL  [1]hca.SGE

	local   []exchange.PingpongDest
	remote  []exchange.PingpongDest
	routs   int
	pending []int
	ref     []byte // server: the first message, every later one must equal it
	client  bool
	out     io.Writer

	// echoHook, when set (tests), may alter the server's echo once it has
	// been copied to the send region.
	echoHook func(sendRegion []byte)
}

// New creates the PD, MR, CQ, SRQ and QPs on dev, moves the QPs to INIT,
// posts RxDepth receives, arms the CQ when Events is set and prints the
// "local address" lines, in the C programs' order.
func New(dev *hca.Device, cfg Config) (s *Session, err error) {
	if err := fill(&cfg, dev); err != nil {
		return nil, err
	}
	s = &Session{cfg: cfg, dev: dev, out: cfg.Out}
	if s.out == nil {
		s.out = io.Discard
	}
	sess := s
	defer func() {
		if err != nil {
			sess.Close()
			s = nil
		}
	}()
	if s.sgid, err = dev.QueryGID(cfg.GIDIndex); err != nil {
		return nil, fmt.Errorf("%w: can't read sgid of index %d: %v", ErrConfig, cfg.GIDIndex, err)
	}
	nqp := max(cfg.SRQ, 1)
	s.slotSize = cfg.Size
	if cfg.Type == hca.UD {
		s.slotSize += GRHRoom
	}
	// A single QP's receives complete in order, one message in flight (the
	// tools are lock-step): two slots used round-robin suffice, and the
	// slot being checked is never the one the next message lands in. With
	// an SRQ they do not: one QP's message can still be in flight (a
	// retransmission, or simply another core) while the other QPs go
	// through any number of receives, so a round-robin slot could take two
	// messages at once. Then every posted receive gets its own slot, reused
	// only after its message has been checked, as long as that fits in
	// maxSlotBytes; beyond, the slots are shared round-robin (as the C
	// tool shares one buffer) and not poisoned: every message carries the
	// same bytes, so sharing is harmless, but a stale slot would pass.
	s.slots, s.poison = nqp+1, true
	if cfg.SRQ > 0 {
		if cfg.RxDepth*s.slotSize <= maxSlotBytes {
			s.slots = cfg.RxDepth
			s.free = make([]int, s.slots)
			for i := range s.free {
				s.free[i] = s.slots - 1 - i // popped 0, 1, 2, ...
			}
		} else {
			s.poison = false
		}
	}
	s.buf = make([]byte, cfg.Size+s.slots*s.slotSize)
	s.sendBuf = s.buf[:cfg.Size:cfg.Size]
	s.recvOff = cfg.Size
	for i := s.recvOff; i < len(s.buf); i++ {
		s.buf[i] = poison
	}
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.mr, err = s.pd.RegMR(s.buf, hca.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("couldn't register MR: %w", err)
	}
	if s.cq, err = dev.CreateCQ(cfg.RxDepth + nqp); err != nil {
		return nil, fmt.Errorf("couldn't create CQ: %w", err)
	}
	init := hca.QPInitAttr{Type: cfg.Type, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if cfg.SRQ > 0 {
		if s.srq, err = s.pd.CreateSRQ(hca.SRQAttr{MaxWR: cfg.RxDepth, MaxSGE: 1}); err != nil {
			return nil, fmt.Errorf("couldn't create SRQ: %w", err)
		}
		init.SRQ, init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = s.srq, 0, 0
	}
	for i := range nqp {
		qp, err := s.pd.CreateQP(init)
		if err != nil {
			return nil, fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		s.qps = append(s.qps, qp)
	}
	for i, qp := range s.qps {
		var a hca.QPAttr
		a.State, a.PKeyIndex, a.Port = hca.StateInit, 0, cfg.Port
		mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
		if cfg.Type == hca.UD {
			a.QKey = UDQKey
			mask |= transport.AttrQKey
		} else {
			a.AccessFlags = 0
			mask |= transport.AttrAccessFlags
		}
		if err := qp.Modify(&a, mask); err != nil {
			return nil, fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err)
		}
	}
	if s.routs = s.postRecv(cfg.RxDepth); s.routs < cfg.RxDepth {
		return nil, fmt.Errorf("couldn't post receive (%d)", s.routs)
	}
	if cfg.Events {
		if err := s.cq.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	lid := s.dev.QueryPort().LID
	for i, qp := range s.qps {
		d := exchange.PingpongDest{LID: lid, QPN: qp.QPN(), GID: s.sgid}
		if cfg.PSN != nil {
			d.PSN = cfg.PSN(i) & 0xFFFFFF
		} else {
			d.PSN = bth.PSN(rand.Uint32() & 0xFFFFFF)
		}
		s.local = append(s.local, d)
		sep := ","
		if cfg.Type == hca.UD {
			sep = ":" // ud_pingpong.c prints "PSN 0x%06x: GID %s"
		}
		fmt.Fprintf(s.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			d.LID, uint32(d.QPN), uint32(d.PSN), sep, gidString(d.GID))
	}
	s.pending = make([]int, nqp)
	return s, nil
}

// fill applies the defaults and checks cfg against the tools' rules.
func fill(cfg *Config, dev *hca.Device) error {
	if cfg.Type == 0 {
		cfg.Type = hca.RC
	}
	switch cfg.Type {
	case hca.RC, hca.UC, hca.UD:
	default:
		return fmt.Errorf("%w: QP type %v (want RC, UC or UD)", ErrConfig, cfg.Type)
	}
	if cfg.SRQ < 0 || cfg.SRQ > exchange.SRQRecords {
		return fmt.Errorf("%w: %d SRQ QPs (srq_pingpong allows 1..%d)", ErrConfig, cfg.SRQ, exchange.SRQRecords)
	}
	if cfg.SRQ > 0 && cfg.Type != hca.RC {
		return fmt.Errorf("%w: srq_pingpong uses RC QPs, not %v", ErrConfig, cfg.Type)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
		if cfg.Type == hca.UD {
			cfg.Size = DefaultUDSize
		}
	}
	if cfg.Size < 1 {
		return fmt.Errorf("%w: size %d", ErrConfig, cfg.Size)
	}
	if max := dev.QueryPort().MaxMsgSize; uint64(cfg.Size) > uint64(max) {
		// Every post would fail (the tools' "Couldn't post send"), after
		// allocating and registering the buffer: refuse it first.
		return fmt.Errorf("%w: size %d is over the port's max_msg_sz %d (%#x)", ErrConfig, cfg.Size, max, max)
	}
	if cfg.Iters == 0 {
		cfg.Iters = DefaultIters
	}
	if cfg.RxDepth == 0 {
		cfg.RxDepth = DefaultRxDepth
	}
	if cfg.Iters < 0 || cfg.RxDepth < 0 {
		return fmt.Errorf("%w: negative iterations or rx depth", ErrConfig)
	}
	if cfg.RxDepth < 2 {
		return fmt.Errorf("%w: rx depth %d (the tools re-post when fewer than 2 remain; use at least 2)", ErrConfig, cfg.RxDepth)
	}
	if cfg.SRQ > cfg.RxDepth {
		return fmt.Errorf("%w: rx_depth %d is too small for %d QPs -- must have at least one receive per QP", ErrConfig, cfg.RxDepth, cfg.SRQ)
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU.Bytes() == 0 {
		return fmt.Errorf("%w: path MTU %v", ErrConfig, cfg.MTU)
	}
	if cfg.Port == 0 {
		cfg.Port = 1
	}
	if cfg.Port != 1 {
		return fmt.Errorf("%w: IB port %d (a goroce device has port 1 only)", ErrConfig, cfg.Port)
	}
	if cfg.Type == hca.UD {
		if mtu := dev.QueryPort().ActiveMTU.Bytes(); cfg.Size > mtu {
			return fmt.Errorf("%w: requested size larger than port MTU (%d)", ErrConfig, mtu)
		}
	}
	if cfg.SL > 15 {
		return fmt.Errorf("%w: SL %d (0..15)", ErrConfig, cfg.SL)
	}
	return nil
}

// Local returns our address records (one per QP).
func (s *Session) Local() []exchange.PingpongDest { return s.local }

// records returns what we send over TCP: one record, or srq_pingpong's
// 256-entry table.
func (s *Session) records() ([]exchange.PingpongDest, error) {
	if s.cfg.SRQ > 0 {
		return exchange.SRQTable(s.local)
	}
	return s.local, nil
}

// Serve runs the server side of the exchange on conn: it reads the
// client's records, connects the QPs (before answering, as
// pp_server_exch_dest does), answers, waits for "done" and prints the
// "remote address" lines.
func (s *Session) Serve(conn io.ReadWriter) error {
	recs, err := s.records()
	if err != nil {
		return err
	}
	remote, err := exchange.PingpongServer(conn, len(recs), func(remote []exchange.PingpongDest) ([]exchange.PingpongDest, error) {
		if err := s.connect(remote); err != nil {
			return nil, err
		}
		return recs, nil
	})
	if err != nil {
		return fmt.Errorf("TCP exchange: %w", err)
	}
	s.printRemote(remote)
	return nil
}

// Dial runs the client side of the exchange on conn, prints the "remote
// address" lines and connects the QPs.
func (s *Session) Dial(conn io.ReadWriter) error {
	recs, err := s.records()
	if err != nil {
		return err
	}
	remote, err := exchange.PingpongClient(conn, recs)
	if err != nil {
		return fmt.Errorf("TCP exchange: %w", err)
	}
	s.printRemote(remote)
	s.client = true
	return s.connect(remote)
}

func (s *Session) printRemote(remote []exchange.PingpongDest) {
	for _, d := range remote[:len(s.qps)] {
		fmt.Fprintf(s.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			d.LID, uint32(d.QPN), uint32(d.PSN), gidString(d.GID))
	}
}

// connect moves every QP to RTR and RTS towards the peer's records
// (pp_connect_ctx).
func (s *Session) connect(remote []exchange.PingpongDest) error {
	if len(remote) < len(s.qps) {
		return fmt.Errorf("%w: %d remote records for %d QPs", ErrPeer, len(remote), len(s.qps))
	}
	remote = remote[:len(s.qps)]
	for i, r := range remote {
		// pp_connect_ctx adds the GRH only when the GID's interface ID is
		// non-zero; without it RoCE cannot address the peer at all.
		if r.QPN == 0 && i > 0 {
			// ibv_srq_pingpong's table holds formatted zero records after
			// the peer's own QPs.
			return fmt.Errorf("%w: the peer sent %d QP records for our %d (run both sides with the same -q)", ErrPeer, i, len(s.qps))
		}
		if err := exchange.CheckDataQPN(r.QPN); err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrPeer, i, err)
		}
		if bytes.Equal(r.GID[8:], make([]byte, 8)) {
			return fmt.Errorf("%w: record %d has GID %s; RoCE needs a global route (run the peer with -g)", ErrPeer, i, gidString(r.GID))
		}
	}
	s.remote = remote
	cfg := &s.cfg
	for i, qp := range s.qps {
		r := remote[i]
		ah := hca.AHAttr{DGID: hca.GID(r.GID), SGIDIndex: cfg.GIDIndex, HopLimit: 1, SL: cfg.SL, DLID: r.LID}
		var a hca.QPAttr
		a.State = hca.StateRTR
		mask := transport.AttrState
		if cfg.Type != hca.UD {
			a.AH, a.Port = ah, cfg.Port
			a.PathMTU, a.DestQPN, a.RQPSN = cfg.MTU, r.QPN, r.PSN
			mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
			if cfg.Type == hca.RC {
				a.MaxDestRdAtomic, a.MinRNRTimer = 1, 12
				mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
			}
		}
		if err := qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
		}
		a = hca.QPAttr{}
		a.State, a.SQPSN = hca.StateRTS, s.local[i].PSN
		mask = transport.AttrState | transport.AttrSQPSN
		if cfg.Type == hca.RC {
			a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = 14, 7, 7, 1
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		if err := qp.Modify(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
		}
		if cfg.Type == hca.UD {
			ah, err := s.pd.CreateAH(ah)
			if err != nil {
				return fmt.Errorf("failed to create AH: %w", err)
			}
			s.ah = ah
		}
	}
	return nil
}

// postRecv posts up to n receives (pp_post_recv) and returns how many.
func (s *Session) postRecv(n int) int {
	for i := range n {
		slot := s.nextSlot
		if s.free != nil {
			if len(s.free) == 0 {
				return i
			}
			slot, s.free = s.free[len(s.free)-1], s.free[:len(s.free)-1]
		} else {
			s.nextSlot = (s.nextSlot + 1) % s.slots
		}
		s.recvSGL[0] = s.mr.SGE(s.recvOff+slot*s.slotSize, s.slotSize)
		wr := hca.RecvWR{ID: uint64(slot)<<8 | recvWRID, SGL: s.recvSGL[:]}
		var err error
		if s.srq != nil {
			err = s.srq.PostRecv(&wr)
		} else {
			err = s.qps[0].PostRecv(&wr)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend posts one signaled SEND of the send region on QP i.
func (s *Session) postSend(i int) error {
	s.sendSGL[0] = s.mr.SGE(0, s.cfg.Size)
	wr := hca.SendWR{ID: sendWRID, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: s.sendSGL[:]}
	if s.cfg.Type == hca.UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah.Handle(), s.remote[i].QPN, UDQKey
	}
	if err := s.qps[i].PostSend(&wr); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// Run does the ping-pong traffic and prints the summary lines. ctx bounds
// the whole run: UC and UD never complete a lost message, so a dead peer
// would otherwise hang the loop forever, as it hangs the C tools.
func (s *Session) Run(ctx context.Context) (*Result, error) {
	if s.remote == nil {
		return nil, fmt.Errorf("%w: Run before Serve or Dial", ErrConfig)
	}
	cfg := &s.cfg
	iters := cfg.Iters
	if s.client {
		clientPattern(s.sendBuf)
	}
	for i := range s.pending {
		s.pending[i] = recvWRID
		if s.client && (i == 0 || cfg.SRQ > 0) {
			if err := s.postSend(i); err != nil {
				return nil, err
			}
			s.pending[i] |= sendWRID
		}
	}
	res := &Result{Iters: iters, Local: s.local, Remote: s.remote}
	wcs := make([]hca.WC, 2)
	if cfg.SRQ > 0 {
		wcs = make([]hca.WC, cfg.SRQ+cfg.RxDepth)
	}
	busy := s.dev.BusyPolling()
	start := time.Now()
	var end time.Time     // when the loop ended, if before the last ACK
	waitCtx := ctx        // ctx, or ctx with LastAckGrace once only the last SEND's ACK is missing
	late := func() bool { // the grace is over (and ctx is not)
		if waitCtx != ctx && ctx.Err() == nil && waitCtx.Err() != nil {
			res.LastSendUnacked = true
			return true
		}
		return false
	}
traffic:
	for res.Recvs < iters || res.Sends < iters {
		if waitCtx == ctx && cfg.Type == hca.RC && cfg.SRQ == 0 && res.Recvs >= iters && res.Sends == iters-1 {
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithTimeout(ctx, LastAckGrace)
			defer cancel()
			end = time.Now()
		}
		var n int
		var err error
		if cfg.Events {
			select {
			case <-s.cq.Events():
			case <-waitCtx.Done():
				if late() {
					break traffic
				}
				return res, fmt.Errorf("waiting for a CQ event after %d sends and %d receives: %w", res.Sends, res.Recvs, ctx.Err())
			}
			if err := s.cq.ReqNotify(false); err != nil {
				return res, fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			n, err = s.cq.Poll(wcs)
		} else if busy {
			// The device receives in CQ.Poll (hca.Options.BusyPoll): spin
			// as the tools do on ibv_poll_cq, yielding now and then so the
			// device's own goroutines (timers, a reader taking over) run.
			for spins := 1; ; spins++ {
				n, err = s.cq.Poll(wcs)
				if n > 0 || err != nil {
					break
				}
				if spins%8 == 0 {
					if err := waitCtx.Err(); err != nil {
						if late() {
							break traffic
						}
						return res, fmt.Errorf("polling the CQ after %d sends and %d receives: %w", res.Sends, res.Recvs, err)
					}
					runtime.Gosched()
				}
			}
		} else {
			for spins := 0; ; spins++ {
				n, err = s.cq.Poll(wcs)
				if n > 0 || err != nil {
					break
				}
				if spins < pollSpins {
					runtime.Gosched()
					continue
				}
				// A spinning thread would take the core the HCA's own
				// goroutines (or the peer process on the same host)
				// need: after a short spin, sleep until a completion.
				if err := s.cq.Wait(waitCtx); err != nil {
					if late() {
						break traffic
					}
					return res, fmt.Errorf("polling the CQ after %d sends and %d receives: %w", res.Sends, res.Recvs, err)
				}
				spins = 0
			}
		}
		if err != nil {
			return res, fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := range n {
			if err := s.completion(&wcs[i], res); err != nil {
				return res, err
			}
		}
	}
	if !res.LastSendUnacked {
		end = time.Now()
	}
	elapsed := end.Sub(start)
	// rc_pingpong.c: float usec from gettimeofday; bytes = size*iters*2.
	usec := float32(elapsed.Microseconds())
	res.Usec = usec
	res.Bytes = int64(cfg.Size) * int64(iters) * 2
	res.Summary[0] = fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec",
		res.Bytes, float64(usec)/1000000., float64(res.Bytes)*8./float64(usec))
	res.Summary[1] = fmt.Sprintf("%d iters in %.2f seconds = %.2f usec/iter",
		iters, float64(usec)/1000000., float64(usec/float32(iters)))
	fmt.Fprintln(s.out, res.Summary[0])
	fmt.Fprintln(s.out, res.Summary[1])
	if cfg.Check && !s.client {
		// rc_pingpong -c: the server checks the first byte of each page.
		ps := os.Getpagesize()
		bad := 0
		for i := 0; i < cfg.Size; i += ps {
			if s.ref[i] != 0 {
				fmt.Fprintf(s.out, "invalid data in page %d\n", i/ps)
				bad++
			}
		}
		if bad > 0 {
			return res, fmt.Errorf("%w: %d pages fail the -c check", ErrData, bad)
		}
	}
	return res, nil
}

// completion handles one work completion (parse_single_wc and srq's loop).
func (s *Session) completion(wc *hca.WC, res *Result) error {
	kind := int(wc.WRID & 0xFF)
	if wc.Status != transport.StatusSuccess {
		return fmt.Errorf("%w: failed status %s (%d) for wr_id %d", ErrStatus, wc.Status, wc.Status, kind)
	}
	qi := 0
	if s.cfg.SRQ > 0 {
		qi = -1
		for i, qp := range s.qps {
			if qp.QPN() == wc.QPN {
				qi = i
			}
		}
		if qi < 0 {
			return fmt.Errorf("%w: couldn't find QPN %06x", ErrProtocol, uint32(wc.QPN))
		}
	}
	switch kind {
	case sendWRID:
		if wc.Opcode != transport.WCSend {
			return fmt.Errorf("%w: send WR completed with opcode %d", ErrProtocol, wc.Opcode)
		}
		res.Sends++
	case recvWRID:
		if err := s.checkRecv(wc, res.Recvs); err != nil {
			return err
		}
		s.routs--
		low := 1
		if s.cfg.SRQ > 0 {
			low = s.cfg.SRQ
		}
		if s.routs <= low {
			s.routs += s.postRecv(s.cfg.RxDepth - s.routs)
			if s.routs < s.cfg.RxDepth {
				return fmt.Errorf("couldn't post receive (%d)", s.routs)
			}
		}
		res.Recvs++
	default:
		return fmt.Errorf("%w: completion for unknown wr_id %d", ErrProtocol, wc.WRID)
	}
	s.pending[qi] &^= kind
	if res.Sends < s.cfg.Iters && s.pending[qi] == 0 {
		if err := s.postSend(qi); err != nil {
			return err
		}
		s.pending[qi] = recvWRID | sendWRID
	}
	return nil
}

// checkRecv verifies a received message and poisons its slot.
func (s *Session) checkRecv(wc *hca.WC, n int) error {
	if wc.Opcode != transport.WCRecv {
		return fmt.Errorf("%w: receive WR completed with opcode %d", ErrProtocol, wc.Opcode)
	}
	slot := int(wc.WRID >> 8)
	if slot >= s.slots {
		return fmt.Errorf("%w: receive wr_id %#x names no buffer slot", ErrProtocol, wc.WRID)
	}
	if int(wc.ByteLen) != s.slotSize {
		return fmt.Errorf("%w: message %d is %d bytes, want %d", ErrData, n, wc.ByteLen, s.slotSize)
	}
	b := s.buf[s.recvOff+slot*s.slotSize : s.recvOff+(slot+1)*s.slotSize]
	msg := b
	if s.cfg.Type == hca.UD {
		if wc.Flags&transport.WCWithGRH == 0 {
			return fmt.Errorf("%w: UD message %d without the GRH flag", ErrProtocol, n)
		}
		msg = b[GRHRoom:]
	}
	switch {
	case s.client:
		if !bytes.Equal(msg, s.sendBuf) {
			return mismatch(n, msg, s.sendBuf, "the echo of what we sent")
		}
	case s.ref == nil:
		if !knownPattern(msg) {
			return fmt.Errorf("%w: message 0 is no pattern a pingpong client sends (first bytes % x)", ErrData, msg[:min(len(msg), 16)])
		}
		s.ref = append([]byte(nil), msg...)
		// The server echoes: its sends carry the client's message. The
		// send region is written only here, before the first send.
		copy(s.sendBuf, msg)
		if s.echoHook != nil {
			s.echoHook(s.sendBuf)
		}
	default:
		if !bytes.Equal(msg, s.ref) {
			return mismatch(n, msg, s.ref, "the client's first message")
		}
	}
	if s.poison {
		for i := range b {
			b[i] = poison
		}
	}
	if s.free != nil {
		s.free = append(s.free, slot)
	}
	return nil
}

func mismatch(n int, got, want []byte, what string) error {
	i := 0
	for i < len(got) && got[i] == want[i] {
		i++
	}
	return fmt.Errorf("%w: message %d differs from %s at byte %d (got %#02x, want %#02x)", ErrData, n, what, i, got[i], want[i])
}

// clientPattern fills b with goroce's client pattern: 1..251 cycling, and
// zero at every 4096-byte page start, which is what rdma-core's -c server
// checks (and a 64 KiB-page host's page starts are among them).
func clientPattern(b []byte) {
	for i := range b {
		if i%4096 == 0 {
			b[i] = 0
		} else {
			b[i] = byte(i%251) + 1
		}
	}
}

// knownPattern reports whether b is what some pingpong client sends: our
// pattern; rdma-core's buffer filled with 0x7b (rc, uc, ud) with or without
// -c's zeros at page starts; or srq_pingpong's zero-filled buffer.
func knownPattern(b []byte) bool {
	ours, fill7b, zero := true, true, true
	for i, c := range b {
		pageStart := i%4096 == 0
		want := byte(i%251) + 1
		if pageStart {
			want = 0
		}
		ours = ours && c == want
		fill7b = fill7b && (c == 0x7b || pageStart && c == 0)
		zero = zero && c == 0
		if !ours && !fill7b && !zero {
			return false
		}
	}
	return true
}

// Close destroys the session's objects, not the device. RC QPs first get
// a moment to send what their responder owes: the ACK of the peer's last
// message is queued when its receive completes, and a QP destroyed before
// the runtime transmits it leaves the peer retrying into the void (rxe's
// destroy_qp runs the responder task to the end, which sends it).
func (s *Session) Close() error {
	for _, qp := range s.qps {
		if qp.Type() == hca.RC {
			linger(qp, lingerQuiet, lingerLimit)
		}
	}
	var errs []error
	for _, qp := range s.qps {
		errs = append(errs, qp.Destroy())
	}
	if s.srq != nil {
		errs = append(errs, s.srq.Destroy())
	}
	if s.ah != nil {
		errs = append(errs, s.ah.Destroy())
	}
	if s.cq != nil {
		errs = append(errs, s.cq.Destroy())
	}
	if s.mr != nil {
		errs = append(errs, s.mr.Dereg())
	}
	if s.pd != nil {
		errs = append(errs, s.pd.Dealloc())
	}
	s.qps, s.srq, s.ah, s.cq, s.mr, s.pd = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// linger keeps an RC QP alive, like TCP's TIME_WAIT, while its peer may
// still retransmit: if the ACK of the peer's last message is lost, the peer
// resends it after its local ACK timeout (14 in the pingpong examples:
// 67 ms) and, with retry_cnt 7, keeps resending forever; only a live QP can
// acknowledge it again. It returns once the QP has received no packet for
// quiet, or after limit. Only received packets count: a run that finished
// without its own last ACK (Result.LastSendUnacked) is still resending,
// which says nothing about the peer and would hold it here for limit.
func linger(qp *hca.QP, quiet, limit time.Duration) {
	const tick = 5 * time.Millisecond
	last, idle := qp.Stats().RxPackets, time.Duration(0)
	for waited := time.Duration(0); waited < limit && idle < quiet; waited += tick {
		time.Sleep(tick)
		if n := qp.Stats().RxPackets; n != last {
			last, idle = n, 0
			continue
		}
		idle += tick
	}
}

// Linger times: quiet is over seven of the examples' 67 ms ACK timeouts,
// so a peer resending a message whose ACK was lost is heard and answered.
const (
	lingerQuiet = 500 * time.Millisecond
	lingerLimit = 5 * time.Second
)

// gidString formats a GID as inet_ntop(AF_INET6) does.
func gidString(g [16]byte) string { return hca.GID(g).String() }
