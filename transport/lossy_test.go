package transport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

// TestLossyMixed sends 100,000 RC messages of mixed operations (SEND,
// SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ, FETCH_ADD, CMP_SWAP) over a
// wire with 5% loss, 1% corruption (dropped, as a bad ICRC is), 2%
// duplication and 10% reordering, with the PSNs starting near 2^24, and
// checks that every WR completes exactly once, in order, successfully, with
// the right data; that every receive completes in order with the right
// data; and that each atomic executed exactly once. -short runs 10,000,
// the race detector 30,000.
func TestLossyMixed(t *testing.T) {
	n := 100000
	if raceEnabled {
		n = 30000
	}
	if testing.Short() {
		n = 10000
	}
	runLossy(t, [2]int{n, 0}, 42, tt.Faults{Loss: 0.05, Corrupt: 0.01, Dup: 0.02, Reorder: 0.10, Delay: 2000, Jitter: 20000})
}

// TestLossyBidirectional runs mixed traffic both ways at once over the same
// faulty wire, so each QP's requester, completer and responder interleave
// (ACKs and READ responses queued behind and ahead of requests).
func TestLossyBidirectional(t *testing.T) {
	n := 20000
	if testing.Short() || raceEnabled {
		n = 4000
	}
	runLossy(t, [2]int{n, n}, 7, tt.Faults{Loss: 0.05, Corrupt: 0.01, Dup: 0.02, Reorder: 0.10, Delay: 2000, Jitter: 20000})
}

const (
	lossSlot   = 4096 // bytes per data slot
	lossSlots  = 64
	lossWindow = 32 // outstanding WRs; < lossSlots so a slot is never reused while live
)

type lossMsg struct {
	op   transport.WROpcode
	size int
	slot int
	seed uint64
}

// lossDir is the workload and checker of one direction (from → to).
type lossDir struct {
	t                                          *testing.T
	from, to                                   *tt.Side
	local, remote, source, recv, counter       *tt.MR
	msgs                                       []lossMsg
	recvOrder                                  []int
	fetchAdds                                  uint64
	posted, completed, recvPosted, recvDone, n int
	wcs                                        []transport.Completion
	tmp                                        []byte
	seedBase                                   uint64
	rqDepth                                    int // receive WQEs kept posted
}

// lossOps are the operations of the lossy workloads by default.
var lossOps = []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite,
	transport.WRRDMAWriteWithImm, transport.WRRDMARead, transport.WRAtomicFetchAndAdd, transport.WRAtomicCmpAndSwp}

func newLossDir(t *testing.T, mem *tt.Memory, from, to *tt.Side, n int, seed uint64, ops []transport.WROpcode, rqDepth int) *lossDir {
	d := &lossDir{t: t, from: from, to: to, n: n, tmp: make([]byte, lossSlot), seedBase: seed << 32, rqDepth: rqDepth}
	d.local = mem.Register(from.PD, lossSlots*lossSlot, allAccess) // send source / read target
	d.remote = mem.Register(to.PD, lossSlots*lossSlot, allAccess)  // write target
	d.source = mem.Register(to.PD, lossSlots*lossSlot, allAccess)  // read source (fixed)
	d.recv = mem.Register(to.PD, lossSlots*lossSlot, allAccess)    // receive buffers
	d.counter = mem.Register(to.PD, 16, allAccess)
	fill(d.source.Buf, seed+1234)
	rng := rand.New(rand.NewPCG(seed, 7))
	d.msgs = make([]lossMsg, n)
	for i := range d.msgs {
		op := ops[rng.IntN(len(ops))]
		size := rng.IntN(lossSlot + 1)
		if rng.IntN(2) == 0 {
			size = rng.IntN(64)
		}
		if op == transport.WRAtomicFetchAndAdd || op == transport.WRAtomicCmpAndSwp {
			size = 8
		}
		d.msgs[i] = lossMsg{op: op, size: size, slot: i % lossSlots, seed: d.seedBase + uint64(i)}
		if op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm {
			d.recvOrder = append(d.recvOrder, i)
		}
	}
	return d
}

func (d *lossDir) done() bool { return d.completed == d.n && d.recvDone == len(d.recvOrder) }

// post keeps lossWindow WRs outstanding and the peer's receive queue fed.
func (d *lossDir) post(now transport.Time) {
	t := d.t
	for d.posted < d.n && d.posted-d.completed < lossWindow {
		m := &d.msgs[d.posted]
		wr := transport.SendWR{ID: uint64(d.posted), Opcode: m.op, Flags: transport.SendSignaled, Imm: uint32(d.posted)}
		off := m.slot * lossSlot
		switch m.op {
		case transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
			fill(d.local.Buf[off:off+m.size], m.seed)
			wr.SGL = splitSGL(d.local, off, m.size)
			wr.RemoteAddr, wr.RKey = d.remote.Addr+uint64(off), d.remote.RKey
		case transport.WRRDMARead:
			wr.SGL = splitSGL(d.local, off, m.size)
			wr.RemoteAddr, wr.RKey = d.source.Addr+uint64(off), d.source.RKey
		case transport.WRAtomicFetchAndAdd:
			wr.SGL = []transport.SGE{d.local.SGE(off, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = d.counter.Addr, d.counter.RKey, 1
		case transport.WRAtomicCmpAndSwp:
			// The compare value never matches: the target stays 0 and the
			// original value 0 comes back.
			wr.SGL = []transport.SGE{d.local.SGE(off, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = d.counter.Addr+8, d.counter.RKey, 1<<62, 5
		}
		if err := d.from.QP.PostSend(now, &wr); err != nil {
			t.Fatalf("post %d: %v", d.posted, err)
		}
		d.posted++
	}
	for d.to.RQ.Len() < d.rqDepth && d.recvPosted < len(d.recvOrder) {
		slot := d.recvPosted % lossSlots
		d.to.RQ.Post(uint64(d.recvPosted), d.recv.SGE(slot*lossSlot, lossSlot/2), d.recv.SGE(slot*lossSlot+lossSlot/2, lossSlot/2))
		d.recvPosted++
	}
}

// check consumes and verifies completions on both ends.
func (d *lossDir) check() {
	t := d.t
	d.wcs = d.to.RecvCQ.Take(d.wcs)
	for _, wc := range d.wcs {
		if wc.WRID != uint64(d.recvDone) || wc.Status != transport.StatusSuccess {
			t.Fatalf("recv completion %d: %+v", d.recvDone, wc)
		}
		mi := d.recvOrder[d.recvDone]
		m := &d.msgs[mi]
		slot := d.recvDone % lossSlots
		fill(d.tmp[:m.size], m.seed)
		switch m.op {
		case transport.WRRDMAWriteWithImm:
			if wc.Opcode != transport.WCRecvRDMAWithImm || wc.ByteLen != uint32(m.size) || wc.Imm != uint32(mi) {
				t.Fatalf("recv %d (msg %d WRITE_IMM): %+v", d.recvDone, mi, wc)
			}
			if off := m.slot * lossSlot; !bytes.Equal(d.remote.Buf[off:off+m.size], d.tmp[:m.size]) {
				t.Fatalf("msg %d WRITE_IMM data wrong at recv completion", mi)
			}
		default:
			if wc.Opcode != transport.WCRecv || wc.ByteLen != uint32(m.size) {
				t.Fatalf("recv %d (msg %d %v): %+v", d.recvDone, mi, m.op, wc)
			}
			if m.op == transport.WRSendWithImm && (wc.Flags&transport.WCWithImm == 0 || wc.Imm != uint32(mi)) {
				t.Fatalf("recv %d: imm %+v", d.recvDone, wc)
			}
			if off := slot * lossSlot; !bytes.Equal(d.recv.Buf[off:off+m.size], d.tmp[:m.size]) {
				t.Fatalf("msg %d SEND data wrong", mi)
			}
		}
		d.recvDone++
	}
	d.wcs = d.from.SendCQ.Take(d.wcs)
	for _, wc := range d.wcs {
		if wc.WRID != uint64(d.completed) || wc.Status != transport.StatusSuccess {
			t.Fatalf("send completion %d: %+v (stats %+v)", d.completed, wc, *d.from.QP.Stats())
		}
		m := &d.msgs[d.completed]
		off := m.slot * lossSlot
		switch m.op {
		case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
			fill(d.tmp[:m.size], m.seed)
			if !bytes.Equal(d.remote.Buf[off:off+m.size], d.tmp[:m.size]) {
				t.Fatalf("msg %d WRITE data wrong", d.completed)
			}
		case transport.WRRDMARead:
			if !bytes.Equal(d.local.Buf[off:off+m.size], d.source.Buf[off:off+m.size]) {
				t.Fatalf("msg %d READ data wrong", d.completed)
			}
		case transport.WRAtomicFetchAndAdd:
			if got := binary.NativeEndian.Uint64(d.local.Buf[off:]); got != d.fetchAdds {
				t.Fatalf("msg %d FETCH_ADD returned %d, want %d (executed twice or lost)", d.completed, got, d.fetchAdds)
			}
			d.fetchAdds++
		case transport.WRAtomicCmpAndSwp:
			if got := binary.NativeEndian.Uint64(d.local.Buf[off:]); got != 0 {
				t.Fatalf("msg %d CMP_SWAP returned %d, want 0", d.completed, got)
			}
		}
		d.completed++
	}
}

func runLossy(t *testing.T, n [2]int, seed uint64, f tt.Faults) {
	s := runLossyOpt(t, lossyOpt{n: n, seed: seed, faults: f})
	if s.a.TxRetransmits == 0 || s.b.RxDuplicateRequests == 0 {
		t.Fatalf("faults did not exercise retransmission")
	}
}

// lossyOpt configures runLossyOpt; zero values take the defaults.
type lossyOpt struct {
	n       [2]int // messages A→B and B→A
	seed    uint64
	faults  tt.Faults
	mtu     bth.MTU              // path MTU (1024)
	timeout uint8                // local ACK timeout code (8: 1.05 ms)
	ops     []transport.WROpcode // drawn uniformly (lossOps)
	rqDepth int                  // receive WQEs the peer keeps posted (16); small values cause RNR NAKs
	bidir   bool                 // for callers: split the messages over both directions
	quiet   bool                 // no summary log
}

type lossyStats struct {
	a, b transport.Stats
	wire tt.WireStats
	now  transport.Time
}

// runLossyOpt runs the lossy workload of o: every WR completes exactly once,
// in order, successfully, with the right data; every receive too; each
// atomic executes once; the requesters' positioning invariant holds after
// every step.
func runLossyOpt(t *testing.T, o lossyOpt) lossyStats {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 8
	}
	if o.ops == nil {
		o.ops = lossOps
	}
	if o.rqDepth == 0 {
		o.rqDepth = 16
	}
	n, seed := o.n, o.seed
	p := newPair(t, pairOpt{typ: transport.RC, mtu: o.mtu, psnA: 0xFFF000, psnB: 0xFFFF80, depth: 128, seed: seed, faults: o.faults,
		conn: func(c *tt.Conn) { c.Timeout = o.timeout; c.MinRNRTimer = 1 }})
	dirs := []*lossDir{newLossDir(t, p.mem, p.a, p.b, n[0], seed, o.ops, o.rqDepth)}
	if n[1] > 0 {
		dirs = append(dirs, newLossDir(t, p.mem, p.b, p.a, n[1], seed+1, o.ops, o.rqDepth))
	}
	for {
		all := true
		for _, d := range dirs {
			d.post(p.w.Now)
			all = all && d.done()
		}
		if all {
			break
		}
		if !p.w.Step() {
			t.Fatalf("wire idle; A %v %+v B %v %+v", p.a.QP.State(), *p.a.QP.Stats(), p.b.QP.State(), *p.b.QP.Stats())
		}
		if p.w.Now > 3600e9 {
			t.Fatalf("virtual time ran past an hour")
		}
		for i, qp := range p.w.QP {
			if err := qp.CheckRequester(); err != nil {
				t.Fatalf("QP %c at %v ns: %v", 'A'+i, p.w.Now, err)
			}
		}
		for _, d := range dirs {
			d.check()
		}
	}
	for _, d := range dirs {
		if got := binary.NativeEndian.Uint64(d.counter.Buf); got != d.fetchAdds {
			t.Fatalf("counter %d after %d FETCH_ADDs", got, d.fetchAdds)
		}
	}
	if !p.mem.GuardsIntact() {
		t.Fatal("guard bytes overwritten")
	}
	s := lossyStats{a: *p.a.QP.Stats(), b: *p.b.QP.Stats(), wire: p.w.Stats, now: p.w.Now}
	if !o.quiet {
		t.Logf("%v messages, virtual %.3fs; wire %+v", n, float64(p.w.Now)/1e9, p.w.Stats)
		t.Logf("A: %+v", s.a)
		t.Logf("B: %+v", s.b)
	}
	return s
}

// TestLossySoak runs the lossy workload over GOROCE_SOAK_SEEDS seeds
// (from GOROCE_SOAK_BASE), each drawing its own wire and QPs: loss up to
// 20 %, corruption, duplication up to 20 %, reordering up to 50 % with up
// to 200 µs of jitter, one-way delays of 0.5–50 µs, path MTU 256, 1024 or
// 4096, local ACK timeout codes 6–13, receive queues 1, 2 or 16 deep (RNR
// NAKs), one direction or both. Every seed must pass what TestLossyMixed
// checks. Session 25 swept seeds 1000–5999 this way: the code before and
// after the one-packet rule of Tick passed them all, a timer backoff tried
// on the way stalled five (past an hour of virtual time). It is a tool for
// changes to the retransmission logic, not part of the default run:
// skipped unless GOROCE_SOAK_SEEDS is set, e.g.
// GOROCE_SOAK_SEEDS=5000 GOROCE_SOAK_BASE=1000 go test -run TestLossySoak ./transport.
func TestLossySoak(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GOROCE_SOAK_SEEDS"))
	if n <= 0 {
		t.Skip("a sweep of random lossy wires, run on demand: set GOROCE_SOAK_SEEDS (and GOROCE_SOAK_BASE)")
	}
	base, _ := strconv.Atoi(os.Getenv("GOROCE_SOAK_BASE"))
	mtus := []bth.MTU{bth.MTU256, bth.MTU1024, bth.MTU4096}
	for s := base; s < base+n; s++ {
		r := rand.New(rand.NewPCG(uint64(s), 99))
		pick := func(v ...float64) float64 { return v[r.IntN(len(v))] }
		// Drawn in this order (the seeds of session 25's sweep).
		f := tt.Faults{Loss: pick(0, 0.001, 0.01, 0.05, 0.2), Corrupt: pick(0, 0.01), Dup: pick(0, 0.02, 0.2),
			Reorder: pick(0, 0.1, 0.5), Delay: transport.Time(pick(500, 2000, 50000)),
			Jitter: transport.Time(pick(0, 2000, 20000, 200000))}
		mtu := mtus[r.IntN(len(mtus))]
		o := lossyOpt{n: [2]int{2000 + r.IntN(3000), 0}, seed: uint64(s), faults: f, mtu: mtu}
		o.timeout = uint8(6 + r.IntN(8))
		o.rqDepth = []int{1, 2, 16}[r.IntN(3)]
		o.quiet = true
		if r.IntN(2) == 0 {
			o.n[1] = 1000 + r.IntN(2000)
		}
		t.Run(fmt.Sprintf("seed%d", s), func(t *testing.T) {
			t.Logf("%+v", o)
			runLossyOpt(t, o)
		})
	}
}

// TestUCLossy sends UC SENDs and WRITE_WITH_IMMs of 0..4 KiB (up to 5
// packets at MTU 1024) over a lossy, reordering wire. UC never retries:
// a message with a lost packet must be dropped whole, and every message
// that is delivered must be complete and correct, in posting order.
func TestUCLossy(t *testing.T) {
	n := 20000
	if testing.Short() || raceEnabled {
		n = 3000
	}
	p := newPair(t, pairOpt{typ: transport.UC, psnA: 0xFFFF00, depth: 128, seed: 3,
		faults: tt.Faults{Loss: 0.03, Corrupt: 0.01, Dup: 0.02, Reorder: 0.05, Delay: 1000, Jitter: 3000}})
	rng := rand.New(rand.NewPCG(9, 9))
	src := p.mem.Register(1, lossSlots*lossSlot, allAccess)
	dst := p.mem.Register(2, lossSlots*lossSlot, allAccess)
	wdst := p.mem.Register(2, lossSlots*lossSlot, allAccess)
	sizes := make([]int, n)
	ops := make([]transport.WROpcode, n)
	posted, sent, last := 0, 0, -1
	delivered := 0
	var wcs []transport.Completion
	tmp := make([]byte, lossSlot)
	for recvID := uint64(0); ; {
		// UC completes on transmission: gate on the wire so that a data
		// slot is never reused while a message for it is still in flight.
		for posted < n && posted-sent < 4 && p.w.InFlight() == 0 {
			sizes[posted] = 8 + rng.IntN(lossSlot-8)
			ops[posted] = transport.WRSendWithImm
			if rng.IntN(3) == 0 {
				ops[posted] = transport.WRRDMAWriteWithImm
			}
			off := (posted % lossSlots) * lossSlot
			fill(src.Buf[off:off+sizes[posted]], uint64(posted))
			wr := transport.SendWR{ID: uint64(posted), Opcode: ops[posted], SGL: splitSGL(src, off, sizes[posted]),
				RemoteAddr: wdst.Addr + uint64(off), RKey: wdst.RKey, Imm: uint32(posted), Flags: transport.SendSignaled}
			if err := p.a.QP.PostSend(p.w.Now, &wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		for p.b.RQ.Len() < 8 {
			p.b.RQ.Post(recvID, dst.SGE(int(recvID%lossSlots)*lossSlot, lossSlot))
			recvID++
		}
		if !p.w.Step() {
			break
		}
		sent += len(p.a.SendCQ.Take(wcs[:0]))
		wcs = p.b.RecvCQ.Take(wcs)
		for _, wc := range wcs {
			if wc.Status != transport.StatusSuccess || wc.Flags&transport.WCWithImm == 0 {
				t.Fatalf("recv %+v", wc)
			}
			mi := int(wc.Imm)
			if mi <= last || mi >= posted {
				t.Fatalf("message %d delivered after %d (out of order or twice)", mi, last)
			}
			last = mi
			if wc.ByteLen != uint32(sizes[mi]) {
				t.Fatalf("message %d: byte_len %d, want %d", mi, wc.ByteLen, sizes[mi])
			}
			fill(tmp[:sizes[mi]], uint64(mi))
			got := wdst.Buf[(mi%lossSlots)*lossSlot:]
			if ops[mi] == transport.WRSendWithImm {
				got = dst.Buf[int(wc.WRID%lossSlots)*lossSlot:]
			}
			if !bytes.Equal(got[:sizes[mi]], tmp[:sizes[mi]]) {
				t.Fatalf("message %d (%v) delivered with wrong data", mi, ops[mi])
			}
			delivered++
		}
	}
	if sent != n {
		t.Fatalf("%d/%d send completions", sent, n)
	}
	if delivered == 0 || delivered == n {
		t.Fatalf("%d of %d delivered: loss did not bite or nothing arrived", delivered, n)
	}
	t.Logf("%d of %d UC messages delivered whole; B %+v", delivered, n, *p.b.QP.Stats())
}
