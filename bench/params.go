package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
)

// Mode is one of the seven perftest tests goroce bench runs.
type Mode uint8

// Modes, named after the perftest binaries without the ib_ prefix.
const (
	ModeSendBW Mode = iota + 1
	ModeWriteBW
	ModeReadBW
	ModeAtomicBW
	ModeSendLat
	ModeWriteLat
	ModeReadLat
)

var modeNames = [...]string{ModeSendBW: "send_bw", ModeWriteBW: "write_bw", ModeReadBW: "read_bw", ModeAtomicBW: "atomic_bw",
	ModeSendLat: "send_lat", ModeWriteLat: "write_lat", ModeReadLat: "read_lat"}

// Modes lists every mode in perftest's order.
var Modes = []Mode{ModeSendBW, ModeWriteBW, ModeReadBW, ModeAtomicBW, ModeSendLat, ModeWriteLat, ModeReadLat}

func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Valid reports whether m is one of the seven modes.
func (m Mode) Valid() bool { return m >= ModeSendBW && m <= ModeReadLat }

// ParseMode parses "write_bw" and friends (an "ib_" prefix is accepted).
func ParseMode(s string) (Mode, error) {
	s = strings.TrimPrefix(s, "ib_")
	for _, m := range Modes {
		if modeNames[m] == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown mode %q (want one of %s)", ErrParams, s, strings.Join(modeNames[1:], " "))
}

// Tool is the perftest tool whose TCP exchange the mode uses.
func (m Mode) Tool() exchange.Tool {
	return [...]exchange.Tool{ModeSendBW: exchange.SendBW, ModeWriteBW: exchange.WriteBW, ModeReadBW: exchange.ReadBW,
		ModeAtomicBW: exchange.AtomicBW, ModeSendLat: exchange.SendLat, ModeWriteLat: exchange.WriteLat, ModeReadLat: exchange.ReadLat}[m]
}

// IsBW reports a bandwidth test (the others measure latency).
func (m Mode) IsBW() bool { return m <= ModeAtomicBW }

// verb is the operation, as perftest's testsStr prints it.
func (m Mode) verb() string {
	switch m {
	case ModeSendBW, ModeSendLat:
		return "Send"
	case ModeWriteBW, ModeWriteLat:
		return "RDMA_Write"
	case ModeReadBW, ModeReadLat:
		return "RDMA_Read"
	}
	return "Atomic"
}

func (m Mode) isSend() bool { return m == ModeSendBW || m == ModeSendLat }
func (m Mode) isRead() bool { return m == ModeReadBW || m == ModeReadLat }
func (m Mode) usesRd() bool { return m == ModeReadBW || m == ModeReadLat || m == ModeAtomicBW }
func (m Mode) atomic() bool { return m == ModeAtomicBW }
func (m Mode) oneSided() bool {
	return m == ModeWriteBW || m == ModeReadBW || m == ModeAtomicBW || m == ModeReadLat
}

// AtomicOp selects ib_atomic_bw's operation (-A).
type AtomicOp uint8

// Atomic operations; perftest's default is FETCH_AND_ADD.
const (
	FetchAndAdd AtomicOp = iota
	CmpAndSwap
)

func (a AtomicOp) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// ParseAtomicOp parses -A's argument.
func ParseAtomicOp(s string) (AtomicOp, error) {
	switch s {
	case "FETCH_AND_ADD":
		return FetchAndAdd, nil
	case "CMP_AND_SWAP":
		return CmpAndSwap, nil
	}
	return 0, fmt.Errorf("%w: -A %q: want FETCH_AND_ADD or CMP_AND_SWAP", ErrParams, s)
}

// ParseConn parses -c's argument (RC, UC or UD, any case, as perftest's
// change_conn_type takes them).
func ParseConn(s string) (hca.QPType, error) {
	switch strings.ToUpper(s) {
	case "RC":
		return hca.RC, nil
	case "UC":
		return hca.UC, nil
	case "UD":
		return hca.UD, nil
	}
	return 0, fmt.Errorf("%w: -c %s: want RC, UC or UD (perftest's XRC, DC, SRD and RawEth need hardware goroce does not model)", ErrParams, s)
}

// ErrParams is wrapped by every parameter validation error.
var ErrParams = errors.New("bench: invalid parameters")

// Perftest's defaults (perftest_parameters.h).
const (
	DefaultPort      = exchange.DefaultPort
	DefaultTxDepth   = 128             // DEF_TX_BW
	DefaultRxDepth   = 512             // DEF_RX_SEND
	DefaultCQMod     = 100             // DEF_CQ_MOD
	cqModSizeLimit   = 8192            // MSG_SIZE_CQ_MOD_LIMIT
	DefaultTimeout   = 14              // DEF_QP_TIME: 4.096 us * 2^14 = 67 ms
	defaultDuration  = 5 * time.Second // DEF_DURATION: --run_infinitely's report interval without -D
	DefaultMaxSize   = 1 << 23
	defaultCycleBuf  = 4096
	defaultCacheLine = 64
	minRNRTimer      = 12         // MIN_RNR_TIMER: 0.64 ms
	maxRxUnreliable  = 16000      // UC_MAX_RX: the RX depth cap of UC and UD
	qkey             = 0x11111111 // DEF_QKEY of every UD QP
	udGRH            = 40         // UD_ADDITION: a UD receive's room for the GRH
	retryCount       = 7          // perftest's retry_cnt and rnr_retry: 7 is "infinite" for RNR
	hopLimit         = 0xFF
)

// Params are the test parameters, perftest's flags.
type Params struct {
	Mode Mode
	// Size is the message size (-s). 0 means perftest's default: 65536
	// for bandwidth tests, 2 for latency tests, 8 for atomics (always 8).
	Size int
	// Iters is the number of messages per QP (-n); 0 means the default
	// (5000 for write/read/atomic bw, 1000 otherwise).
	Iters int
	// All runs every power of two from 2 to MaxSize (-a).
	All bool
	// MaxSize caps -a (default 2^23, perftest's fixed limit).
	MaxSize int
	// QPs is the number of QPs (-q, default 1).
	QPs int
	// Duration, when set, runs each size for that long instead of Iters
	// messages (-D).
	Duration time.Duration
	// Infinite is perftest's --run_infinitely (bandwidth modes): the
	// client reports the bandwidth of every Duration (default 5 s) and
	// runs until Hooks.Stop closes; the server serves until the client
	// ends the run.
	Infinite bool
	// Margin is perftest's -f / --margin of a Duration run: the result
	// counts only what completes between Margin after the start and
	// Margin before the end (the warm-up and the drain are left out).
	// 0 is perftest's default, a quarter of the duration in whole seconds
	// (0 below 4 s); Normalize sets it. --run_infinitely has none.
	Margin time.Duration
	// MTU is the path MTU (-m); 0 uses the port's active MTU.
	MTU bth.MTU
	// GIDIndex is the source GID index (-x); negative picks the first
	// IPv4 GID (RoCEv2), as perftest prefers.
	GIDIndex int
	// TxDepth (-t, default 128 for bandwidth, 1 for latency) and RxDepth
	// (-r, default 512) are the send and receive queue depths.
	TxDepth, RxDepth int
	// CQMod is the completion moderation of bandwidth tests: one signaled
	// WR in CQMod (-Q, default 100, capped at TxDepth).
	CQMod int
	// Atomic is ib_atomic_bw's operation (-A).
	Atomic AtomicOp
	// Timeout is the local ACK timeout code (-u, default 14).
	Timeout uint8
	// ReportGbits prints Gb/sec instead of MB/sec (--report_gbits).
	ReportGbits bool
	// CPUUtil adds perftest's CPU_Util[%] column to the text report
	// (--cpu_util, with a Duration only); the caller measures it and puts
	// it in Result.CPUUtil.
	CPUUtil bool
	// OutReads is how many RDMA READs or atomics a QP keeps outstanding
	// (-o / --outs): read and atomic modes only, 0 for the device's
	// max_qp_rd_atom (perftest's default); the other modes use 1, as
	// perftest does.
	OutReads int
	// NoPeak reports no peak bandwidth (0), as perftest's -N / --noPeak;
	// Normalize sets it with Duration, as perftest does.
	NoPeak bool
	// TrafficClass and SL go into every QP's address vector (-T, -S):
	// the IPv4 TOS / IPv6 traffic class of RoCEv2, the GRH TClass and
	// LRH SL of native IB.
	TrafficClass uint8
	SL           uint8
	// Duplex is perftest's -b: both sides run the bandwidth test at once
	// and each reports the sum of both directions (bandwidth modes, one
	// size).
	Duplex bool
	// Histogram and Unsorted are perftest's -H / --report-histogram and
	// -U / --report-unsorted (latency modes, with -n): every sample is
	// printed before the result, sorted (without the two largest, as the
	// statistics) or in the order measured.
	Histogram, Unsorted bool
	// PostList is perftest's -l / --post_list (bandwidth modes): WRs are
	// posted in chained lists of that many (hca.QP.PostSendList), and
	// without -Q the CQ moderation is the list's length, as perftest sets
	// it. 0 means 1.
	PostList int
	// InlineSize is perftest's -I / --inline_size: SENDs and WRITEs of at
	// most that many bytes are posted inline (IBV_SEND_INLINE: the data is
	// copied at post time). 0, the default, is what perftest uses on a
	// device it does not know, such as rxe (or goroce).
	InlineSize int
	// Conn is the transport (-c): hca.RC (the default), hca.UC (send and
	// write modes) or hca.UD (send modes; messages of at most the path
	// MTU, which perftest's check_mtu enforces once the MTU is agreed:
	// FitUD).
	Conn hca.QPType
	// UseSRQ is perftest's --use-srq (SEND modes): the QPs take their
	// receives from one shared receive queue of RxDepth WRs, to which each
	// QP's share of the buffers (RxDepth / QPs) is posted.
	UseSRQ bool
	// WarmUp is perftest's --perform_warm_up (write, read and atomic
	// bandwidth): before each size's measured run, every QP posts TxDepth
	// WRs of it, all signaled, and waits for them (perform_warm_up).
	WarmUp bool
	// IPv6 is perftest's --ipv6: without -x, the source GID is the
	// device's first IPv6 GID (not IPv4-mapped), not its first IPv4 one.
	IPv6 bool
	// ReportBoth is perftest's --report-both: a -b run of one size (not
	// -a) prints, after the sum of both directions, each direction's
	// result (Report.Sides). Without -b it does nothing, as in perftest.
	ReportBoth bool
	// Reversed is perftest's --reversed (bandwidth modes): the side that
	// waits for the TCP connection runs the test and the side that dials
	// is the passive one, as perftest swaps its machine role after
	// parsing (the "fan-in addition"). Both sides must be given it.
	Reversed bool
	// RateLimit is perftest's SW rate limiter (--rate_limit with
	// --rate_limit_type=SW; write, read and send bandwidth, not
	// bidirectional SEND): the sender posts BurstSize WRs, over all its
	// QPs, per the time they take at RateLimit RateUnits (default Gb/s).
	// 0: off.
	RateLimit float64
	RateUnits RateUnit
	// BurstSize is perftest's --burst_size: WRs per burst of the rate
	// limiter; 0 is the TX depth, as perftest sets it.
	BurstSize int

	// sizeGiven records an explicit -s (Size set before Normalize): a UD
	// run then refuses a size above the MTU rather than shrinking it.
	sizeGiven bool
	// rxGiven records an explicit -r (perftest raises only the default
	// RX depth of UC and UD runs).
	rxGiven bool
	// normalized: Normalize ran (it runs again on a copy, which must not
	// take its own defaults for the user's flags).
	normalized bool
}

// Normalize fills defaults and validates p.
func (p *Params) Normalize() error {
	if !p.Mode.Valid() {
		return fmt.Errorf("%w: no mode", ErrParams)
	}
	if p.Conn == 0 {
		p.Conn = hca.RC
	}
	switch {
	case p.Conn != hca.RC && p.Conn != hca.UC && p.Conn != hca.UD:
		return fmt.Errorf("%w: connection type %v: want RC, UC or UD", ErrParams, p.Conn)
	case p.Conn == hca.UC && p.Mode.usesRd():
		// perftest's change_conn_type, word for word.
		return fmt.Errorf("%w: UC connection not possible in READ/ATOMIC verbs", ErrParams)
	case p.Conn == hca.UD && !p.Mode.isSend():
		return fmt.Errorf("%w: UD connection only possible in SEND verb", ErrParams)
	}
	if p.Size != 0 && !p.normalized {
		p.sizeGiven = true
	}
	cqGiven := p.CQMod != 0
	if p.RxDepth != 0 && !p.normalized {
		p.rxGiven = true
	}
	p.normalized = true
	if p.Size == 0 {
		p.Size = 65536
		if !p.Mode.IsBW() {
			p.Size = 2
		}
	}
	if p.Mode.atomic() {
		// The bandwidth default above is not the user's: only a size
		// given (perftest: "Message size cannot be changed for Atomic
		// tests", -s 65536 included) is refused.
		if p.sizeGiven && p.Size != 8 {
			return fmt.Errorf("%w: atomic messages are 8 bytes (-s %d)", ErrParams, p.Size)
		}
		p.Size = 8
		if p.All {
			return fmt.Errorf("%w: -a does not apply to atomic_bw (8-byte messages)", ErrParams)
		}
	}
	if p.Size < 1 || p.Size > 1<<30 {
		return fmt.Errorf("%w: -s %d out of range", ErrParams, p.Size)
	}
	if p.Iters == 0 {
		p.Iters = 1000
		if p.Mode == ModeWriteBW || p.Mode == ModeReadBW || p.Mode == ModeAtomicBW {
			p.Iters = 5000
		}
	}
	if p.Iters < 1 {
		return fmt.Errorf("%w: -n %d", ErrParams, p.Iters)
	}
	if p.MaxSize == 0 {
		p.MaxSize = DefaultMaxSize
	}
	if p.MaxSize < 2 || p.MaxSize > DefaultMaxSize {
		return fmt.Errorf("%w: maximum size %d out of [2, %d]", ErrParams, p.MaxSize, DefaultMaxSize)
	}
	if p.QPs == 0 {
		p.QPs = 1
	}
	if p.QPs < 1 || p.QPs > 1024 {
		return fmt.Errorf("%w: -q %d out of [1, 1024]", ErrParams, p.QPs)
	}
	if !p.Mode.IsBW() && p.QPs > 1 {
		return fmt.Errorf("%w: latency tests use one QP (-q %d)", ErrParams, p.QPs)
	}
	if p.Duration < 0 {
		return fmt.Errorf("%w: negative duration", ErrParams)
	}
	if p.Infinite {
		// force_dependecies' run_infinitely rules, in its words.
		switch {
		case !p.Mode.IsBW():
			return fmt.Errorf("%w: run_infinitely exists only in BW tests for now", ErrParams)
		case p.Duplex && p.Mode.isSend():
			return fmt.Errorf("%w: run_infinitely not supported in SEND Bidirectional BW test", ErrParams)
		case p.Duplex:
			// perftest runs both sides until killed; goroce ends a run
			// from the client, which a duplex run does not have.
			return fmt.Errorf("%w: run_infinitely with -b is not supported by goroce bench", ErrParams)
		case p.All:
			return fmt.Errorf("%w: run_infinitely runs one size: no -a", ErrParams)
		}
		if p.Duration == 0 {
			p.Duration = defaultDuration
		}
	}
	if p.Duration > 0 && p.All {
		return fmt.Errorf("%w: -D and -a cannot be combined", ErrParams)
	}
	if p.Duplex && !p.Mode.IsBW() {
		return fmt.Errorf("%w: -b (bidirectional) applies to the bandwidth modes", ErrParams)
	}
	if p.Duration > 0 {
		p.NoPeak = true // perftest: no peak in duration mode (its BW peak column reads 0.00)
	}
	if err := p.margin(); err != nil {
		return err
	}
	if p.MTU != 0 && !p.MTU.Valid() {
		return fmt.Errorf("%w: MTU enum %d", ErrParams, uint8(p.MTU))
	}
	if p.TxDepth == 0 {
		p.TxDepth = DefaultTxDepth
		if !p.Mode.IsBW() {
			p.TxDepth = 1
		}
	}
	if p.RxDepth == 0 {
		p.RxDepth = DefaultRxDepth
	}
	if p.Conn != hca.RC && !p.rxGiven && p.Duration == 0 {
		// force_dependecies: nothing resends a UC or UD message that
		// found no receive, so post one for every message if possible.
		p.RxDepth = min(p.Iters, maxRxUnreliable)
		if p.UseSRQ {
			// perftest gives each QP rx_depth / num_of_qps of an SRQ,
			// a 1/QPs share of its messages; the rest would race the
			// reposts and be lost. One receive for every message of
			// every QP instead.
			p.RxDepth = min(p.Iters*p.QPs, maxRxUnreliable)
		}
	}
	if p.TxDepth < 1 || p.TxDepth > 1<<14 || p.RxDepth < 1 || p.RxDepth > 1<<14 {
		return fmt.Errorf("%w: queue depths -t %d -r %d out of [1, 16384]", ErrParams, p.TxDepth, p.RxDepth)
	}
	if p.Duration == 0 {
		// force_dependecies: no deeper than the messages to send.
		p.TxDepth = min(p.TxDepth, p.Iters)
	}
	if p.CQMod == 0 {
		p.CQMod = DefaultCQMod
		// force_dependecies: perftest signals every WR of messages over
		// MSG_SIZE_CQ_MOD_LIMIT (8 KiB) unless -Q was given, -a runs, so
		// its "CQ Moderation" reads 1 at 64 KiB (interop logs).
		if p.Size > cqModSizeLimit && !p.All && p.Conn != hca.UD {
			p.CQMod = 1
		}
	}
	if p.CQMod < 1 {
		return fmt.Errorf("%w: CQ moderation %d", ErrParams, p.CQMod)
	}
	// perftest: "CQ moderation can't be grater than number of scqe's".
	p.CQMod = min(p.CQMod, p.TxDepth)
	if !p.Mode.IsBW() {
		p.CQMod = 1
	}
	if err := p.postList(cqGiven); err != nil {
		return err
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	if p.Timeout > 31 {
		return fmt.Errorf("%w: timeout code %d out of [0, 31]", ErrParams, p.Timeout)
	}
	if (p.Histogram || p.Unsorted) && p.Mode.IsBW() {
		return fmt.Errorf("%w: -H and -U are available only in latency tests", ErrParams)
	}
	if p.InlineSize < 0 {
		return fmt.Errorf("%w: -I %d: negative inline size", ErrParams, p.InlineSize)
	}
	if p.OutReads < 0 {
		return fmt.Errorf("%w: -o %d outstanding reads", ErrParams, p.OutReads)
	}
	if p.WarmUp && p.Mode != ModeWriteBW && p.Mode != ModeReadBW && p.Mode != ModeAtomicBW {
		// force_dependecies, word for word.
		return fmt.Errorf("%w: Perform warm up is available in ATOMIC, READ and WRITE BW tests only", ErrParams)
	}
	switch {
	case p.Reversed && !p.Mode.IsBW():
		return fmt.Errorf("%w: --reversed: the bandwidth tests only", ErrParams)
	case p.Reversed && p.Infinite:
		return fmt.Errorf("%w: --reversed with --run_infinitely: goroce ends an infinite run from the side that dials", ErrParams)
	}
	if err := p.rateLimit(); err != nil {
		return err
	}
	switch {
	case p.UseSRQ && !p.Mode.isSend():
		// force_dependecies: "Using SRQ only avavilible in SEND tests."
		return fmt.Errorf("%w: --use-srq: an SRQ is used only in the SEND tests (send_bw, send_lat)", ErrParams)
	case p.UseSRQ && p.RxDepth < p.QPs:
		// ctx_set_recv_wqes posts rx_depth / num_of_qps per QP: none.
		return fmt.Errorf("%w: --use-srq: RX depth %d leaves no receive for each of %d QPs (-r must be at least -q)", ErrParams, p.RxDepth, p.QPs)
	}
	return nil
}

// rateLimit checks the SW rate limiter's flags as force_dependecies does
// and makes the burst the TX depth by default.
func (p *Params) rateLimit() error {
	switch {
	case p.RateLimit < 0:
		return fmt.Errorf("%w: --rate_limit %v: Rate limit must be non-negative floating point number", ErrParams, p.RateLimit)
	case p.BurstSize < 0:
		return fmt.Errorf("%w: --burst_size %d: must be non-negative", ErrParams, p.BurstSize)
	case p.RateLimit == 0 && p.BurstSize > 0:
		return fmt.Errorf("%w: --burst_size: Can't enable burst mode when rate limiter is off", ErrParams)
	case p.RateLimit == 0:
		return nil
	case !p.Mode.IsBW() || p.Mode.atomic() || (p.Mode.isSend() && p.Duplex):
		return fmt.Errorf("%w: --rate_limit: SW rate limiter can't be executed on non-BW, ATOMIC or bidirectional SEND tests", ErrParams)
	case p.Infinite:
		return fmt.Errorf("%w: --rate_limit: run_infinitely does not support rate limit feature yet", ErrParams)
	}
	switch p.RateUnits {
	case 0:
		p.RateUnits = RateGbps
	case RateGbps, RateMBps, RatePPS:
	default:
		return fmt.Errorf("%w: rate units %q: Invalid rate limit units. Please use M,g or p", ErrParams, rune(p.RateUnits))
	}
	if p.BurstSize == 0 {
		p.BurstSize = p.TxDepth // force_dependecies
	}
	return nil
}

// margin applies -f: force_dependecies makes the default margin a quarter
// of the duration (integer seconds), and catch_alarm samples for the
// duration less both margins, which must leave something.
func (p *Params) margin() error {
	switch {
	case p.Margin < 0:
		return fmt.Errorf("%w: -f %v: margin must be greater than 0", ErrParams, p.Margin)
	case p.Duration == 0 || p.Infinite:
		p.Margin = 0
	case p.Margin == 0:
		p.Margin = (p.Duration / 4).Truncate(time.Second)
	case 2*p.Margin >= p.Duration:
		return fmt.Errorf("%w: -f %v: two margins leave nothing of -D %v to measure", ErrParams, p.Margin, p.Duration)
	}
	return nil
}

// postList applies -l (force_dependecies: after the other CQ moderation
// rules, the list's length becomes the moderation unless -Q was given);
// goroce refuses what perftest would overshoot or mis-signal.
func (p *Params) postList(cqGiven bool) error {
	if p.PostList == 0 {
		p.PostList = 1
	}
	switch {
	case p.PostList < 1:
		return fmt.Errorf("%w: -l %d: a post list holds at least one WR", ErrParams, p.PostList)
	case p.PostList == 1:
		return nil
	case !p.Mode.IsBW():
		return fmt.Errorf("%w: -l %d: post lists apply to the bandwidth modes", ErrParams, p.PostList)
	case p.PostList > p.TxDepth:
		return fmt.Errorf("%w: -l %d: a post list longer than the TX depth (%d)", ErrParams, p.PostList, p.TxDepth)
	case p.Duration == 0 && p.Iters%p.PostList != 0:
		return fmt.Errorf("%w: Number of iterations must be a multiple of post list size (-n %d, -l %d)", ErrParams, p.Iters, p.PostList)
	}
	if !cqGiven {
		p.CQMod = p.PostList
	} else if p.PostList%p.CQMod != 0 {
		return fmt.Errorf("%w: Post list size must be a multiple of CQ moderation (-l %d, -Q %d)", ErrParams, p.PostList, p.CQMod)
	}
	return nil
}

// PostListNotice is what perftest prints when -l sets the CQ moderation.
const PostListNotice = "Post List requested - CQ moderation will be the size of the post list"

// Notices returns the lines perftest's force_dependecies prints on stdout
// about p as given (before Normalize), each after a RESULT_LINE: a -Q
// over 1 with messages over 8 KiB, and -l setting the CQ moderation.
func (p Params) Notices() []string {
	var n []string
	if p.CQMod > 1 && p.Size > cqModSizeLimit && p.Conn != hca.UD && !p.All {
		n = append(n, "Warning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results")
	}
	if p.PostList > 1 && p.CQMod == 0 {
		n = append(n, PostListNotice)
	}
	return n
}

// FitUD applies perftest's check_mtu to a UD run once the path MTU is
// agreed: a UD message is at most one packet, so -a runs 2..MTU and a
// default size (or -a's) shrinks to the MTU, with notice lines for the
// user (perftest prints them on stderr); an explicit -s above the MTU is
// an error. Other connection types return no notice and no error.
func (p *Params) FitUD(mtu bth.MTU) (notice string, err error) {
	if p.Conn != hca.UD {
		return "", nil
	}
	m := mtu.Bytes()
	if p.All {
		p.MaxSize = min(p.MaxSize, m)
	}
	if p.Size <= m {
		return "", nil
	}
	if p.sizeGiven && !p.All {
		return "", fmt.Errorf("%w: Max message size in UD cannot be greater than MTU (-s %d, MTU %d)", ErrParams, p.Size, m)
	}
	p.Size = m
	return fmt.Sprintf(" Max msg size in UD is MTU %d\n Changing to this MTU\n", m), nil
}

// Sizes returns the message sizes the run covers: 2, 4, ... MaxSize with
// All, else Size.
func (p *Params) Sizes() []int {
	if !p.All {
		return []int{p.Size}
	}
	var s []int
	for n := 2; n <= p.MaxSize; n <<= 1 {
		s = append(s, n)
	}
	return s
}

func (p *Params) maxSize() int {
	if p.All {
		return p.MaxSize
	}
	return p.Size
}
