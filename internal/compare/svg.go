package compare

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartWidth   = 980
	panelHeight  = 300
	panelGap     = 40
	titleHeight  = 56
	plotLeft     = 70  // room for the y axis labels
	plotRight    = 200 // room for the legend
	plotTop      = 44  // room for the panel title and the window-edge labels
	plotBottom   = 44  // room for the x axis labels
	plotWidth    = chartWidth - plotLeft - plotRight
	plotHeight   = panelHeight - plotTop - plotBottom
	chartPadding = 16
	lineGap      = 2 // pixels between lines drawn side by side
)

// palette colours algorithms in registry order: the third, the fixed
// window, is red.
var palette = []string{"#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// dashes tell overlapping lines apart.
var dashes = []string{"", "9 4", "3 3", "12 3 3 3", "1 4", "6 6"}

// panel is one line chart: the series of one scenario run, one per
// algorithm.
type panel struct {
	title  string
	series []Series
	xLabel string
	guides []guide // horizontal reference lines
}

type guide struct {
	y     float64
	label string
	color string
}

// Chart returns an SVG line chart of the admissions over time to one user,
// in the last window at each instant, for the boundary burst and for the
// fleet over each store: one line per algorithm, the limit drawn. It is
// hand-written SVG 1.1 with no scripts or external resources, so that
// browsers and Markdown renderers show it as an image.
func (rep *Report) Chart() []byte {
	panels := rep.panels()
	points := rep.tradeoff()
	n := len(panels)
	if len(points) > 0 {
		n++
	}
	height := titleHeight + n*(panelHeight+panelGap) + chartPadding
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		chartWidth, height, chartWidth, height)
	title := fmt.Sprintf("fleetlimit compare: accuracy against memory, and admissions over time, at a limit of %s per %s",
		thousands(rep.Limit), window(rep.Window))
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="18" font-weight="bold">%s</text>`+"\n", chartPadding, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="46" fill="#555">%s</text>`+"\n", chartPadding,
		esc(fmt.Sprintf("store \"redis\": %s. Lines that coincide are drawn %d px apart.", rep.Server, lineGap)))
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", chartPadding, titleHeight+30, esc("No boundary or fleet scenario was run."))
	}
	y := titleHeight
	if len(points) > 0 {
		rep.drawTradeoff(&b, points, y)
		y += panelHeight + panelGap
	}
	for _, p := range panels {
		rep.drawPanel(&b, p, y)
		y += panelHeight + panelGap
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// panels picks what to draw: the boundary burst (over Redis; the memory
// store's lines are the same), and the fleet of four instances (or the
// middle size run) over a shared Redis and over a memory store each.
func (rep *Report) panels() []panel {
	var boundary []Series
	fleet := map[int]map[string][]Series{}
	for _, s := range rep.Series {
		switch {
		case s.Lease > 0:
			// The table shows the lease rows; the chart stays with the
			// algorithms themselves.
		case s.Scenario == "boundary burst" && s.Store == StoreRedis:
			boundary = append(boundary, s)
		case s.Scenario == "fleet":
			if fleet[s.Instances] == nil {
				fleet[s.Instances] = map[string][]Series{}
			}
			fleet[s.Instances][s.Store] = append(fleet[s.Instances][s.Store], s)
		}
	}
	limit := fmt.Sprintf("limit %s", thousands(rep.Limit))
	var ps []panel
	if len(boundary) > 0 {
		ps = append(ps, panel{
			title:  fmt.Sprintf("Boundary burst: %s requests in the last 60th of a window before its edge, %s in the first 60th after", thousands(rep.Limit), thousands(rep.Limit)),
			series: boundary,
			xLabel: "seconds from the window edge",
			guides: []guide{{float64(rep.Limit), limit, "#333"}},
		})
	}
	var sizes []int
	for k := range fleet {
		sizes = append(sizes, k)
	}
	slices.Sort(sizes)
	if len(sizes) > 0 {
		k := sizes[len(sizes)/2]
		if slices.Contains(sizes, 4) {
			k = 4
		}
		if s := fleet[k][StoreRedis]; len(s) > 0 {
			ps = append(ps, panel{
				title:  fmt.Sprintf("Fleet of %d instances in round robin, one shared Redis: the fleet acts as one limiter", k),
				series: s, xLabel: "seconds",
				guides: []guide{{float64(rep.Limit), limit, "#333"}},
			})
		}
		if s := fleet[k][StoreMemory]; len(s) > 0 {
			g := []guide{{float64(rep.Limit), limit, "#333"}}
			if k > 1 {
				g = append(g, guide{float64(int64(k) * rep.Limit), fmt.Sprintf("%d × limit", k), "#999"})
			}
			ps = append(ps, panel{
				title:  fmt.Sprintf("Fleet of %d instances in round robin, a memory store each: every instance applies the limit alone", k),
				series: s, xLabel: "seconds", guides: g,
			})
		}
	}
	return ps
}

// drawPanel writes one panel whose top edge is at y0.
func (rep *Report) drawPanel(b *strings.Builder, p panel, y0 int) {
	w := rep.Window.Microseconds()
	from, to := p.series[0].From, p.series[0].To
	curves := make([][]float64, len(p.series))
	top := 0.0
	for _, g := range p.guides {
		top = max(top, g.y)
	}
	for i, s := range p.series {
		curves[i] = rolling(s.Admitted, w, from, to, plotWidth)
		top = max(top, slices.Max(curves[i]))
	}
	yStep := niceStep(top*1.1, 5)
	yMax := math.Ceil(top*1.1/yStep) * yStep
	x0, y1 := plotLeft, y0+plotTop+plotHeight
	px := func(t float64) float64 { return float64(x0) + (t-float64(from))/float64(to-from)*plotWidth }
	py := func(v float64) float64 { return float64(y1) - v/yMax*plotHeight }

	fmt.Fprintf(b, `<g><text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, y0+18, esc(p.title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`+"\n", x0, y0+plotTop, plotWidth, plotHeight)
	// Grid and y axis.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`, x0, y, x0+plotWidth, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", x0-6, y+4, thousands(int64(v)))
	}
	fmt.Fprintf(b, `<text transform="translate(%d %d) rotate(-90)" text-anchor="middle" fill="#444">%s</text>`+"\n",
		18, y0+plotTop+plotHeight/2, esc("admitted in the last "+window(rep.Window)))
	// x axis in seconds, and the fixed window's edges.
	secFrom, secTo := float64(from)/1e6, float64(to)/1e6
	xStep := niceStep(secTo-secFrom, 8)
	for s := math.Ceil(secFrom/xStep) * xStep; s <= secTo; s += xStep {
		x := px(s * 1e6)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`, x, y1, x, y1+5)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, y1+19, trimFloat(s))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x0+plotWidth/2, y1+37, esc(p.xLabel))
	// The origin is a window edge, so edges are the multiples of w.
	firstEdge := from / w * w
	if firstEdge <= from {
		firstEdge += w
	}
	for e := firstEdge; e < to; e += w {
		x := px(float64(e))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#aaa" stroke-dasharray="2 4"/>`, x, y0+plotTop, x, y1)
		// Above the plot, where no line can cross it.
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" fill="#888" text-anchor="middle">window edge</text>`+"\n", x, y0+plotTop-4)
	}
	// Reference lines; their labels come after the curves.
	for _, g := range p.guides {
		y := py(g.y)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="7 5"/>`, x0, y, x0+plotWidth, y, g.color)
	}
	// One line per algorithm, and the legend. Lines that coincide (the
	// fixed window and the log at the limit, say) would hide one another,
	// so they are drawn side by side: the first (the exact log) where it
	// belongs, the others lineGap pixels further each, alternately below
	// and above, as the chart's subtitle says.
	legendY := y0 + plotTop + 16
	const width = 2.5
	for i, s := range p.series {
		color, dash := palette[i%len(palette)], dashes[i%len(dashes)]
		shift := float64((i+1)/2) * lineGap
		if i%2 == 0 {
			shift = -shift
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"%s points="%s"><title>%s</title></polyline>`+"\n",
			color, width, dashAttr(dash), points(curves[i], x0, func(v float64) float64 { return py(v) + shift }), esc(s.Algorithm))
		ly := legendY + i*20
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"%s/>`, x0+plotWidth+10, ly, x0+plotWidth+38, ly, color, width, dashAttr(dash))
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12">%s</text>`+"\n", x0+plotWidth+43, ly+4, esc(s.Algorithm))
	}
	// Drawn over the curves, on a halo of the plot's background, so that a
	// curve crossing a label cannot hide it.
	for _, g := range p.guides {
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-size="12" stroke="#fafafa" stroke-width="4" paint-order="stroke">%s</text>`+"\n",
			x0+plotWidth-6, py(g.y)-5, g.color, esc(g.label))
	}
	b.WriteString("</g>\n")
}

// rolling returns, for each of n columns splitting [from, to), the most
// units admitted in the last window at any instant in the column (a unit
// admitted at a counts in [a, a+window)).
func rolling(admitted []Event, window, from, to int64, n int) []float64 {
	type step struct{ at, delta int64 }
	steps := make([]step, 0, 2*len(admitted))
	for _, ev := range admitted {
		steps = append(steps, step{ev.At, ev.N}, step{ev.At + window, -ev.N})
	}
	// At equal times, leaving comes before arriving: [a, a+window) is
	// half-open.
	slices.SortFunc(steps, func(a, b step) int {
		if a.at != b.at {
			return compareInt(a.at, b.at)
		}
		return compareInt(a.delta, b.delta)
	})
	out := make([]float64, n)
	var count int64
	i := 0
	for c := range n {
		start := from + mulDiv(int64(c), to-from, int64(n))
		end := from + mulDiv(int64(c+1), to-from, int64(n))
		for i < len(steps) && steps[i].at <= start {
			count += steps[i].delta
			i++
		}
		peak := count
		for i < len(steps) && steps[i].at < end {
			count += steps[i].delta
			peak = max(peak, count)
			i++
		}
		out[c] = float64(peak)
	}
	return out
}

// points renders a curve with one value per pixel column, keeping only the
// ends of flat runs.
func points(curve []float64, x0 int, py func(float64) float64) string {
	var b strings.Builder
	for i, v := range curve {
		if i > 0 && i < len(curve)-1 && curve[i-1] == v && curve[i+1] == v {
			continue
		}
		fmt.Fprintf(&b, "%d,%.1f ", x0+i, py(v))
	}
	return strings.TrimSpace(b.String())
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span
// into about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func trimFloat(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func dashAttr(d string) string {
	if d == "" {
		return ""
	}
	return fmt.Sprintf(` stroke-dasharray="%s"`, d)
}

func esc(s string) string { return html.EscapeString(s) }
