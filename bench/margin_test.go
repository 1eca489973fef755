package bench

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestMarginDefaults: perftest's -f default is a quarter of -D in whole
// seconds; two margins must leave something to measure.
func TestMarginDefaults(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		dur, margin, want time.Duration
		infinite          bool
	}{
		{dur: 3 * s, want: 0},
		{dur: 4 * s, want: s},
		{dur: 7 * s, want: s},
		{dur: 10 * s, want: 2 * s},
		{dur: 10 * s, margin: 4 * s, want: 4 * s},
		{dur: 0, margin: 2 * s, want: 0}, // -n runs have no margins
		{dur: 10 * s, infinite: true, want: 0},
	} {
		p := Params{Mode: ModeWriteBW, Duration: tc.dur, Margin: tc.margin, Infinite: tc.infinite}
		if err := p.Normalize(); err != nil || p.Margin != tc.want {
			t.Errorf("-D %v -f %v (infinite %v): margin %v, %v; want %v", tc.dur, tc.margin, tc.infinite, p.Margin, err, tc.want)
		}
	}
	for _, p := range []Params{
		{Mode: ModeWriteBW, Duration: 4 * s, Margin: 2 * s},
		{Mode: ModeSendLat, Duration: 5 * s, Margin: 3 * s},
		{Mode: ModeWriteBW, Duration: 5 * s, Margin: -s},
	} {
		if err := p.Normalize(); !errors.Is(err, ErrParams) {
			t.Errorf("-D %v -f %v: %v, want ErrParams", p.Duration, p.Margin, err)
		}
	}
}

// TestSampledWindow: a Duration run's result counts the completions
// between the samples at its margins, over the time between them.
func TestSampledWindow(t *testing.T) {
	ms := time.Millisecond
	ss := []sample{{100 * ms, 10}, {900 * ms, 90}, {1100 * ms, 120}, {2000 * ms, 200}, {2950 * ms, 300}, {3100 * ms, 310}, {4000 * ms, 400}}
	s := &Session{p: Params{Duration: 4000 * ms, Margin: time.Second}, samples: ss}
	// Window [1 s, 3 s]: the last samples at or before its edges are
	// (900 ms, 90) and (2950 ms, 300).
	if done, el := s.sampled(400, 4000*ms); done != 210 || el != 2050*ms {
		t.Fatalf("sampled = %d messages in %v, want 210 in 2.05s", done, el)
	}
	s.p.Margin = 0
	if done, el := s.sampled(400, 4000*ms); done != 400 || el != 4000*ms {
		t.Fatalf("no margin: %d in %v, want the whole run", done, el)
	}
	s.p.Margin, s.samples = time.Second, nil
	if done, el := s.sampled(5, 4000*ms); done != 5 || el != 4000*ms {
		t.Fatalf("no samples: %d in %v, want the whole run", done, el)
	}
}

// TestMarginWindowLatency: a latency Duration run keeps the samples taken
// between its margins.
func TestMarginWindowLatency(t *testing.T) {
	const margin, dur = 10, 40 // time units: ms
	w := marginWindow{lo: -1, hi: -1}
	var lat []time.Duration
	for i := range 50 { // one sample per ms, the i-th at i ms
		lat = append(lat, time.Duration(i))
		w.note(time.Duration(i)*time.Millisecond, len(lat), margin*time.Millisecond, dur*time.Millisecond)
	}
	got := w.cut(lat)
	want := lat[margin : dur-margin]
	if !slices.Equal(got, want) {
		t.Fatalf("window %v, want samples %d..%d", got, margin, dur-margin-1)
	}
	short := marginWindow{lo: -1, hi: -1}
	short.note(time.Millisecond, 1, margin*time.Millisecond, dur*time.Millisecond)
	if got := short.cut(lat[:1]); len(got) != 1 {
		t.Fatalf("a run that ended inside the first margin keeps its %d samples, want 1", len(got))
	}
}
