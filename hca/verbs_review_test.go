package hca_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// API misuse found by a review session of the verbs layer: each test but
// the controls (TestVerbsCheckedCorrect, TestVerbsSGEChecks,
// TestVerbsDestroyWhilePosting) failed before its fix. Misuse gets a
// typed error naming the problem, never a panic or a silent success.

// verbsNoPanic runs f and turns a panic into a test error.
func verbsNoPanic(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", what, r)
				err = nil
			}
		}()
		err = f()
	}()
	if err != nil {
		t.Logf("%s: %v", what, err)
	}
}

// Nil work requests and nil attributes must be refused with an error, not
// a panic.
func TestVerbsNilArguments(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	ud := newEnd(t, da, hca.UD, 4096, allAccess)
	udb := newEnd(t, db, hca.UD, 4096, allAccess)
	connect(t, ud, udb, bth.MTU1024, 1, 2)
	rc := newEnd(t, da, hca.RC, 4096, allAccess)
	var init hca.QPAttr
	init.State, init.Port = hca.StateInit, 1
	if err := rc.qp.Modify(&init, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	srq, err := rc.pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	verbsNoPanic(t, "UD QP.PostSend(nil)", func() error { return ud.qp.PostSend(nil) })
	verbsNoPanic(t, "RC QP.PostRecv(nil)", func() error { return rc.qp.PostRecv(nil) })
	verbsNoPanic(t, "SRQ.PostRecv(nil)", func() error { return srq.PostRecv(nil) })
	verbsNoPanic(t, "QP.Modify(nil, STATE)", func() error { return rc.qp.Modify(nil, transport.AttrState) })
}

// A UD send WR naming an AH of another PD must be refused (rxe_av.c
// rxe_get_av: "PDs don't match for AH and QP").
func TestVerbsUDSendWithAHOfAnotherPD(t *testing.T) {
	a, b, bgid := udEnds(t)
	otherPD, err := a.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ah, err := otherPD.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	err = a.qp.PostSend(&hca.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 64)}, AH: ah.Handle(), RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
	if err == nil {
		wc := waitWC(t, a.cq)
		t.Errorf("UD send with an AH of PD %d on a QP of PD %d accepted; send WC %+v", otherPD.Handle(), a.pd.Handle(), wc)
		if wc, err := wcWithin(b.cq, 2*time.Second); err == nil {
			t.Errorf("and the peer received it: %+v", wc)
		}
	}
}

// A destroyed AH's handle must not name another AH: a WR posted with the
// stale handle must fail, not go to the destination of an unrelated AH.
func TestVerbsStaleAHHandle(t *testing.T) {
	a, b, bgid := udEnds(t)
	old, err := a.pd.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0})
	if err != nil {
		t.Fatal(err)
	}
	stale := old.Handle()
	if err := old.Destroy(); err != nil {
		t.Fatal(err)
	}
	// Another part of the program creates an AH of its own.
	other, err := a.pd.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0, FlowLabel: 7})
	if err != nil {
		t.Fatal(err)
	}
	err = a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 8)}, AH: stale, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
	if err == nil {
		t.Errorf("post with the handle %d of a destroyed AH succeeded (the new AH has handle %d)", stale, other.Handle())
	}
}

// rdma-core's ib_modify_qp_is_ok rejects IB_QP_CUR_STATE unless the
// current state is RTR, RTS, SQD or SQE, and any bit outside the
// transition's required and optional sets; X -> ERR and X -> RESET have
// none, so CUR_STATE is refused there. UC SQD -> SQD does not allow PORT.
func TestVerbsModifyMasksRdmaCoreRefuses(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	// INIT -> ERR with CUR_STATE (current state INIT: refused twice over).
	q := newEnd(t, da, hca.RC, 4096, allAccess)
	var init hca.QPAttr
	init.State, init.Port = hca.StateInit, 1
	if err := q.qp.Modify(&init, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	var e hca.QPAttr
	e.State = hca.StateErr
	if err := q.qp.Modify(&e, transport.AttrState|transport.AttrCurState); !errors.Is(err, hca.ErrAttrMask) {
		t.Errorf("INIT->ERR with CUR_STATE: %v, want ErrAttrMask", err)
	}
	// RESET -> RESET with CUR_STATE.
	q2 := newEnd(t, da, hca.RC, 4096, allAccess)
	var r hca.QPAttr
	r.State = hca.StateReset
	if err := q2.qp.Modify(&r, transport.AttrState|transport.AttrCurState); !errors.Is(err, hca.ErrAttrMask) {
		t.Errorf("RESET->RESET with CUR_STATE: %v, want ErrAttrMask", err)
	}
	// UC SQD -> SQD with PORT.
	a := newEnd(t, da, hca.UC, 4096, allAccess)
	b := newEnd(t, db, hca.UC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	var sqd hca.QPAttr
	sqd.State = hca.StateSQD
	if err := a.qp.Modify(&sqd, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	p := hca.QPAttr{Port: 1}
	p.State = hca.StateSQD
	if err := a.qp.Modify(&p, transport.AttrState|transport.AttrPort); !errors.Is(err, hca.ErrAttrMask) {
		t.Errorf("UC SQD->SQD with PORT: %v, want ErrAttrMask", err)
	}
}

// wire-spec §7 (rxe_qp_chk_attr): SQD -> anything but ERR is refused while
// the send queue is still draining.
func TestVerbsSQDModifyWhileDraining(t *testing.T) {
	rcTimeout = 17
	defer func() { rcTimeout = 14 }()
	da, db := pair(t, memlink.Config{QueueLen: 4096, BtoA: memlink.Faults{Delay: 300 * time.Millisecond}})
	a := newEnd(t, da, hca.RC, 1<<20, allAccess)
	b := newEnd(t, db, hca.RC, 1<<20, allAccess)
	connect(t, a, b, bth.MTU1024, 0, 0)
	for i := range 200 {
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	var sqd hca.QPAttr
	sqd.State, sqd.EnSQDAsyncNotify = hca.StateSQD, true
	if err := a.qp.Modify(&sqd, transport.AttrState|transport.AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	// Still draining: the ACKs are 300 ms away.
	m := hca.QPAttr{}
	m.State, m.Timeout = hca.StateSQD, 20
	errSQD := a.qp.Modify(&m, transport.AttrState|transport.AttrTimeout)
	rts := hca.QPAttr{}
	rts.State = hca.StateRTS
	errRTS := a.qp.Modify(&rts, transport.AttrState)
	select {
	case ev := <-da.Events():
		t.Logf("event %v arrived before the checks", ev.Type)
	default:
	}
	if errSQD == nil {
		t.Errorf("SQD->SQD (timeout) while draining accepted")
	}
	if errRTS == nil {
		t.Errorf("SQD->RTS while draining accepted")
	}
}

// Objects of a closed device: later calls must return errors.
func TestVerbsCallsAfterClose(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	bgid, _ := db.QueryGID(0)
	da.Close()
	if mr, err := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite); err == nil {
		t.Errorf("RegMR after Close succeeded (lkey %#x)", mr.LKey())
	}
	if _, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1}); err == nil {
		t.Errorf("CreateSRQ after Close succeeded")
	}
	if _, err := pd.CreateAH(hca.AHAttr{DGID: bgid}); err == nil {
		t.Errorf("CreateAH after Close succeeded")
	}
}

// Use after destroy of an SRQ.
func TestVerbsSRQUseAfterDestroy(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, _ := da.AllocPD()
	srq, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(2); !errors.Is(err, hca.ErrDestroyed) {
		t.Errorf("Modify of a destroyed SRQ: %v, want ErrDestroyed", err)
	}
}

// max_srq is advertised (Query().MaxSRQ) and must be enforced, as max_cq is.
func TestVerbsMaxSRQEnforced(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, _ := da.AllocPD()
	max := da.Query().MaxSRQ
	for i := 0; i <= max; i++ {
		if _, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 1, MaxSGE: 1}); err != nil {
			if i < max {
				t.Fatalf("SRQ %d: %v", i, err)
			}
			return
		}
	}
	t.Errorf("created %d SRQs; max_srq is %d", max+1, max)
}

// Posting beyond max_send_wr and posting a send in RESET must wrap hca's
// sentinels, as the receive side does (ErrLimit, ErrQPState).
func TestVerbsPostSendErrorsWrapHCASentinels(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	q := newEnd(t, da, hca.RC, 4096, allAccess)
	err := q.qp.PostSend(&hca.SendWR{Opcode: transport.WRSend})
	if !errors.Is(err, hca.ErrQPState) {
		t.Errorf("post_send in RESET: %v; errors.Is(ErrQPState) false (post_recv in RESET gives ErrQPState)", err)
	}
	err = q.qp.PostRecv(&hca.RecvWR{})
	t.Logf("post_recv in RESET: %v (ErrQPState: %v)", err, errors.Is(err, hca.ErrQPState))

	// max_send_wr 1 on a stalled QP: the second post overflows.
	pd, _ := da.AllocPD()
	cq, _ := da.CreateCQ(16)
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	a := &end{dev: da, pd: pd, cq: cq, qp: qp, mr: mr}
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	var sqd hca.QPAttr
	sqd.State = hca.StateSQD
	if err := qp.Modify(&sqd, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	wr := hca.SendWR{Opcode: transport.WRRDMAWrite, SGL: []hca.SGE{mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	err = qp.PostSend(&wr)
	if !errors.Is(err, hca.ErrLimit) {
		t.Errorf("post_send beyond max_send_wr: %v; errors.Is(ErrLimit) false (a full receive queue gives ErrLimit)", err)
	}
}

var _ = fmt.Sprintf

// What was checked and found correct (kept passing).
func TestVerbsCheckedCorrect(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	pd, _ := da.AllocPD()
	cq, _ := da.CreateCQ(16)
	must := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err := da.CreateCQ(-1)
	must("CreateCQ(-1)", err, hca.ErrInvalidArg)
	_, err = da.CreateCQ(da.Query().MaxCQE + 1)
	must("CreateCQ(max+1)", err, hca.ErrInvalidArg)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: 401}})
	must("MaxInline 401", err, hca.ErrInvalidArg)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: -5, MaxRecvWR: 1}})
	must("MaxSendWR -5", err, hca.ErrInvalidArg)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1 << 30}})
	must("MaxRecvWR 2^30", err, hca.ErrInvalidArg)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	must("nil send CQ", err, hca.ErrInvalidArg)
	cqB, _ := db.CreateCQ(4)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cqB, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	must("CQ of other device", err, hca.ErrWrongDevice)
	_, err = pd.CreateSRQ(hca.SRQAttr{MaxWR: 1 << 20, MaxSGE: 1})
	must("SRQ huge", err, hca.ErrInvalidArg)
	_, err = pd.CreateAH(hca.AHAttr{SGIDIndex: 99})
	must("AH sgid 99", err, hca.ErrNoGID)
	_, err = pd.CreateAH(hca.AHAttr{SGIDIndex: -1})
	must("AH sgid -1", err, hca.ErrNoGID)

	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 2, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{0, 2} {
		a := hca.QPAttr{Port: port}
		a.State = hca.StateInit
		must(fmt.Sprintf("port %d", port), qp.Modify(&a, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags), hca.ErrInvalidArg)
	}
	a := hca.QPAttr{Port: 1}
	a.State = hca.StateInit
	if err := qp.Modify(&a, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	bgid, _ := db.QueryGID(0)
	rtr := func(sgid int, mtu bth.MTU) error {
		r := hca.QPAttr{AH: hca.AHAttr{DGID: bgid, SGIDIndex: sgid}}
		r.State, r.PathMTU, r.DestQPN, r.RQPSN, r.MaxDestRdAtomic = hca.StateRTR, mtu, 0x11, 0, 1
		return qp.Modify(&r, transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|
			transport.AttrRQPSN|transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer)
	}
	must("sgid 99", rtr(99, bth.MTU1024), hca.ErrNoGID)
	if da.QueryPort().ActiveMTU < bth.MTU4096 {
		must("mtu above port", rtr(0, da.QueryPort().ActiveMTU+1), hca.ErrInvalidArg)
	}
	must("mtu 0", rtr(0, 0), hca.ErrInvalidArg)
	if qp.State() != hca.StateInit {
		t.Errorf("failed modifies changed the state to %v", qp.State())
	}
	// Double destroy / use after destroy.
	mr, _ := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	ah, _ := pd.CreateAH(hca.AHAttr{DGID: bgid})
	srq, _ := pd.CreateSRQ(hca.SRQAttr{MaxWR: 2, MaxSGE: 1})
	must("qp destroy", qp.Destroy(), nil)
	must("qp destroy 2", qp.Destroy(), hca.ErrDestroyed)
	must("qp modify after", qp.Modify(&a, transport.AttrState), hca.ErrDestroyed)
	must("qp post_recv after", qp.PostRecv(&hca.RecvWR{}), hca.ErrDestroyed)
	_, err = qp.PostSendList([]hca.SendWR{{}})
	must("qp post list after", err, hca.ErrDestroyed)
	must("mr dereg", mr.Dereg(), nil)
	must("mr dereg 2", mr.Dereg(), hca.ErrDestroyed)
	must("ah destroy", ah.Destroy(), nil)
	must("ah destroy 2", ah.Destroy(), hca.ErrDestroyed)
	must("srq destroy", srq.Destroy(), nil)
	must("srq destroy 2", srq.Destroy(), hca.ErrDestroyed)
	must("srq post after", srq.PostRecv(&hca.RecvWR{}), hca.ErrDestroyed)
	must("cq destroy", cq.Destroy(), nil)
	must("cq destroy 2", cq.Destroy(), hca.ErrDestroyed)
	_, err = cq.Poll(make([]hca.WC, 1))
	must("cq poll after", err, hca.ErrDestroyed)
	must("cq notify after", cq.ReqNotify(false), hca.ErrDestroyed)
	_, err = pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	must("qp on destroyed cq", err, hca.ErrDestroyed)
	must("pd dealloc", pd.Dealloc(), nil)
	must("pd dealloc 2", pd.Dealloc(), hca.ErrDestroyed)
	_, err = pd.RegMR(make([]byte, 8), 0)
	must("regmr on dead pd", err, hca.ErrDestroyed)
	da.Close()
	_, err = da.AllocPD()
	must("AllocPD after close", err, hca.ErrClosed)
	_, err = da.CreateCQ(4)
	must("CreateCQ after close", err, hca.ErrClosed)
}

// Lkey of another PD and zero-length SGEs.
func TestVerbsSGEChecks(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	pd2, _ := da.AllocPD()
	mr2, _ := pd2.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	if err := a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{mr2.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusLocProtErr {
		t.Errorf("lkey of another PD: %+v", wc)
	}
}

// Destroying a QP while other goroutines post to it and poll its CQ, then
// the CQ, then closing the device (run with -race).
func TestVerbsDestroyWhilePosting(t *testing.T) {
	for iter := 0; iter < 5; iter++ {
		da, db := pair(t, memlink.Config{QueueLen: 4096})
		a := newEnd(t, da, hca.RC, 1<<16, allAccess)
		b := newEnd(t, db, hca.RC, 1<<16, allAccess)
		connect(t, a, b, bth.MTU1024, 1, 2)
		var wg sync.WaitGroup
		var stop atomic.Bool
		seen := map[uint64]int{}
		var mu sync.Mutex
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := uint64(1); !stop.Load(); i++ {
				if err := a.qp.PostSend(&hca.SendWR{ID: i, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
					SGL: []hca.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
					if errors.Is(err, hca.ErrDestroyed) || errors.Is(err, transport.ErrQueueFull) {
						if errors.Is(err, hca.ErrDestroyed) {
							return
						}
						continue
					}
					t.Errorf("post: %v", err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			wcs := make([]hca.WC, 64)
			for !stop.Load() {
				n, err := a.cq.Poll(wcs)
				mu.Lock()
				for _, wc := range wcs[:n] {
					seen[wc.WRID]++
					if seen[wc.WRID] > 1 {
						t.Errorf("WR %d completed twice", wc.WRID)
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		if err := a.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := a.cq.Destroy(); err != nil {
			t.Errorf("cq destroy after qp destroy: %v", err)
		}
		if err := a.mr.Dereg(); err != nil {
			t.Error(err)
		}
		da.Close()
		stop.Store(true)
		wg.Wait()
		db.Close()
	}
}

// TestVerbsUDSendAfterAHDestroyed: a UD WR whose AH is destroyed before its
// packet is built (held here in SQD) completes with LOC_QP_OP_ERR, as
// rxe's "no address vector"; it used to complete with success while the
// packet was dropped for want of an address.
func TestVerbsUDSendAfterAHDestroyed(t *testing.T) {
	a, b, bgid := udEnds(t)
	ah, err := a.pd.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0})
	if err != nil {
		t.Fatal(err)
	}
	// SQD holds the WR in the send queue.
	var sqd hca.QPAttr
	sqd.State = hca.StateSQD
	if err := a.qp.Modify(&sqd, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 7, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 64)}, AH: ah.Handle(), RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
	var rts hca.QPAttr
	rts.State = hca.StateRTS
	if err := a.qp.Modify(&rts, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, a.cq)
	_, rerr := wcWithin(b.cq, 300*time.Millisecond)
	if wc.Status != transport.StatusLocQPOpErr || rerr == nil {
		t.Errorf("WR %d completed %v though its AH was destroyed (want LOC_QP_OP_ERR); peer received: %v",
			wc.WRID, wc.Status, rerr == nil)
	}
}
