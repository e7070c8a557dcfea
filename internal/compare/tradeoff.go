package compare

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// tradeoffPoint is one algorithm in the trade-off plot.
type tradeoffPoint struct {
	algorithm string
	color     string
	// worst is the largest worst window ÷ limit over every scenario row
	// decided by one limiter (a shared store, or a single instance).
	worst float64
	// bytes is the memory per key at the report's limit; bytesHigh at the
	// highest other limit measured (0 if none), at limitHigh.
	bytes, bytesHigh float64
	limitHigh        int64
	estimated        bool
}

// tradeoff returns the trade-off plot's points: every algorithm with both
// an accuracy row and a memory row at the report's limit, in registry
// (report) order.
func (rep *Report) tradeoff() []tradeoffPoint {
	var order []string
	worst := map[string]float64{}
	mem := map[string]*tradeoffPoint{}
	for _, r := range rep.Rows {
		if r.Lease > 0 {
			continue // the algorithms themselves; leases trade accuracy for round trips
		}
		if !slices.Contains(order, r.Algorithm) {
			order = append(order, r.Algorithm)
		}
		switch {
		case r.Scenario == manyUsersName && r.MemoryUsage != nil:
			p := mem[r.Algorithm]
			if p == nil {
				p = &tradeoffPoint{algorithm: r.Algorithm}
				mem[r.Algorithm] = p
			}
			if r.Limit == rep.Limit {
				p.bytes, p.estimated = *r.MemoryUsage, r.MemoryEstimated
			} else if r.Limit > p.limitHigh {
				p.bytesHigh, p.limitHigh = *r.MemoryUsage, r.Limit
			}
		case r.Scenario != manyUsersName && (r.Store == StoreRedis || r.Instances == 1):
			worst[r.Algorithm] = max(worst[r.Algorithm], r.WorstWindow)
		}
	}
	var out []tradeoffPoint
	for i, a := range order {
		p, ok := mem[a]
		w, seen := worst[a]
		if !ok || !seen || p.bytes <= 0 {
			continue
		}
		p.worst, p.color = w, palette[i%len(palette)]
		out = append(out, *p)
	}
	return out
}

// drawTradeoff writes the trade-off plot whose top edge is at y0: x is
// memory per key on a log scale, y the worst window ÷ limit; one point per
// algorithm at the report's limit, with an arrow to its memory at the
// highest other limit measured.
func (rep *Report) drawTradeoff(b *strings.Builder, points []tradeoffPoint, y0 int) {
	lo, hi := math.Inf(1), 0.0
	top := 2.0
	for _, p := range points {
		lo, hi = min(lo, p.bytes), max(hi, p.bytes, p.bytesHigh)
		top = max(top, p.worst)
	}
	decLo, decHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if decHi <= decLo {
		decHi = decLo + 1
	}
	yMin, yMax := 0.75, math.Ceil(top*4+0.5)/4
	x0, y1 := plotLeft, y0+plotTop+plotHeight
	px := func(bytes float64) float64 {
		return float64(x0) + (math.Log10(bytes)-decLo)/(decHi-decLo)*plotWidth
	}
	py := func(v float64) float64 { return float64(y1) - (v-yMin)/(yMax-yMin)*plotHeight }

	title := fmt.Sprintf("The trade-off: worst window against Redis memory per key, at a limit of %s", thousands(rep.Limit))
	fmt.Fprintf(b, `<g><text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, y0+18, esc(title))
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" fill="#555">%s</text>`+"\n", x0, y0+34,
		esc("Lower is more accurate, left is cheaper. Worst window: the most one user got in any window-long interval, in any scenario, ÷ the limit."))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`+"\n", x0, y0+plotTop, plotWidth, plotHeight)
	// y grid every quarter of the limit.
	for v := 1.0; v <= yMax+1e-9; v += 0.25 {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`, x0, y, x0+plotWidth, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%.2f×</text>`+"\n", x0-6, y+4, v)
	}
	y := py(1)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333" stroke-width="1.5" stroke-dasharray="7 5"/>`, x0, y, x0+plotWidth, y)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333" font-size="12">exact: the limit in every interval</text>`+"\n", x0+plotWidth-6, y+16)
	fmt.Fprintf(b, `<text transform="translate(%d %d) rotate(-90)" text-anchor="middle" fill="#444">%s</text>`+"\n",
		18, y0+plotTop+plotHeight/2, esc("worst window ÷ limit"))
	// x axis: decades, with 2 and 5 between.
	for d := decLo; d <= decHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if d == decHi && m > 1 {
				break
			}
			x := px(v)
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`, x, y0+plotTop, x, y1, map[bool]string{true: "#e4e4e4", false: "#f0f0f0"}[m == 1])
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444" font-size="%d">%s</text>`+"\n", x, y1+19, map[bool]int{true: 13, false: 11}[m == 1], axisSize(v))
		}
	}
	xLabel := "Redis memory per key (MEMORY USAGE, log scale)"
	if points[0].estimated {
		xLabel = "Redis memory per key (estimated MEMORY USAGE, log scale)"
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x0+plotWidth/2, y1+37, esc(xLabel))

	// Arrows first, points on top; labels in the right margin, in the
	// order of the points' heights, joined to their point by a thin line,
	// so that points close together (a token bucket and a fixed window
	// differ by a few bytes) keep legible labels.
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>` + "\n")
	for _, p := range points {
		x1, x2, y := px(p.bytes)+6, px(p.bytesHigh)-2, py(p.worst)
		if p.bytesHigh == 0 || x2-x1 < 20 {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3" marker-end="url(#arrow)"/>`+"\n",
			x1, y, x2, y, p.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="11" fill="#555">%s</text>`+"\n",
			x2, y-7, esc(fmt.Sprintf("%s at a limit of %s", axisSize(p.bytesHigh), thousands(p.limitHigh))))
	}
	// Labels above and right of their point; a label that would cover one
	// placed before it moves down (a token bucket and a fixed window sit a
	// few bytes apart), joined to its point by a thin line.
	sorted := slices.Clone(points)
	slices.SortStableFunc(sorted, func(a, b tradeoffPoint) int { return cmp.Compare(py(a.worst), py(b.worst)) })
	type box struct{ x, y float64 }
	var placed []box
	for _, p := range sorted {
		x, y := px(p.bytes), py(p.worst)
		lx, ly := x+10, y-8
		for _, q := range placed {
			if math.Abs(q.x-lx) < 190 && ly < q.y+32 && ly > q.y-32 {
				ly = q.y + 32
			}
		}
		placed = append(placed, box{lx, ly})
		if ly != y-8 {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="0.8"/>`, x, y, lx-2, ly-4, p.color)
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="#fff" stroke-width="1.5"><title>%s</title></circle>`+"\n", x, y, p.color, esc(p.algorithm))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" font-weight="bold" fill="%s">%s</text>`, lx, ly-8, p.color, esc(p.algorithm))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="#333">%s</text>`+"\n", lx, ly+6,
			esc(fmt.Sprintf("%s B, %.2f×", thousands(int64(p.bytes+0.5)), p.worst)))
	}
	b.WriteString("</g>\n")
}

// axisSize is formatSize without trailing zeros: 100 B, 2 KB, 1 MB.
func axisSize(v float64) string {
	num, unit, _ := strings.Cut(formatSize(v), " ")
	if strings.Contains(num, ".") {
		num = strings.TrimRight(strings.TrimRight(num, "0"), ".")
	}
	return num + " " + unit
}
