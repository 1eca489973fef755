package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
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

// TestMessageShape: the packets IBA makes of one message, as UDP payload
// sizes (BTH 12, RETH 16, AETH 4, DETH 8, ICRC 4; payload padded to 4).
func TestMessageShape(t *testing.T) {
	rep := func(n, v int) []int { return slices.Repeat([]int{v}, n) }
	cat := func(ss ...[]int) []int { return slices.Concat(ss...) }
	for _, tc := range []struct {
		name string
		mode Mode
		conn hca.QPType
		size int
		mtu  bth.MTU
		want []int
		ok   bool
	}{
		{"write 64 KiB", ModeWriteBW, hca.RC, 65536, bth.MTU4096, cat([]int{4128}, rep(15, 4112)), true},
		{"write 64 KiB UC", ModeWriteBW, hca.UC, 65536, bth.MTU4096, cat([]int{4128}, rep(15, 4112)), true},
		{"write 1 MTU", ModeWriteBW, hca.RC, 4096, bth.MTU4096, []int{4128}, true},
		{"write 2 B", ModeWriteBW, hca.RC, 2, bth.MTU4096, []int{36}, true},
		{"write 0 B", ModeWriteBW, hca.RC, 0, bth.MTU4096, []int{32}, true},
		{"write 5000 B at 1024", ModeWriteBW, hca.RC, 5000, bth.MTU1024, cat([]int{1056}, rep(3, 1040), []int{12 + 904 + 4}), true},
		{"send 64 KiB", ModeSendBW, hca.RC, 65536, bth.MTU4096, rep(16, 4112), true},
		{"send 3 B", ModeSendBW, hca.RC, 3, bth.MTU4096, []int{20}, true},
		{"send UD", ModeSendBW, hca.UD, 4096, bth.MTU4096, []int{4120}, true},
		{"send UD over the MTU", ModeSendBW, hca.UD, 4097, bth.MTU4096, nil, false},
		{"read 64 KiB", ModeReadBW, hca.RC, 65536, bth.MTU4096, cat([]int{4116}, rep(14, 4112), []int{4116}), true},
		{"read 1 MTU", ModeReadBW, hca.RC, 4096, bth.MTU4096, []int{4116}, true},
		{"atomic", ModeAtomicBW, hca.RC, 8, bth.MTU4096, nil, false},
		{"bad MTU", ModeWriteBW, hca.RC, 65536, bth.MTU(9), nil, false},
	} {
		got, ok := MessageShape(tc.mode, tc.conn, tc.size, tc.mtu)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestShapeString(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		want  string
	}{
		{[]int{4128, 4112, 4112}, "4128 + 2 x 4112 B"},
		{[]int{36}, "36 B"},
		{[]int{4116, 4112, 4112, 4116}, "4116 + 2 x 4112 + 4116 B"},
	} {
		if got := shapeString(tc.shape); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.shape, got, tc.want)
		}
	}
}

// TestRatiosShaped: every ratio is taken from the best size's bandwidth,
// and the shaped ceiling's lines and fields appear only when it ran.
func TestRatiosShaped(t *testing.T) {
	r := &Report{Params: Params{Mode: ModeWriteBW, Conn: hca.RC, QPs: 1}, MTU: bth.MTU4096}
	r.Results = []Result{{BW: BWResult{Size: 4096, BytesPerSec: 100}}, {BW: BWResult{Size: 65536, BytesPerSec: 300}}}
	r.Ceiling = NewCeiling("udp-blast", 4140, 4096, 1000, 1000, time.Second)               // 4 096 000 B/s
	r.ShapedCeiling = NewCeiling("udp-blast-shaped", 65808+56, 65536, 40, 40, time.Second) // 2 621 440 B/s
	r.ShapedCeiling.MessageShape = []int{4128, 4112}
	r.Ratios()
	if r.BestSize() != 65536 || r.CeilingRatio != 300.0/4096000 || r.ShapedCeilingRatio != 300.0/2621440 {
		t.Fatalf("best size %d, ratios %v %v", r.BestSize(), r.CeilingRatio, r.ShapedCeilingRatio)
	}
	j := ToJSON(r)
	if j.ShapedCeilingRatio == nil || *j.ShapedCeilingRatio != r.ShapedCeilingRatio || j.ShapedOfRaw == nil || *j.ShapedOfRaw != 2621440.0/4096000 {
		t.Fatalf("JSON %v %v", j.ShapedCeilingRatio, j.ShapedOfRaw)
	}
	var b strings.Builder
	PrintFooter(&b, r)
	for _, want := range []string{"Shaped UDP ceiling", "4128 + 4112 B", "shaped / raw UDP ceiling: 0.640", "goroce / shaped UDP ceiling: 0.000"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	r.ShapedCeiling = nil
	b.Reset()
	PrintFooter(&b, r)
	if strings.Contains(b.String(), "haped") || ToJSON(r).ShapedCeilingRatio != nil {
		t.Errorf("a shaped ceiling that did not run is reported:\n%s", b.String())
	}
}
