package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Hand-written SVG, in the manner of internal/bench/plot.go: panels side by
// side, each a framed plotting area with grid lines, ticks, lines with
// optional markers, dashed reference lines and vertical event marks.

const (
	panelW, panelH     = 460.0, 320.0
	marginL, marginR   = 66.0, 18.0
	marginT, marginB   = 42.0, 46.0
	captionH           = 22.0
	markerR            = 2.8
	legendRowH         = 14.0
	legendSwatchW      = 18.0
	legendCharW        = 6.2 // rough width of one 11px sans-serif character
	defaultLegendSpace = 8.0
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

type axis struct {
	min, max float64
	log      bool
	ticks    []float64
	format   string // for tick labels
	label    string
}

func (a axis) frac(v float64) float64 {
	if a.log {
		v = math.Max(v, a.min)
		return (math.Log10(v) - math.Log10(a.min)) / (math.Log10(a.max) - math.Log10(a.min))
	}
	return (v - a.min) / (a.max - a.min)
}

type line struct {
	name   string
	color  string
	pts    [][2]float64
	dashed bool
	marks  bool
}

type vmark struct {
	x     float64
	label string
}

type chart struct {
	title  string
	x, y   axis
	lines  []line
	vmarks []vmark
	legend string // corner: "br" (default), "bl", "tr", "tl"
}

// svgDoc lays the charts out left to right, with a caption line below.
func svgDoc(charts []chart, caption string) string {
	var b strings.Builder
	w := panelW * float64(len(charts))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, panelH+captionH)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, c := range charts {
		c.draw(&b, float64(i)*panelW)
	}
	fmt.Fprintf(&b, `<text x="8" y="%.0f" fill="#555">%s</text>`+"\n", panelH+captionH-8, html.EscapeString(caption))
	b.WriteString("</svg>\n")
	return b.String()
}

func (c chart) draw(b *strings.Builder, left float64) {
	x0, y0 := left+marginL, marginT
	w, h := panelW-marginL-marginR, panelH-marginT-marginB
	px := func(v float64) float64 { return x0 + w*clamp01(c.x.frac(v)) }
	py := func(v float64) float64 { return y0 + h*(1-clamp01(c.y.frac(v))) }
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, w, h)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+w/2, y0-16, html.EscapeString(c.title))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x0+w/2, y0+h+36, html.EscapeString(c.x.label))
	fmt.Fprintf(b, `<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0-52, y0+h/2, html.EscapeString(c.y.label))
	for _, t := range c.x.ticks {
		X := px(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", X, y0, X, y0+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", X, y0+h+16, fmt.Sprintf(c.x.format, t))
	}
	for _, t := range c.y.ticks {
		Y := py(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, Y, x0+w, Y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, Y+4, fmt.Sprintf(c.y.format, t))
	}
	for _, m := range c.vmarks {
		X := px(m.x)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4,3"/>`+"\n", X, y0, X, y0+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", X+4, y0+12, html.EscapeString(m.label))
	}
	for i, l := range c.lines {
		color := l.color
		if color == "" {
			color = palette[i%len(palette)]
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		if len(l.pts) > 1 {
			fmt.Fprintf(b, `<polyline fill="none" stroke-width="1.6" stroke="%s"%s points="`, color, dash)
			for _, p := range l.pts {
				fmt.Fprintf(b, "%.1f,%.1f ", px(p[0]), py(p[1]))
			}
			b.WriteString("\"/>\n")
		}
		if l.marks || len(l.pts) == 1 {
			for _, p := range l.pts {
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`+"\n", px(p[0]), py(p[1]), markerR, color)
			}
		}
	}
	c.drawLegend(b, x0, y0, w, h)
}

func (c chart) drawLegend(b *strings.Builder, x0, y0, w, h float64) {
	if len(c.lines) == 0 {
		return
	}
	longest := 0
	for _, l := range c.lines {
		longest = max(longest, len(l.name))
	}
	lw := legendSwatchW + 6 + legendCharW*float64(longest) + 8
	lh := legendRowH*float64(len(c.lines)) + 6
	pad := defaultLegendSpace
	lx, ly := x0+w-lw-pad, y0+h-lh-pad // bottom right
	switch c.legend {
	case "bl":
		lx = x0 + pad
	case "tr":
		ly = y0 + pad
	case "tl":
		lx, ly = x0+pad, y0+pad
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="white" fill-opacity="0.85" stroke="#ccc"/>`+"\n", lx, ly, lw, lh)
	for i, l := range c.lines {
		color := l.color
		if color == "" {
			color = palette[i%len(palette)]
		}
		y := ly + 3 + legendRowH*float64(i) + legendRowH/2
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5,3"`
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx+4, y, lx+4+legendSwatchW, y, color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+legendSwatchW+10, y+4, html.EscapeString(l.name))
	}
}

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }

// niceStep is 1, 2 or 5 times a power of ten, giving about five ticks up
// to max.
func niceStep(max float64) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// linAxis is 0 .. a nice ceiling above max, with ticks.
func linAxis(max float64, format, label string) axis {
	if max <= 0 || math.IsNaN(max) {
		max = 1
	}
	s := niceStep(max * 1.08)
	top := math.Ceil(max*1.08/s) * s
	var t []float64
	for v := 0.0; v <= top*1.0001; v += s {
		t = append(t, v)
	}
	return axis{min: 0, max: top, ticks: t, format: format, label: label}
}

// decadeAxis is a log axis over whole decades covering lo..hi.
func decadeAxis(lo, hi float64, label string) axis {
	lo, hi = math.Max(lo, 0.001), math.Max(hi, 0.001)
	a := axis{log: true, format: "%g", label: label,
		min: math.Pow(10, math.Floor(math.Log10(lo))), max: math.Pow(10, math.Ceil(math.Log10(hi)))}
	if a.max <= a.min {
		a.max = a.min * 10
	}
	for v := a.min; v <= a.max*1.0001; v *= 10 {
		a.ticks = append(a.ticks, v)
	}
	return a
}

// pointsAxis is a log axis whose ticks are the given points (client
// counts 1, 2, 4 ... 64), or linear when lin.
func pointsAxis(pts []int, lin bool, label string) axis {
	a := axis{log: !lin, format: "%g", label: label}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		a.ticks = append(a.ticks, float64(p))
		lo, hi = math.Min(lo, float64(p)), math.Max(hi, float64(p))
	}
	if lin {
		pad := math.Max((hi-lo)*0.06, 0.5)
		a.min, a.max = math.Max(0, lo-pad), hi+pad
		return a
	}
	a.min, a.max = lo/1.25, hi*1.25
	if len(pts) == 0 {
		a.min, a.max = 1, 10
	}
	return a
}
