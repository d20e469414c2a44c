package promtool

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// promqlKeywords are the identifiers of PromQL that are not metric names:
// operators, modifiers and the literals Inf and NaN.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
}

// labelLists are the keywords followed by a parenthesised list of label names.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// aggregationModifier reports whether rest starts with "by (" or
// "without (", as after an aggregation operator's name.
func aggregationModifier(rest string) bool {
	for _, kw := range []string{"by", "without"} {
		if after, ok := strings.CutPrefix(rest, kw); ok && strings.HasPrefix(strings.TrimLeft(after, " \t\n"), "(") {
			return true
		}
	}
	return false
}

// metricNames returns the metric names a PromQL expression selects: every
// identifier that is not a function or aggregation (followed by "("), a
// keyword, a label name (inside {...} or a by/without/on/ignoring/group_*
// list), a string, a duration or a number. Grafana variables ($name,
// ${name}, $__interval) are skipped. promtool parses the expressions
// (TestDashboardExpressionsParse); this only has to find the names.
func metricNames(expr string) ([]string, error) {
	var names []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, open, close byte) (int, error) { // i at open; returns the index after its close
		depth := 0
		for j := i; j < len(expr); j++ {
			switch c := expr[j]; {
			case c == '"' || c == '\'' || c == '`':
				k := strings.IndexByte(expr[j+1:], c)
				if k < 0 {
					return 0, fmt.Errorf("unterminated string at %d in %q", j, expr)
				}
				j += k + 1
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d in %q", open, i, expr)
	}
	labelListNext := false
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			if k := strings.IndexByte(expr[i:], '\n'); k >= 0 {
				i += k
			} else {
				i = len(expr)
			}
		case c == '"' || c == '\'' || c == '`':
			k := strings.IndexByte(expr[i+1:], c)
			if k < 0 {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			i += k + 2
		case c == '{':
			j, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '(' && labelListNext:
			j, err := skipTo(i, '(', ')')
			if err != nil {
				return nil, err
			}
			i, labelListNext = j, false
		case c == '$': // a Grafana variable
			i++
			if i < len(expr) && expr[i] == '{' {
				j, err := skipTo(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			// A number or a duration (1e9, 0x1f, 5m, 1h30m): digits,
			// letters and dots with no identifier meaning.
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			lower := strings.ToLower(word)
			switch {
			case labelLists[lower]:
				labelListNext = true
			case promqlKeywords[lower]:
			case k < len(expr) && expr[k] == '(':
				// A function or an aggregation.
			case aggregationModifier(expr[k:]):
				// An aggregation with its grouping first: max by (l) (...).
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// TestMetricNamesFindsEverySelector: the extractor returns the metric names
// of an expression and nothing else — not functions, aggregations, label
// names (in matchers or by/without/on lists), keywords, strings, durations,
// numbers or Grafana variables — so a misspelt or unexported metric in a
// rule or panel is caught.
func TestMetricNamesFindsEverySelector(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum(gpubroker_leader) < 1 or absent(gpubroker_leader)`, []string{"gpubroker_leader"}},
		{`max by (source) (gpubroker_source_stale) == 1`, []string{"gpubroker_source_stale"}},
		{`sum by (tenant) (x{tenant=~"$tenant", a!="b}c"}) without (pool)`, []string{"x"}},
		{`max by (kind) (gpubroker_ops{state="failed"} - min_over_time(gpubroker_ops{state="failed"}[15m])) > 0`, []string{"gpubroker_ops"}},
		{`time() - max(gpubroker_last_tick_timestamp_seconds) > 120`, []string{"gpubroker_last_tick_timestamp_seconds"}},
		{`histogram_quantile(0.95, sum by (le, route) (rate(req_bucket[$__rate_interval])))`, []string{"req_bucket"}},
		{`a / on (instance) group_left (pod) b offset 5m > bool 1e3`, []string{"a", "b"}},
		{`rate(x[${window}]) * 15 * 60 + Inf`, []string{"x"}},
		{`sum(up) by (job) unless other:recorded:rule`, []string{"up", "other:recorded:rule"}},
		{"count without\n(a) (y) / bycount", []string{"y", "bycount"}},
		{`label_values(gpubroker_pool_nodes, pool)`, []string{"gpubroker_pool_nodes", "pool"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: names %q, want %q", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`x{a="b"`, `rate(x[5m)`, `x{a="b}`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("%s: no error for an unbalanced expression", bad)
		}
	}
}
