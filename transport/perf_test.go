package transport_test

import (
	"runtime"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	tt "github.com/goroce/goroce/transport/transporttest"
)

// direct is a lossless zero-delay driver between two QPs with no wire
// bookkeeping, for allocation tests.
type direct struct {
	a, b *tt.Side
	buf  []byte
	info transport.RxInfo
	now  transport.Time
}

func (d *direct) pump() int {
	n := 0
	for {
		moved := false
		for i, s := range [2]*tt.Side{d.a, d.b} {
			peer := d.b
			if i == 1 {
				peer = d.a
			}
			k, _, ok := s.QP.Transmit(d.now, d.buf)
			if ok {
				peer.QP.Receive(d.now, d.buf[:k], &d.info)
				moved = true
				n++
			}
		}
		if !moved {
			return n
		}
		d.now += 100
	}
}

func newDirect(t testing.TB, typ transport.QPType) (*direct, *tt.Memory) {
	p := newPair(t, pairOpt{typ: typ})
	return &direct{a: p.a, b: p.b, buf: make([]byte, 8192), info: tt.GRHFor(0)}, p.mem
}

// TestZeroAllocsSteadyState checks that a whole message cycle — PostSend,
// every request packet built and received, the responses, the completions —
// allocates nothing once the queues have been used once.
func TestZeroAllocsSteadyState(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	cases := []struct {
		name string
		typ  transport.QPType
		op   transport.WROpcode
		size int
		recv bool
	}{
		{"RCWrite64K", transport.RC, transport.WRRDMAWrite, 65536, false},
		{"RCSend4K", transport.RC, transport.WRSend, 4096, true},
		{"RCRead64K", transport.RC, transport.WRRDMARead, 65536, false},
		{"RCFetchAdd", transport.RC, transport.WRAtomicFetchAndAdd, 8, false},
		{"UCWriteImm8K", transport.UC, transport.WRRDMAWriteWithImm, 8192, true},
		{"UDSend1K", transport.UD, transport.WRSend, 1024, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, mem := newDirect(t, c.typ)
			src := mem.Register(1, c.size, allAccess)
			dst := mem.Register(2, c.size+64, allAccess)
			wr := &transport.SendWR{ID: 1, Opcode: c.op, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, c.size)},
				RemoteAddr: dst.Addr, RKey: dst.RKey, RemoteQPN: d.b.QP.QPN(), RemoteQKey: 0x11111111, CompareAdd: 1}
			var wcs []transport.Completion
			cycle := func() {
				if c.recv {
					d.b.RQ.Post(1, dst.SGE(0, c.size+64))
				}
				if err := d.a.QP.PostSend(d.now, wr); err != nil {
					t.Fatal(err)
				}
				d.pump()
				wcs = d.a.SendCQ.Take(wcs)
				if len(wcs) != 1 || wcs[0].Status != transport.StatusSuccess {
					t.Fatalf("completions %+v", wcs)
				}
				wcs = d.b.RecvCQ.Take(wcs)
			}
			for i := 0; i < 4; i++ { // warm up every slot and buffer
				cycle()
			}
			if a := testing.AllocsPerRun(100, cycle); a != 0 {
				t.Fatalf("%v allocations per message cycle, want 0", a)
			}
		})
	}
}

// BenchmarkRCWrite64K measures 64 KiB RDMA WRITEs over the simulated wire
// (MTU 4096 and 1024; lossless, 1 µs virtual delay): engine + harness cost.
func BenchmarkRCWrite64K(b *testing.B) {
	for _, mtu := range []bth.MTU{bth.MTU1024, bth.MTU4096} {
		b.Run(mtu.String(), func(b *testing.B) {
			p := newPair(b, pairOpt{typ: transport.RC, mtu: mtu, depth: 128})
			src := p.mem.Register(1, 65536, allAccess)
			dst := p.mem.Register(2, 65536, allAccess)
			wr := &transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 65536)},
				RemoteAddr: dst.Addr, RKey: dst.RKey}
			var wcs []transport.Completion
			const window = 16
			posted, done := 0, 0
			b.SetBytes(65536)
			b.ReportAllocs()
			b.ResetTimer()
			for done < b.N {
				for posted < b.N && posted-done < window {
					wr.ID = uint64(posted)
					if err := p.a.QP.PostSend(p.w.Now, wr); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				p.w.Step()
				wcs = p.a.SendCQ.Take(wcs)
				done += len(wcs)
			}
			b.ReportMetric(float64(p.w.Stats.Sent)/float64(b.N), "pkts/op")
		})
	}
}

// BenchmarkTransmitReceive measures the engine alone: one 4 KiB WRITE
// packet built by the requester and executed by the responder.
func BenchmarkTransmitReceive(b *testing.B) {
	d, mem := newDirect(b, transport.RC)
	d.a.QP.Modify(0, &transport.Attr{PathMTU: bth.MTU4096}, transport.AttrPathMTU)
	d.b.QP.Modify(0, &transport.Attr{PathMTU: bth.MTU4096}, transport.AttrPathMTU)
	const size = 1 << 20
	src := mem.Register(1, size, allAccess)
	dst := mem.Register(2, size, allAccess)
	wr := &transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr, RKey: dst.RKey}
	b.SetBytes(4096)
	b.ReportAllocs()
	pkts := 0
	for b.Loop() {
		n, _, ok := d.a.QP.Transmit(d.now, d.buf)
		if !ok {
			d.pump() // deliver ACKs, complete
			d.a.SendCQ.Take(nil)
			if err := d.a.QP.PostSend(d.now, wr); err != nil {
				b.Fatal(err)
			}
			continue
		}
		d.b.QP.Receive(d.now, d.buf[:n], &d.info)
		pkts++
	}
}

// TestIdleQPMemory creates 10,000 RC QPs in RTS and reports the heap bytes
// each costs; the target is under 8 KiB (queues are allocated on first use).
func TestIdleQPMemory(t *testing.T) {
	const n = 10000
	mem := tt.NewMemory()
	cq := &tt.CQ{}
	rq := tt.NewRQ(1, 1)
	qps := make([]*transport.QP, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range qps {
		qp, err := transport.NewQP(transport.Config{Type: transport.RC, QPN: bth.QPN(i + 16), PD: 1,
			MaxSendWR: 128, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256,
			Memory: mem, SendCQ: cq, RecvCQ: cq, RQ: rq})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			a transport.Attr
			m transport.AttrMask
		}{
			{transport.Attr{State: transport.StateInit, AccessFlags: allAccess}, transport.AttrState | transport.AttrAccessFlags},
			{transport.Attr{State: transport.StateRTR, PathMTU: bth.MTU1024, DestQPN: 99, MaxDestRdAtomic: 16, MinRNRTimer: 12},
				transport.AttrState | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer},
			{transport.Attr{State: transport.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				transport.AttrState | transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic},
		} {
			if err := qp.Modify(0, &s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
		qps[i] = qp
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d idle RC QPs in RTS (max_send_wr 128, max_dest_rd_atomic 16): %.0f bytes per QP", n, per)
	if per > 8192 {
		t.Fatalf("%.0f bytes per idle QP, target < 8 KiB", per)
	}
	runtime.KeepAlive(qps)
}
