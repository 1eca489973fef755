package hca_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// The verbs objects after their own Destroy / Dereg / Dealloc and after
// Device.Close: every exported method either fails with a typed error
// (ErrDestroyed for a call on a destroyed object, ErrClosed for one that
// would create an object on a closed device, ErrInvalidArg for an
// argument that is wrong whatever the state) or gives the answer its doc
// comment promises for a destroyed object. Nil and zero-value arguments
// are among the calls: none may panic.

// afterObjs is one object of each kind on device dev, with what they
// answered while alive.
type afterObjs struct {
	dev     *hca.Device
	pd      *hca.PD
	cq      *hca.CQ
	rc, ud  *hca.QP
	srq     *hca.SRQ
	mr      *hca.MR
	ah      *hca.AH
	witness *hca.QP // a QP of another PD, for ReadMR of a deregistered MR
	wpd     *hca.PD
	wcq     *hca.CQ
	bgid    hca.GID
	peerQPN bth.QPN // the UD QP of the peer, for UD send WRs

	// While alive.
	rcQPN, udQPN   bth.QPN
	rcInit         hca.QPInitAttr
	rcAttr         hca.QPAttr
	rcStats        transport.Stats
	udStats        transport.Stats
	cqCap          int
	srqMax, srqSGE int
	lkey           bth.LKey
	rkey           bth.RKey
	mrAddr         uint64
	mrLen          int
	mrBytes        []byte
	mrSGE          hca.SGE
	ahHandle       uint32
	ahAttr         hca.AHAttr
	pdHandle       uint32
}

func newAfterObjs(t *testing.T) *afterObjs {
	t.Helper()
	da, db := pair(t, memlink.Config{})
	ea := newEnd(t, da, hca.RC, 4096, allAccess)
	eb := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, ea, eb, bth.MTU1024, 1, 2)
	udq, err := ea.pd.CreateQP(hca.QPInitAttr{Type: hca.UD, SendCQ: ea.cq, RecvCQ: ea.cq, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	ua := &end{dev: da, pd: ea.pd, cq: ea.cq, qp: udq, mr: ea.mr, buf: ea.buf}
	ub := newEnd(t, db, hca.UD, 4096, allAccess)
	connect(t, ua, ub, bth.MTU1024, 3, 4)
	bgid, err := db.QueryGID(0)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := ea.pd.CreateAH(hca.AHAttr{DGID: bgid})
	if err != nil {
		t.Fatal(err)
	}
	srq, err := ea.pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := srq.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{ea.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	wpd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	wcq, err := da.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	witness, err := wpd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: wcq, RecvCQ: wcq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// One completion left in the CQ: a destroyed CQ still hands it over.
	if err := ea.qp.PostSend(&hca.SendWR{ID: 99, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{ea.mr.SGE(0, 8)}, RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ea.cq.Len() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no completion for the RDMA WRITE in 20 s")
		}
	}
	o := &afterObjs{dev: da, pd: ea.pd, cq: ea.cq, rc: ea.qp, ud: udq, srq: srq, mr: ea.mr, ah: ah,
		witness: witness, wpd: wpd, wcq: wcq, bgid: bgid, peerQPN: ub.qp.QPN()}
	o.rcQPN, o.udQPN = o.rc.QPN(), o.ud.QPN()
	o.rcAttr, o.rcInit = o.rc.Query()
	if o.rcAttr.State != hca.StateRTS || o.rc.State() != hca.StateRTS {
		t.Fatalf("RC QP in %s (Query: %s), want RTS", o.rc.State(), o.rcAttr.State)
	}
	o.rcStats, o.udStats = o.rc.Stats(), o.ud.Stats()
	if o.rcStats.TxPackets == 0 {
		t.Fatalf("RC QP stats after a WRITE: %+v", o.rcStats)
	}
	o.cqCap = o.cq.Cap()
	q := o.srq.Query()
	o.srqMax, o.srqSGE = q.MaxWR, q.MaxSGE
	o.lkey, o.rkey, o.mrAddr, o.mrLen, o.mrBytes, o.mrSGE = o.mr.LKey(), o.mr.RKey(), o.mr.Addr(), o.mr.Len(), o.mr.Bytes(), o.mr.SGE(8, 16)
	o.ahHandle, o.ahAttr = o.ah.Handle(), o.ah.Attr()
	o.pdHandle = o.pd.Handle()
	return o
}

// destroyAll destroys every object with its own verb, in an order each
// verb accepts.
func (o *afterObjs) destroyAll(t *testing.T) {
	t.Helper()
	for _, s := range []struct {
		name string
		f    func() error
	}{
		{"RC QP.Destroy", o.rc.Destroy}, {"UD QP.Destroy", o.ud.Destroy},
		{"AH.Destroy", o.ah.Destroy}, {"MR.Dereg", o.mr.Dereg},
		{"SRQ.Destroy", o.srq.Destroy}, {"CQ.Destroy", o.cq.Destroy},
		{"PD.Dealloc", o.pd.Dealloc},
	} {
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
}

// afterCheck is one call and its verdict: nil when the answer is the
// documented one.
type afterCheck struct {
	name string
	f    func() error
}

// wantErr is the verdict on an error that must match target.
func wantErr(err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("error %v, want %v", err, target)
	}
	return nil
}

// wantEq is the verdict on a value that must equal want.
func wantEq(got, want any) error {
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%+v, want %+v", got, want)
	}
	return nil
}

// afterChecks lists the calls of every exported method of o's objects.
// closed: the device was closed (the objects were not destroyed one by
// one): calls that create an object then fail with ErrClosed.
func afterChecks(o *afterObjs, closed bool) []afterCheck {
	create := hca.ErrDestroyed // the PD is deallocated
	if closed {
		create = hca.ErrClosed
	}
	p := make([]byte, 4)
	sendWR := func() *hca.SendWR {
		return &hca.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{o.mrSGE}}
	}
	udWR := func() *hca.SendWR {
		wr := sendWR()
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = o.ahHandle, o.peerQPN, 0x11111111
		return wr
	}
	recvWR := &hca.RecvWR{ID: 2, SGL: []hca.SGE{o.mrSGE}}
	toErr := &hca.QPAttr{}
	toErr.State = hca.StateErr
	checks := []afterCheck{
		// QP.
		{"QP.QPN", func() error { return wantEq(o.rc.QPN(), o.rcQPN) }},
		{"QP.Type", func() error { return wantEq(o.rc.Type(), hca.RC) }},
		{"RC QP.State", func() error { return wantEq(o.rc.State(), hca.StateReset) }},
		{"UD QP.State", func() error { return wantEq(o.ud.State(), hca.StateReset) }},
		{"QP.Query", func() error {
			a, ia := o.rc.Query()
			if a.State != hca.StateReset {
				return fmt.Errorf("state %s, want RESET", a.State)
			}
			want := o.rcAttr
			want.State = hca.StateReset
			if err := wantEq(a, want); err != nil {
				return fmt.Errorf("attributes: %w", err)
			}
			return wantEq(ia, o.rcInit)
		}},
		{"RC QP.Stats", func() error { return wantEq(o.rc.Stats(), o.rcStats) }},
		{"UD QP.Stats", func() error { return wantEq(o.ud.Stats(), o.udStats) }},
		{"QP.Modify(to ERR)", func() error { return wantErr(o.rc.Modify(toErr, transport.AttrState), hca.ErrDestroyed) }},
		{"QP.Modify(nil)", func() error { return wantErr(o.rc.Modify(nil, transport.AttrState), hca.ErrDestroyed) }},
		{"QP.Modify(zero, 0)", func() error { return wantErr(o.rc.Modify(&hca.QPAttr{}, 0), hca.ErrDestroyed) }},
		{"RC QP.PostSend", func() error { return wantErr(o.rc.PostSend(sendWR()), hca.ErrDestroyed) }},
		{"UD QP.PostSend", func() error { return wantErr(o.ud.PostSend(udWR()), hca.ErrDestroyed) }},
		{"QP.PostSend(nil)", func() error { return wantErr(o.rc.PostSend(nil), hca.ErrDestroyed) }},
		{"QP.PostSend(zero)", func() error { return wantErr(o.ud.PostSend(&hca.SendWR{}), hca.ErrDestroyed) }},
		{"QP.PostSendList", func() error {
			n, err := o.rc.PostSendList([]hca.SendWR{*sendWR(), *sendWR()})
			if n != 0 {
				return fmt.Errorf("posted %d", n)
			}
			return wantErr(err, hca.ErrDestroyed)
		}},
		{"QP.PostSendList(nil)", func() error {
			n, err := o.ud.PostSendList(nil)
			if n != 0 {
				return fmt.Errorf("posted %d", n)
			}
			return wantErr(err, hca.ErrDestroyed)
		}},
		{"QP.PostRecv", func() error { return wantErr(o.rc.PostRecv(recvWR), hca.ErrDestroyed) }},
		{"QP.PostRecv(nil)", func() error { return wantErr(o.ud.PostRecv(nil), hca.ErrDestroyed) }},
		{"QP.ReadMR", func() error { return wantErr(o.rc.ReadMR(o.mr, 0, p), hca.ErrDestroyed) }},
		{"QP.ReadMR(nil)", func() error { return wantErr(o.rc.ReadMR(nil, 0, nil), hca.ErrDestroyed) }},
		{"QP.ReadMR(off -1)", func() error { return wantErr(o.rc.ReadMR(o.mr, -1, p), hca.ErrDestroyed) }},
		{"live QP.ReadMR(deregistered MR)", func() error { return wantErr(o.witness.ReadMR(o.mr, 0, p), hca.ErrDestroyed) }},
		{"RC QP.Destroy", func() error { return wantErr(o.rc.Destroy(), hca.ErrDestroyed) }},
		{"UD QP.Destroy", func() error { return wantErr(o.ud.Destroy(), hca.ErrDestroyed) }},

		// CQ: it hands over the completion it held, then reports
		// ErrDestroyed.
		{"CQ.Cap", func() error { return wantEq(o.cq.Cap(), o.cqCap) }},
		{"CQ.Len, Wait, Poll", func() error {
			if n := o.cq.Len(); n != 1 {
				return fmt.Errorf("Len %d before polling, want the 1 completion held", n)
			}
			if err := o.cq.Wait(context.Background()); err != nil {
				return fmt.Errorf("Wait with a completion held: %v", err)
			}
			if n, err := o.cq.Poll(nil); n != 0 || err != nil {
				return fmt.Errorf("Poll(nil) with a completion held: %d, %v", n, err)
			}
			var wcs [4]hca.WC
			n, err := o.cq.Poll(wcs[:])
			if n != 1 || err != nil || wcs[0].WRID != 99 || wcs[0].Status != transport.StatusSuccess {
				return fmt.Errorf("Poll: %d, %v (%+v), want the WRITE's completion", n, err, wcs[0])
			}
			n, err = o.cq.Poll(wcs[:])
			if n != 0 {
				return fmt.Errorf("second Poll: %d completions", n)
			}
			if err := wantErr(err, hca.ErrDestroyed); err != nil {
				return fmt.Errorf("second Poll: %w", err)
			}
			if n := o.cq.Len(); n != 0 {
				return fmt.Errorf("Len %d after polling", n)
			}
			return nil
		}},
		{"CQ.Poll(nil) when empty", func() error {
			n, err := o.cq.Poll(nil)
			if n != 0 {
				return fmt.Errorf("%d completions", n)
			}
			return wantErr(err, hca.ErrDestroyed)
		}},
		{"CQ.Wait when empty", func() error { return wantErr(o.cq.Wait(context.Background()), hca.ErrDestroyed) }},
		{"CQ.Wait(nil ctx) when empty", func() error {
			//lint:ignore SA1012 a nil context is the misuse under test
			return wantErr(o.cq.Wait(nil), hca.ErrDestroyed)
		}},
		{"CQ.ReqNotify(false)", func() error { return wantErr(o.cq.ReqNotify(false), hca.ErrDestroyed) }},
		{"CQ.ReqNotify(true)", func() error { return wantErr(o.cq.ReqNotify(true), hca.ErrDestroyed) }},
		{"CQ.Events", func() error {
			ch := o.cq.Events()
			if ch == nil {
				return errors.New("nil channel")
			}
			select {
			case <-ch:
				return errors.New("an event from a destroyed CQ")
			default:
				return nil
			}
		}},
		{"CQ.Push", func() error {
			if o.cq.Push(&hca.WC{WRID: 5}) {
				return errors.New("a destroyed CQ took a completion")
			}
			if o.cq.Push(nil) {
				return errors.New("a destroyed CQ took a nil completion")
			}
			return wantEq(o.cq.Len(), 0)
		}},
		{"CQ.Destroy", func() error { return wantErr(o.cq.Destroy(), hca.ErrDestroyed) }},

		// SRQ: destroyed, it holds no WQE and no armed limit.
		{"SRQ.PostRecv", func() error { return wantErr(o.srq.PostRecv(recvWR), hca.ErrDestroyed) }},
		{"SRQ.PostRecv(nil)", func() error { return wantErr(o.srq.PostRecv(nil), hca.ErrDestroyed) }},
		{"SRQ.Modify(1)", func() error { return wantErr(o.srq.Modify(1), hca.ErrDestroyed) }},
		{"SRQ.Modify(-1)", func() error { return wantErr(o.srq.Modify(-1), hca.ErrDestroyed) }},
		{"SRQ.Query", func() error { return wantEq(o.srq.Query(), hca.SRQAttr{MaxWR: o.srqMax, MaxSGE: o.srqSGE}) }},
		{"SRQ.Len", func() error { return wantEq(o.srq.Len(), 0) }},
		{"SRQ.Destroy", func() error { return wantErr(o.srq.Destroy(), hca.ErrDestroyed) }},

		// MR: its identity stays readable; the keys name nothing.
		{"MR.LKey", func() error { return wantEq(o.mr.LKey(), o.lkey) }},
		{"MR.RKey", func() error { return wantEq(o.mr.RKey(), o.rkey) }},
		{"MR.Addr", func() error { return wantEq(o.mr.Addr(), o.mrAddr) }},
		{"MR.Len", func() error { return wantEq(o.mr.Len(), o.mrLen) }},
		{"MR.Bytes", func() error {
			b := o.mr.Bytes()
			if len(b) != len(o.mrBytes) || &b[0] != &o.mrBytes[0] {
				return errors.New("not the registered buffer")
			}
			return nil
		}},
		{"MR.SGE", func() error { return wantEq(o.mr.SGE(8, 16), o.mrSGE) }},
		{"MR.Dereg", func() error { return wantErr(o.mr.Dereg(), hca.ErrDestroyed) }},

		// AH.
		{"AH.Handle", func() error { return wantEq(o.ah.Handle(), o.ahHandle) }},
		{"AH.Attr", func() error { return wantEq(o.ah.Attr(), o.ahAttr) }},
		{"AH.Destroy", func() error { return wantErr(o.ah.Destroy(), hca.ErrDestroyed) }},

		// PD.
		{"PD.Handle", func() error { return wantEq(o.pd.Handle(), o.pdHandle) }},
		{"PD.Dealloc", func() error { return wantErr(o.pd.Dealloc(), hca.ErrDestroyed) }},
		{"PD.RegMR", func() error {
			_, err := o.pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
			return wantErr(err, create)
		}},
		{"PD.RegMR(nil)", func() error {
			_, err := o.pd.RegMR(nil, 0)
			return wantErr(err, hca.ErrInvalidArg)
		}},
		{"PD.CreateQP", func() error {
			_, err := o.pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: o.cq, RecvCQ: o.cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			return wantErr(err, create)
		}},
		{"PD.CreateQP(zero)", func() error {
			_, err := o.pd.CreateQP(hca.QPInitAttr{})
			return wantErr(err, hca.ErrInvalidArg)
		}},
		{"PD.CreateSRQ", func() error {
			_, err := o.pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1})
			return wantErr(err, create)
		}},
		{"PD.CreateSRQ(zero)", func() error {
			_, err := o.pd.CreateSRQ(hca.SRQAttr{})
			return wantErr(err, hca.ErrInvalidArg)
		}},
		{"PD.CreateAH", func() error {
			_, err := o.pd.CreateAH(hca.AHAttr{DGID: o.bgid})
			return wantErr(err, create)
		}},
		{"PD.CreateAH(zero)", func() error {
			_, err := o.pd.CreateAH(hca.AHAttr{})
			return wantErr(err, hca.ErrInvalidArg)
		}},
	}
	if closed {
		checks = append(checks,
			afterCheck{"Device.Close again", func() error { return o.dev.Close() }},
			afterCheck{"Device.AllocPD", func() error { _, err := o.dev.AllocPD(); return wantErr(err, hca.ErrClosed) }},
			afterCheck{"Device.CreateCQ", func() error { _, err := o.dev.CreateCQ(1); return wantErr(err, hca.ErrClosed) }},
			afterCheck{"Device.CreateCQ(0)", func() error { _, err := o.dev.CreateCQ(0); return wantErr(err, hca.ErrInvalidArg) }},
			afterCheck{"Device.QueryGID", func() error { _, err := o.dev.QueryGID(0); return err }},
			afterCheck{"Device.Events", func() error {
				timeout := time.After(5 * time.Second)
				for {
					select {
					case _, ok := <-o.dev.Events():
						if !ok {
							return nil
						}
					case <-timeout:
						return errors.New("channel not closed")
					}
				}
			}},
			afterCheck{"witness QP.State", func() error { return wantEq(o.witness.State(), hca.StateReset) }},
			afterCheck{"witness CQ.Poll", func() error { _, err := o.wcq.Poll(make([]hca.WC, 1)); return wantErr(err, hca.ErrDestroyed) }},
			afterCheck{"other PD.Dealloc", func() error { return wantErr(o.wpd.Dealloc(), hca.ErrDestroyed) }},
		)
	}
	return checks
}

func runAfterChecks(t *testing.T, checks []afterCheck) {
	t.Helper()
	for _, c := range checks {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			err = c.f()
		}()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestAfterDestroy: every method of each object after the object's own
// destroy verb.
func TestAfterDestroy(t *testing.T) {
	o := newAfterObjs(t)
	o.destroyAll(t)
	runAfterChecks(t, afterChecks(o, false))
}

// TestAfterDestroyByClose: every method of each object after Device.Close,
// which destroys them all: the same answers as after their own destroy
// verbs (a QP Close destroyed reports RESET, not the state it had), except
// that creating an object reports the closed device.
func TestAfterDestroyByClose(t *testing.T) {
	o := newAfterObjs(t)
	if err := o.dev.Close(); err != nil {
		t.Fatal(err)
	}
	runAfterChecks(t, afterChecks(o, true))
}
