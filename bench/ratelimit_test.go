package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The limiter's gap is the time a burst takes at the rate, in each of
// perftest's units (run_iter_bw: MB = 2^20 bytes, Gb = 10^9 bits).
func TestRateLimiterGap(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		unit  RateUnit
		size  int
		burst int
		gap   time.Duration
	}{
		{1, RateGbps, 65536, 128, 67108864 * time.Nanosecond}, // 128 × 64 KiB × 8 bits at 10^9 b/s
		{0.5, RateGbps, 2048, 1, 32768 * time.Nanosecond},
		{100, RateMBps, 65536, 16, 10 * time.Millisecond}, // 1 MiB at 100 MiB/s
		{20000, RatePPS, 4096, 128, 6400 * time.Microsecond},
		{1e12, RatePPS, 2, 1, 1}, // never a zero gap
	} {
		p := Params{RateLimit: tc.rate, RateUnits: tc.unit, BurstSize: tc.burst}
		l := newRateLimiter(&p, tc.size)
		if d := l.gap - tc.gap; d < -1 || d > 1 {
			t.Errorf("%v %v, %d B, burst %d: gap %v, want %v", tc.rate, tc.unit, tc.size, tc.burst, l.gap, tc.gap)
		}
	}
	if newRateLimiter(&Params{}, 64) != nil {
		t.Error("a limiter without a rate")
	}
}

// A burst is whole before the next one, which starts a gap after the
// previous one was due; a burst more than a gap late starts the schedule
// again rather than letting two bursts through at once.
func TestRateLimiterBursts(t *testing.T) {
	l := &rateLimiter{gap: 10 * time.Millisecond, burst: 3}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	post := func(now time.Time, want int) {
		t.Helper()
		n := 0
		for n < 10 && l.allow(now) {
			l.posted(1)
			n++
		}
		if n != want {
			t.Fatalf("at %v: %d WRs allowed, want %d", now.Sub(t0), n, want)
		}
	}
	post(at(0), 3)
	post(at(5*time.Millisecond), 0)
	post(at(10*time.Millisecond), 3)
	post(at(19*time.Millisecond), 0)
	// Late by 3 ms: the burst due at 20 ms goes now, the next one stays
	// due at 30 ms.
	post(at(23*time.Millisecond), 3)
	post(at(29*time.Millisecond), 0)
	post(at(30*time.Millisecond), 3)
	// A pause of several gaps: one burst now, the next a gap later.
	post(at(100*time.Millisecond), 3)
	post(at(105*time.Millisecond), 0)
	post(at(110*time.Millisecond), 3)
	// A burst the TX depth holds up stays open until it is whole.
	if !l.allow(at(120 * time.Millisecond)) {
		t.Fatal("burst due at 120 ms refused")
	}
	l.posted(1)
	if !l.allow(at(135*time.Millisecond)) || l.left != 2 {
		t.Fatalf("the open burst: allow refused or %d left, want 2", l.left)
	}
}

// With a rate limit the run is never faster than the limit: bursts of
// BurstSize WRs start a gap apart, so N messages take at least
// (N/BurstSize - 1) gaps whatever the machine, and a slower machine only
// adds time. The bound below allows for the first burst (sent at once).
func TestRateLimitCaps(t *testing.T) {
	const iters, size, burst = 64, 4096, 8
	for _, tc := range []struct {
		mode Mode
		unit RateUnit
		rate float64
		qps  int
	}{
		{ModeWriteBW, RateMBps, 16, 1}, // 4096 messages/s: a gap of ~2 ms
		{ModeSendBW, RatePPS, 4000, 2},
		{ModeReadBW, RateGbps, 0.1, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c, _ := loopback(t, Params{Mode: tc.mode, Iters: iters, Size: size, QPs: tc.qps,
				RateLimit: tc.rate, RateUnits: tc.unit, BurstSize: burst})
			r := c.Results[0]
			checkBW(t, r, size, iters, tc.qps)
			l := newRateLimiter(&Params{RateLimit: tc.rate, RateUnits: tc.unit, BurstSize: burst}, size)
			bursts := iters * tc.qps / burst
			if min := time.Duration(bursts-1) * l.gap; r.BW.Duration < min {
				t.Fatalf("%d messages in %v: faster than the limit allows (%d bursts a gap of %v apart take at least %v)",
					iters*tc.qps, r.BW.Duration, bursts, l.gap, min)
			}
		})
	}
}

func TestRateLimitRefusals(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Mode: ModeWriteBW, RateLimit: -1}, "non-negative"},
		{Params{Mode: ModeWriteBW, BurstSize: 4}, "rate limiter is off"},
		{Params{Mode: ModeWriteBW, RateLimit: 1, BurstSize: -1}, "--burst_size -1"},
		{Params{Mode: ModeAtomicBW, RateLimit: 1}, "non-BW, ATOMIC or bidirectional SEND"},
		{Params{Mode: ModeSendLat, RateLimit: 1}, "non-BW, ATOMIC or bidirectional SEND"},
		{Params{Mode: ModeSendBW, RateLimit: 1, Duplex: true}, "non-BW, ATOMIC or bidirectional SEND"},
		{Params{Mode: ModeWriteBW, RateLimit: 1, Infinite: true}, "run_infinitely"},
		{Params{Mode: ModeWriteBW, RateLimit: 1, RateUnits: 'k'}, "Please use M,g or p"},
	} {
		p := tc.p
		if err := p.Normalize(); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.p, err, tc.want)
		}
	}
	// Defaults: Gb/s, a burst of the TX depth; write_bw -b is allowed.
	p := Params{Mode: ModeWriteBW, RateLimit: 2, TxDepth: 32, Duplex: true}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if p.RateUnits != RateGbps || p.BurstSize != 32 {
		t.Fatalf("units %v, burst %d: want Gb/sec and the TX depth 32", p.RateUnits, p.BurstSize)
	}
	if _, err := ParseRateUnit("G"); err == nil {
		t.Error("--rate_units G accepted")
	}
}
