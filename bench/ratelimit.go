package bench

import (
	"fmt"
	"time"
)

// RateUnit is the unit of Params.RateLimit: perftest's --rate_units.
type RateUnit byte

const (
	RateGbps RateUnit = 'g' // Gb/s, 10^9 bits of payload (perftest's default)
	RateMBps RateUnit = 'M' // MB/s, 2^20 bytes of payload
	RatePPS  RateUnit = 'p' // messages per second
)

// ParseRateUnit reads perftest's --rate_units: M, g or p.
func ParseRateUnit(s string) (RateUnit, error) {
	switch s {
	case "M", "g", "p":
		return RateUnit(s[0]), nil
	}
	return 0, fmt.Errorf("%w: --rate_units %q: Invalid rate limit units. Please use M,g or p", ErrParams, s)
}

func (u RateUnit) String() string {
	switch u {
	case RateMBps:
		return "MB/sec"
	case RatePPS:
		return "msg/sec"
	}
	return "Gb/sec"
}

// rateLimiter is perftest's SW rate limiter (run_iter_bw): the sender
// posts at most burst WRs, counted over all its QPs, in each gap, where
// gap is the time burst messages take at the rate. A burst that the TX
// depth holds up stays open until it is whole. Bursts are scheduled a gap
// apart (perftest restarts the gap when it notices the deadline, which
// lets the rate sag by its polling delay); one that starts more than a
// gap late restarts the schedule, so the rate stays a ceiling: a slow
// peer is never made up for with a flood.
type rateLimiter struct {
	gap   time.Duration
	burst int
	next  time.Time // when the next burst may start
	left  int       // WRs still allowed in the current burst
}

// newRateLimiter returns the limiter of p's rate for messages of size
// bytes, or nil without a rate limit.
func newRateLimiter(p *Params, size int) *rateLimiter {
	if p.RateLimit <= 0 {
		return nil
	}
	var pps float64 // messages per second
	switch p.RateUnits {
	case RateMBps:
		pps = p.RateLimit * (1 << 20) / float64(size)
	case RatePPS:
		pps = p.RateLimit
	default:
		pps = p.RateLimit * 1e9 / (8 * float64(size))
	}
	gap := time.Duration(float64(p.BurstSize) / pps * float64(time.Second))
	return &rateLimiter{gap: max(gap, 1), burst: p.BurstSize}
}

// allow reports whether a WR may be posted at now, starting a burst when
// the previous one is whole and its gap has passed.
func (l *rateLimiter) allow(now time.Time) bool {
	if l.left > 0 {
		return true
	}
	if now.Before(l.next) {
		return false
	}
	if l.next.IsZero() || now.Sub(l.next) > l.gap {
		// The first burst, or one after a pause (a poll that waited on
		// the peer): a gap from now, not a run of bursts to catch up.
		l.next = now
	}
	l.next = l.next.Add(l.gap)
	l.left = l.burst
	return true
}

// posted counts n WRs against the current burst.
func (l *rateLimiter) posted(n int) { l.left = max(l.left-n, 0) }
