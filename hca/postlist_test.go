package hca_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// PostSendList posts a chained list as ibv_post_send does: every WR in
// order, and at the first it refuses it stops and says how many went
// before it (bad_wr); those complete, the rest never were posted.
func TestPostSendList(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 1<<16, allAccess)
	b := newEnd(t, db, hca.RC, 1<<16, allAccess)
	connect(t, a, b, bth.MTU1024, 100, 200)
	fill(a.buf[:4096], 9)
	wrs := make([]hca.SendWR, 4)
	for i := range wrs {
		wrs[i] = hca.SendWR{ID: uint64(i), Opcode: transport.WRRDMAWrite, SGL: []hca.SGE{a.mr.SGE(i*1024, 1024)},
			RemoteAddr: b.mr.Addr() + uint64(i*1024), RKey: b.mr.RKey()}
	}
	wrs[3].Flags = transport.SendSignaled // the list's last, as perftest signals it
	if n, err := a.qp.PostSendList(wrs); n != 4 || err != nil {
		t.Fatalf("PostSendList = %d, %v", n, err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != 3 {
		t.Fatalf("completion %+v, want WR 3 (the only signaled one)", wc)
	}
	if !bytes.Equal(b.buf[:4096], a.buf[:4096]) {
		t.Fatal("the list's four WRITEs did not all land")
	}

	// The third WR asks for more SGEs than the QP has: two are posted.
	bad := []hca.SGE{a.mr.SGE(0, 1), a.mr.SGE(1, 1), a.mr.SGE(2, 1), a.mr.SGE(3, 1), a.mr.SGE(4, 1)}
	for i := range wrs {
		wrs[i].Flags = transport.SendSignaled
	}
	wrs[2].SGL = bad
	n, err := a.qp.PostSendList(wrs)
	if n != 2 || err == nil {
		t.Fatalf("PostSendList with a bad third WR = %d, %v; want 2 and an error", n, err)
	}
	for want := uint64(0); want < 2; want++ {
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != want {
			t.Fatalf("completion %+v, want WR %d", wc, want)
		}
	}
	a.qp.Destroy()
	if _, err := a.qp.PostSendList(wrs); !errors.Is(err, hca.ErrDestroyed) {
		t.Fatalf("PostSendList on a destroyed QP: %v", err)
	}
}
