package transport_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

func statuses(wcs []transport.Completion) []transport.Status {
	var s []transport.Status
	for _, wc := range wcs {
		s = append(s, wc.Status)
	}
	return s
}

func wantStatuses(t *testing.T, what string, wcs []transport.Completion, want ...transport.Status) {
	t.Helper()
	got := statuses(wcs)
	if len(got) != len(want) {
		t.Fatalf("%s: statuses %v, want %v (%+v)", what, got, want, wcs)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: statuses %v, want %v (%+v)", what, got, want, wcs)
		}
	}
}

func sendWR(id uint64, mr *tt.MR, n int, signaled bool) *transport.SendWR {
	wr := &transport.SendWR{ID: id, Opcode: transport.WRSend, SGL: []transport.SGE{mr.SGE(0, n)}}
	if signaled {
		wr.Flags = transport.SendSignaled
	}
	return wr
}

func TestRetryExceeded(t *testing.T) {
	// The peer is gone: nothing A sends arrives. With retry_cnt 2 each
	// message is sent 3 times, then RETRY_EXC_ERR and the rest flush (the
	// unsignaled one too).
	p := newPair(t, pairOpt{typ: transport.RC, faults: tt.Faults{Drop: func(from int, _ []byte) bool { return from == 0 }},
		conn: func(c *tt.Conn) { c.RetryCnt = 2; c.Timeout = 5 }})
	src := p.mem.Register(1, 64, allAccess)
	for i := 0; i < 3; i++ {
		if err := p.a.QP.PostSend(0, sendWR(uint64(i), src, 64, i != 1)); err != nil {
			t.Fatal(err)
		}
	}
	p.run(3, 0)
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRetryExcErr, transport.StatusWRFlushErr, transport.StatusWRFlushErr)
	if p.a.QP.State() != transport.StateErr {
		t.Fatalf("state %v", p.a.QP.State())
	}
	st := p.a.QP.Stats()
	if st.RetryTimeouts != 3 || st.TxRetransmits != 2 {
		t.Fatalf("timeouts %d retransmits %d, want 3 and 2", st.RetryTimeouts, st.TxRetransmits)
	}
	// Timeout 5 = 4.096µs × 32 = 131µs; three timeouts.
	if p.w.Now < 3*131072 || p.w.Now > 4*131072 {
		t.Fatalf("virtual time %d ns, want ~3 local ACK timeouts", p.w.Now)
	}
	// Posting in ERR completes with WR_FLUSH_ERR.
	if err := p.a.QP.PostSend(p.w.Now, sendWR(9, src, 8, false)); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "post in ERR", p.a.SendCQ.Take(nil), transport.StatusWRFlushErr)
}

func TestRNRRetry(t *testing.T) {
	t.Run("Exceeded", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC, conn: func(c *tt.Conn) { c.RNRRetry = 2; c.MinRNRTimer = 3 }})
		src := p.mem.Register(1, 64, allAccess)
		p.a.QP.PostSend(0, sendWR(1, src, 64, true))
		p.a.QP.PostSend(0, sendWR(2, src, 64, true))
		p.run(2, 0)
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRNRRetryExcErr, transport.StatusWRFlushErr)
		if n := p.a.QP.Stats().RNRNAKsReceived; n != 3 {
			t.Fatalf("RNR NAKs received %d, want 3", n)
		}
		// Each wait is the responder's timer code 3 = 30µs.
		if p.w.Now < 2*30000 {
			t.Fatalf("did not wait the RNR time: %d ns", p.w.Now)
		}
	})
	t.Run("Recovers", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC, conn: func(c *tt.Conn) { c.RNRRetry = 7; c.MinRNRTimer = 1 }})
		src := p.mem.Register(1, 3000, allAccess)
		dst := p.mem.Register(2, 3000, allAccess)
		fill(src.Buf, 3)
		p.a.QP.PostSend(0, sendWR(1, src, 3000, true))
		p.w.Run(func() bool { return p.a.QP.Stats().RNRNAKsReceived >= 5 }, 1e9)
		p.b.RQ.Post(7, dst.SGE(0, 3000))
		p.run(1, 1)
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess)
		wantStatuses(t, "B", p.b.RecvCQ.Take(nil), transport.StatusSuccess)
		if string(src.Buf) != string(dst.Buf) {
			t.Fatal("data")
		}
	})
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		op   transport.WROpcode
		// mk returns the remote address and R_Key to use.
		mk      func(p *pair) (uint64, bth.RKey)
		accessB transport.Access
	}{
		{"BadRKey", transport.WRRDMAWrite, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, allAccess)
			return mr.Addr, mr.RKey + 1
		}, 0},
		{"OutOfRange", transport.WRRDMAWrite, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, allAccess)
			return mr.Addr + 32, mr.RKey
		}, 0},
		{"MRLacksRemoteWrite", transport.WRRDMAWrite, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, transport.AccessLocalWrite|transport.AccessRemoteRead)
			return mr.Addr, mr.RKey
		}, 0},
		{"MRLacksRemoteRead", transport.WRRDMARead, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, transport.AccessLocalWrite|transport.AccessRemoteWrite)
			return mr.Addr, mr.RKey
		}, 0},
		{"MROfAnotherPD", transport.WRRDMAWrite, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(1, 64, allAccess) // PD 1 is A's, B's QP is in PD 2
			return mr.Addr, mr.RKey
		}, 0},
		{"QPLacksRemoteRead", transport.WRRDMARead, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, allAccess)
			return mr.Addr, mr.RKey
		}, transport.AccessLocalWrite | transport.AccessRemoteWrite},
		{"AtomicBadRKey", transport.WRAtomicFetchAndAdd, func(p *pair) (uint64, bth.RKey) {
			mr := p.mem.Register(2, 64, allAccess)
			return mr.Addr, mr.RKey ^ 0xFF
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpt{typ: transport.RC, conn: func(cn *tt.Conn) {
				if c.accessB != 0 {
					cn.AccessB = c.accessB
				}
			}})
			src := p.mem.Register(1, 64, allAccess)
			addr, rkey := c.mk(p)
			n := 64
			if c.op == transport.WRAtomicFetchAndAdd {
				n = 8
			}
			wr := &transport.SendWR{ID: 1, Opcode: c.op, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, n)},
				RemoteAddr: addr, RKey: rkey}
			p.a.QP.PostSend(0, wr)
			p.a.QP.PostSend(0, sendWR(2, src, 8, false))
			p.run(2, 0)
			wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRemAccessErr, transport.StatusWRFlushErr)
			if p.b.QP.State() != transport.StateErr || p.a.QP.State() != transport.StateErr {
				t.Fatalf("states A %v B %v, want ERR", p.a.QP.State(), p.b.QP.State())
			}
		})
	}
}

func TestRemoteInvalidRequest(t *testing.T) {
	t.Run("ReadWithoutResponderResources", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC, conn: func(c *tt.Conn) { c.NoDestRdAtomicB = true }})
		src := p.mem.Register(1, 64, allAccess)
		dst := p.mem.Register(2, 64, allAccess)
		p.b.RQ.Post(5, dst.SGE(0, 64))
		p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, SGL: []transport.SGE{src.SGE(0, 64)},
			RemoteAddr: dst.Addr, RKey: dst.RKey})
		p.run(1, 1)
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRemInvReqErr)
		// B's receive queue is flushed when it enters ERR.
		wantStatuses(t, "B", p.b.RecvCQ.Take(nil), transport.StatusWRFlushErr)
	})
	t.Run("SendLargerThanRecvBuffer", func(t *testing.T) {
		p := newPair(t, pairOpt{typ: transport.RC})
		src := p.mem.Register(1, 3000, allAccess)
		dst := p.mem.Register(2, 3000, allAccess)
		p.b.RQ.Post(5, dst.SGE(0, 2000))
		p.b.RQ.Post(6, dst.SGE(0, 2000))
		p.a.QP.PostSend(0, sendWR(1, src, 3000, true))
		p.run(1, 2)
		wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusRemInvReqErr)
		// The local receive completes with LOC_LEN_ERR (IBA/hardware; rxe
		// says REM_INV_REQ_ERR), the other is flushed.
		wantStatuses(t, "B", p.b.RecvCQ.Take(nil), transport.StatusLocLenErr, transport.StatusWRFlushErr)
		if !p.mem.GuardsIntact() {
			t.Fatal("guards")
		}
	})
}

func TestLocalProtectionError(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC})
	src := p.mem.Register(1, 64, allAccess)
	dst := p.mem.Register(2, 64, allAccess)
	p.b.RQ.Post(1, dst.SGE(0, 64))
	p.a.QP.PostSend(0, sendWR(1, src, 64, true))
	bad := sendWR(2, src, 64, false)
	bad.SGL[0].LKey++
	p.a.QP.PostSend(0, bad)
	p.a.QP.PostSend(0, sendWR(3, src, 64, true))
	p.run(3, 1)
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess, transport.StatusLocProtErr, transport.StatusWRFlushErr)
	// A READ into a read-only local MR is a protection error too.
	p2 := newPair(t, pairOpt{typ: transport.RC})
	ro := p2.mem.Register(1, 64, 0)
	rem := p2.mem.Register(2, 64, allAccess)
	p2.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, SGL: []transport.SGE{ro.SGE(0, 64)},
		RemoteAddr: rem.Addr, RKey: rem.RKey})
	p2.run(1, 0)
	wantStatuses(t, "A2", p2.a.SendCQ.Take(nil), transport.StatusLocProtErr)
}

func TestFlush(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC})
	src := p.mem.Register(1, 64, allAccess)
	dst := p.mem.Register(2, 64, allAccess)
	p.a.QP.PostSend(0, sendWR(1, src, 64, false))
	p.a.QP.PostSend(0, sendWR(2, src, 64, true))
	p.b.RQ.Post(1, dst.SGE(0, 64))
	p.b.RQ.Post(2, dst.SGE(0, 64))
	if err := p.a.QP.Modify(0, &transport.Attr{State: transport.StateErr}, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "A send", p.a.SendCQ.Take(nil), transport.StatusWRFlushErr, transport.StatusWRFlushErr)
	if _, _, ok := p.a.QP.Transmit(0, make([]byte, 4200)); ok {
		t.Fatal("transmitted in ERR")
	}
	p.b.QP.Modify(0, &transport.Attr{State: transport.StateErr}, transport.AttrState)
	wantStatuses(t, "B recv", p.b.RecvCQ.Take(nil), transport.StatusWRFlushErr, transport.StatusWRFlushErr)
	p.b.RQ.Post(3, dst.SGE(0, 64))
	p.b.QP.FlushRecv()
	wantStatuses(t, "B recv after post", p.b.RecvCQ.Take(nil), transport.StatusWRFlushErr)
	// RESET empties without completions; back to RTS works again.
	p.a.QP.PostSend(0, sendWR(3, src, 64, true))
	p.a.SendCQ.Take(nil)
	p.a.QP.Modify(0, &transport.Attr{State: transport.StateReset}, transport.AttrState)
	if p.a.QP.State() != transport.StateReset || p.a.SendCQ.Len() != 0 {
		t.Fatal("reset")
	}
	p.b.QP.Modify(0, &transport.Attr{State: transport.StateReset}, transport.AttrState)
	if err := tt.Connect(0, p.a.QP, p.b.QP, tt.Conn{MTU: bth.MTU1024, PSN: [2]bth.PSN{5, 9}, Timeout: 10, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 4, Access: allAccess}); err != nil {
		t.Fatal(err)
	}
	p.b.RQ.Post(4, dst.SGE(0, 64))
	p.a.QP.PostSend(0, sendWR(4, src, 64, true))
	p.run(1, 1)
	wantStatuses(t, "after RESET and reconnect", p.a.SendCQ.Take(nil), transport.StatusSuccess)
}

func TestPostSendErrors(t *testing.T) {
	mem := tt.NewMemory()
	mk := func(typ transport.QPType) *tt.Side {
		s, err := tt.NewSide(typ, 5, 1, mem, 2)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mr := mem.Register(1, 64, allAccess)
	rc := mk(transport.RC)
	if err := rc.QP.PostSend(0, sendWR(1, mr, 8, true)); !errors.Is(err, transport.ErrBadState) {
		t.Fatalf("post in RESET: %v", err)
	}
	other := mk(transport.RC)
	tt.Connect(0, rc.QP, other.QP, tt.Conn{MTU: bth.MTU1024, MaxRdAtomic: 1, Access: allAccess, RetryCnt: 7, RNRRetry: 7})
	if err := rc.QP.PostSend(0, &transport.SendWR{Opcode: transport.WRSend, SGL: make([]transport.SGE, 5)}); !errors.Is(err, transport.ErrTooManySGE) {
		t.Fatalf("too many SGE: %v", err)
	}
	if err := rc.QP.PostSend(0, &transport.SendWR{Opcode: transport.WRSend, Flags: transport.SendInline, Inline: make([]byte, 257)}); !errors.Is(err, transport.ErrInlineTooLarge) {
		t.Fatalf("inline: %v", err)
	}
	if err := rc.QP.PostSend(0, &transport.SendWR{Opcode: 42}); !errors.Is(err, transport.ErrBadWR) {
		t.Fatalf("bad opcode: %v", err)
	}
	rc.QP.PostSend(0, sendWR(1, mr, 8, true))
	rc.QP.PostSend(0, sendWR(2, mr, 8, true))
	if err := rc.QP.PostSend(0, sendWR(3, mr, 8, true)); !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("queue full: %v", err)
	}
	uc, ud := mk(transport.UC), mk(transport.UD)
	tt.Connect(0, uc.QP, mk(transport.UC).QP, tt.Conn{MTU: bth.MTU1024})
	tt.Connect(0, ud.QP, mk(transport.UD).QP, tt.Conn{MTU: bth.MTU1024})
	for _, c := range []struct {
		s  *tt.Side
		op transport.WROpcode
	}{{uc, transport.WRRDMARead}, {uc, transport.WRAtomicFetchAndAdd}, {uc, transport.WRSendWithInv},
		{ud, transport.WRRDMAWrite}, {ud, transport.WRRDMARead}, {ud, transport.WRSendWithInv}} {
		if err := c.s.QP.PostSend(0, &transport.SendWR{Opcode: c.op, SGL: []transport.SGE{mr.SGE(0, 8)}}); !errors.Is(err, transport.ErrBadWR) {
			t.Errorf("%v on %v: %v", c.op, c.s.QP.Type(), err)
		}
	}
	if _, err := transport.NewQP(transport.Config{Type: 9}); !errors.Is(err, transport.ErrBadConfig) {
		t.Fatalf("bad type: %v", err)
	}
	if _, err := transport.NewQP(transport.Config{Type: transport.RC, QPN: 1 << 24}); !errors.Is(err, transport.ErrBadConfig) {
		t.Fatalf("bad QPN: %v", err)
	}
}

func TestInlineAndCQOverflow(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC})
	dst := p.mem.Register(2, 64, allAccess)
	p.b.RQ.Post(1, dst.SGE(0, 64))
	data := []byte("inline payload, copied at post time")
	wr := &transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendInline | transport.SendSignaled, Inline: data}
	p.a.QP.PostSend(0, wr)
	copy(data, "XXXXXX") // the engine copied it
	p.run(1, 1)
	if string(dst.Buf[:len(data)]) != "inline payload, copied at post time" {
		t.Fatalf("inline data %q", dst.Buf[:len(data)])
	}
	// A full CQ moves the QP to ERR.
	p.b.RecvCQ.Cap = 1
	p.b.RQ.Post(2, dst.SGE(0, 64))
	p.b.RQ.Post(3, dst.SGE(0, 64))
	p.a.QP.PostSend(0, &transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendInline, Inline: []byte("x")})
	p.w.Run(func() bool { return p.b.QP.State() == transport.StateErr }, p.w.Now+1e9)
	if p.b.QP.State() != transport.StateErr {
		t.Fatal("CQ overflow did not move the QP to ERR")
	}
}

func TestMaxRdAtomicAndFence(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC, conn: func(c *tt.Conn) { c.MaxRdAtomic = 1 }})
	loc := p.mem.Register(1, 8192, allAccess)
	rem := p.mem.Register(2, 8192, allAccess)
	var ops []bth.Opcode
	p.w.Tap = func(from int, pkt []byte, _ uint32) {
		if from == 0 {
			ops = append(ops, bth.Header(pkt).Opcode())
		}
	}
	read := func(id uint64) *transport.SendWR {
		return &transport.SendWR{ID: id, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []transport.SGE{loc.SGE(0, 4096)}, RemoteAddr: rem.Addr, RKey: rem.RKey}
	}
	p.a.QP.PostSend(0, read(1))
	p.a.QP.PostSend(0, read(2))
	// Only one READ may be outstanding: the second request leaves after
	// the first one's responses.
	for p.w.Step() && len(ops) < 2 {
	}
	if len(ops) < 1 || ops[0] != bth.OpRCRDMAReadRequest {
		t.Fatalf("ops %v", ops)
	}
	if p.a.SendCQ.Len() != 1 {
		t.Fatalf("second READ sent before the first completed (completions %d)", p.a.SendCQ.Len())
	}
	p.run(2, 0)
	// Fence: a WRITE with SendFence waits for the outstanding READ.
	p2 := newPair(t, pairOpt{typ: transport.RC})
	loc2 := p2.mem.Register(1, 8192, allAccess)
	rem2 := p2.mem.Register(2, 8192, allAccess)
	p2.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, SGL: []transport.SGE{loc2.SGE(0, 4096)},
		RemoteAddr: rem2.Addr, RKey: rem2.RKey})
	p2.a.QP.PostSend(0, &transport.SendWR{ID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendFence | transport.SendSignaled,
		SGL: []transport.SGE{loc2.SGE(0, 16)}, RemoteAddr: rem2.Addr + 4096, RKey: rem2.RKey})
	buf := make([]byte, 2000)
	if _, _, ok := p2.a.QP.Transmit(0, buf); !ok {
		t.Fatal("READ not sent")
	}
	if _, _, ok := p2.a.QP.Transmit(0, buf); ok {
		t.Fatal("fenced WRITE sent while the READ is outstanding")
	}
}

func TestSQDStartsNothingNew(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC})
	src := p.mem.Register(1, 4096, allAccess)
	dst := p.mem.Register(2, 4096, allAccess)
	p.b.RQ.Post(1, dst.SGE(0, 4096))
	p.a.QP.PostSend(0, sendWR(1, src, 3000, true))
	buf := make([]byte, 2000)
	if _, _, ok := p.a.QP.Transmit(0, buf); !ok { // FIRST of WR 1
		t.Fatal("no FIRST")
	}
	p.a.QP.PostSend(0, sendWR(2, src, 8, true))
	p.a.QP.Modify(0, &transport.Attr{State: transport.StateSQD}, transport.AttrState)
	// The in-flight message finishes; WR 2 is not started.
	p.w.Run(func() bool { return false }, 1e8)
	if p.a.SendCQ.Len() != 1 {
		t.Fatalf("completions in SQD: %d, want 1", p.a.SendCQ.Len())
	}
	p.a.QP.Modify(0, &transport.Attr{State: transport.StateRTS}, transport.AttrState)
	p.b.RQ.Post(2, dst.SGE(0, 4096))
	p.run(2, 2)
}

// TestNAKAfterPipelinedRead: the responder answers a READ and then NAKs a
// later request (SEND_WITH_INV naming an unknown R_Key). The READ response
// queued before the NAK must still go out, so the requester completes the
// READ successfully and only the SEND_WITH_INV fails.
func TestNAKAfterPipelinedRead(t *testing.T) {
	p := newPair(t, pairOpt{typ: transport.RC, conn: func(c *tt.Conn) { c.RetryCnt = 1 }})
	loc := p.mem.Register(1, 4096, allAccess)
	rem := p.mem.Register(2, 4096, allAccess)
	fill(rem.Buf, 8)
	p.b.RQ.Post(1, rem.SGE(0, 64))
	p.a.QP.PostSend(0, &transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{loc.SGE(0, 3000)}, RemoteAddr: rem.Addr, RKey: rem.RKey})
	p.a.QP.PostSend(0, &transport.SendWR{ID: 2, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
		SGL: []transport.SGE{loc.SGE(0, 10)}, InvRKey: 0xDEAD00})
	p.run(2, 1)
	wantStatuses(t, "A", p.a.SendCQ.Take(nil), transport.StatusSuccess, transport.StatusRemInvReqErr)
	wantStatuses(t, "B", p.b.RecvCQ.Take(nil), transport.StatusRemInvReqErr)
	if string(loc.Buf[:3000]) != string(rem.Buf[:3000]) {
		t.Fatal("READ data")
	}
}
