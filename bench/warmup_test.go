package bench

import (
	"errors"
	"strings"
	"testing"
)

// TestWarmUp: --perform_warm_up posts TX depth WRs per QP before the run
// and waits for them: an atomic_bw target counts them too, and the run
// itself still reports its own iterations.
func TestWarmUp(t *testing.T) {
	da, db := memPair(t)
	const iters, depth = 100, 16
	cli, srv := connected(t, da, db, Params{Mode: ModeAtomicBW, Iters: iters, QPs: 2, TxDepth: depth, WarmUp: true})
	rc, _ := runBoth(t, testCtx(t), cli, srv, 8)
	checkBW(t, rc, 8, iters, 2)
	for i := range 2 {
		if v := srv.atomicValue(i); v != iters+depth {
			t.Fatalf("QP %d: FETCH_AND_ADD target is %d, want %d (%d warm-up adds and %d measured)", i, v, iters+depth, depth, iters)
		}
	}
	for _, m := range []Mode{ModeWriteBW, ModeReadBW} {
		c, _ := loopback(t, Params{Mode: m, Iters: 50, Size: 4096, WarmUp: true})
		checkBW(t, c.Results[0], 4096, 50, 1)
	}
	for _, m := range []Mode{ModeSendBW, ModeWriteLat} {
		p := Params{Mode: m, WarmUp: true}
		if err := p.Normalize(); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "ATOMIC, READ and WRITE BW tests only") {
			t.Errorf("%v --perform_warm_up: %v", m, err)
		}
	}
}
