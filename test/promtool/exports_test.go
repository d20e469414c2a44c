package promtool

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// leaderRuntime is a tick loop that leads, with a stale source, a stale
// pool and a claim conflict, so the loop's series are exported too.
type leaderRuntime struct{}

func (leaderRuntime) DryRun(context.Context) (broker.Plan, error) { return broker.Plan{}, nil }
func (leaderRuntime) Status() engine.RuntimeStatus {
	return engine.RuntimeStatus{Leader: true, LastTick: time.Now(),
		Stale:      map[broker.Source]string{broker.SourceYARN: "RM unreachable"},
		StalePools: map[string]string{"gpu": "group not returned"}, ClaimConflicts: 1,
		ClaimConflictNodes: []string{"n1"}}
}
func (leaderRuntime) Cordon(context.Context, string) error                 { return nil }
func (leaderRuntime) Drain(context.Context, string) error                  { return nil }
func (leaderRuntime) Transfer(context.Context, string, broker.Owner) error { return nil }

// exportedMetrics serves the API the way "gpubroker serve" does (api.New
// on a registry of its own) over a real store holding a pool, a node, a
// tenant's demand and an op, scrapes /metrics, and returns every sample
// name a PromQL expression may select: each family's name, and for
// histograms and summaries their _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "ml", MaxGPUs: 8, Weight: 1, Namespaces: []string{"ml"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "H100",
		GPUsPerNode: 4, MaxNodes: 3, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "owned", Provider: broker.ProviderFleet, GPUModel: "A100",
		GPUsPerNode: 8, MinNodes: 2, MaxNodes: 2, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := st.UpsertNodes(ctx, []broker.Node{{Name: "n1", InstanceID: "i-1", Pool: "gpu", Owner: broker.OwnerK8s,
		Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, Utilisation: -1, Healthy: true}}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: now, Demand: []broker.Demand{{
		Source: broker.SourceK8s, Key: "p1", Name: "ml/p1", Tenant: "ml", Queue: "ml", GPUsPerUnit: 2, Units: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 1, Reason: "p1 waits"}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h, err := api.New(api.Config{Store: st, Runtime: leaderRuntime{}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// A refused request counts an auth failure; the first scrape counts a
	// request, which the second shows.
	get := func(path string) string {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return b.String()
	}
	get("/api/v1/tenants")
	get("/metrics")
	names := map[string]bool{}
	for line := range strings.SplitSeq(get("/metrics"), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+s] = true
			}
		}
	}
	for _, n := range []string{"gpubroker_ops", "gpubroker_leader", "gpubroker_api_requests_total", "gpubroker_api_auth_failures_total",
		"gpubroker_source_stale", "gpubroker_demand_pending_gpus", "gpubroker_side_gpus"} {
		if !names[n] {
			t.Fatalf("the broker's /metrics lacks %s; it exports %v", n, slices.Sorted(maps.Keys(names)))
		}
	}
	return names
}

// unexported returns the metric names expr selects that the broker does
// not export.
func unexported(t *testing.T, exported map[string]bool, expr string) []string {
	t.Helper()
	names, err := metricNames(expr)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	if len(names) == 0 {
		t.Errorf("%q selects no metric", expr)
	}
	var out []string
	for _, n := range names {
		if !exported[n] {
			out = append(out, n)
		}
	}
	return out
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// dashboardExprs returns every PromQL expression of the dashboard by where
// it is (panel title, or the template variable), panels of collapsed rows
// included; label_values(selector, label) queries give their selector.
func dashboardExprs(t *testing.T) (map[string]string, dashboard) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && !strings.Contains(string(p.Datasource), "${datasource}") {
				t.Errorf("panel %q does not use the dashboard's Prometheus variable: %s", p.Title, p.Datasource)
			}
			for i, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		out["variable "+v.Name] = m[1]
	}
	return out, d
}

// TestRulesAndDashboardReferenceExportedMetrics: every metric that an
// alert rule or a dashboard panel or variable selects is one the broker's
// own registry serves at /metrics (read from a real API handler on a real
// store, not from a list), and the dashboard covers capacity by side,
// pending demand by tenant, ops, pools, staleness and the leader.
func TestRulesAndDashboardReferenceExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	for _, r := range readRules(t) {
		if bad := unexported(t, exported, r.Expr); len(bad) > 0 {
			t.Errorf("rule %s selects %v, which the broker does not export", r.Alert, bad)
		}
	}
	exprs, _ := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has only %d expressions", len(exprs))
	}
	used := map[string]bool{}
	for where, e := range exprs {
		if bad := unexported(t, exported, e); len(bad) > 0 {
			t.Errorf("dashboard %s selects %v, which the broker does not export", where, bad)
		}
		names, _ := metricNames(e)
		for _, n := range names {
			used[n] = true
		}
	}
	for _, n := range []string{"gpubroker_side_gpus", "gpubroker_demand_pending_gpus", "gpubroker_ops", "gpubroker_pool_nodes",
		"gpubroker_pool_backoff", "gpubroker_pool_repairs_paused", "gpubroker_source_stale", "gpubroker_pool_stale", "gpubroker_leader"} {
		if !used[n] {
			t.Errorf("the dashboard shows nothing of %s", n)
		}
	}
	// The check itself rejects a name the broker does not export.
	if bad := unexported(t, exported, `sum(gpubroker_pending_gpus_total)`); !slices.Equal(bad, []string{"gpubroker_pending_gpus_total"}) {
		t.Errorf("an unexported name passed the check: %v", bad)
	}
}

// TestDashboardExpressionsParse: promtool parses every dashboard
// expression (as recording rules, Grafana's variables replaced by values
// of their kind), so a panel never shows a PromQL syntax error.
func TestDashboardExpressionsParse(t *testing.T) {
	exprs, d := dashboardExprs(t)
	if d.UID == "" {
		t.Error("the dashboard has no uid")
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$tenant", ".*", "$pool", ".*")
	keys := slices.Sorted(maps.Keys(exprs))
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, k := range keys {
		e := vars.Replace(exprs[k])
		if strings.Contains(e, "$") {
			t.Errorf("%s: a Grafana variable the check does not know: %s", k, e)
		}
		j, _ := json.Marshal(e)
		fmt.Fprintf(&b, "      - record: dashboard:expr_%d\n        expr: %s\n", i, j)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promtool(t, "check", "rules", path)
	if err != nil {
		t.Fatalf("promtool does not parse the dashboard's expressions: %v\n%s", err, out)
	}
}
