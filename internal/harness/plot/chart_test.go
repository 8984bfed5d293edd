package plot_test

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/plot"
)

func latencyChart() plot.Chart {
	rates := []float64{10, 20, 50, 100, 200}
	return plot.Chart{
		Title: "Intake latency by offered rate", XLabel: "offered rate (deliveries/s)", YLabel: "latency (ms)", YFromZero: true,
		Series: []plot.Series{
			{Name: "p50", X: rates, Y: []float64{3.1, 3.4, 4.0, 6.2, 11.5}},
			{Name: "p95", X: rates, Y: []float64{5.0, 6.1, 8.8, 15.2, 40.3}},
			{Name: "p99", X: rates, Y: []float64{7.2, 9.9, 14.1, 30.8, 95.0}},
		},
	}
}

func decode(t *testing.T, c plot.Chart) (image.Image, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	return img, buf.Bytes()
}

func count(img image.Image, want color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bl>>8) == want.B && uint8(a>>8) == want.A {
				n++
			}
		}
	}
	return n
}

func TestChartDrawsEverySeries(t *testing.T) {
	c := latencyChart()
	img, _ := decode(t, c)
	if b := img.Bounds(); b.Dx() != plot.DefaultWidth || b.Dy() != plot.DefaultHeight {
		t.Fatalf("size %v", b)
	}
	for i, s := range c.Series {
		// Lines two pixels wide, seven-pixel markers and a legend swatch:
		// hundreds of pixels each.
		if n := count(img, c.SeriesColor(i)); n < 300 {
			t.Errorf("series %s: %d pixels of its colour", s.Name, n)
		}
	}
	// Text and axes are drawn in near-black.
	if n := count(img, color.RGBA{0x20, 0x20, 0x20, 0xff}); n < 1000 {
		t.Errorf("axes and labels: %d dark pixels", n)
	}
}

func TestChartPointsLandWhereTheyBelong(t *testing.T) {
	// One series rising from the bottom-left to the top-right corner of
	// the plot: its colour appears in the lower-left and upper-right
	// quarters and not in the upper-left one.
	red := color.RGBA{0xff, 0, 0, 0xff}
	c := plot.Chart{Width: 400, Height: 400, Series: []plot.Series{{X: []float64{0, 10}, Y: []float64{0, 10}, Color: red}}}
	img, _ := decode(t, c)
	quarter := func(x0, y0 int) int {
		return count(img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(image.Rect(x0, y0, x0+200, y0+200)), red)
	}
	if quarter(0, 200) == 0 || quarter(200, 0) == 0 || quarter(0, 0) != 0 {
		t.Fatalf("red pixels: upper-left %d, lower-left %d, upper-right %d", quarter(0, 0), quarter(0, 200), quarter(200, 0))
	}
}

func TestChartIsDeterministic(t *testing.T) {
	_, a := decode(t, latencyChart())
	_, b := decode(t, latencyChart())
	if !bytes.Equal(a, b) {
		t.Fatal("same chart, different bytes")
	}
	other := latencyChart()
	other.Series[2].Y[4] = 50
	if _, c := decode(t, other); bytes.Equal(a, c) {
		t.Fatal("different data, same bytes")
	}
}

func TestChartLogY(t *testing.T) {
	// Latencies from 3 ms to 4 s: on a log scale the low ones are as far
	// apart as the high ones, so the series' colour reaches the bottom
	// quarter of the image.
	c := latencyChart()
	c.LogY = true
	c.Series[0].Y = []float64{3, 3.5, 150, 2100, 4000}
	img, _ := decode(t, c)
	low := img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(0, plot.DefaultHeight*3/4, plot.DefaultWidth, plot.DefaultHeight))
	if count(low, c.SeriesColor(0)) == 0 {
		t.Fatal("low latencies not drawn near the bottom")
	}
}

func TestChartLogXAndSize(t *testing.T) {
	c := plot.Chart{Title: "write units per event", XLabel: "payload (KB)", YLabel: "WCU", LogX: true, YFromZero: true, Width: 640, Height: 360,
		Series: []plot.Series{{Name: "processed event", X: []float64{1, 4, 64}, Y: []float64{7, 10, 140}}}}
	img, _ := decode(t, c)
	if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 360 {
		t.Fatalf("size %v", b)
	}
	if count(img, c.SeriesColor(0)) < 200 {
		t.Fatal("series not drawn")
	}
	path := filepath.Join(t.TempDir(), "wcu.png")
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if f, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(f, []byte("\x89PNG")) {
		t.Fatalf("file: %v", err)
	}
}

func TestChartRefusesBadInput(t *testing.T) {
	for name, c := range map[string]plot.Chart{
		"no series":    {},
		"empty series": {Series: []plot.Series{{Name: "a"}}},
		"lengths":      {Series: []plot.Series{{X: []float64{1, 2}, Y: []float64{1}}}},
		"nan":          {Series: []plot.Series{{X: []float64{1}, Y: []float64{math.NaN()}}}},
		"log of zero":  {LogX: true, Series: []plot.Series{{X: []float64{0, 1}, Y: []float64{1, 2}}}},
		"log y of -1":  {LogY: true, Series: []plot.Series{{X: []float64{0, 1}, Y: []float64{-1, 2}}}},
		"too small":    {Width: 10, Series: []plot.Series{{X: []float64{1}, Y: []float64{1}}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.Encode(&bytes.Buffer{})
			if !errors.Is(err, plot.ErrNoData) && !errors.Is(err, plot.ErrBadSeries) && !errors.Is(err, plot.ErrSize) {
				t.Fatalf("accepted: %v", err)
			}
		})
	}
	// One point, or a flat line, still draws.
	if _, err := latencyChartWith(plot.Series{X: []float64{5}, Y: []float64{5}}).Image(); err != nil {
		t.Fatal(err)
	}
}

func latencyChartWith(s plot.Series) plot.Chart { return plot.Chart{Series: []plot.Series{s}} }

func TestChartSample(t *testing.T) {
	if dir := os.Getenv("PLOT_SAMPLE_DIR"); dir != "" {
		if err := latencyChart().WriteFile(filepath.Join(dir, "latency.png")); err != nil {
			t.Fatal(err)
		}
		c := latencyChart()
		c.LogX, c.LogY = true, true
		if err := c.WriteFile(filepath.Join(dir, "latency-log.png")); err != nil {
			t.Fatal(err)
		}
	}
}
