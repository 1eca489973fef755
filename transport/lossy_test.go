package transport_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
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
// data; and that each atomic executed exactly once. -short runs 10,000.
func TestLossyMixed(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	runLossy(t, n, 42, tt.Faults{Loss: 0.05, Corrupt: 0.01, Dup: 0.02, Reorder: 0.10, Delay: 2000, Jitter: 20000})
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

func runLossy(t *testing.T, n int, seed uint64, f tt.Faults) {
	p := newPair(t, pairOpt{typ: transport.RC, psnA: 0xFFF000, psnB: 0xFFFF80, depth: 128, seed: seed, faults: f,
		conn: func(c *tt.Conn) { c.Timeout = 8; c.MinRNRTimer = 1 }})
	rng := rand.New(rand.NewPCG(seed, 7))
	aLocal := p.mem.Register(1, lossSlots*lossSlot, allAccess)  // A: send source / read target
	bRemote := p.mem.Register(2, lossSlots*lossSlot, allAccess) // B: write target
	bSource := p.mem.Register(2, lossSlots*lossSlot, allAccess) // B: read source (fixed)
	bRecv := p.mem.Register(2, lossSlots*lossSlot, allAccess)   // B: receive buffers
	counter := p.mem.Register(2, 16, allAccess)
	fill(bSource.Buf, 1234)

	msgs := make([]lossMsg, n)
	var recvOrder []int // message indices that consume a receive WQE, in order
	ops := []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite,
		transport.WRRDMAWriteWithImm, transport.WRRDMARead, transport.WRAtomicFetchAndAdd, transport.WRAtomicCmpAndSwp}
	for i := range msgs {
		op := ops[rng.IntN(len(ops))]
		size := rng.IntN(lossSlot + 1)
		if rng.IntN(2) == 0 {
			size = rng.IntN(64)
		}
		if op == transport.WRAtomicFetchAndAdd || op == transport.WRAtomicCmpAndSwp {
			size = 8
		}
		msgs[i] = lossMsg{op: op, size: size, slot: i % lossSlots, seed: uint64(i)}
		if op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm {
			recvOrder = append(recvOrder, i)
		}
	}
	var fetchAdds, casDone uint64
	posted, completed, recvPosted, recvDone := 0, 0, 0, 0
	var wcs []transport.Completion
	tmp := make([]byte, lossSlot)
	for completed < n {
		for posted < n && posted-completed < lossWindow {
			m := &msgs[posted]
			wr := transport.SendWR{ID: uint64(posted), Opcode: m.op, Flags: transport.SendSignaled, Imm: uint32(posted)}
			off := m.slot * lossSlot
			switch m.op {
			case transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
				fill(aLocal.Buf[off:off+m.size], m.seed)
				wr.SGL = splitSGL(aLocal, off, m.size)
				wr.RemoteAddr, wr.RKey = bRemote.Addr+uint64(off), bRemote.RKey
			case transport.WRRDMARead:
				wr.SGL = splitSGL(aLocal, off, m.size)
				wr.RemoteAddr, wr.RKey = bSource.Addr+uint64(off), bSource.RKey
			case transport.WRAtomicFetchAndAdd:
				wr.SGL = []transport.SGE{aLocal.SGE(off, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = counter.Addr, counter.RKey, 1
			case transport.WRAtomicCmpAndSwp:
				// Swap counter+1<<32... keep it simple: compare against a
				// value that never matches, so the target is unchanged but
				// the original value comes back.
				wr.SGL = []transport.SGE{aLocal.SGE(off, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = counter.Addr+8, counter.RKey, 1<<62, 5
			}
			if err := p.a.QP.PostSend(p.w.Now, &wr); err != nil {
				t.Fatalf("post %d: %v", posted, err)
			}
			posted++
		}
		for p.b.RQ.Len() < 16 && recvPosted < len(recvOrder) {
			slot := recvPosted % lossSlots
			p.b.RQ.Post(uint64(recvPosted), bRecv.SGE(slot*lossSlot, lossSlot/2), bRecv.SGE(slot*lossSlot+lossSlot/2, lossSlot/2))
			recvPosted++
		}
		if !p.w.Step() {
			t.Fatalf("wire idle with %d/%d completed; A %v %+v B %v %+v", completed, n, p.a.QP.State(), *p.a.QP.Stats(),
				p.b.QP.State(), *p.b.QP.Stats())
		}
		if p.w.Now > 3600e9 {
			t.Fatalf("virtual time ran past an hour with %d/%d completed", completed, n)
		}
		wcs = p.b.RecvCQ.Take(wcs)
		for _, wc := range wcs {
			if wc.WRID != uint64(recvDone) || wc.Status != transport.StatusSuccess {
				t.Fatalf("recv completion %d: %+v", recvDone, wc)
			}
			mi := recvOrder[recvDone]
			m := &msgs[mi]
			slot := recvDone % lossSlots
			switch m.op {
			case transport.WRRDMAWriteWithImm:
				if wc.Opcode != transport.WCRecvRDMAWithImm || wc.ByteLen != uint32(m.size) || wc.Imm != uint32(mi) {
					t.Fatalf("recv %d (msg %d WRITE_IMM): %+v", recvDone, mi, wc)
				}
				fill(tmp[:m.size], m.seed)
				if off := m.slot * lossSlot; !bytes.Equal(bRemote.Buf[off:off+m.size], tmp[:m.size]) {
					t.Fatalf("msg %d WRITE_IMM data wrong at recv completion", mi)
				}
			default:
				if wc.Opcode != transport.WCRecv || wc.ByteLen != uint32(m.size) {
					t.Fatalf("recv %d (msg %d %v): %+v", recvDone, mi, m.op, wc)
				}
				if m.op == transport.WRSendWithImm && (wc.Flags&transport.WCWithImm == 0 || wc.Imm != uint32(mi)) {
					t.Fatalf("recv %d: imm %+v", recvDone, wc)
				}
				fill(tmp[:m.size], m.seed)
				if off := slot * lossSlot; !bytes.Equal(bRecv.Buf[off:off+m.size], tmp[:m.size]) {
					t.Fatalf("msg %d SEND data wrong", mi)
				}
			}
			recvDone++
		}
		wcs = p.a.SendCQ.Take(wcs)
		for _, wc := range wcs {
			if wc.WRID != uint64(completed) || wc.Status != transport.StatusSuccess {
				t.Fatalf("send completion %d: %+v (A %+v)", completed, wc, *p.a.QP.Stats())
			}
			m := &msgs[completed]
			off := m.slot * lossSlot
			switch m.op {
			case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
				fill(tmp[:m.size], m.seed)
				if !bytes.Equal(bRemote.Buf[off:off+m.size], tmp[:m.size]) {
					t.Fatalf("msg %d WRITE data wrong", completed)
				}
			case transport.WRRDMARead:
				if !bytes.Equal(aLocal.Buf[off:off+m.size], bSource.Buf[off:off+m.size]) {
					t.Fatalf("msg %d READ data wrong", completed)
				}
			case transport.WRAtomicFetchAndAdd:
				if got := binary.NativeEndian.Uint64(aLocal.Buf[off:]); got != fetchAdds {
					t.Fatalf("msg %d FETCH_ADD returned %d, want %d (executed twice or lost)", completed, got, fetchAdds)
				}
				fetchAdds++
			case transport.WRAtomicCmpAndSwp:
				if got := binary.NativeEndian.Uint64(aLocal.Buf[off:]); got != 0 {
					t.Fatalf("msg %d CMP_SWAP returned %d, want 0", completed, got)
				}
				casDone++
			}
			completed++
		}
	}
	if got := binary.NativeEndian.Uint64(counter.Buf); got != fetchAdds {
		t.Fatalf("counter %d after %d FETCH_ADDs", got, fetchAdds)
	}
	if recvDone != len(recvOrder) {
		// The last receives complete before the last send completions.
		p.w.Run(func() bool { return p.b.RecvCQ.Len() >= len(recvOrder)-recvDone }, p.w.Now+10e9)
	}
	if !p.mem.GuardsIntact() {
		t.Fatal("guard bytes overwritten")
	}
	sa, sb := p.a.QP.Stats(), p.b.QP.Stats()
	t.Logf("%d messages, virtual %.3fs; wire %+v", n, float64(p.w.Now)/1e9, p.w.Stats)
	t.Logf("A: %+v", *sa)
	t.Logf("B: %+v", *sb)
	if sa.TxRetransmits == 0 || sb.RxDuplicateRequests == 0 {
		t.Fatalf("faults did not exercise retransmission")
	}
	_ = bth.PSN(0)
}
