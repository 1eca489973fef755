package hca_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// TestTeardownUnderTraffic takes two devices apart, piece by piece and
// then whole, while every QP pair carries SENDs, WRITEs, READs and atomics
// both ways over a lossy wire, from goroutines that go on posting and
// polling until the API tells them to stop. One device busy-polls, the
// other does not. Nothing may panic or hang; every API error must wrap one
// of hca's sentinel errors; no WR may complete twice or complete without
// having been posted; and once both devices are closed and the workers
// have stopped, no goroutine of theirs may be left.
func TestTeardownUnderTraffic(t *testing.T) {
	before := runtime.NumGoroutine()
	const pairs = 8
	la, lb, err := memlink.Pair(memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB}, QueueLen: 4096,
		Seed: 7, AtoB: memlink.Faults{Loss: 0.01, Reorder: 0.02}, BtoA: memlink.Faults{Loss: 0.01, Reorder: 0.02}})
	if err != nil {
		t.Fatal(err)
	}
	da, err := hca.Open(la, hca.Options{Name: "ta", Shards: 2, BusyPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(lb, hca.Options{Name: "tb", Shards: 2})
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() }) // on an early failure; Close is idempotent
	ends := make([][2]*end, pairs)
	for i := range ends {
		a := newEnd(t, da, hca.RC, 64<<10, allAccess)
		b := newEnd(t, db, hca.RC, 64<<10, allAccess)
		connect(t, a, b, bth.MTU1024, bth.PSN(i*100), bth.PSN(0xFFFFF0-i))
		ends[i] = [2]*end{a, b}
	}

	var stop atomic.Bool
	var ok atomic.Int64 // successful completions, all workers
	var wg sync.WaitGroup
	errs := make(chan error, 4*pairs)
	for i, e := range ends {
		for side := 0; side < 2; side++ {
			l, r := e[side], e[1-side]
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := teardownWorker(l, r, &stop, &ok); err != nil {
					errs <- fmt.Errorf("pair %d side %d: %w", i, side, err)
				}
			}()
		}
	}

	// Piece by piece, once the traffic runs (500 WRs done; a slow race
	// build on a loaded machine may take seconds).
	for start := time.Now(); ok.Load() < 500; time.Sleep(time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			stop.Store(true)
			t.Fatalf("only %d successful completions in 20 s", ok.Load())
		}
	}
	steps := []struct {
		what string
		do   func() error
		want error // nil: must succeed
	}{
		{"destroy a busy QP", func() error { return ends[0][0].qp.Destroy() }, nil},
		{"deregister an MR its peer is writing", func() error { return ends[1][1].mr.Dereg() }, nil},
		{"move a busy QP to ERR", func() error {
			var attr hca.QPAttr
			attr.State = hca.StateErr
			return ends[2][0].qp.Modify(&attr, transport.AttrState)
		}, nil},
		{"destroy the peer's QP", func() error { return ends[3][1].qp.Destroy() }, nil},
		{"deallocate a PD in use", func() error { return ends[4][0].pd.Dealloc() }, hca.ErrInUse},
		{"destroy a CQ in use", func() error { return ends[5][1].cq.Destroy() }, hca.ErrInUse},
	}
	for _, s := range steps {
		err := s.do()
		if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
			t.Errorf("%s: %v, want %v", s.what, err, s.want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Then whole: one device, a moment later the other, still under traffic.
	if err := db.Close(); err != nil {
		t.Errorf("closing b: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := da.Close(); err != nil {
		t.Errorf("closing a: %v", err)
	}
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("workers still running 20 s after Close:\n%s", buf[:runtime.Stack(buf, true)])
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d successful completions", ok.Load())
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, g, buf[:runtime.Stack(buf, true)])
	}
}

// teardownWorker keeps up to 16 WRs in flight from l to r and 16 receives
// posted on l, and polls l's CQ, until an API call fails (the expected end:
// the error must wrap a sentinel) or stop is set and nothing it can still
// wait for is left. It returns what broke a rule.
func teardownWorker(l, r *end, stop *atomic.Bool, ok *atomic.Int64) error {
	half := len(l.buf) / 2
	outstanding := map[uint64]bool{} // WR ID -> is a receive
	posted := map[uint64]bool{}
	var id uint64
	recvs := 0
	wcs := make([]hca.WC, 16)
	sentinel := func(what string, err error) error {
		for _, s := range []error{hca.ErrClosed, hca.ErrDestroyed, hca.ErrQPState, hca.ErrCQOverflow, hca.ErrInvalidArg, hca.ErrLimit} {
			if errors.Is(err, s) {
				return nil
			}
		}
		return fmt.Errorf("%s: %v wraps no sentinel error", what, err)
	}
	for n := 0; ; n++ {
		if stop.Load() {
			return nil
		}
		for recvs < 16 {
			id++
			if err := l.qp.PostRecv(&hca.RecvWR{ID: id, SGL: []hca.SGE{l.mr.SGE(half, half)}}); err != nil {
				return sentinel("post_recv", err)
			}
			outstanding[id], posted[id] = true, true
			recvs++
		}
		for len(outstanding)-recvs < 16 {
			id++
			size := 1 + int(id*4099)%(half-8)
			wr := hca.SendWR{ID: id, Flags: transport.SendSignaled, SGL: []hca.SGE{l.mr.SGE(0, size)},
				RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}
			switch id % 4 {
			case 0:
				wr.Opcode = transport.WRSend
			case 1:
				wr.Opcode = transport.WRRDMAWrite
			case 2:
				wr.Opcode, wr.SGL[0] = transport.WRRDMARead, l.mr.SGE(half, size)
			case 3:
				wr.Opcode, wr.SGL[0], wr.CompareAdd = transport.WRAtomicFetchAndAdd, l.mr.SGE(8, 8), 1
				wr.RemoteAddr += 64
			}
			if err := l.qp.PostSend(&wr); err != nil {
				return sentinel("post_send", err)
			}
			outstanding[id], posted[id] = false, true
		}
		k, err := l.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if !posted[wc.WRID] {
				return fmt.Errorf("completion of WR %d, never posted: %+v", wc.WRID, wc)
			}
			isRecv, found := outstanding[wc.WRID]
			if !found {
				return fmt.Errorf("WR %d completed twice: %+v", wc.WRID, wc)
			}
			delete(outstanding, wc.WRID)
			if wc.Status == transport.StatusSuccess {
				ok.Add(1)
			}
			if isRecv {
				recvs--
			}
		}
		if err != nil {
			return sentinel("poll", err)
		}
		if k == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			err := l.cq.Wait(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return sentinel("wait", err)
			}
		}
	}
}
