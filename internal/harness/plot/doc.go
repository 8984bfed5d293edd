// Package plot provides simple line charts drawn as PNG with the standard
// library only: axes with numeric tick labels (linear, or log10 with ticks
// at 1, 2 and 5 × 10^k), grid lines, several series with markers, a legend
// in the corner where it hides the least, a title and axis labels.
//
// Text is drawn with a small built-in 5×7 bitmap font (digits, letters,
// and the punctuation charts need). Letters are drawn in capitals, so
// "p99 latency (ms)" reads "P99 LATENCY (MS)"; a character the font lacks
// is drawn as a hollow box. golang.org/x/image is not a dependency of
// this module, and a font is not worth adding one.
//
// Output is deterministic: the same Chart gives the same bytes, so a
// benchmark report's plots change only when their numbers do.
//
//	c := plot.Chart{
//		Title: "intake latency", XLabel: "offered rate (/s)", YLabel: "ms", YFromZero: true,
//		Series: []plot.Series{{Name: "p50", X: rates, Y: p50}, {Name: "p99", X: rates, Y: p99}},
//	}
//	err := c.WriteFile("latency.png")
package plot
