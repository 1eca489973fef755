package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// setStalls sets rcStall and drainWait for one test.
func setStalls(t *testing.T, stall, drain time.Duration) {
	t.Helper()
	oldStall, oldDrain := rcStall, drainWait
	rcStall, drainWait = stall, drain
	t.Cleanup(func() { rcStall, drainWait = oldStall, oldDrain })
}

// A peer that goes away in the middle of an RC run never fails the WRs
// (perftest's retry count 7 retries forever, as rxe's does). A timed run
// still ends on time and says what it left outstanding; a counted run
// gives up once nothing has completed for rcStall. Neither waits for
// good, as both did before.
func TestRCRunPeerGone(t *testing.T) {
	for _, tc := range []struct {
		name         string
		p            Params
		stall, drain time.Duration
		want         string
	}{
		{"timed write_bw", Params{Mode: ModeWriteBW, Duration: 400 * time.Millisecond, Size: 65536},
			time.Hour, 300 * time.Millisecond, "after the stop"},
		{"counted write_bw", Params{Mode: ModeWriteBW, Iters: 1 << 30, Size: 65536},
			300 * time.Millisecond, time.Hour, "no completion for 300ms"},
		{"counted read_bw", Params{Mode: ModeReadBW, Iters: 1 << 30, Size: 65536},
			300 * time.Millisecond, time.Hour, "no completion for 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setStalls(t, tc.stall, tc.drain)
			da, db := memPair(t)
			cli, srv := connected(t, da, db, tc.p)
			if err := cli.Ready(tc.p.Size); err != nil {
				t.Fatal(err)
			}
			if err := srv.Ready(tc.p.Size); err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			time.AfterFunc(100*time.Millisecond, func() {
				srv.Close() // its QPs go: nothing answers
				close(closed)
			})
			_, err := cli.Run(testCtx(t), tc.p.Size)
			<-closed // before the cleanup's Close
			if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run after the peer went: %v, want ErrStalled saying %q", err, tc.want)
			}
		})
	}
}

// A timed latency run whose peer is gone (its QP destroyed: nothing
// acknowledges) ends drainWait after its end with ErrStalled, as a timed
// bandwidth run does, not after rcStall: the last SEND or WRITE, or the
// READ under way, never completes. The side that posts first runs.
func TestLatencyTimedPeerGone(t *testing.T) {
	setStalls(t, time.Hour, 300*time.Millisecond)
	for _, m := range []Mode{ModeSendLat, ModeWriteLat, ModeReadLat} {
		t.Run(m.String(), func(t *testing.T) {
			p := Params{Mode: m, Duration: 400 * time.Millisecond, Size: 2}
			da, db := memPair(t)
			cli, srv := connected(t, da, db, p)
			run, gone := cli, srv
			if m == ModeWriteLat { // ib_write_lat's server writes first
				run, gone = srv, cli
			}
			if err := run.Ready(2); err != nil {
				t.Fatal(err)
			}
			gone.Close()
			_, err := run.Run(testCtx(t), 2)
			if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "after the end") {
				t.Fatalf("timed %v after the peer went: %v, want ErrStalled saying \"after the end\"", m, err)
			}
		})
	}
}

// A send_lat client whose server stops answering (its messages are still
// acknowledged by the server's HCA, the answers never come) gives up after
// rcStall.
func TestLatencyPeerStops(t *testing.T) {
	setStalls(t, 300*time.Millisecond, time.Hour)
	p := Params{Mode: ModeSendLat, Iters: 1 << 30, Size: 2}
	da, db := memPair(t)
	cli, srv := connected(t, da, db, p)
	for _, s := range []*Session{cli, srv} {
		if err := s.Ready(2); err != nil {
			t.Fatal(err)
		}
	}
	sctx, stop := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := srv.Run(sctx, 2)
		done <- err
	}()
	time.AfterFunc(100*time.Millisecond, stop)
	_, err := cli.Run(testCtx(t), 2)
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("send_lat after the server stopped: %v, want ErrStalled", err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("server: %v, want context.Canceled", err)
	}
}

// A run that makes progress is never cut short by the watch: a timed run
// four times longer than rcStall completes.
func TestRCStallWatchSparesProgress(t *testing.T) {
	setStalls(t, 300*time.Millisecond, 300*time.Millisecond)
	p := Params{Mode: ModeWriteBW, Duration: 4 * rcStall, Size: 4096}
	da, db := memPair(t)
	cli, srv := connected(t, da, db, p)
	if err := cli.Ready(4096); err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(4096); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Run(testCtx(t), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if r.BW.Iters == 0 {
		t.Fatalf("no messages: %+v", r.BW)
	}
}
