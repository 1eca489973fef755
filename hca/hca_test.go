package hca_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

// pair opens two devices joined by an in-memory link.
func pair(t testing.TB, cfg memlink.Config) (*hca.Device, *hca.Device) {
	t.Helper()
	return pairShards(t, cfg, 0)
}

// pairShards is pair with Options.Shards set on both devices.
func pairShards(t testing.TB, cfg memlink.Config, shards int) (*hca.Device, *hca.Device) {
	t.Helper()
	return pairWrapped(t, cfg, shards, nil)
}

// pairWrapped is pairShards with the first device on wrapA(its endpoint)
// when wrapA is not nil.
func pairWrapped(t testing.TB, cfg memlink.Config, shards int, wrapA func(link.Endpoint) link.Endpoint) (*hca.Device, *hca.Device) {
	t.Helper()
	if cfg.AddrsA == nil {
		cfg.AddrsA, cfg.AddrsB = []netip.Addr{addrA}, []netip.Addr{addrB}
	}
	a, b, err := memlink.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ea link.Endpoint = a
	if wrapA != nil {
		ea = wrapA(a)
	}
	da, err := hca.Open(ea, hca.Options{Name: "ga", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(b, hca.Options{Name: "gb", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// end is one side of a connected QP with its resources.
type end struct {
	dev    *hca.Device
	pd     *hca.PD
	cq     *hca.CQ
	qp     *hca.QP
	mr     *hca.MR
	buf    []byte
	gidIdx int
}

func newEnd(t testing.TB, d *hca.Device, typ hca.QPType, size int, access hca.Access) *end {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(4096)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
		Cap: hca.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	return &end{dev: d, pd: pd, cq: cq, qp: qp, mr: mr, buf: buf, gidIdx: 0}
}

// rcTimeout is the local ACK timeout connect sets on RC QPs.
var rcTimeout uint8 = 14

const allAccess = hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic

// udEnds returns two connected UD ends on a memlink pair and the GID of
// b's device, for the AH a sends to b through.
func udEnds(t testing.TB) (a, b *end, bgid hca.GID) {
	t.Helper()
	da, db := pair(t, memlink.Config{})
	a = newEnd(t, da, hca.UD, 8192, allAccess)
	b = newEnd(t, db, hca.UD, 8192, allAccess)
	connect(t, a, b, bth.MTU1024, 10, 20)
	bgid, _ = db.QueryGID(0)
	return a, b, bgid
}

// connect moves both QPs to RTS, each pointing at the other.
func connect(t testing.TB, a, b *end, mtu bth.MTU, psnA, psnB bth.PSN) {
	t.Helper()
	for _, s := range []struct {
		l, r       *end
		lpsn, rpsn bth.PSN
	}{{a, b, psnA, psnB}, {b, a, psnB, psnA}} {
		typ := s.l.qp.Type()
		init := hca.QPAttr{Port: 1}
		init.State = hca.StateInit
		mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
		if typ == hca.UD {
			init.QKey = 0x11111111
			mask |= transport.AttrQKey
		} else {
			init.AccessFlags = hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
			mask |= transport.AttrAccessFlags
		}
		if err := s.l.qp.Modify(&init, mask); err != nil {
			t.Fatal(err)
		}
		rgid, err := s.r.dev.QueryGID(s.r.gidIdx)
		if err != nil {
			t.Fatal(err)
		}
		rtr := hca.QPAttr{AH: hca.AHAttr{DGID: rgid, SGIDIndex: s.l.gidIdx, HopLimit: 64}}
		rtr.State = hca.StateRTR
		mask = transport.AttrState
		if typ != hca.UD {
			rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = mtu, s.r.qp.QPN(), s.rpsn
			mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
			if typ == hca.RC {
				rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 16, 12
				mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
			}
		}
		if err := s.l.qp.Modify(&rtr, mask); err != nil {
			t.Fatal(err)
		}
		rts := hca.QPAttr{}
		rts.State, rts.SQPSN = hca.StateRTS, s.lpsn
		mask = transport.AttrState | transport.AttrSQPSN
		if typ == hca.RC {
			rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = rcTimeout, 7, 7, 16
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		if err := s.l.qp.Modify(&rts, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWC polls cq until it yields one completion or the deadline passes.
func waitWC(t testing.TB, cq *hca.CQ) hca.WC {
	t.Helper()
	wc, err := wcWithin(cq, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// wcWithin is waitWC for goroutines other than the test's: it reports
// what went wrong instead of failing the test.
func wcWithin(cq *hca.CQ, d time.Duration) (hca.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]hca.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return hca.WC{}, fmt.Errorf("poll: %w", err)
		}
		if n == 1 {
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return hca.WC{}, fmt.Errorf("waiting for a completion: %w", err)
		}
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestRCOperations(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	const size = 1 << 20
	a := newEnd(t, da, hca.RC, 2*size, allAccess)
	b := newEnd(t, db, hca.RC, 2*size, allAccess)
	connect(t, a, b, bth.MTU1024, 0xFFFFF0, 0x123456) // PSNs wrap during the test

	for _, n := range []int{0, 1, 1023, 1024, 1025, 4096, size} {
		// SEND: b posts a receive, a sends.
		fill(a.buf[:n], byte(n))
		if err := b.qp.PostRecv(&hca.RecvWR{ID: 7, SGL: []hca.SGE{b.mr.SGE(size, size)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != 1 || wc.Opcode != transport.WCSend {
			t.Fatalf("send %d: %+v", n, wc)
		}
		wc := waitWC(t, b.cq)
		if wc.Status != transport.StatusSuccess || wc.WRID != 7 || wc.ByteLen != uint32(n) || wc.Opcode != transport.WCRecv {
			t.Fatalf("recv %d: %+v", n, wc)
		}
		if !bytes.Equal(b.buf[size:size+n], a.buf[:n]) {
			t.Fatalf("SEND %d: data differs", n)
		}

		// RDMA WRITE a → b.
		fill(a.buf[:n], byte(n)+1)
		if err := a.qp.PostSend(&hca.SendWR{ID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCRDMAWrite {
			t.Fatalf("write %d: %+v", n, wc)
		}
		if !bytes.Equal(b.buf[:n], a.buf[:n]) {
			t.Fatalf("WRITE %d: data differs", n)
		}

		// RDMA READ b → a.
		fill(b.buf[size:size+n], byte(n)+2)
		if err := a.qp.PostSend(&hca.SendWR{ID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(size, n)}, RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCRDMARead || wc.ByteLen != uint32(n) {
			t.Fatalf("read %d: %+v", n, wc)
		}
		if !bytes.Equal(a.buf[size:size+n], b.buf[size:size+n]) {
			t.Fatalf("READ %d: data differs", n)
		}
	}

	// Atomics on an 8-byte aligned word of b.
	binary.NativeEndian.PutUint64(b.buf[64:], 100)
	if err := a.qp.PostSend(&hca.SendWR{ID: 4, Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(128, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 5}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCFetchAdd {
		t.Fatalf("fetch-add: %+v", wc)
	}
	if got := binary.NativeEndian.Uint64(a.buf[128:]); got != 100 {
		t.Fatalf("fetch-add returned %d, want 100", got)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 5, Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(136, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCCompSwap {
		t.Fatalf("cmp-swap: %+v", wc)
	}
	if got := binary.NativeEndian.Uint64(a.buf[136:]); got != 105 {
		t.Fatalf("cmp-swap returned %d, want 105", got)
	}
	if got := binary.NativeEndian.Uint64(b.buf[64:]); got != 7 {
		t.Fatalf("target after cmp-swap = %d, want 7", got)
	}

	// WRITE_WITH_IMM consumes a receive and reports the immediate.
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 8}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 6, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Imm: 0xdeadbeef}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.cq)
	wc := waitWC(t, b.cq)
	if wc.Opcode != transport.WCRecvRDMAWithImm || wc.Imm != 0xdeadbeef || wc.Flags&transport.WCWithImm == 0 || wc.ByteLen != 3000 {
		t.Fatalf("write-with-imm recv: %+v", wc)
	}
}

func TestModifyErrorsNameTheProblem(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	// RESET → RTR is illegal.
	var attr hca.QPAttr
	attr.State = hca.StateRTR
	err := a.qp.Modify(&attr, transport.AttrState)
	var se *hca.StateError
	if !errors.As(err, &se) || !errors.Is(err, hca.ErrQPState) {
		t.Fatalf("RESET->RTR: got %v, want a StateError", err)
	}
	// RESET → INIT without PORT.
	attr = hca.QPAttr{}
	attr.State = hca.StateInit
	err = a.qp.Modify(&attr, transport.AttrState|transport.AttrPKeyIndex|transport.AttrAccessFlags)
	var me *hca.MaskError
	if !errors.As(err, &me) || me.Missing != transport.AttrPort {
		t.Fatalf("missing PORT: got %v", err)
	}
	if want := "missing required PORT"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("error %q does not name %q", err, want)
	}
	// A QKEY on an RC RESET→INIT is not allowed.
	attr.Port = 1
	err = a.qp.Modify(&attr, transport.AttrState|transport.AttrPKeyIndex|transport.AttrAccessFlags|transport.AttrPort|transport.AttrQKey)
	if !errors.As(err, &me) || me.Extra != transport.AttrQKey {
		t.Fatalf("extra QKEY: got %v", err)
	}
	// A bad value names the attribute.
	attr.Port = 2
	err = a.qp.Modify(&attr, transport.AttrState|transport.AttrPKeyIndex|transport.AttrAccessFlags|transport.AttrPort)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("port_num")) {
		t.Fatalf("bad port: got %v", err)
	}
	// Posting a send in RESET fails.
	if err := a.qp.PostSend(&hca.SendWR{Opcode: transport.WRSend}); err == nil {
		t.Fatal("post_send in RESET succeeded")
	}
}

func TestRemoteAccessRefusals(t *testing.T) {
	cases := []struct {
		name string
		wr   func(b *end, other *hca.MR) hca.SendWR
	}{
		{"bad rkey", func(b *end, _ *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x5500}
		}},
		{"out of range", func(b *end, _ *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: b.mr.Addr() + uint64(b.mr.Len()) - 8, RKey: b.mr.RKey()}
		}},
		{"no remote read right", func(b *end, _ *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: transport.WRRDMARead, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"MR of another PD", func(b *end, other *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: transport.WRRDMAWrite, RemoteAddr: other.Addr(), RKey: other.RKey()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			da, db := pair(t, memlink.Config{})
			a := newEnd(t, da, hca.RC, 4096, allAccess)
			b := newEnd(t, db, hca.RC, 4096, hca.AccessLocalWrite|hca.AccessRemoteWrite)
			pd2, _ := db.AllocPD()
			other, err := pd2.RegMR(make([]byte, 4096), allAccess)
			if err != nil {
				t.Fatal(err)
			}
			connect(t, a, b, bth.MTU1024, 1, 2)
			guard := append([]byte(nil), other.Bytes()...)
			wr := c.wr(b, other)
			wr.ID, wr.Flags, wr.SGL = 9, transport.SendSignaled, []hca.SGE{a.mr.SGE(0, 64)}
			fill(a.buf[:64], 3)
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemAccessErr {
				t.Fatalf("got %v, want REM_ACCESS_ERR", wc.Status)
			}
			if !bytes.Equal(guard, other.Bytes()) {
				t.Fatal("memory of the other PD changed")
			}
			if a.qp.State() != hca.StateErr {
				t.Fatalf("requester QP state %s, want ERR", a.qp.State())
			}
		})
	}
}

// TestStaleRKeyRefused: after an MR is deregistered and another takes its
// table index, the old R_Key (same index, older key byte) reaches neither
// the new region nor the old range.
func TestStaleRKeyRefused(t *testing.T) {
	for _, oldRange := range []bool{false, true} {
		da, db := pair(t, memlink.Config{})
		a := newEnd(t, da, hca.RC, 4096, allAccess)
		b := newEnd(t, db, hca.RC, 4096, allAccess)
		connect(t, a, b, bth.MTU1024, 1, 2)
		stale, staleAddr := b.mr.RKey(), b.mr.Addr()
		if err := b.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		mr, err := b.pd.RegMR(buf, allAccess)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(mr.RKey())>>8 != uint32(stale)>>8 || mr.RKey() == stale {
			t.Fatalf("new R_Key %#x, old %#x: want the same index with another key", mr.RKey(), stale)
		}
		addr := mr.Addr()
		if oldRange {
			addr = staleAddr
		}
		fill(a.buf[:64], 9)
		if err := a.qp.PostSend(&hca.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(0, 64)}, RemoteAddr: addr, RKey: stale}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemAccessErr {
			t.Fatalf("old range %v: %v, want REM_ACCESS_ERR", oldRange, wc.Status)
		}
		if !bytes.Equal(buf, make([]byte, 4096)) {
			t.Fatal("the new region changed")
		}
	}
}

// TestSendWithInvalidateRefused: a SEND_WITH_INV naming a region
// registered with RegMR is refused (only memory windows and fast-register
// regions may be invalidated by a peer, and rxe's responder refuses user
// MRs too), and the region stays valid: otherwise any peer that knows an
// R_Key could revoke the region for good.
func TestSendWithInvalidateRefused(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 5, SGL: []hca.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 6, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 16)}, InvRKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusRemInvReqErr {
		t.Fatalf("sender: %v, want REM_INV_REQ_ERR", wc.Status)
	}
	if wc := waitWC(t, b.cq); wc.Status == transport.StatusSuccess {
		t.Fatalf("receiver completed the SEND_WITH_INV: %+v", wc)
	}
	// The region still takes a WRITE from a second QP pair in the same PDs.
	a2, b2 := *a, *b
	var err error
	if a2.qp, err = a.pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if b2.qp, err = b.pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: b.cq, RecvCQ: b.cq,
		Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	connect(t, &a2, &b2, bth.MTU1024, 10, 20)
	fill(a.buf[:32], 4)
	if err := a2.qp.PostSend(&hca.SendWR{ID: 7, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 32)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != 7 {
		t.Fatalf("WRITE after the refused invalidation: %+v", wc)
	}
	if !bytes.Equal(b.buf[100:132], a.buf[:32]) {
		t.Fatal("WRITE after the refused invalidation: data differs")
	}
}

// TestCQOverrunRaisesEvents: a peer's SENDs overrun a receiver's CQ that
// nobody polls. The CQ keeps what it holds and reports ErrCQOverflow, the
// QP goes to ERR, and the device raises CQ_ERR once and QP_FATAL once.
func TestCQOverrunRaisesEvents(t *testing.T) {
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
	connect(t, a, b, bth.MTU1024, 1, 2)
	const sends = 8
	for i := 0; i < sends; i++ {
		if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []hca.SGE{a.mr.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []hca.EventType
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case ev := <-db.Events():
			switch {
			case ev.Type == hca.EventCQErr && ev.CQ == small, ev.Type == hca.EventQPFatal && ev.QP == b.qp:
				got = append(got, ev.Type)
			default:
				t.Fatalf("unexpected event %v (QP %v, CQ %v)", ev.Type, ev.QP, ev.CQ)
			}
		case <-timeout:
			t.Fatalf("events after 10 s: %v, want CQ_ERR and QP_FATAL", got)
		}
	}
	if got[0] == got[1] {
		t.Fatalf("events %v, want one CQ_ERR and one QP_FATAL", got)
	}
	wcs := make([]hca.WC, 16)
	n, err := small.Poll(wcs)
	if n != 4 || !errors.Is(err, hca.ErrCQOverflow) {
		t.Fatalf("Poll: %d completions, %v; want 4 and ErrCQOverflow", n, err)
	}
	for i, wc := range wcs[:n] {
		if wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if s := b.qp.State(); s != hca.StateErr {
		t.Fatalf("QP state %s, want ERR", s)
	}
	select {
	case ev := <-db.Events():
		t.Fatalf("a second event: %v", ev.Type)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestFlushOnError(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	b := newEnd(t, db, hca.RC, 4096, allAccess)
	connect(t, a, b, bth.MTU1024, 1, 2)
	for i := 0; i < 3; i++ {
		if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(10 + i), SGL: []hca.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	var attr hca.QPAttr
	attr.State = hca.StateErr
	if err := b.qp.Modify(&attr, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		wc := waitWC(t, b.cq)
		if wc.Status != transport.StatusWRFlushErr || wc.WRID != uint64(10+i) {
			t.Fatalf("flush %d: %+v", i, wc)
		}
	}
	// A receive posted in ERR is flushed at once.
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 20}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, b.cq); wc.Status != transport.StatusWRFlushErr || wc.WRID != 20 {
		t.Fatalf("post in ERR: %+v", wc)
	}
}

func TestUDCarriesGRH(t *testing.T) {
	a, b, bgid := udEnds(t)
	ah, err := a.pd.CreateAH(hca.AHAttr{DGID: bgid, SGIDIndex: 0, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 1, SGL: []hca.SGE{b.mr.SGE(0, 40+512)}}); err != nil {
		t.Fatal(err)
	}
	fill(a.buf[:512], 9)
	if err := a.qp.PostSend(&hca.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 512)}, AH: ah.Handle(), RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.cq)
	wc := waitWC(t, b.cq)
	if wc.Status != transport.StatusSuccess || wc.ByteLen != 40+512 || wc.SrcQP != a.qp.QPN() || wc.Flags&transport.WCWithGRH == 0 {
		t.Fatalf("UD recv: %+v", wc)
	}
	// IPv4: 20 zero bytes then the IPv4 header with our addresses.
	if !bytes.Equal(b.buf[:20], make([]byte, 20)) || b.buf[20]>>4 != 4 {
		t.Fatalf("GRH area % x", b.buf[:40])
	}
	if got := netip.AddrFrom4([4]byte(b.buf[32:36])); got != addrA {
		t.Fatalf("GRH source %s, want %s", got, addrA)
	}
	if !bytes.Equal(b.buf[40:40+512], a.buf[:512]) {
		t.Fatal("UD payload differs")
	}
}

func TestSRQLimitEvent(t *testing.T) {
	da, db := pair(t, memlink.Config{})
	a := newEnd(t, da, hca.RC, 4096, allAccess)
	pd, _ := db.AllocPD()
	srq, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 16, MaxSGE: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := db.CreateCQ(64)
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: hca.QPCap{MaxSendWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, _ := pd.RegMR(buf, hca.AccessLocalWrite)
	b := &end{dev: db, pd: pd, cq: cq, qp: qp, mr: mr, buf: buf}
	connect(t, a, b, bth.MTU1024, 5, 6)
	if err := qp.PostRecv(&hca.RecvWR{}); err == nil {
		t.Fatal("PostRecv on a QP with an SRQ succeeded")
	}
	for i := 0; i < 3; i++ {
		if err := srq.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{mr.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []hca.SGE{a.mr.SGE(0, 32)}, Flags: transport.SendSignaled}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.cq)
		if wc := waitWC(t, cq); wc.WRID != uint64(i) || wc.Status != transport.StatusSuccess {
			t.Fatalf("srq recv %d: %+v", i, wc)
		}
	}
	select {
	case ev := <-db.Events():
		if ev.Type != hca.EventSRQLimitReached || ev.SRQ != srq {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	if srq.Query().Limit != 0 {
		t.Fatal("limit not disarmed after the event")
	}
}

func TestRCUnderLoss(t *testing.T) {
	f := memlink.Faults{Loss: 0.05, Reorder: 0.05, Duplicate: 0.02, Corrupt: 0.01}
	da, db := pair(t, memlink.Config{Seed: 42, AtoB: f, BtoA: f})
	const size = 64 << 10
	a := newEnd(t, da, hca.RC, size, allAccess)
	b := newEnd(t, db, hca.RC, size, allAccess)
	// A short local ACK timeout (4.096µs<<10 ≈ 4ms) so tail losses recover quickly.
	rcTimeout = 10
	defer func() { rcTimeout = 14 }()
	connect(t, a, b, bth.MTU1024, 0xFFFF00, 77)
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := 0; i < n; i++ {
		ln := 1 + (i*997)%size
		fill(a.buf[:ln], byte(i))
		if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{b.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{a.mr.SGE(0, ln)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) {
			t.Fatalf("msg %d send: %+v", i, wc)
		}
		wc := waitWC(t, b.cq)
		if wc.Status != transport.StatusSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(ln) {
			t.Fatalf("msg %d recv: %+v", i, wc)
		}
		if !bytes.Equal(b.buf[:ln], a.buf[:ln]) {
			t.Fatalf("msg %d data differs", i)
		}
	}
	if da.Counters.RxICRCErrors.Load()+db.Counters.RxICRCErrors.Load() == 0 {
		t.Error("1% corruption produced no ICRC error: the check is not running")
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		a, b, err := memlink.Pair(memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB}})
		if err != nil {
			t.Fatal(err)
		}
		da, err := hca.Open(a, hca.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db, err := hca.Open(b, hca.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ea := newEnd(t, da, hca.RC, 4096, allAccess)
		eb := newEnd(t, db, hca.RC, 4096, allAccess)
		connect(t, ea, eb, bth.MTU1024, 1, 1)
		da.Close()
		db.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, g, buf[:runtime.Stack(buf, true)])
	}
}

func TestAPIMisuse(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, _ := da.AllocPD()
	if _, err := pd.RegMR(nil, 0); !errors.Is(err, hca.ErrInvalidArg) {
		t.Fatalf("RegMR(nil): %v", err)
	}
	if _, err := pd.RegMR(make([]byte, 8), hca.AccessRemoteWrite); !errors.Is(err, hca.ErrInvalidArg) {
		t.Fatalf("REMOTE_WRITE without LOCAL_WRITE: %v", err)
	}
	if _, err := da.CreateCQ(0); !errors.Is(err, hca.ErrInvalidArg) {
		t.Fatalf("CreateCQ(0): %v", err)
	}
	cq, _ := da.CreateCQ(4)
	if _, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq}); !errors.Is(err, hca.ErrInvalidArg) {
		t.Fatalf("QP without recv CQ: %v", err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); !errors.Is(err, hca.ErrInUse) {
		t.Fatalf("destroying a CQ in use: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, hca.ErrInUse) {
		t.Fatalf("deallocating a PD in use: %v", err)
	}
	if _, err := da.QueryGID(99); !errors.Is(err, hca.ErrNoGID) {
		t.Fatalf("QueryGID(99): %v", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&hca.SendWR{}); !errors.Is(err, hca.ErrDestroyed) {
		t.Fatalf("post on destroyed QP: %v", err)
	}
}

// TestSRQLastWQEReached: a QP attached to an SRQ that enters ERR raises
// QP_LAST_WQE_REACHED once (what ib_drain_rq waits for on an SRQ), again
// after a trip through RESET, and a QP without an SRQ never does.
func TestSRQLastWQEReached(t *testing.T) {
	d, _ := pair(t, memlink.Config{})
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(hca.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(64)
	withSRQ, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: hca.QPCap{MaxSendWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	to := func(q *hca.QP, st transport.State) {
		t.Helper()
		var a hca.QPAttr
		a.State = st
		mask := transport.AttrState
		if st == hca.StateInit {
			a.Port = 1
			mask |= transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags
		}
		if err := q.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	events := func() []hca.AsyncEvent {
		var out []hca.AsyncEvent
		for {
			select {
			case ev := <-d.Events():
				out = append(out, ev)
			case <-time.After(50 * time.Millisecond):
				return out
			}
		}
	}
	for round := 0; round < 2; round++ {
		for _, q := range []*hca.QP{withSRQ, plain} {
			to(q, hca.StateInit)
			to(q, hca.StateErr)
			to(q, hca.StateErr) // ERR -> ERR: no second event
		}
		evs := events()
		if len(evs) != 1 || evs[0].Type != hca.EventQPLastWQEReached || evs[0].QP != withSRQ {
			t.Fatalf("round %d: events %+v, want one QP_LAST_WQE_REACHED for the SRQ's QP", round, evs)
		}
		to(withSRQ, hca.StateReset)
		to(plain, hca.StateReset)
	}
}
