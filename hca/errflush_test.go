package hca_test

import (
	"context"
	"errors"
	"fmt"
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

// TestErrUnderTrafficCompletesEveryWR: one end posts SENDs, WRITEs and
// READs and receives from several goroutines while its peer does the same;
// the end is moved to ERR in the middle. Every WR it accepted must complete
// exactly once, successfully or with a flush, and the posts it refused
// must say why with a sentinel.
func TestErrUnderTrafficCompletesEveryWR(t *testing.T) {
	for iter := 0; iter < 3; iter++ {
		t.Run(fmt.Sprint(iter), func(t *testing.T) { errUnderTraffic(t, uint64(iter)) })
	}
}

func errUnderTraffic(t *testing.T, seed uint64) {
	f := memlink.Faults{Loss: 0.01, Reorder: 0.02}
	da, db := pair(t, memlink.Config{Seed: seed, AtoB: f, BtoA: f, QueueLen: 4096})
	a := newEnd(t, da, hca.RC, 64<<10, allAccess)
	b := newEnd(t, db, hca.RC, 64<<10, allAccess)
	connect(t, a, b, bth.MTU1024, 5, 9)
	var mu sync.Mutex
	posted := map[uint64]bool{}
	var next atomic.Uint64
	var stop atomic.Bool
	var outstanding atomic.Int64 // accepted and not yet polled: bounded below the CQ's 4096
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	ok := func(err error) bool {
		return errors.Is(err, hca.ErrQPState) || errors.Is(err, hca.ErrLimit)
	}
	for g := 0; g < 2; g++ {
		wg.Go(func() {
			for !stop.Load() {
				if outstanding.Load() > 1500 {
					runtime.Gosched()
					continue
				}
				id := next.Add(1)
				var err error
				if id%3 == 0 {
					err = a.qp.PostRecv(&hca.RecvWR{ID: id, SGL: []hca.SGE{a.mr.SGE(32<<10, 4096)}})
				} else {
					wr := hca.SendWR{ID: id, Flags: transport.SendSignaled, SGL: []hca.SGE{a.mr.SGE(0, 1+int(id)%8000)},
						RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
					switch id % 4 {
					case 0:
						wr.Opcode = transport.WRSend
					case 1:
						wr.Opcode = transport.WRRDMAWrite
					default:
						wr.Opcode, wr.SGL[0] = transport.WRRDMARead, a.mr.SGE(16<<10, 1+int(id)%8000)
					}
					err = a.qp.PostSend(&wr)
				}
				if err == nil {
					mu.Lock()
					posted[id] = true
					mu.Unlock()
					outstanding.Add(1)
				} else if !ok(err) {
					errc <- fmt.Errorf("post %d: %w", id, err)
					return
				}
			}
		})
	}
	// The peer keeps receives posted and sends to a.
	wg.Go(func() {
		wcs := make([]hca.WC, 32)
		for i := uint64(0); !stop.Load(); i++ {
			_ = b.qp.PostRecv(&hca.RecvWR{ID: i, SGL: []hca.SGE{b.mr.SGE(0, 8192)}})
			_ = b.qp.PostSend(&hca.SendWR{ID: i, Opcode: transport.WRSend, SGL: []hca.SGE{b.mr.SGE(0, 100)}})
			b.cq.Poll(wcs)
		}
	})
	seen := map[uint64]transport.Status{}
	wcs := make([]hca.WC, 64)
	pollAll := func() {
		for {
			n, err := a.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if s, dup := seen[wc.WRID]; dup {
					t.Fatalf("WR %d completed twice: %v then %+v", wc.WRID, s, wc)
				}
				seen[wc.WRID] = wc.Status
			}
			outstanding.Add(-int64(n))
			if n == 0 {
				return
			}
		}
	}
	for deadline := time.Now().Add(20 * time.Second); len(seen) < 300; {
		pollAll()
		if time.Now().After(deadline) {
			t.Fatalf("%d completions in 20 s", len(seen))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		a.cq.Wait(ctx)
		cancel()
	}
	var attr hca.QPAttr
	attr.State = hca.StateErr
	if err := a.qp.Modify(&attr, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	// Posts keep coming for a while in ERR (they are flushed); then stop.
	for len(seen) < 600 {
		pollAll()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		a.cq.Wait(ctx)
		cancel()
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); len(seen) < len(posted); {
		pollAll()
		if time.Now().After(deadline) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		a.cq.Wait(ctx)
		cancel()
	}
	missing := 0
	for id := range posted {
		if _, ok := seen[id]; !ok {
			if missing < 10 {
				t.Errorf("WR %d was posted and never completed", id)
			}
			missing++
		}
	}
	for id := range seen {
		if !posted[id] {
			t.Errorf("WR %d completed but was never accepted", id)
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d posted WRs never completed (state %s)", missing, len(posted), a.qp.State())
	}
}
