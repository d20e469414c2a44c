package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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

// fakeRuntime records manual operations and answers dry runs.
type fakeRuntime struct {
	mu     sync.Mutex
	calls  []string
	status engine.RuntimeStatus
	plan   broker.Plan
	err    error
	// dry counts dry runs (each one a live observation in production).
	dry int
}

func (f *fakeRuntime) DryRun(context.Context) (broker.Plan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dry++
	return f.plan, f.err
}

// dryRuns returns how many dry runs were made.
func (f *fakeRuntime) dryRuns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dry
}

func (f *fakeRuntime) Status() engine.RuntimeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeRuntime) record(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.calls = append(f.calls, s)
	return nil
}

func (f *fakeRuntime) Cordon(_ context.Context, n string) error { return f.record("cordon " + n) }
func (f *fakeRuntime) Drain(_ context.Context, n string) error  { return f.record("drain " + n) }
func (f *fakeRuntime) Transfer(_ context.Context, n string, to broker.Owner) error {
	return f.record("transfer " + n + " " + string(to))
}

func (f *fakeRuntime) set(fn func(f *fakeRuntime)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// env is one API server on its own database, with a token per role.
type env struct {
	t       testing.TB
	st      *store.Store
	rt      *fakeRuntime
	srv     *httptest.Server
	handler http.Handler
	logs    *syncBuffer
	now     time.Time
	tokens  map[string]string // admin, ml-admin, viewer, agent
	// skew moves the API's clock ahead of the wall clock (advance).
	skew atomic.Int64
}

// advance moves the API's clock d ahead.
func (e *env) advance(d time.Duration) { e.skew.Add(int64(d)) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	url := pg.NewDatabase(t, store.Migrate)
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{t: t, st: st, rt: &fakeRuntime{status: engine.RuntimeStatus{Leader: true, LastTick: time.Now()}},
		logs: &syncBuffer{}, now: time.Now(), tokens: map[string]string{}}
	for _, name := range []string{"ml", "vision"} {
		if _, err := st.CreateTenant(ctx, broker.Tenant{Name: name, MaxGPUs: 16, GuaranteedGPUs: 2, Weight: 1,
			YARNQueues: []string{"root." + name}, Namespaces: []string{name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range []struct {
		name   string
		role   store.Role
		tenant string
	}{{"admin", store.RoleAdmin, ""}, {"ml-admin", store.RoleTenantAdmin, "ml"},
		{"viewer", store.RoleViewer, ""}} {
		secret, _, err := st.CreateToken(ctx, tk.name, tk.role, tk.tenant)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[tk.name] = secret
	}
	// The agent token is bound to the nodes the tests report for.
	secret, _, err := st.CreateAgentToken(ctx, "agent", []string{"ip-10-0-0-1", "ip-10-0-0-2", "n1", "node-a"}, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	e.tokens["agent"] = secret
	e.handler, err = api.New(api.Config{Store: st, Runtime: e.rt, Registry: prometheus.NewRegistry(),
		Logger:       slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AuthCacheTTL: -1, MaxBodyBytes: 64 << 10,
		Now: func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.handler)
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() {
		// No secret may ever reach the log.
		logs := e.logs.String()
		for role, secret := range e.tokens {
			if strings.Contains(logs, secret) {
				t.Errorf("the %s token appears in the log", role)
			}
		}
	})
	return e
}

// resp is a decoded answer.
type resp struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

func (r resp) errField() string {
	e, _ := r.body["error"].(map[string]any)
	f, _ := e["field"].(string)
	return f
}

func (r resp) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r resp) items() []any {
	it, _ := r.body["items"].([]any)
	return it
}

// call sends a request as the token of role ("" for none). body is
// marshalled unless it is a string; headers are "Key: value" pairs.
func (e *env) call(method, path, role string, body any, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if role != "" {
		tok, ok := e.tokens[role]
		if !ok {
			tok = role // a literal token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := resp{code: res.StatusCode, header: res.Header, raw: string(raw)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") && len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return out
}

// want fails the test unless r has the code.
func want(t *testing.T, r resp, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: got %d %s, want %d", what, r.code, r.raw, code)
	}
}

// wantInvalid fails unless r is a 400 naming field.
func wantInvalid(t *testing.T, r resp, field, what string) {
	t.Helper()
	if r.code != http.StatusBadRequest || r.errCode() != "invalid" || r.errField() != field {
		t.Fatalf("%s: got %d %s, want 400 invalid naming field %q", what, r.code, r.raw, field)
	}
	e, _ := r.body["error"].(map[string]any)
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("%s: error without a message: %s", what, r.raw)
	}
}

// seed fills the store with pools, nodes, demand, decisions and samples.
func (e *env) seed() {
	e.t.Helper()
	ctx := context.Background()
	for _, p := range []broker.Pool{
		{Name: "gpu-training-group", Provider: "aws", Group: "gpu-training-group", GPUModel: "H100", GPUsPerNode: 4, MinNodes: 0, MaxNodes: 5, Sides: broker.PoolShared},
		{Name: "cpu-node-group", Provider: "aws", Group: "cpu-node-group", MinNodes: 1, MaxNodes: 10, Sides: broker.PoolK8s},
	} {
		if _, err := e.st.UpsertPool(ctx, p); err != nil {
			e.t.Fatal(err)
		}
	}
	nodes := []broker.Node{
		{Name: "ip-10-0-0-1", InstanceID: "i-1", Pool: "gpu-training-group", Owner: broker.OwnerK8s, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 3, Utilisation: 0.7, Healthy: true},
		{Name: "ip-10-0-0-2", InstanceID: "i-2", Pool: "gpu-training-group", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 1, Utilisation: 0.2, Healthy: true},
		{Name: "ip-10-0-0-3", InstanceID: "i-3", Pool: "gpu-training-group", Owner: broker.OwnerNone, Phase: broker.PhaseBooting, GPUModel: "H100", Utilisation: -1, Healthy: true},
	}
	if err := e.st.UpsertNodes(ctx, nodes, e.now); err != nil {
		e.t.Fatal(err)
	}
	mk := func(src broker.Source, key, tenant string, prio int64, gpus int) broker.Demand {
		return broker.Demand{Source: src, Key: key, Name: tenant + "/" + key, Tenant: tenant, Queue: tenant,
			Priority: prio, GPUsPerUnit: gpus, Units: 1}
	}
	if _, err := e.st.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: e.now.Add(-10 * time.Minute),
		Demand: []broker.Demand{mk(broker.SourceK8s, "p1", "ml", 1000000, 2), mk(broker.SourceK8s, "p2", "vision", 100, 4)}}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: e.now.Add(-time.Minute),
		Demand: []broker.Demand{mk(broker.SourceYARN, "application_1_0001/1", "ml", 10, 1)}}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.SetWaitReasons(ctx, []broker.Wait{
		{Demand: "k8s/p1", Reason: broker.WaitInFlight, Detail: "node ip-10-0-0-3 is booting for it"},
		{Demand: "k8s/p2", Reason: broker.WaitQuota, Detail: "vision is at its max of 16 GPUs"},
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.RecordDecisions(ctx, []broker.Decision{
		{At: e.now.Add(-2 * time.Minute), Tick: 1, Kind: "scale-up", Pool: "gpu-training-group", Reason: "k8s/p1 needs 2 H100 GPUs"},
		{At: e.now.Add(-time.Minute), Tick: 2, Kind: "wait", Demand: "k8s/p2", Tenant: "vision", Reason: "over quota"},
	}); err != nil {
		e.t.Fatal(err)
	}
	var samples []broker.CapacitySample
	for i := 10; i > 0; i-- {
		at := e.now.Add(-time.Duration(i) * time.Minute).Truncate(time.Second)
		samples = append(samples,
			broker.CapacitySample{At: at, Side: "k8s", GPUsBusy: 3, GPUsIdle: 1, GPUsInFlight: 4, GPUsPending: 6},
			broker.CapacitySample{At: at, Side: "yarn", GPUsBusy: 1, GPUsIdle: 3, GPUsPending: 1})
	}
	if err := e.st.RecordSamples(ctx, samples); err != nil {
		e.t.Fatal(err)
	}
}
