package compare

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRolling(t *testing.T) {
	// Window 10µs; admissions at 0 and 5; one column per µs from 0 to 20.
	got := rolling([]Event{{At: 0, N: 1}, {At: 5, N: 2}}, 10, 0, 20, 20)
	want := []float64{1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("rolling = %v\nwant      %v", got, want)
	}
	// Wider columns keep the peak inside them: 3 in [0, 10); from 10 on,
	// the unit admitted at 0 has left.
	if got := rolling([]Event{{At: 0, N: 1}, {At: 5, N: 2}}, 10, 0, 20, 2); !slices.Equal(got, []float64{3, 2}) {
		t.Fatalf("2 columns: %v", got)
	}
}

// chartReport is a report with the series a full run charts.
func chartReport() *Report {
	w := time.Minute.Microseconds()
	rep := &Report{Server: "embedded miniredis", Embedded: true, Limit: 10, Window: time.Minute}
	boundary := boundaryPlan(10, w, nil)
	for _, algo := range []string{"sliding_window_log", "token_bucket", "fixed_window"} {
		adm := boundary.traffic[:10]
		if algo == "fixed_window" {
			adm = boundary.traffic
		}
		rep.Series = append(rep.Series, Series{Scenario: "boundary burst", Algorithm: algo, Store: StoreRedis, Instances: 1, Limit: 10, Admitted: adm, From: boundary.from, To: boundary.to})
		for _, k := range []int{1, 4} {
			for _, st := range []string{StoreRedis, StoreMemory} {
				fleet, _ := fleetPlan(10, w, k, 1, 2, nil)
				rep.Series = append(rep.Series, Series{Scenario: "fleet", Algorithm: algo, Store: st, Instances: k, Limit: 10, Admitted: fleet.traffic[:10*k], From: fleet.from, To: fleet.to})
			}
		}
	}
	return rep
}

func TestChartIsWellFormedSVG(t *testing.T) {
	svg := string(chartReport().Chart())
	dec := xml.NewDecoder(strings.NewReader(svg))
	polylines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	// Three panels (boundary; fleet of 4 over each store), three algorithms.
	if polylines != 9 {
		t.Errorf("%d lines drawn, want 9", polylines)
	}
	for _, want := range []string{"Boundary burst", "Fleet of 4 instances", "one shared Redis", "a memory store each", "limit 10", "4 × limit", "window edge", "fixed_window"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// The memory-store panel's title claims no multiple: the token bucket
	// and the fixed window reach 5x with 4 instances, not 4x.
	if strings.Contains(svg, "4 × what") {
		t.Error("panel title claims 4 × what one limiter admits")
	}
	// No trade-off plot without memory figures.
	if strings.Contains(svg, "The trade-off") {
		t.Error("trade-off plot drawn without memory rows")
	}
}

// TestTradeoffPlot: one point per algorithm at (bytes per key, worst window
// over the rows one limiter decided), labelled; an arrow where memory grows
// with the limit.
func TestTradeoffPlot(t *testing.T) {
	rep := chartReport()
	for _, r := range []struct {
		algo          string
		worst, worst4 float64 // one limiter; a memory store per instance
		bytes, at1000 float64
	}{
		{"sliding_window_log", 1, 4, 2664, 102_376},
		{"token_bucket", 1.99, 5, 104, 104},
		{"fixed_window", 2, 5, 120, 136},
	} {
		rep.Rows = append(rep.Rows,
			Row{Scenario: "boundary burst", Algorithm: r.algo, Store: StoreRedis, Instances: 1, Limit: 10, WorstWindow: r.worst},
			Row{Scenario: "fleet", Algorithm: r.algo, Store: StoreMemory, Instances: 4, Limit: 10, WorstWindow: r.worst4},
			Row{Scenario: manyUsersName, Algorithm: r.algo, Store: StoreRedis, Instances: 1, Limit: 10, MemoryUsage: f(r.bytes)},
			Row{Scenario: manyUsersName, Algorithm: r.algo, Store: StoreRedis, Instances: 1, Limit: 100, MemoryUsage: f(r.at1000)})
	}
	svg := string(rep.Chart())
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	// The per-instance fleet's 4x and 5x are not one limiter's accuracy.
	for _, want := range []string{"The trade-off", "2,664 B, 1.00×", "104 B, 1.99×", "120 B, 2.00×", "102 KB at a limit of 100", "log scale"} {
		if !strings.Contains(svg, want) {
			t.Errorf("trade-off plot lacks %q", want)
		}
	}
	if n := strings.Count(svg, "<circle"); n != 3 {
		t.Errorf("%d points, want 3", n)
	}
	// The token bucket's memory does not grow: no arrow; the fixed
	// window's grows by 16 bytes: too short to draw.
	if n := strings.Count(svg, "marker-end"); n != 1 {
		t.Errorf("%d arrows, want 1 (the sliding log's)", n)
	}
}

func TestChartWithoutSeries(t *testing.T) {
	rep := &Report{Server: "x", Limit: 5, Window: time.Minute}
	svg := string(rep.Chart())
	if !strings.Contains(svg, "No boundary or fleet scenario") || strings.Contains(svg, "polyline") {
		t.Errorf("empty chart:\n%s", svg)
	}
}
