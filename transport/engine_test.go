package transport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

const allAccess = transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead | transport.AccessRemoteAtomic

// pair is two connected QPs over a simulated wire, sharing one MR table
// (as two QPs of one device would; PD 1 and PD 2 keep them apart).
type pair struct {
	t    testing.TB
	mem  *tt.Memory
	a, b *tt.Side
	w    *tt.Wire
}

type pairOpt struct {
	typ       transport.QPType
	mtu       bth.MTU
	psnA      bth.PSN
	psnB      bth.PSN
	depth     int
	seed      uint64
	faults    tt.Faults
	conn      func(*tt.Conn)
	sameDepth bool
}

func newPair(t testing.TB, o pairOpt) *pair {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = bth.MTU1024
	}
	if o.depth == 0 {
		o.depth = 64
	}
	mem := tt.NewMemory()
	a, err := tt.NewSide(o.typ, 0x11, 1, mem, o.depth)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tt.NewSide(o.typ, 0x22, 2, mem, o.depth)
	if err != nil {
		t.Fatal(err)
	}
	c := tt.Conn{Type: o.typ, MTU: o.mtu, PSN: [2]bth.PSN{o.psnA, o.psnB}, Timeout: 10, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 16, Access: allAccess, QKey: 0x11111111}
	if o.conn != nil {
		o.conn(&c)
	}
	if err := tt.Connect(0, a.QP, b.QP, c); err != nil {
		t.Fatal(err)
	}
	return &pair{t: t, mem: mem, a: a, b: b, w: tt.NewWire(a.QP, b.QP, o.seed, o.faults)}
}

// run steps the wire until the expected number of completions arrived.
func (p *pair) run(sendA, recvB int) {
	p.t.Helper()
	ok := p.w.Run(func() bool { return p.a.SendCQ.Len() >= sendA && p.b.RecvCQ.Len() >= recvB }, 600e9)
	if !ok {
		p.t.Fatalf("did not complete: sendA %d/%d recvB %d/%d; A %v %+v; B %v %+v; wire %+v", p.a.SendCQ.Len(), sendA,
			p.b.RecvCQ.Len(), recvB, p.a.QP.State(), *p.a.QP.Stats(), p.b.QP.State(), *p.b.QP.Stats(), p.w.Stats)
	}
}

func fill(b []byte, seed uint64) {
	// A cheap per-seed pattern (xorshift, 8 bytes per step): the lossy test
	// fills and checks hundreds of megabytes.
	x := seed*0x9E3779B97F4A7C15 | 1
	i := 0
	for ; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if i+8 <= len(b) {
			binary.LittleEndian.PutUint64(b[i:], x)
			continue
		}
		for j := 0; i+j < len(b); j++ {
			b[i+j] = byte(x >> (8 * j))
		}
	}
}

// splitSGL cuts [0,n) of mr at off into up to three SGEs.
func splitSGL(mr *tt.MR, off, n int) []transport.SGE {
	if n < 3 {
		return []transport.SGE{mr.SGE(off, n)}
	}
	a, b := n/3, n/2
	return []transport.SGE{mr.SGE(off, a), mr.SGE(off+a, b-a), mr.SGE(off+b, n-b)}
}

func wantWC(t testing.TB, cq *tt.CQ, want ...transport.Completion) {
	t.Helper()
	got := cq.Take(nil)
	if len(got) != len(want) {
		t.Fatalf("got %d completions %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.WRID != w.WRID || g.Status != w.Status || g.Opcode != w.Opcode || g.ByteLen != w.ByteLen ||
			g.Flags != w.Flags || g.Imm != w.Imm || g.InvRKey != w.InvRKey || g.SrcQP != w.SrcQP {
			t.Errorf("completion %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

var sizesFor = func(pmtu int) []int { return []int{0, 1, pmtu - 1, pmtu, pmtu + 1, 1 << 20} }

func TestRCOperations(t *testing.T) {
	for _, mtu := range []bth.MTU{bth.MTU1024, bth.MTU4096} {
		pmtu := mtu.Bytes()
		for _, size := range sizesFor(pmtu) {
			for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRSendWithInv,
				transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead} {
				t.Run(fmt.Sprintf("mtu%d/%v/%d", pmtu, op, size), func(t *testing.T) {
					testOp(t, transport.RC, mtu, op, size)
				})
			}
		}
	}
}

func TestUCOperations(t *testing.T) {
	pmtu := 1024
	for _, size := range sizesFor(pmtu) {
		for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm,
			transport.WRRDMAWrite, transport.WRRDMAWriteWithImm} {
			t.Run(fmt.Sprintf("%v/%d", op, size), func(t *testing.T) {
				testOp(t, transport.UC, bth.MTU1024, op, size)
			})
		}
	}
}

// testOp runs one operation of size bytes from A to B with the PSNs just
// below 2^24 so that long messages wrap, multi-SGE on both sides, and
// checks data and completions.
func testOp(t *testing.T, typ transport.QPType, mtu bth.MTU, op transport.WROpcode, size int) {
	p := newPair(t, pairOpt{typ: typ, mtu: mtu, psnA: 0xFFFFF0, psnB: 0xFFFF00, seed: 1})
	src := p.mem.Register(1, size+16, allAccess)
	dst := p.mem.Register(2, size+16, allAccess)
	fill(src.Buf, uint64(size))
	fill(dst.Buf, uint64(size)+99)
	wr := transport.SendWR{ID: 7, Opcode: op, Flags: transport.SendSignaled, Imm: 0xA1B2C3D4}
	var from, to *tt.MR // data flows from→to
	switch op {
	case transport.WRRDMARead:
		from, to = dst, src
		wr.SGL = splitSGL(src, 8, size)
		wr.RemoteAddr, wr.RKey = dst.Addr+8, dst.RKey
	default:
		from, to = src, dst
		wr.SGL = splitSGL(src, 8, size)
		wr.RemoteAddr, wr.RKey = dst.Addr+8, dst.RKey
	}
	recv := op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRSendWithInv || op == transport.WRRDMAWriteWithImm
	var invMR *tt.MR
	if op == transport.WRSendWithInv {
		invMR = p.mem.Register(2, 64, transport.AccessRemoteWrite|transport.AccessLocalWrite)
		wr.InvRKey = invMR.RKey
	}
	if recv {
		sgl := []transport.SGE{dst.SGE(8, size/2), dst.SGE(8+size/2, size-size/2+8)}
		if op == transport.WRRDMAWriteWithImm {
			sgl = nil
		}
		if !p.b.RQ.Post(100, sgl...) {
			t.Fatal("post recv")
		}
	}
	want := append([]byte(nil), from.Buf[8:8+size]...)
	before := append([]byte(nil), to.Buf...)
	if err := p.a.QP.PostSend(0, &wr); err != nil {
		t.Fatal(err)
	}
	nrecv := 0
	if recv {
		nrecv = 1
	}
	p.run(1, nrecv)
	p.w.Run(func() bool { return false }, p.w.Now+1e9) // UC completes on send: let the wire drain
	if !bytes.Equal(to.Buf[8:8+size], want) {
		t.Fatalf("data mismatch")
	}
	if !bytes.Equal(to.Buf[:8], before[:8]) || !bytes.Equal(to.Buf[8+size:], before[8+size:]) {
		t.Fatalf("bytes outside the target range changed")
	}
	wcOp := map[transport.WROpcode]transport.WCOpcode{transport.WRSend: transport.WCSend, transport.WRSendWithImm: transport.WCSend,
		transport.WRSendWithInv: transport.WCSend, transport.WRRDMAWrite: transport.WCRDMAWrite,
		transport.WRRDMAWriteWithImm: transport.WCRDMAWrite, transport.WRRDMARead: transport.WCRDMARead}[op]
	wantWC(t, p.a.SendCQ, transport.Completion{WRID: 7, Opcode: wcOp, ByteLen: uint32(size)})
	if recv {
		rc := transport.Completion{WRID: 100, Opcode: transport.WCRecv, ByteLen: uint32(size), Flags: transport.WCWithGRH}
		switch op {
		case transport.WRSendWithImm:
			rc.Flags |= transport.WCWithImm
			rc.Imm = 0xA1B2C3D4
		case transport.WRRDMAWriteWithImm:
			rc.Opcode = transport.WCRecvRDMAWithImm
			rc.Flags |= transport.WCWithImm
			rc.Imm = 0xA1B2C3D4
		case transport.WRSendWithInv:
			rc.Flags |= transport.WCWithInv
			rc.InvRKey = invMR.RKey
		}
		wantWC(t, p.b.RecvCQ, rc)
	}
	if invMR != nil && p.mem.RValid(invMR) {
		t.Fatal("SEND_WITH_INV did not invalidate the R_Key")
	}
	if !p.mem.GuardsIntact() {
		t.Fatal("guard bytes overwritten")
	}
	// PSNs advanced by the number of packets and wrapped.
	if st := p.a.QP.Stats(); st.TxRetransmits != 0 || st.RxDropped != 0 {
		t.Fatalf("unexpected retransmits/drops on a clean wire: %+v", *st)
	}
}

func TestUDOperations(t *testing.T) {
	pmtu := 1024
	for _, size := range []int{0, 1, pmtu - 1, pmtu} {
		for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm} {
			t.Run(fmt.Sprintf("%v/%d", op, size), func(t *testing.T) {
				p := newPair(t, pairOpt{typ: transport.UD, psnA: 0xFFFFFF, seed: 2})
				src := p.mem.Register(1, size+8, allAccess)
				dst := p.mem.Register(2, size+tt.GuardLen+64, allAccess)
				fill(src.Buf, 5)
				p.b.RQ.Post(1, dst.SGE(0, 20), dst.SGE(20, size+20))
				wr := transport.SendWR{ID: 3, Opcode: op, Flags: transport.SendSignaled, SGL: splitSGL(src, 0, size),
					RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x11111111, Imm: 0x01020304, AH: 9}
				var ahSeen uint32
				p.w.Tap = func(from int, pkt []byte, ah uint32) { ahSeen = ah }
				if err := p.a.QP.PostSend(0, &wr); err != nil {
					t.Fatal(err)
				}
				p.run(1, 1)
				if ahSeen != 9 {
					t.Errorf("Transmit returned AH %d, want 9", ahSeen)
				}
				grh := tt.GRHFor(0)
				if !bytes.Equal(dst.Buf[:40], grh.GRH[:]) {
					t.Errorf("GRH not at the start of the buffer: %x", dst.Buf[:40])
				}
				if !bytes.Equal(dst.Buf[40:40+size], src.Buf[:size]) {
					t.Errorf("payload mismatch")
				}
				wantWC(t, p.a.SendCQ, transport.Completion{WRID: 3, Opcode: transport.WCSend, ByteLen: uint32(size)})
				rc := transport.Completion{WRID: 1, Opcode: transport.WCRecv, ByteLen: uint32(40 + size),
					Flags: transport.WCWithGRH, SrcQP: p.a.QP.QPN()}
				if op == transport.WRSendWithImm {
					rc.Flags |= transport.WCWithImm
					rc.Imm = 0x01020304
				}
				wantWC(t, p.b.RecvCQ, rc)
			})
		}
	}
	t.Run("QKeyMismatchDropped", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.UD})
		src := p.mem.Register(1, 8, allAccess)
		dst := p.mem.Register(2, 100, allAccess)
		p.b.RQ.Post(1, dst.SGE(0, 100))
		wr := transport.SendWR{ID: 3, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 8)}, RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x1234}
		p.a.QP.PostSend(0, &wr)
		p.w.Run(func() bool { return false }, 1e9)
		if p.b.RecvCQ.Len() != 0 || p.b.QP.Stats().RxQKeyMismatch != 1 {
			t.Fatalf("Q_Key mismatch not dropped: %+v", *p.b.QP.Stats())
		}
		// High bit set: the QP's own Q_Key is used (0x11111111 on both).
		wr.RemoteQKey = 0x80000000
		p.a.QP.PostSend(0, &wr)
		p.run(0, 1)
	})
	t.Run("TooLargeForMTU", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.UD})
		src := p.mem.Register(1, 2048, allAccess)
		wr := transport.SendWR{ID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 2048)}, RemoteQPN: p.b.QP.QPN()}
		p.a.QP.PostSend(0, &wr)
		p.run(1, 0)
		if p.w.Stats.Sent != 0 {
			t.Fatalf("sent %d packets for an over-MTU UD message", p.w.Stats.Sent)
		}
		wantWC(t, p.a.SendCQ, transport.Completion{WRID: 3, Opcode: transport.WCSend, ByteLen: 2048})
	})
	t.Run("RecvBufferTooSmall", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.UD})
		src := p.mem.Register(1, 100, allAccess)
		dst := p.mem.Register(2, 100, allAccess)
		p.b.RQ.Post(1, dst.SGE(0, 100))
		wr := transport.SendWR{ID: 3, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 100)}, RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x11111111}
		p.a.QP.PostSend(0, &wr)
		p.run(0, 1)
		wantWC(t, p.b.RecvCQ, transport.Completion{WRID: 1, Status: transport.StatusLocLenErr, Opcode: transport.WCRecv, SrcQP: p.a.QP.QPN()})
	})
}

func TestAtomics(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC, psnA: 0xFFFFFE})
	res := p.mem.Register(1, 16, allAccess)
	tgt := p.mem.Register(2, 16, allAccess)
	put := func(v uint64) {
		for i := 0; i < 8; i++ {
			tgt.Buf[8+i] = byte(v >> (8 * i)) // little-endian host
		}
	}
	get := func(b []byte) uint64 {
		var v uint64
		for i := 0; i < 8; i++ {
			v |= uint64(b[i]) << (8 * i)
		}
		return v
	}
	put(100)
	ops := []struct {
		op         transport.WROpcode
		cmp, swap  uint64
		wantOrig   uint64
		wantTarget uint64
	}{
		{transport.WRAtomicFetchAndAdd, 5, 0, 100, 105},
		{transport.WRAtomicCmpAndSwp, 105, 7, 105, 7},
		{transport.WRAtomicCmpAndSwp, 105, 9, 7, 7},
		{transport.WRAtomicFetchAndAdd, 1 << 63, 0, 7, 7 + 1<<63},
	}
	for i, o := range ops {
		wr := transport.SendWR{ID: uint64(i), Opcode: o.op, Flags: transport.SendSignaled, SGL: []transport.SGE{res.SGE(8, 8)},
			RemoteAddr: tgt.Addr + 8, RKey: tgt.RKey, CompareAdd: o.cmp, Swap: o.swap}
		if err := p.a.QP.PostSend(0, &wr); err != nil {
			t.Fatal(err)
		}
		p.run(1, 0)
		wc := p.a.SendCQ.Take(nil)
		if wc[0].Status != transport.StatusSuccess {
			t.Fatalf("op %d: %+v", i, wc[0])
		}
		if g := get(res.Buf[8:]); g != o.wantOrig {
			t.Errorf("op %d: orig %d want %d", i, g, o.wantOrig)
		}
		if g := get(tgt.Buf[8:]); g != o.wantTarget {
			t.Errorf("op %d: target %d want %d", i, g, o.wantTarget)
		}
	}
	// Bad WRs rejected at post.
	bad := []transport.SendWR{
		{Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{res.SGE(0, 4)}, RemoteAddr: tgt.Addr},
		{Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{res.SGE(0, 8)}, RemoteAddr: tgt.Addr + 4},
	}
	for i := range bad {
		if err := p.a.QP.PostSend(0, &bad[i]); err == nil {
			t.Errorf("bad atomic %d accepted", i)
		}
	}
}

// InFlight counts an RC requester's unacknowledged packets, across the
// PSN wrap, and is 0 once they are acknowledged; UC, which has no
// acknowledgements, always reports 0 (the HCA would otherwise treat every
// UC QP as one with a deep pipe after 32 packets).
func TestInFlight(t *testing.T) {
	for _, typ := range []transport.QPType{transport.RC, transport.UC} {
		p := newPair(t, pairOpt{typ: typ, psnA: 0xFFFFFE, psnB: 0x100, seed: 3})
		src := p.mem.Register(1, 4096, allAccess)
		dst := p.mem.Register(2, 4096, allAccess)
		wr := transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 4096)}, RemoteAddr: dst.Addr, RKey: dst.RKey}
		if err := p.a.QP.PostSend(0, &wr); err != nil {
			t.Fatal(err)
		}
		if got := p.a.QP.InFlight(); got != 0 {
			t.Errorf("%v: %d in flight before anything was sent; want 0", typ, got)
		}
		buf := make([]byte, 2048)
		sent := 0
		for {
			if _, _, ok := p.a.QP.Transmit(0, buf); !ok {
				break
			}
			sent++
		}
		want := int32(4) // 4 KiB at MTU 1024, PSNs 0xFFFFFE..0x000001
		if typ != transport.RC {
			want = 0
		}
		if sent != 4 || p.a.QP.InFlight() != want {
			t.Errorf("%v: %d packets sent, %d in flight; want 4 and %d", typ, sent, p.a.QP.InFlight(), want)
		}
		if typ == transport.RC {
			// The 4 packets above were dropped: the retransmission
			// delivers them and the ACK empties the pipe.
			p.run(1, 0)
			if got := p.a.QP.InFlight(); got != 0 {
				t.Errorf("RC: %d in flight after the WRITE completed; want 0", got)
			}
		}
	}
}
