package hca_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// Many QP pairs driven from their own goroutines at once: every message
// arrives intact on its own QP. Run with -race. With one transmit shard
// every QP shares one lock; with three, QPs of different shards transmit
// from different goroutines through their own link writers while one
// reader feeds them all.
func TestManyQPsManyGoroutines(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) { manyQPs(t, shards) })
	}
}

func manyQPs(t *testing.T, shards int) {
	da, db := pairShards(t, memlink.Config{QueueLen: 4096}, shards)
	const pairs, msgs = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for i := 0; i < pairs; i++ {
		a := newEnd(t, da, hca.RC, 64<<10, allAccess)
		b := newEnd(t, db, hca.RC, 64<<10, allAccess)
		connect(t, a, b, bth.MTU1024, bth.PSN(i*1000), bth.PSN(0xFFFF00+i))
		wg.Add(1)
		go func(i int, a, b *end) {
			defer wg.Done()
			errs <- drive(t, i, a, b, msgs)
		}(i, a, b)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// drive sends msgs messages of varying size and operation from a to b.
func drive(t testing.TB, id int, a, b *end, msgs int) error {
	half := len(a.buf) / 2
	for m := 0; m < msgs; m++ {
		n := 1 + (m*4099+id*31)%half
		fill(a.buf[:n], byte(m+id))
		if m%2 == 0 {
			if err := b.qp.PostRecv(&hca.RecvWR{ID: uint64(m), SGL: []hca.SGE{b.mr.SGE(half, half)}}); err != nil {
				return err
			}
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(m), Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{a.mr.SGE(0, n)}}); err != nil {
				return err
			}
			if wc := waitWC(t, b.cq); wc.Status != transport.StatusSuccess || wc.ByteLen != uint32(n) || !bytes.Equal(b.buf[half:half+n], a.buf[:n]) {
				return fmt.Errorf("pair %d SEND %d: %+v or data differs", id, m, wc)
			}
		} else {
			if err := a.qp.PostSend(&hca.SendWR{ID: uint64(m), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []hca.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				return err
			}
		}
		if wc := waitWC(t, a.cq); wc.Status != transport.StatusSuccess || wc.WRID != uint64(m) {
			return fmt.Errorf("pair %d msg %d: %+v", id, m, wc)
		}
		if m%2 == 1 && !bytes.Equal(b.buf[:n], a.buf[:n]) {
			return fmt.Errorf("pair %d WRITE %d: data differs", id, m)
		}
	}
	return nil
}

// 10,000 connected idle RC QPs in one device: report the memory each costs
// and check that no goroutine exists per QP.
func TestIdleQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creating 10,000 QPs takes a few seconds")
	}
	da, db := pair(t, memlink.Config{})
	pdA, _ := da.AllocPD()
	pdB, _ := db.AllocPD()
	cqA, _ := da.CreateCQ(16)
	cqB, _ := db.CreateCQ(16)
	peerQP, err := pdB.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cqB, RecvCQ: cqB, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	gidB, _ := db.QueryGID(0)
	goroutines := runtime.NumGoroutine()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 10000
	qps := make([]*hca.QP, 0, n)
	for i := 0; i < n; i++ {
		qp, err := pdA.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cqA, RecvCQ: cqA,
			Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		toRTS(t, qp, gidB, peerQP.QPN())
		qps = append(qps, qp)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d connected idle RC QPs (send/recv depth 16): %.0f bytes per QP", n, per)
	if per > 8192 {
		t.Errorf("%.0f bytes per idle QP, target < 8 KiB", per)
	}
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines with %d QPs, %d before: goroutines per QP?", g, n, goroutines)
	}
	runtime.KeepAlive(qps)
}

func toRTS(t testing.TB, qp *hca.QP, dgid hca.GID, dqpn bth.QPN) {
	t.Helper()
	var a hca.QPAttr
	a.State, a.Port, a.AccessFlags = hca.StateInit, 1, hca.AccessRemoteWrite
	if err := qp.Modify(&a, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{AH: hca.AHAttr{DGID: dgid, HopLimit: 64}}
	a.State, a.PathMTU, a.DestQPN, a.RQPSN, a.MaxDestRdAtomic, a.MinRNRTimer = hca.StateRTR, bth.MTU1024, dqpn, 1, 1, 12
	if err := qp.Modify(&a, transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN|transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{}
	a.State, a.SQPSN, a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = hca.StateRTS, 1, 14, 7, 7, 1
	if err := qp.Modify(&a, transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRCWrite64K measures RDMA WRITE of 64 KiB messages through two
// devices over an in-memory link: the whole runtime (decode, ICRC, engines,
// batching) without the kernel. allocs/op counts allocations per message
// (64 packets plus ACKs at MTU 1024).
func BenchmarkRCWrite64K(b *testing.B) {
	da, db := pair(b, memlink.Config{QueueLen: 4096})
	x := newEnd(b, da, hca.RC, 64<<10, allAccess)
	y := newEnd(b, db, hca.RC, 64<<10, allAccess)
	connect(b, x, y, bth.MTU1024, 1, 2)
	wr := hca.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{x.mr.SGE(0, 64<<10)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	run := func(iters int) { pipeWrites(b, x, &wr, 32, iters) }
	run(64) // warm up: queues, heaps and pools reach their steady size
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// pipeWrites posts wr on x iters times, keeping depth outstanding, and
// waits for every completion, failing tb on an error status.
func pipeWrites(tb testing.TB, x *end, wr *hca.SendWR, depth, iters int) {
	wcs := make([]hca.WC, depth)
	posted, done := 0, 0
	for done < iters {
		for posted < iters && posted-done < depth {
			if err := x.qp.PostSend(wr); err != nil {
				tb.Fatal(err)
			}
			posted++
		}
		n, err := x.cq.Poll(wcs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess {
				tb.Fatalf("completion %+v", wc)
			}
		}
		done += n
		if n == 0 {
			if err := x.cq.Wait(tb.Context()); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
