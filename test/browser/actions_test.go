package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// recordingRuntime records the manual node operations the dashboard asks
// for and answers plan previews with a fixed plan.
type recordingRuntime struct {
	mu    sync.Mutex
	calls []string
	plan  broker.Plan
}

func (f *recordingRuntime) DryRun(context.Context) (broker.Plan, error) { return f.plan, nil }
func (f *recordingRuntime) Status() engine.RuntimeStatus {
	return engine.RuntimeStatus{Leader: true, LastTick: time.Now()}
}
func (f *recordingRuntime) record(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
	return nil
}
func (f *recordingRuntime) Cordon(_ context.Context, n string) error { return f.record("cordon " + n) }
func (f *recordingRuntime) Drain(_ context.Context, n string) error  { return f.record("drain " + n) }
func (f *recordingRuntime) Transfer(_ context.Context, n string, to broker.Owner) error {
	return f.record("transfer " + n + " " + string(to))
}
func (f *recordingRuntime) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// find returns the WebDriver id of the element sel selects.
func (d *driver) find(sel string) string {
	d.t.Helper()
	var res struct {
		Value map[string]string `json:"value"`
	}
	if err := d.do("POST", d.s("/element"), map[string]string{"using": "css selector", "value": sel}, &res); err != nil {
		d.t.Fatalf("find %s: %v", sel, err)
	}
	for _, id := range res.Value {
		return id
	}
	d.t.Fatalf("find %s: no element id in the answer", sel)
	return ""
}

// click clicks the element sel selects, as a user would (WebDriver's
// element click: the element must be visible and not covered).
func (d *driver) click(sel string) {
	d.t.Helper()
	// Centre it first: WebDriver scrolls it just into view, where the
	// sticky header may cover it, as it would for a person scrolling.
	var ok bool
	if err := d.eval(`const e = document.querySelector(`+jsString(sel)+`); if (!e) return false; e.scrollIntoView({block: "center"}); return true;`, &ok); err != nil || !ok {
		d.t.Fatalf("click %s: no such element (%v)", sel, err)
	}
	if err := d.do("POST", d.s("/element/"+d.find(sel)+"/click"), map[string]any{}, nil); err != nil {
		d.t.Fatalf("click %s: %v", sel, err)
	}
}

// fill clears the input sel selects and types text into it.
func (d *driver) fill(sel, text string) {
	d.t.Helper()
	id := d.find(sel)
	if err := d.do("POST", d.s("/element/"+id+"/clear"), map[string]any{}, nil); err != nil {
		d.t.Fatalf("clear %s: %v", sel, err)
	}
	if err := d.do("POST", d.s("/element/"+id+"/value"), map[string]any{"text": text}, nil); err != nil {
		d.t.Fatalf("type into %s: %v", sel, err)
	}
}

// waitText polls until the text of sel contains every sub.
func (d *driver) waitText(budget time.Duration, sel string, subs ...string) string {
	d.t.Helper()
	deadline := time.Now().Add(budget)
	script := `const e = document.querySelector(` + jsString(sel) + `); return e ? e.innerText : "";`
	var text string
	for {
		text = ""
		if err := d.eval(script, &text); err == nil && containsAll([]string{text}, subs...) {
			return text
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: %q does not show %q within %s", sel, text, subs, budget)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// actionsWorld is the seeded store behind the real API with a recording
// runtime, plus tokens: an admin, a second admin (alice) and ml's
// tenant-admin.
type actionsWorld struct {
	st                 *store.Store
	rt                 *recordingRuntime
	url                string
	admin, alice, mlAd string
}

func newActionsWorld(t *testing.T) *actionsWorld {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	now := time.Now()
	seed(t, st, now)
	// A failed op with its reason, and a preemption with the work it lost.
	op, err := st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu-inference-group", Target: 2, Serves: []string{"k8s/detector-7"},
		Reason: "detector-7 needs 4 L4 GPUs", State: broker.OpPending, Step: "set-desired"})
	if err != nil {
		t.Fatal(err)
	}
	op.State, op.LastError = broker.OpFailed, "InsufficientInstanceCapacity: no L4 capacity in us-east-1a; pool backs off"
	if _, err := st.AdvanceOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	detail, _ := json.Marshal(broker.Action{Kind: broker.ActPreempt, Node: "ip-10-0-1-13", Serves: []string{"k8s/elastic-gpu-training-0"},
		Victims:      []broker.Workload{{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", Name: "speech/asr-batch", Tenant: "speech", Priority: 50, GPUs: 2}},
		GPUHoursLost: 3.5, Reason: "ml outranks speech"})
	if err := st.RecordDecisions(ctx, []broker.Decision{{At: now.Add(-2 * time.Minute), Tick: 12, Kind: "preempt",
		Demand: "k8s/elastic-gpu-training-0", Tenant: "ml", Node: "ip-10-0-1-13", Reason: "ml outranks speech", Detail: detail}}); err != nil {
		t.Fatal(err)
	}
	migrated, _ := json.Marshal(broker.Action{Kind: broker.ActMigrate, Node: "ip-10-0-1-21", Pool: "gpu-training-group",
		Victims:      []broker.Workload{{Source: broker.SourceK8s, Key: "uid-trainer-3", Name: "ml/trainer-3", Tenant: "ml", Priority: 0, GPUs: 1}},
		Landing:      []string{"ip-10-0-1-22"},
		GPUHoursLost: 0.08, Reason: "1 of 8 GPUs allocated"})
	if err := st.RecordDecisions(ctx, []broker.Decision{{At: now.Add(-time.Minute), Tick: 13, Kind: string(broker.ActMigrate),
		Tenant: "ml", Node: "ip-10-0-1-21", Reason: "migrate 1 tasks off node ip-10-0-1-21: 1 of 8 GPUs allocated", Detail: migrated}}); err != nil {
		t.Fatal(err)
	}
	w := &actionsWorld{st: st, rt: &recordingRuntime{plan: broker.Plan{
		Actions: []broker.Action{{Kind: broker.ActScaleUp, Pool: "gpu-training-group", Target: 3, Serves: []string{"k8s/elastic-gpu-training-1"},
			Reason: "1 pod of ml needs 2 H100 GPUs; ordering 1 node"}},
		Waits: []broker.Wait{{Demand: "k8s/detector-7", Reason: broker.WaitQuota, Detail: "tenant vision uses 16 of its 16 GPUs"},
			{Demand: "yarn/application_1700000000000_0042/1", Reason: broker.WaitQuota, Detail: "tenant speech uses 8 of its 8 GPUs"}}}}}
	for _, tk := range []struct {
		into   *string
		name   string
		role   store.Role
		tenant string
	}{{&w.admin, "ops-admin", store.RoleAdmin, ""}, {&w.alice, "alice", store.RoleAdmin, ""}, {&w.mlAd, "ml-admin", store.RoleTenantAdmin, "ml"}} {
		if *tk.into, _, err = st.CreateToken(ctx, tk.name, tk.role, tk.tenant); err != nil {
			t.Fatal(err)
		}
	}
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Runtime: w.rt})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

func (w *actionsWorld) tenant(t *testing.T, name string) broker.Tenant {
	t.Helper()
	tn, err := w.st.GetTenant(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// TestDashboardActions drives each action as an admin: edit a tenant's
// quota and weight, lose a race to another admin (412, nothing
// overwritten), edit the policy, cordon, drain and transfer a node, and
// read the ops journal's failed op, the preemption with its work lost, the
// plan preview and a demand's history.
func TestDashboardActions(t *testing.T) {
	w := newActionsWorld(t)
	d := startDriver(t)
	d.open(w.url + "/#token=" + w.admin)
	waitPage(t, d, 60*time.Second, "the dashboard as admin", func(p page) bool { return p.Loaded >= 1 && len(p.Tiles) == 8 })
	d.waitText(10*time.Second, "#whoami", "ops-admin", "admin")

	// The ops journal shows the failed op and why it ended; the preemption
	// shows its victims and the work lost.
	d.waitText(10*time.Second, "#ops", "failed", "InsufficientInstanceCapacity: no L4 capacity")
	d.waitText(10*time.Second, "#preemptions", "speech/asr-batch (2 GPUs, priority 50)", "3.5", "ml outranks speech")
	d.waitText(10*time.Second, "#migrations", "ml/trainer-3 (1 GPUs)", "ip-10-0-1-22", "0.08", "migrate 1 tasks off node ip-10-0-1-21")
	d.waitText(10*time.Second, "#policy", "migration", "off", "max migrations per hour")

	// Edit ml's quota and weight.
	d.click(`#tenants [data-edit="ml"]`)
	d.fill(`#tenant-form [name=max_gpus]`, "24")
	d.fill(`#tenant-form [name=weight]`, "2.5")
	d.click(`#tenant-form button[type=submit]`)
	d.waitText(10*time.Second, "#tenant-msg", "saved tenant ml", "max 24 GPUs", "weight 2.5", "version 2")
	if ml := w.tenant(t, "ml"); ml.MaxGPUs != 24 || ml.Weight != 2.5 || !slices.Equal(ml.Namespaces, []string{"ml"}) {
		t.Errorf("tenant ml after the edit: %+v (its namespaces must stay)", ml)
	}
	d.waitText(10*time.Second, `#tenants [data-tenant="ml"]`, "24", "2.5")

	// A stale edit: alice changes vision through the API after the form
	// was opened; saving is refused with 412 and alice's edit stays.
	d.click(`#tenants [data-edit="vision"]`)
	vision := w.tenant(t, "vision")
	vision.MaxGPUs = 12
	for _, l := range []*[]string{&vision.YARNQueues, &vision.Namespaces, &vision.Admins} {
		if *l == nil {
			*l = []string{} // the API refuses nulls
		}
	}
	if _, err := apiPut(w.url+"/api/v1/tenants/vision", w.alice, `"1"`, vision); err != nil {
		t.Fatal(err)
	}
	d.fill(`#tenant-form [name=max_gpus]`, "99")
	d.click(`#tenant-form button[type=submit]`)
	d.waitText(10*time.Second, "#tenant-msg", "not saved", "tenant vision was changed by someone else (now version 2, you sent 1)")
	if v := w.tenant(t, "vision"); v.MaxGPUs != 12 {
		t.Errorf("the stale edit overwrote alice's: vision max %d", v.MaxGPUs)
	}

	// The policy, with If-Match on the version shown.
	d.waitText(10*time.Second, "#policy", "expander")
	d.click("#policy-edit")
	d.fill(`#policy-form [name=cluster_max_gpus]`, "40")
	d.click(`#policy-form [name=preemption]`)
	before, err := w.st.GetPolicy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d.click(`#policy-form button[type=submit]`)
	d.waitText(10*time.Second, "#policy-msg", "saved the policy (version 1)")
	if p, err := w.st.GetPolicy(context.Background()); err != nil || p.ClusterMaxGPUs != 40 || p.Preemption == before.Preemption || p.Expander != before.Expander {
		t.Errorf("policy after the edit: %+v (before %+v), %v", p, before, err)
	}

	// Node actions on a Kubernetes node: cordon, drain, transfer to YARN;
	// "transfer to Kubernetes" is not offered for it.
	d.click(`#nodes [data-node="ip-10-0-1-12"]`)
	d.waitText(5*time.Second, "#node-actions", "ip-10-0-1-12")
	var hidden bool
	if err := d.eval(`return document.querySelector('#node-actions [data-to="k8s"]').hidden;`, &hidden); err != nil || !hidden {
		t.Errorf("transfer to Kubernetes offered for a Kubernetes node (hidden=%v, %v)", hidden, err)
	}
	d.click(`#node-actions [data-act="cordon"]`)
	d.waitText(10*time.Second, "#node-msg", "cordon of ip-10-0-1-12 accepted", "journaled")
	d.click(`#node-actions [data-act="drain"]`)
	d.waitText(10*time.Second, "#node-msg", "drain of ip-10-0-1-12 accepted")
	d.click(`#node-actions [data-to="yarn"]`)
	d.waitText(10*time.Second, "#node-msg", "transfer of ip-10-0-1-12 to YARN accepted")
	if got, want := w.rt.recorded(), []string{"cordon ip-10-0-1-12", "drain ip-10-0-1-12", "transfer ip-10-0-1-12 yarn"}; !slices.Equal(got, want) {
		t.Errorf("runtime calls %q, want %q", got, want)
	}

	// The plan preview.
	d.click("#plan-run")
	d.waitText(10*time.Second, "#plan-summary", "1 actions, 2 waits (2 over-quota)")
	d.waitText(5*time.Second, "#plan", "scale-up", "gpu-training-group", "ordering 1 node")

	// A demand's history, from GET /demand/{id}/why.
	d.click(`#demand [data-why="k8s/detector-7"]`)
	d.waitText(10*time.Second, "#why-box", "vision/detector-7", "tenant vision", "vision is over quota")
}

// TestDashboardTenantAdminSeesOnlyItsTenant: ml's tenant-admin sees ml's
// tenant, demand, decisions and chart and nothing of the other tenants,
// is offered no tenant, policy, node or plan actions, and its writes to
// its own tenant's quota and to another tenant are refused by the API and
// say so.
func TestDashboardTenantAdminSeesOnlyItsTenant(t *testing.T) {
	w := newActionsWorld(t)
	d := startDriver(t)
	d.open(w.url + "/#token=" + w.mlAd)
	p := waitPage(t, d, 60*time.Second, "the dashboard as ml's tenant-admin", func(p page) bool { return p.Loaded >= 1 && len(p.Tiles) == 8 })
	d.waitText(10*time.Second, "#whoami", "tenant-admin of ml")
	if len(p.Demand) != 2 || !containsAll(p.Demand, "elastic-gpu-training-0", "elastic-gpu-training-1") {
		t.Errorf("pending demand shown to ml's admin: %q", p.Demand)
	}
	if !containsAll(p.Cards, "4 GPUs of demand pending") || !containsAll(p.Groups, "ml 1000000 2 4") || len(p.Groups) != 1 {
		t.Errorf("ml's pending: cards %q, groups %q", p.Cards, p.Groups)
	}
	if len(p.TenantLegend) != 1 || p.TenantLegend[0] != "ml" {
		t.Errorf("tenant chart legend %q, want ml only", p.TenantLegend)
	}
	// The plan preview is the admin's (each one observes every source
	// live): not offered, and the API refuses it (api tests).
	d.waitText(10*time.Second, "#plan-summary", "Only an admin may preview the plan")
	var planOffered bool
	if err := d.eval(`return !document.querySelector("#plan-run").hidden;`, &planOffered); err != nil || planOffered {
		t.Errorf("plan preview offered to a tenant-admin (%v)", err)
	}
	var text string
	if err := d.eval(`return document.body.innerText;`, &text); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"vision", "speech", "detector-7", "nightly-asr"} {
		// Whole words: the policy's "max provision time" is no tenant.
		if loc := regexp.MustCompile(`\b` + regexp.QuoteMeta(other) + `\b`).FindStringIndex(text); loc != nil {
			t.Errorf("ml's tenant-admin sees %q on the page: …%s…", other, text[max(0, loc[0]-80):min(len(text), loc[1]+80)])
		}
	}
	var offered struct {
		Policy, Nodes bool
		Edits         []string
	}
	if err := d.eval(`return {policy: !document.querySelector("#policy-edit").hidden, nodes: !document.querySelector("#node-actions").hidden,
		edits: Array.from(document.querySelectorAll("#tenants [data-edit]")).map(b => b.dataset.edit)};`, &offered); err != nil {
		t.Fatal(err)
	}
	if offered.Policy || len(offered.Edits) != 0 {
		t.Errorf("offered to ml's tenant-admin: policy edit %v, tenant edits %q", offered.Policy, offered.Edits)
	}
	d.click(`#nodes [data-node="ip-10-0-1-12"]`)
	d.waitText(5*time.Second, "#node-msg", "only an admin may cordon, drain or transfer nodes")
	if err := d.eval(`return {policy: false, nodes: !document.querySelector("#node-actions").hidden, edits: []};`, &offered); err != nil || offered.Nodes {
		t.Errorf("node actions offered to a tenant-admin (%v)", err)
	}

	// Its own tenant's quota, through the dashboard's own save: a
	// tenant-admin may not size its tenant against the others (issue 25).
	if err := d.eval(`window.gpubroker.saveTenant("ml", {max_gpus: 20}); return null;`, new(any)); err != nil {
		t.Fatal(err)
	}
	d.waitText(10*time.Second, "#tenant-msg", "not saved", "max_gpus may only be changed by an admin")
	if ml := w.tenant(t, "ml"); ml.MaxGPUs != 16 {
		t.Errorf("ml max %d after its tenant-admin tried to change it, want 16", ml.MaxGPUs)
	}
	// Another tenant, through the dashboard's own save: the API refuses
	// it already at the save's read of the tenant (its version), since a
	// tenant-admin may not read another tenant (api/scope.go); the write
	// itself is refused too (api tests).
	if err := d.eval(`window.gpubroker.saveTenant("vision", {max_gpus: 99}); return null;`, new(any)); err != nil {
		t.Fatal(err)
	}
	d.waitText(10*time.Second, "#tenant-msg", "not saved", "a tenant-admin token of tenant ml may read only tenant ml")
	if v := w.tenant(t, "vision"); v.MaxGPUs != 16 {
		t.Errorf("vision max %d after ml's admin tried to change it, want 16", v.MaxGPUs)
	}
}

// apiPut sends a PUT with If-Match as token, as another user's client
// would, and fails unless it succeeds.
func apiPut(url, token, ifMatch string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", ifMatch)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return res, fmt.Errorf("PUT %s: %d %s", url, res.StatusCode, raw)
	}
	return res, nil
}
