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
}

func TestChartWithoutSeries(t *testing.T) {
	rep := &Report{Server: "x", Limit: 5, Window: time.Minute}
	svg := string(rep.Chart())
	if !strings.Contains(svg, "No boundary or fleet scenario") || strings.Contains(svg, "polyline") {
		t.Errorf("empty chart:\n%s", svg)
	}
}
