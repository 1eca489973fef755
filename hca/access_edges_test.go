package hca_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// accessCase is one RC work request of a against b's memory, with the
// completion status it must end in. Refused ones must leave every buffer
// of both devices as it was.
type accessCase struct {
	name string
	// wr builds the request; b.mr has allAccess unless bAccess says
	// otherwise, other is an MR of another PD on b's device and local is
	// the MR of a the request's SGE uses (a.mr unless mk sets it).
	wr   func(a, b *end, other *hca.MR) hca.SendWR
	want transport.Status
	// bAccess, when not zero, is the access of b.mr.
	bAccess hca.Access
	// local, when set, returns the MR of a (or of another PD) whose bytes
	// [0, 64) the request's SGE names instead of a.mr.
	local func(a *end) *hca.MR
}

func runAccessCases(t *testing.T, cases []accessCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			da, db := pair(t, memlink.Config{})
			a := newEnd(t, da, hca.RC, 4096, allAccess)
			bAccess := allAccess
			if c.bAccess != 0 {
				bAccess = c.bAccess
			}
			b := newEnd(t, db, hca.RC, 4096, bAccess)
			pd2, err := db.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			other, err := pd2.RegMR(make([]byte, 4096), allAccess)
			if err != nil {
				t.Fatal(err)
			}
			connect(t, a, b, bth.MTU1024, 1, 2)
			fill(a.buf, 1)
			fill(b.buf, 2)
			fill(other.Bytes(), 3)
			local := a.mr
			if c.local != nil {
				local = c.local(a)
				fill(local.Bytes(), 4)
			}
			snap := func() [][]byte {
				return [][]byte{append([]byte(nil), a.buf...), append([]byte(nil), b.buf...),
					append([]byte(nil), other.Bytes()...), append([]byte(nil), local.Bytes()...)}
			}
			before := snap()
			wr := c.wr(a, b, other)
			wr.ID, wr.Flags = 9, transport.SendSignaled
			if wr.SGL == nil {
				n := 64
				if wr.Opcode == transport.WRAtomicFetchAndAdd || wr.Opcode == transport.WRAtomicCmpAndSwp {
					n = 8
				}
				wr.SGL = []hca.SGE{local.SGE(0, n)}
			}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			wc := waitWC(t, a.cq)
			if wc.Status != c.want || wc.WRID != 9 {
				t.Fatalf("WC %+v, want status %v", wc, c.want)
			}
			if c.want == transport.StatusSuccess {
				checkDone(t, &wr, before[0], before[1], a, b)
				return
			}
			for i, after := range snap() {
				if !bytes.Equal(before[i], after) {
					t.Fatalf("refused request changed buffer %d", i)
				}
			}
			if a.qp.State() != hca.StateErr {
				t.Fatalf("requester in %v after the refusal, want ERR", a.qp.State())
			}
		})
	}
}

// TestRemoteAccessEdges pins the responder's refusals against the real
// MR table: keys of another PD for READ and ATOMIC (WRITE is in
// TestRemoteAccessRefusals), ranges at the exact end of a region, a
// range whose end overflows 64 bits, zero-length requests (C9-88: no key
// check) and atomics on a region without REMOTE_ATOMIC. (A misaligned
// atomic never leaves PostSend; the responder's refusal of a forged one is
// in transport's TestHostileMisalignedAtomic.)
func TestRemoteAccessEdges(t *testing.T) {
	atomicWR := func(addr uint64, rkey bth.RKey) hca.SendWR {
		return hca.SendWR{Opcode: transport.WRAtomicFetchAndAdd, RemoteAddr: addr, RKey: rkey, CompareAdd: 1}
	}
	runAccessCases(t, []accessCase{
		{name: "READ from MR of another PD", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, o *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: o.Addr(), RKey: o.RKey()}
			}},
		{name: "ATOMIC on MR of another PD", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, o *hca.MR) hca.SendWR { return atomicWR(o.Addr(), o.RKey()) }},
		{name: "CMP_SWAP on MR of another PD", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, o *hca.MR) hca.SendWR {
				w := atomicWR(o.Addr(), o.RKey())
				w.Opcode, w.CompareAdd, w.Swap = transport.WRAtomicCmpAndSwp, binary.NativeEndian.Uint64(o.Bytes()), 0
				return w
			}},
		{name: "WRITE ending at the MR end", want: transport.StatusSuccess,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr() + 4096 - 64, RKey: b.mr.RKey()}
			}},
		{name: "WRITE one byte past the MR end", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr() + 4096 - 63, RKey: b.mr.RKey()}
			}},
		{name: "WRITE one byte before the MR", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr() - 1, RKey: b.mr.RKey()}
			}},
		{name: "READ ending at the MR end", want: transport.StatusSuccess,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: b.mr.Addr() + 4096 - 64, RKey: b.mr.RKey()}
			}},
		{name: "READ one byte past the MR end", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: b.mr.Addr() + 4096 - 63, RKey: b.mr.RKey()}
			}},
		{name: "WRITE whose end overflows 64 bits", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: ^uint64(0) - 31, RKey: b.mr.RKey()}
			}},
		{name: "READ whose end overflows 64 bits", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: ^uint64(0) - 31, RKey: b.mr.RKey()}
			}},
		{name: "zero-length WRITE at any address and key", want: transport.StatusSuccess,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, SGL: []hca.SGE{}, RemoteAddr: ^uint64(0), RKey: 0xDEAD00}
			}},
		{name: "zero-length READ at any address and key", want: transport.StatusSuccess,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMARead, SGL: []hca.SGE{}, RemoteAddr: ^uint64(0), RKey: 0xDEAD00}
			}},
		{name: "ATOMIC on the last word of the MR", want: transport.StatusSuccess,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR { return atomicWR(b.mr.Addr()+4096-8, b.mr.RKey()) }},
		{name: "ATOMIC just past the MR end", want: transport.StatusRemAccessErr,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR { return atomicWR(b.mr.Addr()+4096, b.mr.RKey()) }},
		{name: "ATOMIC on MR without REMOTE_ATOMIC", want: transport.StatusRemAccessErr,
			bAccess: hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead,
			wr:      func(a, b *end, _ *hca.MR) hca.SendWR { return atomicWR(b.mr.Addr(), b.mr.RKey()) }},
		{name: "WRITE on MR without REMOTE_WRITE", want: transport.StatusRemAccessErr,
			bAccess: hca.AccessLocalWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic,
			wr: func(a, b *end, _ *hca.MR) hca.SendWR {
				return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			}},
	})
}

// TestLocalAccessRefusals: the SGE of a READ or ATOMIC is where the reply
// lands, so it needs LOCAL_WRITE and the QP's PD; a fault completes the WR
// with LOC_PROT_ERR and nothing is written, on either side.
func TestLocalAccessRefusals(t *testing.T) {
	readOnly := func(a *end) *hca.MR {
		mr, err := a.pd.RegMR(make([]byte, 64), hca.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	otherPD := func(a *end) *hca.MR {
		pd, err := a.dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 64), allAccess)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	read := func(a, b *end, _ *hca.MR) hca.SendWR {
		return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	fadd := func(a, b *end, _ *hca.MR) hca.SendWR {
		return hca.SendWR{Opcode: transport.WRAtomicFetchAndAdd, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1}
	}
	runAccessCases(t, []accessCase{
		{name: "READ into MR without LOCAL_WRITE", want: transport.StatusLocProtErr, local: readOnly, wr: read},
		{name: "READ into MR of another PD", want: transport.StatusLocProtErr, local: otherPD, wr: read},
		{name: "ATOMIC into MR without LOCAL_WRITE", want: transport.StatusLocProtErr, local: readOnly, wr: fadd},
		{name: "ATOMIC into MR of another PD", want: transport.StatusLocProtErr, local: otherPD, wr: fadd},
	})
}

// TestDeregisteredRKeyRefused: READ and ATOMIC with the R_Key of a region
// deregistered before the request (WRITE is in TestStaleRKeyRefused).
func TestDeregisteredRKeyRefused(t *testing.T) {
	for _, op := range []transport.WROpcode{transport.WRRDMARead, transport.WRAtomicFetchAndAdd} {
		da, db := pair(t, memlink.Config{})
		a := newEnd(t, da, hca.RC, 4096, allAccess)
		b := newEnd(t, db, hca.RC, 4096, allAccess)
		connect(t, a, b, bth.MTU1024, 1, 2)
		fill(b.buf, 5)
		guard := append([]byte(nil), b.buf...)
		if err := b.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		n := 64
		if op == transport.WRAtomicFetchAndAdd {
			n = 8
		}
		if err := a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: op, Flags: transport.SendSignaled, CompareAdd: 1,
			SGL: []hca.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemAccessErr {
			t.Fatalf("%v with a deregistered R_Key: %v, want REM_ACCESS_ERR", op, wc.Status)
		}
		if !bytes.Equal(b.buf, guard) {
			t.Fatalf("%v with a deregistered R_Key changed the old region", op)
		}
		if !bytes.Equal(a.buf[:n], make([]byte, n)) {
			t.Fatalf("%v with a deregistered R_Key placed data locally", op)
		}
	}
}

// TestSRQBadLKey: a receive WQE posted to an SRQ whose SGE has a bad
// L_Key or one of another PD. The SEND that takes it completes the
// receive with LOC_PROT_ERR and is NAKed (remote operational error: the
// sender sees REM_OP_ERR); no byte lands anywhere.
func TestSRQBadLKey(t *testing.T) {
	for _, name := range []string{"bad lkey", "lkey of another PD"} {
		t.Run(name, func(t *testing.T) {
			da, db := pair(t, memlink.Config{})
			a := newEnd(t, da, hca.RC, 4096, allAccess)
			pd, _ := db.AllocPD()
			srq, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 4, MaxSGE: 1})
			if err != nil {
				t.Fatal(err)
			}
			cq, _ := db.CreateCQ(16)
			qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: hca.QPCap{MaxSendWR: 4}})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			mr, err := pd.RegMR(buf, hca.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			pd2, _ := db.AllocPD()
			otherBuf := make([]byte, 4096)
			other, err := pd2.RegMR(otherBuf, hca.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			b := &end{dev: db, pd: pd, cq: cq, qp: qp, mr: mr, buf: buf}
			connect(t, a, b, bth.MTU1024, 5, 6)
			sge := mr.SGE(0, 64)
			if name == "bad lkey" {
				sge.LKey ^= 0x7700
			} else {
				sge = other.SGE(0, 64)
			}
			if err := srq.PostRecv(&hca.RecvWR{ID: 3, SGL: []hca.SGE{sge}}); err != nil {
				t.Fatal(err)
			}
			fill(a.buf[:64], 7)
			if err := a.qp.PostSend(&hca.SendWR{ID: 4, Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []hca.SGE{a.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemOpErr {
				t.Fatalf("sender: %+v, want REM_OP_ERR", wc)
			}
			if wc := waitWC(t, cq); wc.Status != transport.StatusLocProtErr || wc.WRID != 3 {
				t.Fatalf("receiver: %+v, want LOC_PROT_ERR for WR 3", wc)
			}
			if !bytes.Equal(buf, make([]byte, 4096)) || !bytes.Equal(otherBuf, make([]byte, 4096)) {
				t.Fatal("the refused SEND wrote memory")
			}
		})
	}
}

// TestUDWrongQKeyDropped: a UD datagram with another Q_Key is dropped and
// counted, and takes no receive WQE: the next one with the right Q_Key
// lands in the first WQE posted.
func TestUDWrongQKeyDropped(t *testing.T) {
	a, b, bgid := udEnds(t)
	ah, err := a.pd.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	send := func(id uint64, qkey bth.QKey, seed byte) {
		t.Helper()
		fill(a.buf[:64], seed)
		if err := a.qp.PostSend(&hca.SendWR{ID: id, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, 64)}, AH: ah.Handle(), RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess {
			t.Fatalf("UD send %d: %+v", id, wc)
		}
	}
	send(10, 0x11111112, 1)
	send(11, 0x11111111, 2)
	wc := waitWC(t, b.cq)
	if wc.Status != transport.StatusSuccess || wc.WRID != 1 || wc.ByteLen != 40+64 {
		t.Fatalf("UD recv: %+v", wc)
	}
	if !bytes.Equal(b.buf[40:40+64], a.buf[:64]) {
		t.Fatal("the receive holds the wrong datagram")
	}
	if got := b.qp.Stats().RxQKeyMismatch; got != 1 {
		t.Fatalf("RxQKeyMismatch = %d, want 1", got)
	}
}

// checkDone checks that a successful WR of runAccessCases did what it says:
// the bytes a WRITE sent or a READ fetched, the old value an atomic
// returned. aBuf and bBuf are the buffers before the WR.
func checkDone(t *testing.T, wr *hca.SendWR, aBuf, bBuf []byte, a, b *end) {
	t.Helper()
	if len(wr.SGL) == 0 || wr.SGL[0].Length == 0 {
		return
	}
	n := int(wr.SGL[0].Length)
	off := int(wr.RemoteAddr - b.mr.Addr())
	switch wr.Opcode {
	case transport.WRRDMAWrite:
		if !bytes.Equal(b.buf[off:off+n], aBuf[:n]) {
			t.Fatal("WRITE: data differs")
		}
	case transport.WRRDMARead:
		if !bytes.Equal(a.buf[:n], bBuf[off:off+n]) {
			t.Fatal("READ: data differs")
		}
	case transport.WRAtomicFetchAndAdd:
		old := binary.NativeEndian.Uint64(bBuf[off:])
		if got := binary.NativeEndian.Uint64(a.buf); got != old {
			t.Fatalf("FETCH_ADD returned %#x, want %#x", got, old)
		}
		if got := binary.NativeEndian.Uint64(b.buf[off:]); got != old+wr.CompareAdd {
			t.Fatalf("FETCH_ADD left %#x, want %#x", got, old+wr.CompareAdd)
		}
	}
}
