package linktest

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Watchdog bounds a test's waits on a link: when it fires it closes the
// endpoints it guards, so a Read waiting for a frame that never comes
// returns link.ErrClosed instead of blocking the test binary forever.
// Starting it allocates; the guarded loop does not, so it also wraps
// testing.AllocsPerRun.
type Watchdog struct {
	d     time.Duration
	timer *time.Timer
	fired atomic.Bool
}

// NewWatchdog closes every c after d unless Stop is called first.
func NewWatchdog(d time.Duration, c ...io.Closer) *Watchdog {
	w := &Watchdog{d: d}
	w.timer = time.AfterFunc(d, func() {
		w.fired.Store(true)
		for _, x := range c {
			x.Close()
		}
	})
	return w
}

// Stop disarms the watchdog.
func (w *Watchdog) Stop() { w.timer.Stop() }

// Fired reports whether the watchdog closed the endpoints.
func (w *Watchdog) Fired() bool { return w.fired.Load() }

// Err describes a failed wait for want frames of which got arrived: when
// the watchdog fired it says so, since the error itself (link.ErrClosed)
// would not.
func (w *Watchdog) Err(err error, got, want int) error {
	if w.Fired() {
		return fmt.Errorf("timed out after %v with %d of %d frames received (watchdog closed the endpoint): %w", w.d, got, want, err)
	}
	return fmt.Errorf("Read after %d of %d frames: %w", got, want, err)
}
