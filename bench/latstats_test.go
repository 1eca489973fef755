package bench

import (
	"math"
	"testing"
	"time"
)

// latStats follows perftest's print_report_lat: the two largest samples
// left out, the median of an even count the mean of the middle two, t_max
// the sample at the kept count's index, percentiles at ceil(count * p).
func TestLatStatsAsPerftest(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x * 1e3)
		}
		return d
	}
	for _, c := range []struct {
		name                                 string
		in                                   []time.Duration
		min, typ, avg, max, p99, p999, stdev float64 // usec
	}{
		// 8 kept of 10: median (4+5)/2, avg 4.5, max s[8] = 9.
		{"even", us(10, 3, 7, 1, 9, 5, 2, 8, 4, 6), 1, 4.5, 4.5, 9, 9, 9, math.Sqrt(42.0 / 8)},
		// 5 kept of 7: median s[2] = 3, max s[5] = 6.
		{"odd", us(7, 6, 5, 4, 3, 2, 1), 1, 3, 3, 6, 6, 6, math.Sqrt(2)},
		// Too few to trim: all kept.
		{"two", us(2, 4), 2, 3, 3, 4, 4, 4, 1},
		{"one", us(5), 5, 5, 5, 5, 5, 5, 0},
	} {
		r := latStats("SEND", 2, c.in)
		got := []time.Duration{r.Min, r.Typical, r.Avg, r.Max, r.P99, r.P999}
		want := us(c.min, c.typ, c.avg, c.max, c.p99, c.p999)
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: field %d (min, typical, avg, max, p99, p99.9) = %v, want %v", c.name, i, got[i], want[i])
			}
		}
		if d := float64(r.Stdev)/1e3 - c.stdev; math.Abs(d) > 1e-3 {
			t.Errorf("%s: stdev %v, want %.4f us", c.name, r.Stdev, c.stdev)
		}
		if r.Iters != len(c.in) {
			t.Errorf("%s: %d iterations, want %d", c.name, r.Iters, len(c.in))
		}
	}
	// 1000 samples 1..1000 us: 998 kept; p99 = s[ceil(988.02)] = 990 us,
	// p99.9 = s[ceil(997.002)] = 999 us.
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(1000-i) * time.Microsecond
	}
	r := latStats("SEND", 2, s)
	if r.P99 != 990*time.Microsecond || r.P999 != 999*time.Microsecond || r.Max != 999*time.Microsecond || r.Typical != 499500*time.Nanosecond {
		t.Errorf("1..1000: p99 %v p99.9 %v max %v typical %v", r.P99, r.P999, r.Max, r.Typical)
	}
}
