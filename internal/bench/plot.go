package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// The plot is hand-written SVG: two panels side by side, the latency CDF
// (log latency axis) and throughput over time. No plotting dependency.
const (
	plotPanelW, plotPanelH   = 440.0, 300.0
	plotMarginL, plotMarginR = 64.0, 16.0
	plotMarginT, plotMarginB = 40.0, 44.0
)

// plotColors per series: all, then one per operation type.
var plotColors = map[string]string{"all": "#333333", "read": "#1f77b4", "update": "#d62728",
	"insert": "#2ca02c", "scan": "#9467bd", "rmw": "#ff7f0e"}

// cdfPercentiles are where the CDF is sampled: every percent, then finer
// steps in the tail where the interesting latencies are.
func cdfPercentiles() []float64 {
	var ps []float64
	for p := 0.0; p < 99; p++ {
		ps = append(ps, p)
	}
	for _, step := range []float64{0.1, 0.01} {
		for p := 100 - 10*step; p < 100-step/2; p += step {
			ps = append(ps, p)
		}
	}
	return append(ps, 100)
}

// panel maps data coordinates to pixels inside one panel.
type panel struct {
	x0, y0         float64 // top-left pixel of the plotting area
	w, h           float64
	xmin, xmax     float64
	ymin, ymax     float64
	logX           bool
	title, xl, ylb string
}

func newPanel(col int, title, xl, yl string) *panel {
	return &panel{x0: float64(col)*plotPanelW + plotMarginL, y0: plotMarginT,
		w: plotPanelW - plotMarginL - plotMarginR, h: plotPanelH - plotMarginT - plotMarginB,
		title: title, xl: xl, ylb: yl}
}

func (p *panel) px(x float64) float64 {
	if p.logX {
		return p.x0 + p.w*(math.Log10(x)-math.Log10(p.xmin))/(math.Log10(p.xmax)-math.Log10(p.xmin))
	}
	return p.x0 + p.w*(x-p.xmin)/(p.xmax-p.xmin)
}

func (p *panel) py(y float64) float64 { return p.y0 + p.h*(1-(y-p.ymin)/(p.ymax-p.ymin)) }

// frame draws the box, title, axis labels and tick marks with grid lines.
func (p *panel) frame(b *strings.Builder, xticks, yticks []float64, xfmt, yfmt string) {
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", p.x0, p.y0, p.w, p.h)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", p.x0+p.w/2, p.y0-14, html.EscapeString(p.title))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x0+p.w/2, p.y0+p.h+36, html.EscapeString(p.xl))
	fmt.Fprintf(b, `<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", p.x0-50, p.y0+p.h/2, html.EscapeString(p.ylb))
	for _, x := range xticks {
		X := p.px(x)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", X, p.y0, X, p.y0+p.h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">`+xfmt+`</text>`+"\n", X, p.y0+p.h+16, x)
	}
	for _, y := range yticks {
		Y := p.py(y)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", p.x0, Y, p.x0+p.w, Y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">`+yfmt+`</text>`+"\n", p.x0-6, Y+4, y)
	}
}

func polyline(b *strings.Builder, pts [][2]float64, color string) {
	b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + color + `" points="`)
	for _, pt := range pts {
		fmt.Fprintf(b, "%.1f,%.1f ", pt[0], pt[1])
	}
	b.WriteString("\"/>\n")
}

// WritePlot writes an SVG with the latency CDF per operation type and the
// throughput over time.
func (r *Result) WritePlot(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", 2*plotPanelW, plotPanelH+20)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	r.plotCDF(&b)
	r.plotThroughput(&b)
	c := r.Config
	fmt.Fprintf(&b, `<text x="8" y="%.0f" fill="#555">%s</text>`+"\n", plotPanelH+12, html.EscapeString(fmt.Sprintf(
		"concord bench: workload %s, %s, %d clients / %d conns, %d keys, value %d B, %.0f ops/s, p99 %.2f ms",
		c.Workload, c.Distribution, c.Clients, c.Conns, c.Keys, c.ValueSize, r.Throughput, r.Latency.P99)))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plotSeries lists the histograms worth drawing: each op type that ran,
// or only "all" when there is one type.
func (r *Result) plotSeries() (names []string, hists []*hdrhistogram.Histogram) {
	for op := range numOps {
		if r.perOp[op] != nil && r.perOp[op].TotalCount() > 0 {
			names, hists = append(names, opNames[op]), append(hists, r.perOp[op])
		}
	}
	if len(names) != 1 {
		names, hists = append([]string{"all"}, names...), append([]*hdrhistogram.Histogram{r.all}, hists...)
	}
	return names, hists
}

func (r *Result) plotCDF(b *strings.Builder) {
	p := newPanel(0, "Latency CDF", "latency (ms, log scale)", "percent of operations")
	p.logX, p.ymin, p.ymax = true, 0, 100
	names, hists := r.plotSeries()
	if r.all == nil || r.all.TotalCount() == 0 {
		p.xmin, p.xmax = 0.1, 10
		p.frame(b, nil, []float64{0, 50, 100}, "%g", "%.0f")
		return
	}
	// Whole decades, so the ticks sit on the axis ends.
	p.xmin = math.Pow(10, math.Floor(math.Log10(float64(r.all.Min())/1000)))
	p.xmax = math.Pow(10, math.Ceil(math.Log10(float64(r.all.Max())/1000)))
	if p.xmax <= p.xmin {
		p.xmax = p.xmin * 10
	}
	var xt []float64
	for x := p.xmin; x <= p.xmax*1.0001; x *= 10 {
		xt = append(xt, x)
	}
	p.frame(b, xt, []float64{0, 25, 50, 75, 90, 100}, "%g", "%.0f")
	for i, h := range hists {
		var pts [][2]float64
		for _, q := range cdfPercentiles() {
			ms := math.Max(float64(h.ValueAtQuantile(q))/1000, p.xmin)
			pts = append(pts, [2]float64{p.px(ms), p.py(q)})
		}
		polyline(b, pts, plotColors[names[i]])
		legend(b, p, i, names[i])
	}
}

func legend(b *strings.Builder, p *panel, i int, name string) {
	y := p.y0 + p.h - 12 - 14*float64(i)
	x := p.x0 + p.w - 70
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x, y-4, x+16, y-4, plotColors[name])
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+20, y, name)
}

func (r *Result) plotThroughput(b *strings.Builder) {
	p := newPanel(1, "Throughput over time", "time (s)", "ops/s")
	peak := 0.0
	for _, s := range r.Timeline {
		peak = math.Max(peak, s.OpsPerSec)
	}
	p.xmin, p.xmax = 0, math.Max(r.DurationSec, 1)
	p.ymin, p.ymax = 0, niceCeil(peak*1.1)
	p.frame(b, ticks(p.xmax), ticks(p.ymax), "%g", "%.0f")
	var pts [][2]float64
	for _, s := range r.Timeline {
		pts = append(pts, [2]float64{p.px(s.T), p.py(s.OpsPerSec)})
	}
	polyline(b, pts, plotColors["all"])
}

// niceStep is a 1, 2 or 5 times a power of ten step giving about 5 ticks
// up to max.
func niceStep(max float64) float64 {
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	s := niceStep(v)
	return math.Ceil(v/s) * s
}

func ticks(max float64) []float64 {
	s := niceStep(max)
	var t []float64
	for v := 0.0; v <= max*1.0001; v += s {
		t = append(t, v)
	}
	return t
}
