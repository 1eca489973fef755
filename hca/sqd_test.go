package hca_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

func toSQD(t *testing.T, q *hca.QP, notify bool) {
	t.Helper()
	a := hca.QPAttr{}
	a.State, a.EnSQDAsyncNotify = hca.StateSQD, notify
	if err := q.Modify(&a, transport.AttrState|transport.AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
}

func waitEvent(t *testing.T, d *hca.Device) hca.AsyncEvent {
	t.Helper()
	select {
	case e := <-d.Events():
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no asynchronous event")
	}
	return hca.AsyncEvent{}
}

// RTS -> SQD with en_sqd_async_notify: the WQEs already started finish and
// complete, no new one starts, then SQ_DRAINED; back in RTS the rest go.
func TestSQDrainedEvent(t *testing.T) {
	// The responder's ACKs take 100 ms to come back, so the requester is
	// still waiting on its unacknowledged-PSN window when SQD stops it, on
	// however slow or busy a machine: without the delay a fast requester
	// could finish all 40 WRs before Modify runs (it did, once, in CI).
	// The ACK timeout (537 ms) stays well above the delay.
	rcTimeout = 17
	defer func() { rcTimeout = 14 }()
	da, db := pair(t, memlink.Config{QueueLen: 4096, BtoA: memlink.Faults{Delay: 100 * time.Millisecond}})
	a := newEnd(t, da, hca.RC, 1<<20, allAccess)
	b := newEnd(t, db, hca.RC, 1<<20, allAccess)
	connect(t, a, b, bth.MTU1024, 0, 0)

	// An empty send queue is drained at once.
	toSQD(t, a.qp, true)
	if e := waitEvent(t, da); e.Type != hca.EventSQDrained || e.QP != a.qp {
		t.Fatalf("event %v for QP %p, want SQ_DRAINED for %p", e.Type, e.QP, a.qp)
	}
	rts := hca.QPAttr{}
	rts.State = hca.StateRTS
	if err := a.qp.Modify(&rts, transport.AttrState); err != nil {
		t.Fatal(err)
	}

	// 64 KiB WRITEs are 64 packets each: the unacknowledged-PSN window
	// (at most 8192 PSNs at IB MTU 1024, transport.MaxUnackedBytes) lets
	// at most 128 of them start before SQD stops the requester, since no
	// ACK arrives for 100 ms.
	const n = 200
	for i := range n {
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	toSQD(t, a.qp, true)
	if e := waitEvent(t, da); e.Type != hca.EventSQDrained || e.QP != a.qp {
		t.Fatalf("event %v, want SQ_DRAINED", e.Type)
	}
	done := a.cq.Len()
	t.Logf("%d of %d WRs completed when the SQ drained", done, n)
	if done == 0 || done == n {
		t.Fatalf("%d of %d WRs completed when the SQ drained; want some, not all", done, n)
	}
	if err := a.qp.Modify(&rts, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}

	// Without en_sqd_async_notify no event.
	toSQD(t, a.qp, false)
	if err := a.qp.Modify(&rts, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 99, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess {
		t.Fatal(wc)
	}
	select {
	case e := <-da.Events():
		t.Errorf("unexpected event %v", e.Type)
	default:
	}
}
