package hca_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// TestStaleRKeyAfterChurn: an MR is deregistered while 255 other
// registrations came and went in another slot; the next MR takes its slot.
// Its key must differ from the one the slot's previous MR had, or a peer
// holding that stale R_Key writes into the new region. The 8-bit key of a
// slot has to move on per slot: one counter shared by every slot lands on
// the old value again whenever 255 other registrations happened between.
func TestStaleRKeyAfterChurn(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	stale := b.mr.RKey()
	for i := 0; i < 255; i++ {
		x, err := b.pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := b.pd.RegMR(buf, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	if uint32(mr.RKey())>>8 != uint32(stale)>>8 {
		t.Fatalf("new R_Key %#x does not reuse the slot of %#x", mr.RKey(), stale)
	}
	if mr.RKey() == stale || uint32(mr.LKey()) == uint32(stale) {
		t.Fatalf("the MR that reused the slot has the stale keys %#x / %#x", mr.RKey(), mr.LKey())
	}
	fill(a.buf[:64], 9)
	if err := a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 64)}, RemoteAddr: mr.Addr(), RKey: stale}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemAccessErr {
		t.Fatalf("WRITE with the stale R_Key: %v, want REM_ACCESS_ERR", wc.Status)
	}
	if !bytes.Equal(buf, make([]byte, 4096)) {
		t.Fatal("the stale R_Key wrote into the new region")
	}
}

// TestStaleAHHandleAfterChurn is TestStaleRKeyAfterChurn for address
// handles: the handle of a destroyed AH must not name the AH that next
// takes its slot, however many AHs came and went in between.
func TestStaleAHHandleAfterChurn(t *testing.T) {
	a, b, bgid := udEnds(t)
	attr := hca.AHAttr{DGID: bgid, SGIDIndex: 0, HopLimit: 64}
	old, err := a.pd.CreateAH(attr)
	if err != nil {
		t.Fatal(err)
	}
	stale := old.Handle()
	for i := 0; i < 255; i++ {
		x, err := a.pd.CreateAH(attr)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Destroy(); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(attr)
	if err != nil {
		t.Fatal(err)
	}
	if ah.Handle()>>8 != stale>>8 {
		t.Fatalf("new handle %#x does not reuse the slot of %#x", ah.Handle(), stale)
	}
	if ah.Handle() == stale {
		t.Fatalf("the AH that reused the slot has the stale handle %#x", stale)
	}
	err = a.qp.PostSend(&hca.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 8)}, AH: stale, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
	if err == nil {
		t.Fatal("UD send with a stale AH handle was accepted")
	}
}
