package hca_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// Layout of one pipelined QP pair's memory (pipeLoss): A has one slot per
// WR in flight (the source of a SEND or WRITE, the target of a READ) and an
// 8-byte result per slot for FETCH_ADDs; B has receive slots, WRITE slots,
// a READ source and the FETCH_ADD counter.
const (
	plSlots = 64   // slots per area; more than plDepth so none is reused while live
	plSlot  = 8192 // bytes per slot: up to 8 packets at IB MTU 1024
	plDepth = 32   // WRs in flight per QP

	plARes    = plSlots * plSlot // A: FETCH_ADD results
	plALen    = plARes + plSlots*8
	plBWrite  = plSlots * plSlot // B: WRITE slots after the receive slots
	plBRead   = 2 * plSlots * plSlot
	plBCount  = plBRead + plSlot
	plBLen    = plBCount + 8
	plRecvMax = plSlots // receive WQEs B keeps posted
	plMTU     = bth.MTU1024
)

// plWR is one posted WR of a pipeLoss QP pair.
type plWR struct {
	op   transport.WROpcode
	size int
	seed byte
	off  int // WRITE / READ: offset in B's slot or READ source
}

// pipeLoss is one RC QP pair of TestRCPipelinedUnderLoss and its checker.
type pipeLoss struct {
	t          *testing.T
	a, b       *end
	wrs        []plWR
	sends      []int // the WR index of every SEND, in posting order
	posted     int
	completed  int
	recvPosted int
	recvDone   int
	fetchAdds  uint64
	// firstPackets counts the request packets of the WRs posted, each
	// sent once.
	firstPackets int
}

func (p *pipeLoss) postRecv() {
	s := p.recvPosted % plSlots
	if err := p.b.qp.PostRecv(&hca.RecvWR{ID: uint64(p.recvPosted), SGL: []hca.SGE{p.b.mr.SGE(s*plSlot, plSlot)}}); err != nil {
		p.t.Fatalf("post recv %d: %v", p.recvPosted, err)
	}
	p.recvPosted++
}

// post posts WRs while fewer than plDepth are in flight.
func (p *pipeLoss) post() bool {
	did := false
	for p.posted < len(p.wrs) && p.posted-p.completed < plDepth {
		i := p.posted
		w := &p.wrs[i]
		s := i % plSlots
		wr := &hca.SendWR{ID: uint64(i), Opcode: w.op, Flags: transport.SendSignaled}
		switch w.op {
		case transport.WRSend, transport.WRRDMAWrite:
			fill(p.a.buf[s*plSlot:s*plSlot+w.size], w.seed)
			wr.SGL = []hca.SGE{p.a.mr.SGE(s*plSlot, w.size)}
			if w.op == transport.WRRDMAWrite {
				wr.RemoteAddr, wr.RKey = p.b.mr.Addr()+uint64(plBWrite+s*plSlot+w.off), p.b.mr.RKey()
			} else {
				p.sends = append(p.sends, i)
			}
		case transport.WRRDMARead:
			clear(p.a.buf[s*plSlot : s*plSlot+w.size])
			wr.SGL = []hca.SGE{p.a.mr.SGE(s*plSlot, w.size)}
			wr.RemoteAddr, wr.RKey = p.b.mr.Addr()+uint64(plBRead+w.off), p.b.mr.RKey()
		case transport.WRAtomicFetchAndAdd:
			wr.SGL = []hca.SGE{p.a.mr.SGE(plARes+s*8, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = p.b.mr.Addr()+plBCount, p.b.mr.RKey(), 1
		}
		if err := p.a.qp.PostSend(wr); err != nil {
			p.t.Fatalf("post %d (%v): %v", i, w.op, err)
		}
		if w.op == transport.WRSend || w.op == transport.WRRDMAWrite {
			p.firstPackets += (w.size + plMTU.Bytes() - 1) / plMTU.Bytes()
		} else {
			p.firstPackets++ // a READ request, an atomic
		}
		p.posted++
		did = true
	}
	return did
}

// poll checks the completions both CQs have and reposts B's receives.
func (p *pipeLoss) poll() bool {
	var wcs [16]hca.WC
	did := false
	n, err := p.a.cq.Poll(wcs[:])
	if err != nil {
		p.t.Fatal(err)
	}
	for _, wc := range wcs[:n] {
		did = true
		i := p.completed
		if wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
			p.t.Fatalf("QP %v: completion %+v, want WR %d (%v) successful", p.a.qp.QPN(), wc, i, p.wrs[i].op)
		}
		w := &p.wrs[i]
		s := i % plSlots
		switch w.op {
		case transport.WRRDMAWrite:
			// The ACK that completed the WRITE follows its execution at B.
			want := p.a.buf[s*plSlot : s*plSlot+w.size]
			if got := p.b.buf[plBWrite+s*plSlot+w.off:][:w.size]; !bytes.Equal(got, want) {
				p.t.Fatalf("WRITE %d: B's memory differs", i)
			}
		case transport.WRRDMARead:
			if got, want := p.a.buf[s*plSlot:s*plSlot+w.size], p.b.buf[plBRead+w.off:][:w.size]; !bytes.Equal(got, want) {
				p.t.Fatalf("READ %d: data differs", i)
			}
		case transport.WRAtomicFetchAndAdd:
			if got := binary.NativeEndian.Uint64(p.a.buf[plARes+s*8:]); got != p.fetchAdds {
				p.t.Fatalf("FETCH_ADD %d returned %d, want %d: an atomic executed twice or not at all", i, got, p.fetchAdds)
			}
			p.fetchAdds++
		}
		p.completed++
	}
	n, err = p.b.cq.Poll(wcs[:])
	if err != nil {
		p.t.Fatal(err)
	}
	for _, wc := range wcs[:n] {
		did = true
		j := p.recvDone
		if j >= len(p.sends) {
			p.t.Fatalf("receive %d completed with only %d SENDs posted: %+v", j, len(p.sends), wc)
		}
		w := &p.wrs[p.sends[j]]
		if wc.Status != transport.StatusSuccess || wc.WRID != uint64(j) || wc.ByteLen != uint32(w.size) {
			p.t.Fatalf("receive %d: %+v, want %d bytes (WR %d)", j, wc, w.size, p.sends[j])
		}
		want := make([]byte, w.size)
		fill(want, w.seed)
		s := j % plSlots
		if !bytes.Equal(p.b.buf[s*plSlot:s*plSlot+w.size], want) {
			p.t.Fatalf("receive %d (WR %d): data differs", j, p.sends[j])
		}
		p.recvDone++
		p.postRecv()
	}
	return did
}

// plResult is what runPipelined counted.
type plResult struct {
	wrs, retransmitted uint64
	icrcErrors         uint64
}

// runPipelined runs qps RC QP pairs between one pair of devices through a
// wire that loses, reorders, duplicates and corrupts packets both ways,
// each QP with plDepth WRs in flight of n mixed SENDs, WRITEs, READs and
// FETCH_ADDs of up to 8 packets, its local ACK timeout code timeout.
// Every WR completes once, in order, successfully, with the right data;
// every receive too; every FETCH_ADD executes once.
func runPipelined(t *testing.T, qps, n int, timeout uint8) plResult {
	f := memlink.Faults{Loss: 0.02, Reorder: 0.05, Duplicate: 0.02, Corrupt: 0.01}
	da, db := pair(t, memlink.Config{Seed: 5, AtoB: f, BtoA: f, QueueLen: 4096})
	rcTimeout = timeout
	defer func() { rcTimeout = 14 }()
	ops := []transport.WROpcode{transport.WRSend, transport.WRRDMAWrite, transport.WRRDMARead, transport.WRAtomicFetchAndAdd}
	var all []*pipeLoss
	for q := range qps {
		p := &pipeLoss{t: t, a: newEnd(t, da, hca.RC, plALen, allAccess), b: newEnd(t, db, hca.RC, plBLen, allAccess)}
		rng := rand.New(rand.NewPCG(uint64(q), 3))
		fill(p.b.buf[plBRead:plBRead+plSlot], byte(0x5A+q))
		connect(t, p.a, p.b, plMTU, bth.PSN((0xFFFF00+q*16)&0xFFFFFF), bth.PSN(0x100*q))
		for i := range n {
			w := plWR{op: ops[rng.IntN(len(ops))], size: 1 + rng.IntN(plSlot), seed: byte(i)}
			if w.op == transport.WRRDMAWrite || w.op == transport.WRRDMARead {
				w.size = 1 + rng.IntN(plSlot-1)
				w.off = rng.IntN(plSlot - w.size + 1)
			}
			p.wrs = append(p.wrs, w)
		}
		for range plRecvMax {
			p.postRecv()
		}
		all = append(all, p)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done, did := true, false
		for _, p := range all {
			did = p.post() || did
			did = p.poll() || did
			done = done && p.completed == len(p.wrs) && p.recvDone == len(p.sends)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range all {
				t.Logf("QP %v: %d/%d completed, %d/%d received; %+v", p.a.qp.QPN(), p.completed, len(p.wrs),
					p.recvDone, len(p.sends), p.a.qp.Stats())
			}
			t.Fatal("no end in two minutes")
		}
		if !did {
			runtime.Gosched()
			time.Sleep(20 * time.Microsecond)
		}
	}
	r := plResult{wrs: uint64(qps * n), icrcErrors: da.Counters.RxICRCErrors.Load() + db.Counters.RxICRCErrors.Load()}
	for _, p := range all {
		if got := binary.NativeEndian.Uint64(p.b.buf[plBCount:]); got != p.fetchAdds {
			t.Fatalf("QP %v: counter %d after %d FETCH_ADDs", p.b.qp.QPN(), got, p.fetchAdds)
		}
		st := p.a.qp.Stats()
		// Packets beyond the first transmission of every WR's packets.
		r.retransmitted += st.TxPackets - uint64(p.firstPackets)
	}
	t.Logf("%d WRs on %d QPs: %d packets resent (%.2f per WR); ICRC errors %d", r.wrs, qps, r.retransmitted,
		float64(r.retransmitted)/float64(r.wrs), r.icrcErrors)
	if r.icrcErrors == 0 {
		t.Error("1% corruption produced no ICRC error")
	}
	return r
}

// TestRCPipelinedUnderLoss runs runPipelined's workload on four QPs with a
// 4.2 ms local ACK timeout: the runtime's retransmission, the device's
// window shared by its QPs and the responder's handling of duplicates,
// with the real goroutines and timers.
func TestRCPipelinedUnderLoss(t *testing.T) {
	n := 1500
	if testing.Short() || raceEnabled {
		n = 300
	}
	if r := runPipelined(t, 4, n, 10); r.retransmitted == 0 {
		t.Error("the faults caused no retransmission: the test did not exercise recovery")
	}
}

// TestRCPipelinedStorm runs it on sixteen QPs with a 65 µs local ACK
// timeout, shorter than the queue that 16 × 32 WRs in flight build between
// the devices: most timeouts are spurious, the acknowledgments late, not
// lost. When each timeout resent the QP's whole window, every resending
// lengthened the queue and drew more timeouts: 2845 packets resent per WR
// (717 with the race detector) where the same run at a 4.2 ms timeout
// resends 12, the go-back-N of the faults' sequence NAKs. Going back one
// packet at a time until an acknowledgment makes progress (transport's
// Tick) brings it to 12 (27 with the race detector).
func TestRCPipelinedStorm(t *testing.T) {
	n := 1500
	if testing.Short() || raceEnabled {
		n = 300
	}
	r := runPipelined(t, 16, n, 4)
	if per := float64(r.retransmitted) / float64(r.wrs); per > 100 {
		t.Fatalf("%.1f packets resent per WR: a retransmission storm", per)
	}
}
