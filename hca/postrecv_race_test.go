package hca_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/transport"
)

// TestPostRecvRacingErr: every receive PostRecv accepts on a QP that ends
// in ERR completes with WR_FLUSH_ERR. PostRecv used to read the state,
// drop the QP's lock, then push: a WR pushed just after the ERR flush, by a
// poster that had read the state just before it, never completed (found
// by a review session; it failed within 4–92 trials).
func TestPostRecvRacingErr(t *testing.T) {
	d, _ := pair(t, memlink.Config{})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	const depth = 8192
	trials := 150
	if testing.Short() || raceEnabled {
		trials = 30
	}
	for trial := 0; trial < trials; trial++ {
		cq, err := d.CreateCQ(depth + 1024)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq,
			Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		init := hca.QPAttr{Port: 1}
		init.State = hca.StateInit
		if err := qp.Modify(&init, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var accepted atomic.Int64
		var stop atomic.Bool
		started := make(chan struct{})
		var once sync.Once
		for g := 0; g < 3; g++ {
			wg.Go(func() {
				for i := 0; !stop.Load() && qp.State() != hca.StateErr; i++ {
					if qp.PostRecv(&hca.RecvWR{ID: uint64(i), SGL: []hca.SGE{mr.SGE(0, 64)}}) == nil {
						accepted.Add(1)
						once.Do(func() { close(started) })
					}
				}
			})
		}
		<-started
		var toErr hca.QPAttr
		toErr.State = hca.StateErr
		if err := qp.Modify(&toErr, transport.AttrState); err != nil {
			t.Fatal(err)
		}
		stop.Store(true)
		wg.Wait()
		// Flushes complete synchronously; the wait only covers a slow CQ.
		for deadline := time.Now().Add(time.Second); cq.Len() < int(accepted.Load()) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if n := cq.Len(); n != int(accepted.Load()) {
			t.Fatalf("trial %d: %d receives accepted on a QP now in %v, %d completed", trial, accepted.Load(), qp.State(), n)
		}
		qp.Destroy()
		cq.Destroy()
	}
}
