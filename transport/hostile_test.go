package transport_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

// Responses a hostile (or broken) responder might send to a requester, and
// what the requester must make of them: drop what answers nothing it sent
// or what does not fit the WR it would answer, never complete a WR with
// success it has not seen succeed, never write outside the WR's local
// buffer. The packets are forged here; everything else comes from the real
// responder of the pair.

// hostileResp builds a response packet (BTH .. pad, no ICRC) to QP dest.
func hostileResp(op bth.Opcode, dest bth.QPN, psn bth.PSN, syn bth.Syndrome, payload []byte) []byte {
	oi := op.Info()
	pad := int(-len(payload) & 3)
	p := make([]byte, oi.HdrLen+len(payload)+pad)
	bth.Header(p).Encode(&bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: dest, PSN: psn, PadCnt: pad})
	if oi.AETH != 0 {
		bth.AETH(p[oi.AETH:]).SetSyndrome(syn)
	}
	copy(p[oi.HdrLen:], payload)
	return p
}

// hostileReadSetup posts a 1024-byte READ at MTU 256 (4 response PSNs) from B's
// memory into a local buffer filled with 0xEE and sends the READ request.
func hostileReadSetup(t *testing.T, deliverReq bool) (p *pair, loc, rem *tt.MR, req []byte) {
	p = newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
	loc = p.mem.Register(1, 1024, allAccess)
	rem = p.mem.Register(2, 1024, allAccess)
	for i := range loc.Buf {
		loc.Buf[i] = 0xEE
	}
	fill(rem.Buf, 5)
	for i := range rem.Buf {
		if rem.Buf[i] == 0xEE {
			rem.Buf[i] = 0xEF
		}
	}
	if err := p.a.QP.PostSend(0, &transport.SendWR{ID: 7, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{loc.SGE(0, 1024)}, RemoteAddr: rem.Addr, RKey: rem.RKey}); err != nil {
		t.Fatal(err)
	}
	r := xmit(p.a.QP, 0)
	if got := describe(r); got != "RC_RDMA_READ_REQUEST@0x000000" {
		t.Fatalf("sent %s", got)
	}
	if deliverReq {
		// B executes the READ; its responses are lost on the way back.
		deliver(p.b.QP, 0, r[0])
		t.Logf("responder's first answer (lost): %s", describe(xmit(p.b.QP, 0)))
	}
	return p, loc, rem, r[0]
}

// hostileFinishRead lets the real responder B answer whatever A sends now and
// delivers B's answers to A.
func hostileFinishRead(t *testing.T, p *pair, rem *tt.MR, now transport.Time) {
	req := xmit(p.a.QP, now)
	t.Logf("requester re-sent: %s", describe(req))
	for _, r := range req {
		t.Logf("  RETH VA +%d len %d", bth.RETH(r[bth.HeaderLen:]).VA()-rem.Addr, bth.RETH(r[bth.HeaderLen:]).DMALen())
	}
	deliver(p.b.QP, now, req...)
	resp := xmit(p.b.QP, now)
	t.Logf("responder answered: %s", describe(resp))
	deliver(p.a.QP, now, resp...)
}

func hostileCheckRead(t *testing.T, p *pair, loc, rem *tt.MR) {
	wcs := p.a.SendCQ.Take(nil)
	if len(wcs) != 1 {
		t.Fatalf("completions %+v", wcs)
	}
	holes := 0
	for i := range loc.Buf {
		if loc.Buf[i] != rem.Buf[i] {
			holes++
		}
	}
	t.Logf("completion %+v; %d of 1024 bytes differ from the remote buffer", wcs[0], holes)
	if wcs[0].Status == transport.StatusSuccess && holes != 0 {
		t.Fatalf("READ completed with SUCCESS (ByteLen %d) but %d bytes of its buffer were never written (still 0xEE: %v)",
			wcs[0].ByteLen, holes, loc.Buf[0] == 0xEE && loc.Buf[511] == 0xEE)
	}
}

// TestHostileSeqNAKInsideRead: a PSN sequence NAK whose PSN lies
// strictly inside an outstanding READ's response range (no correct
// responder sends one: its expected PSN is the READ's first PSN or the one
// after its last) moves compPSN into the READ; the requester re-reads only
// the tail and completes the READ with SUCCESS, its first 512 bytes never
// written.
func TestHostileSeqNAKInsideRead(t *testing.T) {
	p, loc, rem, _ := hostileReadSetup(t, true)
	deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, p.a.QP.QPN(), 2, bth.NAKSyndrome(bth.NAKPSNSequenceError), nil))
	hostileFinishRead(t, p, rem, 0)
	hostileCheckRead(t, p, loc, rem)
}

// TestHostileRNRNAKInsideRead: the same with an RNR NAK (which a
// responder never sends for a READ at all).
func TestHostileRNRNAKInsideRead(t *testing.T) {
	p, loc, rem, _ := hostileReadSetup(t, true)
	deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, p.a.QP.QPN(), 2, bth.RNRNAKSyndrome(1), nil))
	now := p.a.QP.Deadline()
	p.a.QP.Tick(now)
	hostileFinishRead(t, p, rem, now)
	hostileCheckRead(t, p, loc, rem)
}

// TestHostileAckInsideRead (control): an ACK inside the READ's range is
// ignored, as completer.go intends; the READ then completes fully.
func TestHostileAckInsideRead(t *testing.T) {
	p, loc, rem, req := hostileReadSetup(t, false)
	deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, p.a.QP.QPN(), 2, bth.SyndromeACKUnlimited, nil))
	deliver(p.b.QP, 0, req)
	deliver(p.a.QP, 0, xmit(p.b.QP, 0)...)
	hostileCheckRead(t, p, loc, rem)
}

// TestHostileReadResponses: hostile responses that are handled correctly (expected to
// pass): each is delivered to a QP with one outstanding READ (4 PSNs) and
// must neither complete it nor write outside its buffer; then the real
// responder's answer completes it with the right data. Well-formed prefixes
// carry the right bytes (d), so that the final data check is meaningful.
func TestHostileReadResponses(t *testing.T) {
	pl := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 0x5A
		}
		return b
	}
	type mk func(d []byte) [][]byte
	cases := []struct {
		name string
		pkts mk
	}{
		{"OnlyTooLong", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseOnly, 0x11, 0, 0x1F, pl(1024))}
		}},
		{"LastEarly", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseLast, 0x11, 0, 0x1F, pl(256))}
		}},
		{"FirstTooLong", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseFirst, 0x11, 0, 0x1F, pl(512))}
		}},
		{"LastLong", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseFirst, 0x11, 0, 0x1F, d[0:256]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 1, 0, d[256:512]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 2, 0, d[512:768]),
				hostileResp(bth.OpRCRDMAReadResponseLast, 0x11, 3, 0x1F, pl(260)),
				hostileResp(bth.OpRCRDMAReadResponseLast, 0x11, 3, 0x1F, pl(252))}
		}},
		{"MiddleShort", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseFirst, 0x11, 0, 0x1F, d[0:256]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 1, 0, pl(128))}
		}},
		{"MiddleAtLast", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseFirst, 0x11, 0, 0x1F, d[0:256]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 1, 0, d[256:512]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 2, 0, d[512:768]),
				hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 3, 0, pl(256))}
		}},
		{"Skip", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 1, 0, pl(256))}
		}},
		{"BeyondSent", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCRDMAReadResponseOnly, 0x11, 4, 0x1F, pl(4))}
		}},
		{"FarFuture", func(d []byte) [][]byte { return [][]byte{hostileResp(bth.OpRCAcknowledge, 0x11, 0x7FFFFF, 0x1F, nil)} }},
		{"PastWrap", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCAcknowledge, 0x11, 0xFFFFFF, 0x1F, nil), hostileResp(bth.OpRCAcknowledge, 0x11, 0x800000, 0x1F, nil)}
		}},
		{"AtomicAckForRead", func(d []byte) [][]byte {
			p := hostileResp(bth.OpRCAtomicAcknowledge, 0x11, 0, 0x1F, nil)
			bth.AtomicAckETH(p[bth.HeaderLen+4:]).SetOrigData(^uint64(0))
			return [][]byte{p}
		}},
		{"ReservedSyndromes", func(d []byte) [][]byte {
			return [][]byte{hostileResp(bth.OpRCAcknowledge, 0x11, 0, 0x40, nil), hostileResp(bth.OpRCAcknowledge, 0x11, 0, 0x9F, nil),
				hostileResp(bth.OpRCRDMAReadResponseOnly, 0x11, 0, 0x61, pl(4))}
		}},
		{"AckInside", func(d []byte) [][]byte { return [][]byte{hostileResp(bth.OpRCAcknowledge, 0x11, 3, 0x1F, nil)} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, loc, rem, req := hostileReadSetup(t, false)
			deliver(p.a.QP, 0, c.pkts(rem.Buf)...)
			if wcs := p.a.SendCQ.Take(nil); len(wcs) != 0 {
				t.Fatalf("hostile packets completed: %+v", wcs)
			}
			if !p.mem.GuardsIntact() {
				t.Fatal("write outside an MR")
			}
			deliver(p.b.QP, 0, req)
			deliver(p.a.QP, 0, xmit(p.b.QP, 0)...)
			hostileCheckRead(t, p, loc, rem)
		})
	}
}

// TestHostileRetryCounters (expected to pass): counters at 0, RNR timer 0, NAK
// storms.
func TestHostileRetryCounters(t *testing.T) {
	setup := func(t *testing.T, retry, rnr uint8) (*pair, *tt.MR) {
		p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256, conn: func(c *tt.Conn) { c.RetryCnt, c.RNRRetry = retry, rnr }})
		src := p.mem.Register(1, 64, allAccess)
		p.a.QP.PostSend(0, sendWR(1, src, 64, true))
		p.a.QP.PostSend(0, sendWR(2, src, 64, false))
		xmit(p.a.QP, 0)
		return p, src
	}
	t.Run("SeqNAKRetry0", func(t *testing.T) {
		p, _ := setup(t, 0, 0)
		deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 0, bth.NAKSyndrome(bth.NAKPSNSequenceError), nil))
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRetryExcErr, transport.StatusWRFlushErr)
	})
	t.Run("RNR0", func(t *testing.T) {
		p, _ := setup(t, 0, 0)
		deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 0, bth.RNRNAKSyndrome(0), nil))
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRNRRetryExcErr, transport.StatusWRFlushErr)
	})
	t.Run("RNRTimer0", func(t *testing.T) {
		p, _ := setup(t, 3, 3)
		deliver(p.a.QP, 100, hostileResp(bth.OpRCAcknowledge, 0x11, 0, bth.RNRNAKSyndrome(0), nil))
		if d := p.a.QP.Deadline(); d != 100+655360000 {
			t.Fatalf("deadline %d", d)
		}
		if n := len(xmit(p.a.QP, 200)); n != 0 {
			t.Fatalf("sent %d during the RNR wait", n)
		}
		p.a.QP.Tick(100 + 655360000)
		if got := describe(xmit(p.a.QP, 100+655360000)); got != "RC_SEND_ONLY@0x000000 RC_SEND_ONLY@0x000001" {
			t.Fatalf("after the wait: %s", got)
		}
	})
	t.Run("SeqNAKStorm", func(t *testing.T) {
		p, _ := setup(t, 1, 0)
		for i := 0; i < 1000; i++ {
			deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 0, bth.NAKSyndrome(bth.NAKPSNSequenceError), nil))
		}
		if wcs := p.a.SendCQ.Take(nil); len(wcs) != 0 {
			t.Fatalf("%v", statuses(wcs))
		}
		deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 1, 0x1F, nil))
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess)
	})
	t.Run("ReservedNAKCodes", func(t *testing.T) {
		for _, syn := range []bth.Syndrome{0x64, 0x65, 0x7F} {
			p, _ := setup(t, 1, 0)
			deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 0, syn, nil))
			wantStatuses(t, syn.String(), p.a.SendCQ.Take(nil), transport.StatusRemOpErr, transport.StatusWRFlushErr)
			deliver(p.a.QP, 0, hostileResp(bth.OpRCAcknowledge, 0x11, 1, 0x1F, nil))
			if n := p.a.SendCQ.Len(); n != 0 {
				t.Fatal("completion after ERR")
			}
		}
	})
}

// TestHostileResponseKind (expected to pass): responses of the wrong kind.
func TestHostileResponseKind(t *testing.T) {
	atomicAck := func(psn bth.PSN, syn bth.Syndrome, v uint64) []byte {
		p := hostileResp(bth.OpRCAtomicAcknowledge, 0x11, psn, syn, nil)
		bth.AtomicAckETH(p[bth.HeaderLen+4:]).SetOrigData(v)
		return p
	}
	t.Run("OnAtomic", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
		loc := p.mem.Register(1, 8, allAccess)
		rem := p.mem.Register(2, 8, allAccess)
		p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.SendSignaled,
			SGL: []transport.SGE{loc.SGE(0, 8)}, RemoteAddr: rem.Addr, RKey: rem.RKey, CompareAdd: 1})
		req := xmit(p.a.QP, 0)
		deliver(p.a.QP, 0, hostileResp(bth.OpRCRDMAReadResponseOnly, 0x11, 0, 0x1F, []byte{1, 2, 3, 4, 5, 6, 7, 8}),
			hostileResp(bth.OpRCRDMAReadResponseMiddle, 0x11, 0, 0, make([]byte, 256)),
			hostileResp(bth.OpRCAcknowledge, 0x11, 0, 0x1F, nil), atomicAck(0, 0x61, 7), atomicAck(0, 0x20, 7))
		if p.a.SendCQ.Len() != 0 || !p.mem.GuardsIntact() {
			t.Fatalf("%v", statuses(p.a.SendCQ.Take(nil)))
		}
		deliver(p.b.QP, 0, req...)
		deliver(p.a.QP, 0, xmit(p.b.QP, 0)...)
		deliver(p.a.QP, 0, atomicAck(0, 0x1F, 99)) // duplicate
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess)
		if loc.Buf[0] != 0 || rem.Buf[0] != 1 {
			t.Fatalf("loc %v rem %v", loc.Buf, rem.Buf)
		}
	})
	t.Run("OnWriteAndSend", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
		src := p.mem.Register(1, 600, allAccess)
		rem := p.mem.Register(2, 600, allAccess)
		p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 600)}, RemoteAddr: rem.Addr, RKey: rem.RKey})
		p.a.QP.PostSend(0, sendWR(2, src, 8, true))
		xmit(p.a.QP, 0) // WRITE 0..2, SEND 3
		deliver(p.a.QP, 0, hostileResp(bth.OpRCRDMAReadResponseFirst, 0x11, 0, 0x1F, make([]byte, 256)),
			hostileResp(bth.OpRCRDMAReadResponseLast, 0x11, 2, 0x1F, make([]byte, 88)), atomicAck(2, 0x1F, 5))
		if p.a.SendCQ.Len() != 0 || !p.mem.GuardsIntact() {
			t.Fatalf("%v", statuses(p.a.SendCQ.Take(nil)))
		}
		deliver(p.a.QP, 0, atomicAck(3, 0x1F, 5)) // past the WRITE: implicit ACK of it, nothing for the SEND
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess)
		if src.Buf[0] != 0 {
			t.Fatal("local buffer written")
		}
	})
}

// TestHostileAckBeyondSent: an ACK may acknowledge only PSNs the requester
// has sent. A 64 KiB SEND at MTU 256 is 256 packets, of which the first
// window lets about half out; an ACK naming the message's last PSN used to
// complete the SEND with success, and its other packets never left. Now
// the ACK is dropped, the rest is sent, and the real responder's ACK
// completes it.
func TestHostileAckBeyondSent(t *testing.T) {
	const psn0 = bth.PSN(0x100)
	p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256, psnA: psn0})
	A, B := p.a.QP, p.b.QP
	src := p.mem.Register(1, 65536, allAccess)
	dst := p.mem.Register(2, 65536, allAccess)
	fill(src.Buf, 9)
	if !p.b.RQ.Post(5, dst.SGE(0, 65536)) {
		t.Fatal("post receive")
	}
	if err := A.PostSend(0, sendWR(1, src, 65536, true)); err != nil {
		t.Fatal(err)
	}
	sent := xmit(A, 0)
	if len(sent) >= 256 {
		t.Fatalf("the window let all %d packets out; the test needs some held back", len(sent))
	}
	dup := A.Stats().RxDuplicateResponses
	deliver(A, 0, hostileResp(bth.OpRCAcknowledge, A.QPN(), psn0.Add(255), bth.SyndromeACKUnlimited, nil))
	if wcs := p.a.SendCQ.Take(nil); len(wcs) != 0 {
		t.Fatalf("an ACK for PSN %v (last sent %v) completed %v", psn0.Add(255), bth.Header(sent[len(sent)-1]).PSN(), statuses(wcs))
	}
	if A.Stats().RxDuplicateResponses != dup+1 {
		t.Fatalf("the ACK beyond what was sent was not counted as answering nothing")
	}
	for i := 0; i < 64 && p.a.SendCQ.Len() == 0; i++ {
		deliver(B, 0, sent...)
		deliver(A, 0, xmit(B, 0)...)
		sent = xmit(A, 0)
	}
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess)
	wantStatuses(t, "B", p.b.RecvCQ.Take(nil), transport.StatusSuccess)
	if !bytes.Equal(dst.Buf, src.Buf) {
		t.Fatal("the SEND's data did not all arrive")
	}
}

// TestHostileAckBeyondSentLocalError: the same hole could turn a local
// error into success. WQE 2's MR is deregistered after its first of three
// packets left, so WQE 2 is to complete with LOC_PROT_ERR once it is the
// oldest; an ACK naming its last PSN (never sent) completed it with
// success. Now that ACK is dropped and a real one for WQE 1 lets WQE 2
// complete with its error.
func TestHostileAckBeyondSentLocalError(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC, mtu: bth.MTU256})
	A := p.a.QP
	x := p.mem.Register(1, 64, allAccess)
	y := p.mem.Register(1, 768, allAccess)
	for i, wr := range []*transport.SendWR{sendWR(1, x, 64, true), sendWR(2, y, 768, true)} {
		if err := A.PostSend(0, wr); err != nil {
			t.Fatal(i, err)
		}
	}
	buf := make([]byte, 4096)
	for i := 0; i < 2; i++ {
		if _, _, ok := A.Transmit(0, buf); !ok {
			t.Fatal("transmit")
		}
	}
	p.mem.Deregister(y)
	if _, _, ok := A.Transmit(0, buf); ok {
		t.Fatal("sent from a deregistered MR")
	}
	deliver(A, 0, hostileResp(bth.OpRCAcknowledge, A.QPN(), 3, bth.SyndromeACKUnlimited, nil))
	if wcs := p.a.SendCQ.Take(nil); len(wcs) != 0 {
		t.Fatalf("an ACK for PSN 3 (last sent: 1) completed %v", statuses(wcs))
	}
	deliver(A, 0, hostileResp(bth.OpRCAcknowledge, A.QPN(), 0, bth.SyndromeACKUnlimited, nil))
	xmit(A, 0)
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess, transport.StatusLocProtErr)
}

// bigMem grants every key over any length, backed by one small buffer,
// for READs of up to 2^31 bytes whose data never arrives.
type bigMem struct{ scratch []byte }

func (m *bigMem) Local(pd uint32, lkey bth.LKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	return m.scratch[:min(int(length), len(m.scratch))], nil
}
func (m *bigMem) Remote(pd uint32, rkey bth.RKey, addr uint64, length uint32, need transport.Access) ([]byte, error) {
	return m.scratch[:min(int(length), len(m.scratch))], nil
}
func (m *bigMem) Invalidate(uint32, bth.RKey) error { return nil }

// bigMemQP is a QP of type typ over mem, connected at mtu to a peer QP
// (0x22) that the caller drives by hand; it returns the QP and its send CQ.
func bigMemQP(t *testing.T, typ transport.QPType, mtu bth.MTU, mem transport.Memory) (*transport.QP, *tt.CQ) {
	t.Helper()
	scq := &tt.CQ{}
	q, err := transport.NewQP(transport.Config{Type: typ, QPN: 0x11, PD: 1, MaxSendWR: 8, MaxSendSGE: 1,
		MaxRecvSGE: 1, Memory: mem, SendCQ: scq, RecvCQ: &tt.CQ{}, RQ: tt.NewRQ(4, 1)})
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := tt.NewSide(typ, 0x22, 2, tt.NewMemory(), 4)
	if err := tt.Connect(0, q, peer.QP, tt.Conn{MTU: mtu, Timeout: 10, RetryCnt: 2, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 4, Access: allAccess}); err != nil {
		t.Fatal(err)
	}
	return q, scq
}

// TestReadSpanningHalfPSNSpace: a READ's responses take one PSN per packet
// and PSNs compare only within 2^23 of each other. A READ of 2^31 bytes at
// MTU 256 takes 2^23 PSNs: it used to go out, make the window check wrap
// (the next WR left at once) and see its own responses compare as old, so
// it failed with RETRY_EXC_ERR. Now PostSend refuses it, a READ one packet
// shorter waits until nothing else is outstanding and then holds later WRs
// back, and one whose path MTU shrank after posting completes with
// LOC_LEN_ERR.
func TestReadSpanningHalfPSNSpace(t *testing.T) {
	newQP := func(t *testing.T, mtu bth.MTU) (*transport.QP, *tt.CQ) {
		return bigMemQP(t, transport.RC, mtu, &bigMem{scratch: make([]byte, 4096)})
	}
	read := func(id uint64, n uint32) *transport.SendWR {
		return &transport.SendWR{ID: id, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []transport.SGE{{Addr: 0x1000, Length: n, LKey: 0x111}}, RemoteAddr: 0x1000, RKey: 0x122}
	}
	send := &transport.SendWR{ID: 9, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []transport.SGE{{Addr: 0x1000, Length: 16, LKey: 0x111}}}
	const longest = transport.MaxMessageSize - 256 // 2^23 - 1 packets at MTU 256

	t.Run("Refused", func(t *testing.T) {
		A, _ := newQP(t, bth.MTU256)
		err := A.PostSend(0, read(1, transport.MaxMessageSize))
		if !errors.Is(err, transport.ErrBadWR) {
			t.Fatalf("PostSend of a 2^31-byte READ at MTU 256: %v, want ErrBadWR", err)
		}
		if err := A.PostSend(0, read(1, longest)); err != nil {
			t.Fatalf("PostSend of a READ of 2^31 - 256 bytes: %v", err)
		}
	})
	t.Run("Longest", func(t *testing.T) {
		A, scq := newQP(t, bth.MTU256)
		for _, wr := range []*transport.SendWR{send, read(1, longest), send} {
			if err := A.PostSend(0, wr); err != nil {
				t.Fatal(err)
			}
		}
		if got := describe(xmit(A, 0)); got != "RC_SEND_ONLY@0x000000" {
			t.Fatalf("with a SEND outstanding the READ went out: %s", got)
		}
		deliver(A, 0, hostileResp(bth.OpRCAcknowledge, A.QPN(), 0, bth.SyndromeACKUnlimited, nil))
		if got := describe(xmit(A, 0)); got != "RC_RDMA_READ_REQUEST@0x000001" {
			t.Fatalf("after the SEND's ACK: %s, want the READ alone", got)
		}
		dup := A.Stats().RxDuplicateResponses
		deliver(A, 0, hostileResp(bth.OpRCRDMAReadResponseFirst, A.QPN(), 1, bth.SyndromeACKUnlimited, make([]byte, 256)))
		if A.Stats().RxDuplicateResponses != dup {
			t.Fatal("the READ's first response was dropped as a duplicate")
		}
		if err := A.CheckRequester(); err != nil {
			t.Fatal(err)
		}
		wantStatuses(t, "A", scq.Take(nil), transport.StatusSuccess)
	})
	t.Run("MTUShrank", func(t *testing.T) {
		A, scq := newQP(t, bth.MTU4096)
		if err := A.PostSend(0, read(1, transport.MaxMessageSize)); err != nil {
			t.Fatal(err)
		}
		if err := A.Modify(0, &transport.Attr{PathMTU: bth.MTU256}, transport.AttrPathMTU); err != nil {
			t.Fatal(err)
		}
		if out := xmit(A, 0); len(out) != 0 {
			t.Fatalf("sent %s", describe(out))
		}
		wantStatuses(t, "A", scq.Take(nil), transport.StatusLocLenErr)
	})
}
