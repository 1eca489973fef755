package hca_test

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

func eventPending(cq *hca.CQ) bool {
	select {
	case <-cq.Events():
		return true
	default:
		return false
	}
}

// ReqNotify(solicitedOnly): Push raises the event synchronously, so each
// step is checked right after it.
func TestCQSolicitedOnlyNotification(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	cq, err := da.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	push := func(wc hca.WC) {
		t.Helper()
		if !cq.Push(&wc) {
			t.Fatal("CQ full")
		}
	}
	ok := transport.StatusSuccess
	steps := []struct {
		name         string
		arm, solOnly bool
		wc           hca.WC
		want         bool
	}{
		{"unarmed", false, false, hca.WC{Status: ok}, false},
		{"any completion", true, false, hca.WC{Status: ok}, true},
		{"one event per arming", false, false, hca.WC{Status: ok}, false},
		{"solicited-only, unsolicited", true, true, hca.WC{Status: ok, Opcode: transport.WCRecv}, false},
		{"solicited-only, send completion", false, false, hca.WC{Status: ok, Opcode: transport.WCSend}, false},
		{"solicited-only, solicited", false, false, hca.WC{Status: ok, Opcode: transport.WCRecv, Solicited: true}, true},
		{"solicited-only, error", true, true, hca.WC{Status: transport.StatusWRFlushErr}, true},
		{"solicited-only widened by next-completion", true, true, hca.WC{}, false},
	}
	for _, s := range steps[:len(steps)-1] {
		if s.arm {
			if err := cq.ReqNotify(s.solOnly); err != nil {
				t.Fatal(err)
			}
		}
		push(s.wc)
		if got := eventPending(cq); got != s.want {
			t.Errorf("%s: event %v, want %v", s.name, got, s.want)
		}
	}
	// Arming for solicited only and then for any completion waits for any.
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	push(hca.WC{Status: ok, Opcode: transport.WCRecv})
	if !eventPending(cq) {
		t.Error("armed for any completion after solicited-only: no event")
	}
}

// IBV_SEND_SOLICITED reaches the receiver's completion as Solicited, for
// RC SEND and SEND with immediate, RDMA WRITE with immediate and UD SEND.
func TestSolicitedFlagReachesReceiveCompletion(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	for _, typ := range []hca.QPType{hca.RC, hca.UC, hca.UD} {
		a := newEnd(t, da, typ, 8192, allAccess)
		b := newEnd(t, db, typ, 8192, allAccess)
		connect(t, a, b, bth.MTU1024, 100, 200)
		var ah *hca.AH
		if typ == hca.UD {
			gid, err := db.QueryGID(0)
			if err != nil {
				t.Fatal(err)
			}
			if ah, err = a.pd.CreateAH(hca.AHAttr{DGID: gid, HopLimit: 64}); err != nil {
				t.Fatal(err)
			}
		}
		size := 2000 // two packets at MTU 1024: SE rides on the last
		if typ == hca.UD {
			size = 512
		}
		ops := []transport.WROpcode{transport.WRSend, transport.WRSendWithImm}
		if typ != hca.UD {
			ops = append(ops, transport.WRRDMAWriteWithImm)
		}
		for _, op := range ops {
			for _, sol := range []bool{false, true} {
				if err := b.qp.PostRecv(&hca.RecvWR{ID: 7, SGL: []hca.SGE{b.mr.SGE(0, 4096)}}); err != nil {
					t.Fatal(err)
				}
				wr := &hca.SendWR{ID: 9, Opcode: op, Flags: transport.SendSignaled, SGL: []hca.SGE{a.mr.SGE(0, size)},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if sol {
					wr.Flags |= transport.SendSolicited
				}
				if typ == hca.UD {
					wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.Handle(), b.qp.QPN(), 0x11111111
				}
				if err := a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess {
					t.Fatalf("%v %v: send %+v", typ, op, wc)
				}
				wc := waitWC(t, b.cq)
				if wc.Status != transport.StatusSuccess || wc.Solicited != sol {
					t.Errorf("%v %v solicited=%v: receive completion %+v", typ, op, sol, wc)
				}
			}
		}
	}
}
