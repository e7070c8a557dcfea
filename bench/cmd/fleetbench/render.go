package main

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// reportTmpl holds the prose of RESULTS.md ("results", from a resultsPage)
// and docs/performance.md ("performance", from a guidePage). The two share
// the "table" and "mode" templates, so they live in one file.
//
//go:embed report.tmpl
var reportTmpl string

var pages = template.Must(template.New("report.tmpl").
	Funcs(template.FuncMap{"join": strings.Join}).
	Parse(reportTmpl))

// table is a markdown table with a row per contender or scenario, laid out
// by the template "table". Cells are formatted in Go (fmtRate, fmtF, ...).
type table struct {
	Header []string
	Rows   [][]string
}

// item is one line of a list: a missed target and why, a failed check and
// what it found.
type item struct{ Name, Text string }

// render executes the named template of report.tmpl on data.
func render(name string, data any) (string, error) {
	var w strings.Builder
	if err := pages.ExecuteTemplate(&w, name, data); err != nil {
		return "", fmt.Errorf("fleetbench: rendering %s: %w", name, err)
	}
	return w.String(), nil
}
