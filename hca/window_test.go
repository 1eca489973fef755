package hca

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// The RC QPs a device has in RTS or SQD share transport.MaxUnackedBytes:
// each one's largest window is its share, recomputed as QPs reach RTS,
// go back to RESET or are destroyed. UC QPs and QPs short of RTS do not
// count.
func TestSendersShareTheWindowBudget(t *testing.T) {
	a, b, err := memlink.Pair(memlink.Config{
		AddrsA: []netip.Addr{netip.MustParseAddr("192.0.2.1")},
		AddrsB: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := Open(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := d.QueryGID(0)
	if err != nil {
		t.Fatal(err)
	}
	newQP := func(typ QPType) *QP {
		q, err := pd.CreateQP(QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	modify := func(q *QP, a QPAttr, mask AttrMask) {
		t.Helper()
		if err := q.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	toRTR := func(q *QP) {
		var a QPAttr
		a.State, a.Port = StateInit, 1
		modify(q, a, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags)
		a = QPAttr{AH: AHAttr{DGID: gid, HopLimit: 64}}
		a.State, a.PathMTU, a.DestQPN, a.RQPSN = StateRTR, bth.MTU4096, 0x99, 1
		mask := transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if q.typ == RC {
			a.MaxDestRdAtomic, a.MinRNRTimer = 1, 12
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
		modify(q, a, mask)
	}
	toRTS := func(q *QP) {
		var a QPAttr
		a.State, a.SQPSN = StateRTS, 1
		mask := transport.AttrState | transport.AttrSQPSN
		if q.typ == RC {
			a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = 14, 7, 7, 1
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		modify(q, a, mask)
	}
	winMax := func(q *QP) uint32 {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.eng.WindowMax()
	}
	const full = transport.MaxUnackedBytes / 4096 // PSNs at IB MTU 4096
	check := func(when string, want map[*QP]uint32) {
		t.Helper()
		for q, w := range want {
			if got := winMax(q); got != w {
				t.Errorf("%s: QP 0x%x largest window %d, want %d", when, uint32(q.qpn), got, w)
			}
		}
	}

	q1, q2, q3, uc := newQP(RC), newQP(RC), newQP(RC), newQP(UC)
	toRTR(q1)
	toRTR(q2)
	toRTR(uc)
	toRTS(uc)
	check("RTR", map[*QP]uint32{q1: full, q2: full})
	toRTS(q1)
	check("one sender", map[*QP]uint32{q1: full})
	toRTS(q2)
	check("two senders", map[*QP]uint32{q1: full / 2, q2: full / 2})
	toRTR(q3)
	toRTS(q3)
	check("three senders", map[*QP]uint32{q1: full / 3, q2: full / 3, q3: full / 3})
	// RTS -> SQD still sends what was posted; SQD -> RTS again changes nothing.
	modify(q3, QPAttr{Attr: transport.Attr{State: StateSQD}}, transport.AttrState)
	check("one in SQD", map[*QP]uint32{q1: full / 3, q3: full / 3})
	modify(q3, QPAttr{Attr: transport.Attr{State: StateRTS}}, transport.AttrState)
	if err := q2.Destroy(); err != nil {
		t.Fatal(err)
	}
	check("one destroyed", map[*QP]uint32{q1: full / 2, q3: full / 2})
	modify(q3, QPAttr{Attr: transport.Attr{State: StateReset}}, transport.AttrState)
	check("one reset", map[*QP]uint32{q1: full, q3: transport.MaxUnackedPSNs}) // q3: path MTU 256 again
	// 64 senders: the share, 128 KiB, is below rxe's fixed window, which is
	// the floor.
	for range 63 {
		q := newQP(RC)
		toRTR(q)
		toRTS(q)
	}
	check("64 senders", map[*QP]uint32{q1: transport.MinUnackedPSNs})
}
