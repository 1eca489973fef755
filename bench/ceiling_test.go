package bench

import (
	"testing"
	"time"
)

// TestCeilingMedianOf: the ceiling becomes the median slice rate (odd and
// even counts), one stalled slice does not lower it, the whole run's
// average is kept beside it, and no rates leave the average in place.
func TestCeilingMedianOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rates  []float64
		median float64
	}{
		{"odd", []float64{3, 1, 2}, 2},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"one stall", []float64{100, 100, 10, 100, 100, 100, 100, 100, 100, 100}, 100},
	} {
		c := NewCeiling("udp-blast", 4140, 4096, 1000, 900, time.Second)
		c.MedianOf(tc.rates)
		if c.PacketsPerSec != tc.median || c.PayloadBytesPerSec != tc.median*4096 {
			t.Errorf("%s: %v packets/s, %v B/s; want %v", tc.name, c.PacketsPerSec, c.PayloadBytesPerSec, tc.median)
		}
		if c.AveragePacketsPerSec != 900 || c.Slices != len(tc.rates) {
			t.Errorf("%s: average %v over %d slices; want 900 over %d", tc.name, c.AveragePacketsPerSec, c.Slices, len(tc.rates))
		}
	}
	c := NewCeiling("udp-blast", 4140, 4096, 1000, 900, time.Second)
	c.MedianOf(nil)
	if c.PacketsPerSec != 900 || c.Slices != 0 || c.AveragePacketsPerSec != 0 {
		t.Errorf("no rates: %+v", c)
	}
}

// TestBestCeiling: the faster blast is the ceiling, either order, with
// both figures kept in running order.
func TestBestCeiling(t *testing.T) {
	slow := NewCeiling("udp-blast", 4140, 4096, 100, 100, time.Second)
	fast := NewCeiling("udp-blast", 4140, 4096, 300, 300, time.Second)
	for _, tc := range []struct{ a, b *Ceiling }{{slow, fast}, {fast, slow}} {
		c := BestCeiling(tc.a, tc.b)
		if c.PacketsPerSec != 300 || c.Delivered != 300 {
			t.Errorf("best of %v and %v: %+v", tc.a.PacketsPerSec, tc.b.PacketsPerSec, c)
		}
		if len(c.Blasts) != 2 || c.Blasts[0] != tc.a.PayloadBytesPerSec || c.Blasts[1] != tc.b.PayloadBytesPerSec {
			t.Errorf("blasts %v", c.Blasts)
		}
	}
	if slow.Blasts != nil || fast.Blasts != nil {
		t.Error("BestCeiling changed its arguments")
	}
}
