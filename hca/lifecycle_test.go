package hca_test

import (
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// toReset moves q to RESET.
func toReset(t *testing.T, q *hca.QP) {
	t.Helper()
	var a hca.QPAttr
	a.State = hca.StateReset
	if err := q.Modify(&a, transport.AttrState); err != nil {
		t.Fatal(err)
	}
}

// TestQPFatalAgainAfterReset: a QP whose CQ overran raised QP_FATAL and went
// to ERR; the application takes it through RESET back to RTS (ibv_modify_qp
// allows reuse) and its CQ overruns again. The second loss must raise
// QP_FATAL again: it is all a non-polling application has to learn why the
// reused QP stopped. The once-per-QP flag used to stay set across RESET.
func TestQPFatalAgainAfterReset(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	small, err := db.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	if b.qp, err = b.pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: small, RecvCQ: small,
		Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	b.cq = small
	for round := 0; round < 2; round++ {
		connect(t, a, b, bth.MTU1024, bth.PSN(100*round+1), bth.PSN(100*round+2))
		const sends = 8
		for i := 0; i < sends; i++ {
			if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []hca.SGE{a.mr.SGE(0, 16)}}); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.After(20 * time.Second)
	wait:
		for {
			select {
			case ev := <-db.Events():
				if ev.Type == hca.EventQPFatal && ev.QP == b.qp {
					break wait
				}
				if ev.Type != hca.EventCQErr {
					t.Fatalf("round %d: unexpected event %v", round, ev.Type)
				}
			case <-timeout:
				t.Fatalf("round %d: no QP_FATAL in 20 s (QP state %s)", round, b.qp.State())
			}
		}
		if s := b.qp.State(); s != hca.StateErr {
			t.Fatalf("round %d: QP state %s after QP_FATAL, want ERR", round, s)
		}
		// Reuse: both ends back to RESET, the CQ drained (it keeps
		// reporting the overrun, but takes completions again).
		toReset(t, a.qp)
		toReset(t, b.qp)
		wcs := make([]hca.WC, 16)
		if _, err := small.Poll(wcs); !errors.Is(err, hca.ErrCQOverflow) {
			t.Fatalf("round %d: Poll after the overrun: %v, want ErrCQOverflow", round, err)
		}
		if n := small.Len(); n != 0 {
			t.Fatalf("round %d: %d completions left after Poll", round, n)
		}
	}
}
