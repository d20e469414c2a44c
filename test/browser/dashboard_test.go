package browser_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
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

type fakeRuntime struct{ status engine.RuntimeStatus }

func (f *fakeRuntime) DryRun(context.Context) (broker.Plan, error)          { return broker.Plan{}, nil }
func (f *fakeRuntime) Status() engine.RuntimeStatus                         { return f.status }
func (f *fakeRuntime) Cordon(context.Context, string) error                 { return nil }
func (f *fakeRuntime) Drain(context.Context, string) error                  { return nil }
func (f *fakeRuntime) Transfer(context.Context, string, broker.Owner) error { return nil }

// seed writes the reference scenario's pools, eight GPU nodes across both
// sides (two in flight), pending demand of three tenants, decisions, and
// half an hour of capacity samples where demand rises and falls.
func seed(t *testing.T, st *store.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"ml", "vision", "speech"} {
		if _, err := st.CreateTenant(ctx, broker.Tenant{Name: name, MaxGPUs: 16, Weight: 1, Namespaces: []string{name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []broker.Pool{
		{Name: "gpu-training-group", Provider: "aws", GPUModel: "H100", GPUsPerNode: 4, MaxNodes: 5, Sides: broker.PoolShared},
		{Name: "gpu-inference-group", Provider: "aws", GPUModel: "L4", GPUsPerNode: 4, MinNodes: 1, MaxNodes: 4, Sides: broker.PoolShared},
		// Owned hosts, none of them up (the runtime names one missing).
		{Name: "owned-fleet", Provider: broker.ProviderFleet, GPUModel: "A100", GPUsPerNode: 8, MinNodes: 2, MaxNodes: 2, Sides: broker.PoolShared},
	} {
		if _, err := st.UpsertPool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var nodes []broker.Node
	for i, n := range []struct {
		owner broker.Owner
		phase broker.Phase
		alloc int
	}{{"k8s", "active", 4}, {"k8s", "active", 2}, {"k8s", "active", 0}, {"yarn", "active", 4}, {"yarn", "active", 3},
		{"yarn", "draining", 1}, {"none", "booting", 0}, {"none", "requested", 0}} {
		pool, model, total := "gpu-training-group", "H100", 4
		if i >= 4 && i < 6 {
			pool, model = "gpu-inference-group", "L4"
		}
		if n.phase.InFlight() {
			total = 0
		}
		nodes = append(nodes, broker.Node{Name: fmt.Sprintf("ip-10-0-1-%d", 10+i), InstanceID: fmt.Sprintf("i-%04d", i), Pool: pool,
			Owner: n.owner, Phase: n.phase, GPUModel: model, GPUsTotal: total, GPUsAllocated: n.alloc,
			Utilisation: float64(n.alloc) / 4, Healthy: true, Protected: i == 0})
	}
	if err := st.UpsertNodes(ctx, nodes, now); err != nil {
		t.Fatal(err)
	}
	mk := func(src broker.Source, key, tenant string, prio int64, gpus int) broker.Demand {
		return broker.Demand{Source: src, Key: key, Name: tenant + "/" + key, Tenant: tenant, Queue: tenant,
			Priority: prio, GPUsPerUnit: gpus, Units: 1}
	}
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: now.Add(-12 * time.Minute), Demand: []broker.Demand{
		mk(broker.SourceK8s, "elastic-gpu-training-0", "ml", 1000000, 2),
		mk(broker.SourceK8s, "elastic-gpu-training-1", "ml", 1000000, 2),
		mk(broker.SourceK8s, "detector-7", "vision", 100, 4),
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: now.Add(-3 * time.Minute), Demand: []broker.Demand{
		mk(broker.SourceYARN, "application_1700000000000_0042/1", "speech", 50, 1),
	}}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWaitReasons(ctx, []broker.Wait{
		{Demand: "k8s/elastic-gpu-training-0", Reason: broker.WaitInFlight, Detail: "node ip-10-0-1-16 is booting for it"},
		{Demand: "k8s/elastic-gpu-training-1", Reason: broker.WaitInFlight, Detail: "node ip-10-0-1-17 is requested for it"},
		{Demand: "k8s/detector-7", Reason: broker.WaitQuota, Detail: "vision holds 16 of its 16 GPUs"},
		{Demand: "yarn/application_1700000000000_0042/1", Reason: broker.WaitScheduler, Detail: "3 GPUs free on YARN nodes"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordDecisions(ctx, []broker.Decision{
		{At: now.Add(-11 * time.Minute), Tick: 1, Kind: "scale-up", Pool: "gpu-training-group", Reason: "2 pods of ml need 4 H100 GPUs; ordering 2 nodes"},
		{At: now.Add(-5 * time.Minute), Tick: 9, Kind: "transfer", Node: "ip-10-0-1-12", Reason: "idle Kubernetes node offered to YARN for speech"},
		{At: now.Add(-time.Minute), Tick: 14, Kind: "wait", Demand: "k8s/detector-7", Tenant: "vision", Reason: "vision is over quota"},
	}); err != nil {
		t.Fatal(err)
	}
	var samples []broker.CapacitySample
	for i := 29; i >= 0; i-- {
		at := now.Add(-time.Duration(i) * time.Minute).Truncate(time.Second)
		wave := (30 - i) % 10
		samples = append(samples,
			broker.CapacitySample{At: at, Side: "k8s", GPUsBusy: 4 + wave/2, GPUsIdle: 6 - wave/2, GPUsInFlight: wave % 3 * 4, GPUsPending: wave},
			broker.CapacitySample{At: at, Side: "yarn", GPUsBusy: 8 - wave/3, GPUsIdle: wave / 3, GPUsPending: 10 - wave})
	}
	if err := st.RecordSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
}

// page is what the test reads back from the rendered dashboard.
type page struct {
	Loaded       int      `json:"loaded"`
	Href         string   `json:"href"`
	Tiles        []string `json:"tiles"`
	InFlight     int      `json:"inflight"`
	Cards        []string `json:"cards"`
	Pools        []string `json:"pools"`
	Groups       []string `json:"groups"`
	Demand       []string `json:"demand"`
	Decisions    []string `json:"decisions"`
	ChartPoints  []int    `json:"chartPoints"`
	ChartLayers  []int    `json:"chartLayers"`
	Status       string   `json:"status"`
	LoginVisible bool     `json:"login"`
	Overflow     int      `json:"overflow"`
	TenantLegend []string `json:"tenantLegend"`
}

const readPage = `
const q = s => Array.from(document.querySelectorAll(s));
const rows = s => q(s + " tbody tr:not(.empty)").map(r => r.innerText.replace(/\s+/g, " ").trim());
return {
  loaded: Number(document.body.dataset.loaded || 0),
  href: location.href,
  tiles: q("#nodes .node").map(n => n.dataset.node),
  inflight: q("#nodes .node.inflight").length,
  cards: q("#sides .card").map(c => c.textContent.replace(/\s+/g, " ").trim()),
  pools: rows("#pools"),
  groups: rows("#demand-groups"),
  demand: rows("#demand"),
  decisions: rows("#decisions"),
  chartPoints: q(".chart svg").map(s => Number(s.dataset.points || 0)),
  chartLayers: q(".chart svg").map(s => s.querySelectorAll("[data-layer]").length),
  status: document.querySelector("#status").innerText,
  login: !document.querySelector("#login").hidden,
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  tenantLegend: q("#tenant-legend span").map(s => s.textContent),
};`

// waitPage polls the rendered page until ok accepts it or the budget ends.
func waitPage(t *testing.T, d *driver, budget time.Duration, what string, ok func(p page) bool) page {
	t.Helper()
	deadline := time.Now().Add(budget)
	var p page
	var err error
	for {
		p = page{}
		err = d.eval(readPage, &p)
		if err == nil && ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %s (last error %v); page: %+v", what, budget, err, p)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func containsAll(rows []string, subs ...string) bool {
	all := strings.Join(rows, "\n")
	for _, s := range subs {
		if !strings.Contains(all, s) {
			return false
		}
	}
	return true
}

func TestDashboardShowsLiveData(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	now := time.Now()
	seed(t, st, now)
	viewer, _, err := st.CreateToken(ctx, "dashboard-test", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Runtime: &fakeRuntime{status: engine.RuntimeStatus{Leader: true, LastTick: now,
			MissingHosts: map[string][]string{"owned-fleet": {"gpu-rack-07"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	d := startDriver(t)
	// Without a token the dashboard asks for one.
	d.open(srv.URL + "/")
	waitPage(t, d, 30*time.Second, "login box without a token", func(p page) bool { return p.LoginVisible })

	// A fresh load, as when the demo prints the address with the token.
	d.open(srv.URL + "/?from=test#token=" + viewer)
	p := waitPage(t, d, 60*time.Second, "dashboard with the seeded data", func(p page) bool {
		return p.Loaded >= 1 && len(p.Tiles) == 8 && len(p.ChartPoints) == 3
	})
	if strings.Contains(p.Href, viewer) {
		t.Errorf("the token stays in the address bar: %s", p.Href)
	}
	if p.LoginVisible {
		t.Error("login box shown with a valid token")
	}
	if p.InFlight != 2 {
		t.Errorf("node map: %d in-flight tiles, want 2", p.InFlight)
	}
	// Sides: Kubernetes 6 of 12 busy, YARN 8 of 12, two nodes (8 GPUs) in flight.
	if !containsAll(p.Cards, "Kubernetes6 / 12", "YARN8 / 12", "8 in flight", "9 GPUs of demand pending") {
		t.Errorf("side cards: %q", p.Cards)
	}
	if !containsAll(p.Pools, "gpu-training-group", "4× H100", "(+2 in flight)", "gpu-inference-group", "1–4",
		"owned-fleet fleet", "owned, 2", "listed by neither side: gpu-rack-07") {
		t.Errorf("pools: %q", p.Pools)
	}
	if !containsAll(p.Groups, "ml 1000000 2 4", "in-flight", "vision", "over-quota", "speech") {
		t.Errorf("demand by tenant and priority: %q", p.Groups)
	}
	if len(p.Demand) != 4 || !strings.HasPrefix(p.Demand[0], "k8s ml/elastic-gpu-training-0") ||
		!containsAll(p.Demand, "12m", "node ip-10-0-1-16 is booting for it", "vision holds 16 of its 16 GPUs") {
		t.Errorf("pending demand: %q", p.Demand)
	}
	if !containsAll(p.Decisions, "scale-up", "ordering 2 nodes", "transfer", "ip-10-0-1-12") {
		t.Errorf("decisions: %q", p.Decisions)
	}
	// YARN and Kubernetes: 30 samples, busy/idle/in-flight areas and the
	// pending line. Tenants: one area per tenant with pending demand.
	if len(p.ChartPoints) != 3 || p.ChartPoints[0] != 30 || p.ChartPoints[1] != 30 || p.ChartLayers[0] != 4 || p.ChartLayers[1] != 4 ||
		p.ChartPoints[2] < 10 || p.ChartLayers[2] != 3 || !containsAll(p.TenantLegend, "ml", "vision", "speech") {
		t.Errorf("charts: points %v, layers %v, tenant legend %q", p.ChartPoints, p.ChartLayers, p.TenantLegend)
	}
	if !strings.Contains(p.Status, "leader") {
		t.Errorf("status: %q", p.Status)
	}
	if p.Overflow > 0 {
		t.Errorf("the page scrolls sideways by %dpx at 1366x768", p.Overflow)
	}

	dir, err := os.MkdirTemp("", "gpubroker-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot (1366x768): %s", d.screenshot(dir, "dashboard-1366x768.png"))

	// It refreshes by itself: a new node and new demand appear without a reload.
	if err := st.UpsertNodes(ctx, []broker.Node{{Name: "ip-10-0-1-99", Pool: "gpu-training-group", Owner: broker.OwnerK8s,
		Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 4, Utilisation: 1, Healthy: true}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: time.Now(), Demand: []broker.Demand{
		{Source: broker.SourceYARN, Key: "application_1700000000000_0043/1", Name: "speech/nightly-asr", Tenant: "speech", Queue: "speech",
			Priority: 50, GPUsPerUnit: 2, Units: 3, Gang: true},
	}}); err != nil {
		t.Fatal(err)
	}
	p = waitPage(t, d, 30*time.Second, "refreshed dashboard", func(p page) bool {
		return len(p.Tiles) == 9 && containsAll(p.Demand, "nightly-asr") && containsAll(p.Cards, "Kubernetes10 / 16")
	})
	d.resize(1366, 1500)
	waitPage(t, d, 10*time.Second, "taller window", func(p page) bool { return p.Loaded > 0 })
	t.Logf("screenshot (full page): %s", d.screenshot(dir, "dashboard-full.png"))
}
