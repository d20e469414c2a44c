package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
)

// Tenant B of the scope test: its name, namespace, queue, demand keys and
// a marker in its pods' and rows' names. A tenant-admin of ml must find
// none of them in any answer (tenant vision, the other one of newEnv, by
// name only).
var (
	otherTenantMarks = []string{"okapi", "zebra7", "uid-b", "application_9_"}
	visionWord       = regexp.MustCompile(`(^|[^a-z0-9_-])vision([^a-z0-9_-]|$)`)
)

// seedTwoTenants fills the store with tenant ml's and tenant okapi-lab's
// demand (pending and closed), waits and actions that mention each other,
// ops, a node running both tenants' work, a pool backoff, samples and
// audit entries, and gives the fake runtime a plan for both.
func (e *env) seedTwoTenants() {
	e.t.Helper()
	ctx := context.Background()
	t := e.t
	if _, err := e.st.CreateTenant(ctx, broker.Tenant{Name: "okapi-lab", MaxGPUs: 8, Weight: 1,
		YARNQueues: []string{"root.okapi-q"}, Namespaces: []string{"okapi-ns"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpsertPool(ctx, broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "H100",
		GPUsPerNode: 4, MaxNodes: 5, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetPoolBackoff(ctx, "gpu", time.Now().Add(time.Hour), "a purchase for okapi-lab's okapi-ns/zebra7-train failed"); err != nil {
		t.Fatal(err)
	}
	work := []broker.Workload{
		{Source: broker.SourceK8s, Key: "uid-a9", Name: "ml/alpha7-0", Tenant: "ml", GPUs: 2, CheckpointAge: -1},
		{Source: broker.SourceK8s, Key: "uid-b9", Name: "okapi-ns/zebra7-0", Tenant: "okapi-lab", GPUs: 2, CheckpointAge: -1,
			App: "Job/okapi-ns/zebra7", CheckpointDir: "hdfs:///okapi/zebra7"},
	}
	if err := e.st.UpsertNodes(ctx, []broker.Node{{Name: "n-a", InstanceID: "i-a", Pool: "gpu", Owner: broker.OwnerK8s,
		Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 4, Utilisation: 0.9, Healthy: true,
		Labels: map[string]string{"team": "okapi-lab"}, Work: work}}, e.now); err != nil {
		t.Fatal(err)
	}
	d := func(src broker.Source, key, name, tenant, queue string) broker.Demand {
		return broker.Demand{Source: src, Key: key, Name: name, Tenant: tenant, Queue: queue, Priority: 10, GPUsPerUnit: 2, Units: 1}
	}
	a1 := d(broker.SourceK8s, "uid-a1", "ml/alpha7-train", "ml", "ml")
	a2 := d(broker.SourceK8s, "uid-a2", "ml/alpha7-eval", "ml", "ml")
	b1 := d(broker.SourceK8s, "uid-b1", "okapi-ns/zebra7-train", "okapi-lab", "okapi-ns")
	b2 := d(broker.SourceK8s, "uid-b2", "okapi-ns/zebra7-eval", "okapi-lab", "okapi-ns")
	if _, err := e.st.ApplyObservation(ctx, obs(broker.SourceK8s, e.now.Add(-20*time.Minute), a1, a2, b1, b2)); err != nil {
		t.Fatal(err)
	}
	// uid-a2 and uid-b2 leave the ledger: closed demand of both tenants.
	if _, err := e.st.ApplyObservation(ctx, obs(broker.SourceK8s, e.now.Add(-10*time.Minute), a1, b1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ApplyObservation(ctx, obs(broker.SourceYARN, e.now.Add(-5*time.Minute),
		d(broker.SourceYARN, "application_5_0001/1", "alpha7 etl", "ml", "root.ml"),
		d(broker.SourceYARN, "application_9_0002/1", "zebra7 etl", "okapi-lab", "root.okapi-q"))); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetWaitReasons(ctx, []broker.Wait{
		{Demand: "k8s/uid-a1", Reason: broker.WaitQuota, Detail: "okapi-lab holds 6 GPUs of root.okapi-q and okapi-ns/zebra7-0 runs"},
		{Demand: "k8s/uid-b1", Reason: broker.WaitInFlight, Detail: "zebra7 waits for a node"},
	}); err != nil {
		t.Fatal(err)
	}
	victims := []broker.Workload{work[1]}
	preempt := broker.Action{Kind: broker.ActPreempt, Pool: "gpu", Node: "n-a", Victims: victims,
		Serves: []string{"k8s/uid-a1", "k8s/uid-b1"}, Reason: "preempt 1 workloads on node n-a for demand k8s/uid-a1 at priority 10"}
	detail, err := json.Marshal(preempt)
	if err != nil {
		t.Fatal(err)
	}
	onlyB, err := json.Marshal(broker.Action{Kind: broker.ActScaleUp, Pool: "gpu", Target: 2, Serves: []string{"k8s/uid-b1"},
		Reason: "scale up gpu for zebra7"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.RecordDecisions(ctx, []broker.Decision{
		{At: e.now.Add(-4 * time.Minute), Tick: 1, Kind: "wait", Demand: "k8s/uid-a1", Tenant: "ml",
			Reason: "over-quota: okapi-lab holds the room (alpha7 waits)"},
		{At: e.now.Add(-4 * time.Minute), Tick: 1, Kind: "wait", Demand: "k8s/uid-b1", Tenant: "okapi-lab", Reason: "in-flight: zebra7"},
		{At: e.now.Add(-3 * time.Minute), Tick: 2, Kind: "preempt", Demand: "k8s/uid-a1", Pool: "gpu", Node: "n-a",
			Reason: preempt.Reason, Detail: detail},
		{At: e.now.Add(-3 * time.Minute), Tick: 2, Kind: "scale-up", Demand: "k8s/uid-b1", Pool: "gpu", Reason: "scale up gpu for zebra7", Detail: onlyB},
		{At: e.now.Add(-2 * time.Minute), Tick: 3, Kind: "kept", Node: "n-a", Reason: "runs okapi-ns/zebra7-0 (zebra7)"},
	}); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]any{"victims": victims, "evicted": []string{"okapi-ns/zebra7-0"}})
	if err != nil {
		t.Fatal(err)
	}
	op, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActPreempt, Pool: "gpu", Node: "n-a", Serves: preempt.Serves,
		Reason: preempt.Reason, State: broker.OpRunning, Step: "evict", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	op.LastError = "evict okapi-ns/zebra7-0: 429 Too Many Requests (a PodDisruptionBudget of okapi-ns)"
	if _, err := e.st.AdvanceOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 2, Serves: []string{"k8s/uid-b1"},
		Reason: "scale up gpu for zebra7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Pool: "gpu", Node: "n-z", Reason: "reclaim n-z after zebra7"}); err != nil {
		t.Fatal(err)
	}
	var samples []broker.CapacitySample
	for i := 6; i > 0; i-- {
		samples = append(samples, broker.CapacitySample{At: e.now.Add(-time.Duration(i) * time.Minute).Truncate(time.Second),
			Side: "k8s", GPUsBusy: 4, GPUsPending: 8})
	}
	if err := e.st.RecordSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	// Audit entries of both tenants, through the API.
	for _, w := range []struct {
		path, role string
		body       map[string]any
	}{
		{"/api/v1/tenants/okapi-lab", "admin", map[string]any{"max_gpus": 10, "weight": 1,
			"yarn_queues": []string{"root.okapi-q"}, "namespaces": []string{"okapi-ns"}}},
		// A tenant-admin may send its tenant back unchanged (it may change
		// none of these fields: tenantFieldRules).
		{"/api/v1/tenants/ml", "ml-admin", map[string]any{"max_gpus": 16, "guaranteed_gpus": 2, "weight": 1,
			"yarn_queues": []string{"root.ml"}, "namespaces": []string{"ml"}}},
	} {
		if r := e.call("PUT", w.path, w.role, w.body, `If-Match: "1"`); r.code != 200 {
			t.Fatalf("PUT %s as %s: %d %s", w.path, w.role, r.code, r.raw)
		}
	}
	e.rt.set(func(f *fakeRuntime) {
		f.plan = broker.Plan{
			Actions: []broker.Action{preempt,
				{Kind: broker.ActScaleUp, Pool: "gpu", Target: 3, Serves: []string{"yarn/application_9_0002/1"}, Reason: "scale up gpu for zebra7"}},
			Waits: []broker.Wait{
				{Demand: "k8s/uid-a1", Reason: broker.WaitQuota, Detail: "okapi-lab holds the room (alpha7)"},
				{Demand: "yarn/application_9_0002/1", Reason: broker.WaitInFlight, Detail: "zebra7 etl waits"}},
			Kept: []broker.NodeNote{{Node: "n-a", Reason: "runs okapi-ns/zebra7-0"}},
		}
	})
}

// scopeCall is one request of the scope table.
type scopeCall struct {
	method, path string
	code         int
	// echo is part of the path that the answer may repeat (a refused
	// lookup names what was asked).
	echo string
	// own must be in the tenant-admin's answer; other in the admin's
	// (the seed reaches the route, so the check can fail).
	own, other string
}

// TestTenantAdminSeesOnlyItsTenant walks every read route of the router:
// each must have a case here and a decision in the API's scope table (a
// new route without either fails), and on each a tenant-admin token of ml
// sees no row and no name of tenant okapi-lab (nor tenant vision's name),
// while an admin's answer on the same route does show okapi-lab's data
// where the route has any.
func TestTenantAdminSeesOnlyItsTenant(t *testing.T) {
	e := newEnv(t)
	e.seedTwoTenants()
	cases := map[string][]scopeCall{
		"GET /healthz":             {{path: "/healthz"}},
		"GET /readyz":              {{path: "/readyz"}},
		"GET /metrics":             nil, // public: see TestMetricsArePublic
		"GET /*":                   {{path: "/"}, {path: "/app.js"}},
		"GET /api/v1/openapi.json": {{path: "/api/v1/openapi.json"}},
		"GET /api/v1/whoami":       {{path: "/api/v1/whoami", own: `"ml"`}},
		"GET /api/v1/tenants":      {{path: "/api/v1/tenants", own: `"ml"`, other: "okapi-lab"}},
		"GET /api/v1/tenants/{name}": {{path: "/api/v1/tenants/ml", own: `"ml"`},
			{path: "/api/v1/tenants/okapi-lab", code: 403, echo: "okapi-lab", other: "okapi-q"},
			{path: "/api/v1/tenants/no-such", code: 403}},
		"GET /api/v1/pools":        {{path: "/api/v1/pools", own: "another tenant", other: "okapi"}},
		"GET /api/v1/pools/{name}": {{path: "/api/v1/pools/gpu", own: "H100"}},
		"GET /api/v1/policy":       {{path: "/api/v1/policy"}},
		"GET /api/v1/demand": {{path: "/api/v1/demand", own: "uid-a1", other: "uid-b1"},
			{path: "/api/v1/demand?state=closed", own: "uid-a2", other: "uid-b2"},
			{path: "/api/v1/demand?tenant=ml", own: "application_5_0001"},
			{path: "/api/v1/demand?tenant=okapi-lab", code: 403, echo: "okapi-lab", other: "zebra7"}},
		"GET /api/v1/demand/{id}/why": {{path: "/api/v1/demand/k8s%2Fuid-a1/why", own: "preempt", other: "zebra7"},
			{path: "/api/v1/demand/k8s%2Fuid-b1/why", code: 403, echo: "k8s/uid-b1", other: "zebra7"}},
		"GET /api/v1/nodes": {{path: "/api/v1/nodes", own: "uid-a9", other: "uid-b9"},
			{path: "/api/v1/nodes?limit=1&healthy=true", own: "uid-a9", other: "uid-b9"}},
		"GET /api/v1/nodes/{name}": {{path: "/api/v1/nodes/n-a", own: "alpha7-0", other: "zebra7-0"}},
		"GET /api/v1/decisions": {{path: "/api/v1/decisions", own: "alpha7", other: "zebra7"},
			{path: "/api/v1/decisions?tenant=okapi-lab", code: 403, echo: "okapi-lab", other: "zebra7"},
			{path: "/api/v1/decisions?kind=preempt", own: "another tenant", other: "okapi-ns/zebra7-0"}},
		"GET /api/v1/ops":             {{path: "/api/v1/ops", own: "preempt", other: "zebra7"}},
		"POST /api/v1/plan":           {{method: "POST", path: "/api/v1/plan", code: 403, own: "/api/v1/decisions", other: "zebra7"}},
		"GET /api/v1/capacity":        {{path: "/api/v1/capacity", own: `"tenant":"ml"`, other: "okapi-lab"}},
		"GET /api/v1/capacity/series": {{path: "/api/v1/capacity/series?window=1h", own: `"tenant":"ml"`, other: "okapi-lab"}},
		"GET /api/v1/audit":           {{path: "/api/v1/audit", own: "tenant/ml", other: "okapi"}},
	}
	scopes := api.ReadScopesForTest
	routed := map[string]bool{}
	err := chi.Walk(e.handler.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		k := method + " " + pattern
		if method != http.MethodGet && k != "POST /api/v1/plan" {
			return nil
		}
		routed[k] = true
		if scopes[k] == "" {
			t.Errorf("read route %s has no tenant scope decision in api/scope.go's readScopes", k)
		}
		if _, ok := cases[k]; !ok {
			t.Errorf("read route %s has no case in this test", k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range scopes {
		if !routed[k] {
			t.Errorf("readScopes decides %s, which the router does not serve as a read", k)
		}
	}
	for route, calls := range cases {
		if !routed[route] {
			t.Errorf("case %s: the router does not serve it", route)
		}
		for _, c := range calls {
			if c.method == "" {
				c.method = "GET"
			}
			if c.code == 0 {
				c.code = 200
			}
			r := e.call(c.method, c.path, "ml-admin", nil)
			if r.code != c.code {
				t.Errorf("%s %s as ml-admin: got %d %s, want %d", c.method, c.path, r.code, r.raw, c.code)
				continue
			}
			body := r.raw
			if c.echo != "" {
				body = strings.ReplaceAll(body, c.echo, "")
			}
			for _, m := range otherTenantMarks {
				if strings.Contains(body, m) {
					t.Errorf("%s %s as ml-admin shows %q of tenant okapi-lab: %s", c.method, c.path, m, r.raw)
				}
			}
			if strings.HasPrefix(c.path, "/api/v1/") && c.path != "/api/v1/openapi.json" && visionWord.MatchString(body) {
				t.Errorf("%s %s as ml-admin names tenant vision: %s", c.method, c.path, r.raw)
			}
			if c.own != "" && !strings.Contains(r.raw, c.own) {
				t.Errorf("%s %s as ml-admin lacks its own %q: %s", c.method, c.path, c.own, r.raw)
			}
			if c.other != "" {
				if a := e.call(c.method, strings.ReplaceAll(c.path, "no-such", "okapi-lab"), "admin", nil); !strings.Contains(a.raw, c.other) {
					t.Errorf("%s %s as admin lacks %q: the seed does not reach the route, so the check above proves nothing: %s",
						c.method, c.path, c.other, a.raw)
				}
			}
		}
	}
}

// TestTenantAdminScopedCounts: the aggregates a tenant-admin reads add up
// to its own tenant's rows: pending_gpus is its demand's GPUs, a node's
// gpus_allocated still counts every tenant's work (shared capacity), and
// the ops and decisions it sees are exactly those serving its demand.
func TestTenantAdminScopedCounts(t *testing.T) {
	e := newEnv(t)
	e.seedTwoTenants()
	c := e.call("GET", "/api/v1/capacity", "ml-admin", nil)
	want(t, c, 200, "capacity")
	// ml: uid-a1 (2 GPUs) and application_5_0001/1 (2 GPUs) pend.
	if c.body["pending_gpus"] != float64(4) {
		t.Errorf("ml-admin pending_gpus = %v, want 4 (its own demand): %s", c.body["pending_gpus"], c.raw)
	}
	if a := e.call("GET", "/api/v1/capacity", "admin", nil); a.body["pending_gpus"] != float64(8) {
		t.Errorf("admin pending_gpus = %v, want 8", a.body["pending_gpus"])
	}
	n := e.call("GET", "/api/v1/nodes/n-a", "ml-admin", nil)
	if n.body["gpus_allocated"] != float64(4) || len(n.body["work"].([]any)) != 1 {
		t.Errorf("ml-admin node n-a: %s, want gpus_allocated 4 and its one workload", n.raw)
	}
	ops := e.call("GET", "/api/v1/ops", "ml-admin", nil).items()
	if len(ops) != 1 || ops[0].(map[string]any)["kind"] != "preempt" {
		t.Fatalf("ml-admin ops: %v, want the preemption serving uid-a1 only", ops)
	}
	serves := ops[0].(map[string]any)["serves"].([]any)
	if len(serves) != 2 || serves[0] != "k8s/uid-a1" || serves[1] != "another tenant's demand" {
		t.Errorf("ml-admin op serves %v, want its demand and another tenant's, unnamed", serves)
	}
	ds := e.call("GET", "/api/v1/decisions", "ml-admin", nil).items()
	var kinds []string
	for _, d := range ds {
		kinds = append(kinds, d.(map[string]any)["kind"].(string))
	}
	if strings.Join(kinds, ",") != "preempt,wait" {
		t.Errorf("ml-admin decisions %v, want its preemption and its wait (newest first)", kinds)
	}
	if all := e.call("GET", "/api/v1/decisions", "viewer", nil).items(); len(all) != 5 {
		t.Errorf("viewer decisions: %d, want all 5", len(all))
	}
}

// TestMetricsArePublic: /metrics, the one read that names every tenant,
// is not behind a token at all (readScopes says so: it is for the
// monitoring system), so a tenant-admin token changes nothing there.
func TestMetricsArePublic(t *testing.T) {
	e := newEnv(t)
	e.seedTwoTenants()
	r := e.call("GET", "/metrics", "", nil)
	if r.code != 200 || !strings.Contains(r.raw, `tenant="okapi-lab"`) {
		t.Fatalf("GET /metrics without a token: %d, want 200 with every tenant's series", r.code)
	}
	if !strings.Contains(api.ReadScopesForTest["GET /metrics"], "names every tenant") {
		t.Errorf("readScopes must say that /metrics names every tenant: %q", api.ReadScopesForTest["GET /metrics"])
	}
}
