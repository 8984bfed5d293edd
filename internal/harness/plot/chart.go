package plot

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
)

// Errors.
var (
	ErrNoData    = errors.New("plot: no data")
	ErrBadSeries = errors.New("plot: bad series")
	ErrSize      = errors.New("plot: bad size")
)

// Size bounds.
const (
	DefaultWidth  = 800
	DefaultHeight = 500
	MinSize       = 200
	MaxSize       = 4000
)

// Series is one line: points (X[i], Y[i]) joined in the order given.
type Series struct {
	Name string
	X, Y []float64
	// Color is the line's colour; nil takes the next of Palette.
	Color color.Color
}

// Chart is a line chart. The zero value of every field but Series works.
type Chart struct {
	Title, XLabel, YLabel string
	Width, Height         int // default DefaultWidth × DefaultHeight
	Series                []Series
	// YFromZero makes the y axis start at 0 (or end at 0 when every value
	// is negative), so the eye reads sizes, not differences.
	YFromZero bool
	// LogX puts x on a log10 scale (every x must be positive): for payload
	// sizes such as 1, 4 and 64 KB.
	LogX bool
	// LogY puts y on a log10 scale (every y must be positive; YFromZero
	// is then ignored): for latencies from milliseconds to seconds.
	LogY bool
}

// Palette is the series colours, in order; they repeat past its end.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
}

var (
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black = color.RGBA{0x20, 0x20, 0x20, 0xff}
	grid  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
)

// Text scales (image pixels per font pixel).
const (
	titleScale = 3
	labelScale = 2
	tickScale  = 2
)

// SeriesColor is the colour series i is drawn in.
func (c Chart) SeriesColor(i int) color.RGBA {
	if s := c.Series[i]; s.Color != nil {
		r, g, b, a := s.Color.RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
	}
	return Palette[i%len(Palette)]
}

// axis maps data values to pixels along one direction.
type axis struct {
	lo, hi   float64 // data range, in scale units (log10 when log)
	log      bool
	p0, p1   int // pixels of lo and hi
	ticks    []float64
	decimals int
}

func (a axis) unit(v float64) float64 {
	if a.log {
		return math.Log10(v)
	}
	return v
}

func (a axis) pixel(v float64) int {
	f := (a.unit(v) - a.lo) / (a.hi - a.lo)
	return a.p0 + int(math.Round(f*float64(a.p1-a.p0)))
}

func (a axis) label(v float64) string {
	if a.log {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', a.decimals, 64)
}

// niceStep is 1, 2 or 5 × 10^k, the smallest giving at most n intervals
// over span.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// linearAxis widens [lo, hi] to nice ticks.
func linearAxis(lo, hi float64, n int) axis {
	if hi == lo {
		d := math.Max(math.Abs(lo)*0.1, 1)
		lo, hi = lo-d, hi+d
	}
	step := niceStep(hi-lo, n)
	lo = math.Floor(lo/step+1e-9) * step
	hi = math.Ceil(hi/step-1e-9) * step
	a := axis{lo: lo, hi: hi}
	for i := 0; ; i++ {
		v := lo + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		a.ticks = append(a.ticks, v)
	}
	if step < 1 {
		a.decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return a
}

// logAxis spans [lo, hi] widened to the nearest 1, 2 or 5 × 10^k, with
// ticks at those values (only at powers of ten past four decades).
func logAxis(lo, hi float64) axis {
	nice := func(k int) []float64 {
		p := math.Pow(10, float64(k))
		return []float64{p, 2 * p, 5 * p}
	}
	kLo, kHi := int(math.Floor(math.Log10(lo)+1e-9)), int(math.Floor(math.Log10(hi)+1e-9))
	var cands []float64
	for k := kLo; k <= kHi+1; k++ {
		cands = append(cands, nice(k)...)
	}
	from, to := cands[0], cands[len(cands)-1]
	for _, v := range cands {
		if v <= lo*(1+1e-9) {
			from = v
		}
	}
	for i := len(cands) - 1; i >= 0; i-- {
		if cands[i] >= hi*(1-1e-9) {
			to = cands[i]
		}
	}
	if to <= from {
		to = from * 10
	}
	a := axis{log: true, lo: math.Log10(from), hi: math.Log10(to)}
	decades := a.hi - a.lo
	for _, v := range cands {
		if v < from*(1-1e-9) || v > to*(1+1e-9) {
			continue
		}
		if decades > 4 && math.Abs(math.Log10(v)-math.Round(math.Log10(v))) > 1e-9 {
			continue
		}
		a.ticks = append(a.ticks, v)
	}
	return a
}

// validate checks the series and returns the data's ranges.
func (c Chart) validate() (xlo, xhi, ylo, yhi float64, err error) {
	if c.Width < 0 || c.Height < 0 || (c.Width != 0 && (c.Width < MinSize || c.Width > MaxSize)) || (c.Height != 0 && (c.Height < MinSize || c.Height > MaxSize)) {
		return 0, 0, 0, 0, fmt.Errorf("%w: %d×%d (each side %d to %d)", ErrSize, c.Width, c.Height, MinSize, MaxSize)
	}
	xlo, ylo = math.Inf(1), math.Inf(1)
	xhi, yhi = math.Inf(-1), math.Inf(-1)
	points := 0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, 0, 0, fmt.Errorf("%w: %q has %d x and %d y values", ErrBadSeries, s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				return 0, 0, 0, 0, fmt.Errorf("%w: %q point %d is not finite", ErrBadSeries, s.Name, i)
			}
			if (c.LogX && x <= 0) || (c.LogY && y <= 0) {
				return 0, 0, 0, 0, fmt.Errorf("%w: %q point %d: (%g, %g) on a log axis", ErrBadSeries, s.Name, i, x, y)
			}
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			ylo, yhi = math.Min(ylo, y), math.Max(yhi, y)
			points++
		}
	}
	if points == 0 {
		return 0, 0, 0, 0, ErrNoData
	}
	return xlo, xhi, ylo, yhi, nil
}

// Image draws the chart.
func (c Chart) Image() (*image.RGBA, error) {
	xlo, xhi, ylo, yhi, err := c.validate()
	if err != nil {
		return nil, err
	}
	w, h := c.Width, c.Height
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, 0, 0, w, h, white)

	var ya axis
	switch {
	case c.LogY:
		ya = logAxis(ylo, yhi)
	case c.YFromZero:
		ya = linearAxis(math.Min(ylo, 0), math.Max(yhi, 0), 6)
	default:
		ya = linearAxis(ylo, yhi, 6)
	}
	var xa axis
	if c.LogX {
		xa = logAxis(xlo, xhi)
	} else {
		xa = linearAxis(xlo, xhi, 8)
	}

	// Margins: the title above, tick labels and the axis labels left and
	// below.
	yLabelW := 0
	for _, t := range ya.ticks {
		yLabelW = max(yLabelW, textWidth(ya.label(t), tickScale))
	}
	left := 12 + yLabelW + 8
	if c.YLabel != "" {
		left += textHeight(labelScale) + 10
	}
	top := 16
	if c.Title != "" {
		top += textHeight(titleScale) + 14
	}
	bottom := 12 + textHeight(tickScale) + 10
	if c.XLabel != "" {
		bottom += textHeight(labelScale) + 10
	}
	right := 24
	plotW, plotH := w-left-right, h-top-bottom
	if plotW < 50 || plotH < 50 {
		return nil, fmt.Errorf("%w: %d×%d leaves no room to plot", ErrSize, w, h)
	}
	xa.p0, xa.p1 = left, left+plotW
	ya.p0, ya.p1 = top+plotH, top

	// Grid, axes, ticks and their labels.
	for _, t := range ya.ticks {
		py := ya.pixel(t)
		fill(img, left, py, plotW, 1, grid)
		fill(img, left-5, py, 5, 1, black)
		s := ya.label(t)
		drawText(img, left-8-textWidth(s, tickScale), py-textHeight(tickScale)/2, s, tickScale, black, false)
	}
	for _, t := range xa.ticks {
		px := xa.pixel(t)
		fill(img, px, top, 1, plotH, grid)
		fill(img, px, top+plotH, 1, 5, black)
		s := xa.label(t)
		drawText(img, px-textWidth(s, tickScale)/2, top+plotH+10, s, tickScale, black, false)
	}
	fill(img, left, top, 1, plotH+1, black)
	fill(img, left, top+plotH, plotW+1, 1, black)

	if c.Title != "" {
		drawText(img, (w-textWidth(c.Title, titleScale))/2, 14, c.Title, titleScale, black, false)
	}
	if c.XLabel != "" {
		drawText(img, left+(plotW-textWidth(c.XLabel, labelScale))/2, h-10-textHeight(labelScale), c.XLabel, labelScale, black, false)
	}
	if c.YLabel != "" {
		drawText(img, 10, top+(plotH+textWidth(c.YLabel, labelScale))/2, c.YLabel, labelScale, black, true)
	}

	// Series: lines two pixels wide, a square marker on each point.
	clip := image.Rect(left-4, top-4, left+plotW+5, top+plotH+5)
	for i, s := range c.Series {
		col := c.SeriesColor(i)
		for j := range s.X {
			x, y := xa.pixel(s.X[j]), ya.pixel(s.Y[j])
			if j > 0 {
				line(img, clip, xa.pixel(s.X[j-1]), ya.pixel(s.Y[j-1]), x, y, col)
			}
			fill(img.SubImage(clip).(*image.RGBA), x-3, y-3, 7, 7, col)
		}
	}
	c.legend(img, image.Rect(left, top, left+plotW, top+plotH))
	return img, nil
}

// line draws a 2-pixel-wide segment (Bresenham), clipped.
func line(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1 int, col color.RGBA) {
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
		for _, p := range [4]image.Point{{x0, y0}, {x0 + 1, y0}, {x0, y0 + 1}, {x0 + 1, y0 + 1}} {
			if p.In(clip) {
				img.SetRGBA(p.X, p.Y, col)
			}
		}
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

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// legend draws a box in the corner of the plot area where it hides the
// fewest series pixels (top-right, top-left, bottom-right, bottom-left on
// a tie): a coloured square and the name of each named series.
func (c Chart) legend(img *image.RGBA, area image.Rectangle) {
	var names []int
	wMax := 0
	for i, s := range c.Series {
		if s.Name != "" {
			names = append(names, i)
			wMax = max(wMax, textWidth(s.Name, labelScale))
		}
	}
	if len(names) == 0 {
		return
	}
	lineH := textHeight(labelScale) + 8
	boxW := 10 + 14 + 8 + wMax + 10
	boxH := 8 + len(names)*lineH
	corners := []image.Point{
		{area.Max.X - boxW - 8, area.Min.Y + 8}, {area.Min.X + 8, area.Min.Y + 8},
		{area.Max.X - boxW - 8, area.Max.Y - boxH - 8}, {area.Min.X + 8, area.Max.Y - boxH - 8},
	}
	best, hidden := corners[0], -1
	for _, p := range corners {
		n := 0
		for y := p.Y; y < p.Y+boxH; y++ {
			for x := p.X; x < p.X+boxW; x++ {
				if cl := img.RGBAAt(x, y); cl != white && cl != grid && cl != black {
					n++
				}
			}
		}
		if hidden < 0 || n < hidden {
			best, hidden = p, n
		}
	}
	x0, y0 := best.X, best.Y
	fill(img, x0, y0, boxW, boxH, white)
	fill(img, x0, y0, boxW, 1, black)
	fill(img, x0, y0+boxH-1, boxW, 1, black)
	fill(img, x0, y0, 1, boxH, black)
	fill(img, x0+boxW-1, y0, 1, boxH, black)
	for k, i := range names {
		y := y0 + 8 + k*lineH
		fill(img, x0+10, y, 14, textHeight(labelScale), c.SeriesColor(i))
		drawText(img, x0+10+14+8, y, c.Series[i].Name, labelScale, black, false)
	}
}

// Encode writes the chart as PNG.
func (c Chart) Encode(w io.Writer) error {
	img, err := c.Image()
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}

// WriteFile writes the chart as a PNG file.
func (c Chart) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := c.Encode(bw); err != nil {
		_ = f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
