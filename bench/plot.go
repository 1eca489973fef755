package bench

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"math/bits"
	"strings"
	"time"
)

// Chart is a line chart over message sizes: x is log2 of the size, y is
// linear from 0. Plot builds one from a report; WriteSVG and WritePNG draw
// it (stdlib only: SVG by hand, PNG rasterized with a built-in 5x7 font).
type Chart struct {
	Title, YLabel string
	// LogY draws y on a log10 scale (latency charts, whose tails span
	// decades).
	LogY   bool
	Series []Series
}

// Series is one line.
type Series struct {
	Name  string
	Color color.RGBA
	Sizes []int
	Y     []float64
}

var palette = []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}}

// Plot returns the chart of r: bandwidth (average and peak) against size
// for bandwidth tests, latency percentiles against size for latency tests.
func Plot(r *Report) (*Chart, error) {
	var res []Result
	for _, x := range r.Results {
		if !x.Passive {
			res = append(res, x)
		}
	}
	if len(res) == 0 {
		return nil, errors.New("bench: nothing to plot")
	}
	p := &r.Params
	c := &Chart{}
	add := func(name string, f func(Result) (int, float64)) {
		s := Series{Name: name, Color: palette[len(c.Series)%len(palette)]}
		for _, x := range res {
			size, y := f(x)
			s.Sizes, s.Y = append(s.Sizes, size), append(s.Y, y)
		}
		c.Series = append(c.Series, s)
	}
	if p.Mode.IsBW() {
		c.Title = fmt.Sprintf("goroce %s, %d QP, MTU %d: bandwidth", p.Mode, p.QPs, r.MTU.Bytes())
		c.YLabel = "MB/sec"
		add("average", func(x Result) (int, float64) { return x.BW.Size, x.BW.BytesPerSec / (1 << 20) })
		add("peak", func(x Result) (int, float64) { return x.BW.Size, x.BW.PeakBytesPerSec / (1 << 20) })
	} else {
		kind := "one-way"
		if p.Mode.isRead() {
			kind = "round trip"
		}
		c.Title = fmt.Sprintf("goroce %s, MTU %d: latency (%s)", p.Mode, r.MTU.Bytes(), kind)
		c.YLabel = "usec (log scale)"
		c.LogY = true
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		add("min", func(x Result) (int, float64) { return x.Lat.Size, us(x.Lat.Min) })
		add("p50", func(x Result) (int, float64) { return x.Lat.Size, us(x.Lat.Typical) })
		add("p99", func(x Result) (int, float64) { return x.Lat.Size, us(x.Lat.P99) })
		add("p99.9", func(x Result) (int, float64) { return x.Lat.Size, us(x.Lat.P999) })
	}
	return c, nil
}

// Geometry of both renderings.
const (
	plotW, plotH                    = 900, 540
	marginL, marginR, marginT, marB = 90, 150, 64, 70
)

type axes struct {
	x0, x1 int     // log2 range
	ymax   float64 // nice maximum
	ystep  float64
	logY   bool
	l0, l1 int // log10 range of y when logY
}

// yTicks returns the y values of the grid lines.
func (a axes) yTicks() []float64 {
	var t []float64
	if a.logY {
		for l := a.l0; l <= a.l1; l++ {
			t = append(t, math.Pow(10, float64(l)))
		}
		return t
	}
	for y := 0.0; y <= a.ymax+a.ystep/2; y += a.ystep {
		t = append(t, y)
	}
	return t
}

func (c *Chart) axes() axes {
	a := axes{x0: 64, x1: 0, logY: c.LogY}
	ymax, ymin := 0.0, math.Inf(1)
	for _, s := range c.Series {
		for i, n := range s.Sizes {
			l := log2(n)
			a.x0, a.x1 = min(a.x0, l), max(a.x1, l)
			if !math.IsNaN(s.Y[i]) && !math.IsInf(s.Y[i], 0) {
				ymax = max(ymax, s.Y[i])
				if s.Y[i] > 0 {
					ymin = min(ymin, s.Y[i])
				}
			}
		}
	}
	if a.logY {
		if math.IsInf(ymin, 1) {
			ymin, ymax = 1, 10
		}
		a.l0, a.l1 = int(math.Floor(math.Log10(ymin))), int(math.Ceil(math.Log10(ymax)))
		if a.l1 <= a.l0 {
			a.l1 = a.l0 + 1
		}
	}
	if a.x1 <= a.x0 {
		a.x0, a.x1 = a.x0-1, a.x0+1
	}
	if ymax <= 0 {
		ymax = 1
	}
	// Nice step: 1, 2 or 5 x 10^k giving at most 6 intervals.
	raw := ymax / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			a.ystep = m * mag
			break
		}
	}
	a.ymax = math.Ceil(ymax/a.ystep) * a.ystep
	return a
}

func log2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n)) - 1
}

func (a axes) px(l float64) float64 {
	return marginL + (l-float64(a.x0))/float64(a.x1-a.x0)*float64(plotW-marginL-marginR)
}

func (a axes) py(y float64) float64 {
	h := float64(plotH - marginT - marB)
	if a.logY {
		if y <= 0 {
			y = math.Pow(10, float64(a.l0))
		}
		return float64(plotH-marB) - (math.Log10(y)-float64(a.l0))/float64(a.l1-a.l0)*h
	}
	return float64(plotH-marB) - y/a.ymax*h
}

// sizeLabel prints 2, 512, 1K, 64K, 8M.
func sizeLabel(l int) string {
	switch {
	case l >= 20:
		return fmt.Sprintf("%dM", 1<<(l-20))
	case l >= 10:
		return fmt.Sprintf("%dK", 1<<(l-10))
	}
	return fmt.Sprint(1 << l)
}

func yLabel(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// xTickStep labels every step-th power of two so labels do not collide.
func (a axes) xTickStep() int { return max(1, (a.x1-a.x0+11)/12) }

// WriteSVG draws the chart as a standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	a := c.axes()
	var b strings.Builder
	esc := func(s string) string {
		return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
	}
	hex := func(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", marginL, esc(c.Title))
	bottom, right := plotH-marB, plotW-marginR
	for _, y := range a.yTicks() {
		py := a.py(y)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`+"\n", marginL, py, right, py)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL-8, py+4, yLabel(y))
	}
	for l := a.x0; l <= a.x1; l += a.xTickStep() {
		px := a.px(float64(l))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n", px, marginT, px, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, bottom+20, sizeLabel(l))
	}
	fmt.Fprintf(&b, `<polyline points="%d,%d %d,%d %d,%d" fill="none" stroke="black" stroke-width="1.5"/>`+"\n",
		marginL, marginT, marginL, bottom, right, bottom)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">message size [bytes, log2 scale]</text>`+"\n", (marginL+right)/2, plotH-20)
	fmt.Fprintf(&b, `<text x="20" y="%d" text-anchor="middle" transform="rotate(-90 20 %d)">%s</text>`+"\n", (marginT+bottom)/2, (marginT+bottom)/2, esc(c.YLabel))
	for i, s := range c.Series {
		var pts []string
		for j, n := range s.Sizes {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", a.px(float64(log2(n))), a.py(s.Y[j])))
		}
		col := hex(s.Color)
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		for _, pt := range pts {
			xy := strings.Split(pt, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], col)
		}
		ly := marginT + 10 + 22*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", right+15, ly, right+40, ly, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", right+48, ly+4, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePNG rasterizes the same chart: grid, axes, lines, markers and
// labels in a built-in 5x7 font drawn at twice its size.
func (c *Chart) WritePNG(w io.Writer) error {
	a := c.axes()
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	white, black, grid := color.RGBA{0xff, 0xff, 0xff, 0xff}, color.RGBA{0, 0, 0, 0xff}, color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	_ = white
	bottom, right := plotH-marB, plotW-marginR
	drawText(img, marginL, 10, c.Title, black, 2)
	for _, y := range a.yTicks() {
		py := int(math.Round(a.py(y)))
		line(img, marginL, py, right, py, grid, 1)
		l := yLabel(y)
		drawText(img, marginL-8-textWidth(l, 2), py-7, l, black, 2)
	}
	for l := a.x0; l <= a.x1; l += a.xTickStep() {
		px := int(math.Round(a.px(float64(l))))
		line(img, px, marginT, px, bottom, grid, 1)
		s := sizeLabel(l)
		drawText(img, px-textWidth(s, 2)/2, bottom+10, s, black, 2)
	}
	line(img, marginL, marginT, marginL, bottom, black, 2)
	line(img, marginL, bottom, right, bottom, black, 2)
	xl := "MESSAGE SIZE [BYTES, LOG2 SCALE]"
	drawText(img, (marginL+right-textWidth(xl, 2))/2, plotH-30, xl, black, 2)
	drawText(img, 6, marginT-30, c.YLabel, black, 2)
	for i, s := range c.Series {
		var px, py int
		for j, n := range s.Sizes {
			x, y := int(math.Round(a.px(float64(log2(n))))), int(math.Round(a.py(s.Y[j])))
			if j > 0 {
				line(img, px, py, x, y, s.Color, 2)
			}
			fillRect(img, x-3, y-3, 7, 7, s.Color)
			px, py = x, y
		}
		ly := marginT + 10 + 24*i
		line(img, right+15, ly, right+40, ly, s.Color, 3)
		drawText(img, right+48, ly-7, s.Name, black, 2)
	}
	return png.Encode(w, img)
}

func fillRect(img *image.RGBA, x, y, w, h int, c color.RGBA) {
	for j := y; j < y+h; j++ {
		for i := x; i < x+w; i++ {
			if image.Pt(i, j).In(img.Rect) {
				img.SetRGBA(i, j, c)
			}
		}
	}
}

// line draws a segment of the given thickness (Bresenham with square pens).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, th int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fillRect(img, x0-th/2, y0-th/2, th, th, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func textWidth(s string, scale int) int { return len(s) * 6 * scale }

// drawText draws s (upper-cased) with the 5x7 font; unknown runes are blank.
func drawText(img *image.RGBA, x, y int, s string, c color.RGBA, scale int) {
	for i, r := range strings.ToUpper(s) {
		g, ok := font5x7[r]
		if !ok {
			continue
		}
		for row, bitsRow := range g {
			for col := 0; col < 5; col++ {
				if bitsRow[col] == '#' {
					fillRect(img, x+i*6*scale+col*scale, y+row*scale, scale, scale, c)
				}
			}
		}
	}
}

var font5x7 = map[rune][7]string{
	'A': {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"},
	'B': {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."},
	'C': {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."},
	'D': {"####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."},
	'E': {"#####", "#....", "#....", "####.", "#....", "#....", "#####"},
	'F': {"#####", "#....", "#....", "####.", "#....", "#....", "#...."},
	'G': {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"},
	'H': {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"},
	'I': {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'J': {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."},
	'K': {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"},
	'L': {"#....", "#....", "#....", "#....", "#....", "#....", "#####"},
	'M': {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"},
	'N': {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"},
	'O': {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."},
	'P': {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."},
	'Q': {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"},
	'R': {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"},
	'S': {".####", "#....", "#....", ".###.", "....#", "....#", "####."},
	'T': {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."},
	'U': {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."},
	'V': {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."},
	'W': {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."},
	'X': {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"},
	'Y': {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."},
	'Z': {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"},
	'0': {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."},
	'1': {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'2': {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"},
	'3': {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."},
	'4': {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."},
	'5': {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."},
	'6': {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."},
	'7': {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."},
	'8': {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."},
	'9': {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."},
	'.': {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."},
	',': {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."},
	'/': {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."},
	'[': {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."},
	']': {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."},
	'(': {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."},
	')': {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."},
	'%': {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"},
	'-': {".....", ".....", ".....", "#####", ".....", ".....", "....."},
	'_': {".....", ".....", ".....", ".....", ".....", ".....", "#####"},
	':': {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."},
	'=': {".....", ".....", "#####", ".....", "#####", ".....", "....."},
}
