package yarn_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestCordonProbeRecognisesWhatIsMissing: the startup probe tells a
// cluster that cannot offer the cordon (node labels disabled, a
// distributed node-label configuration, the FairScheduler) by the RM's own
// answers, says what is missing, and does not ask again; an RM it cannot
// reach is asked again later.
func TestCordonProbeRecognisesWhatIsMissing(t *testing.T) {
	ctx := testCtx(t)
	// Through the admin protocol: an RM without yarn.node-labels.enabled.
	sim, err := yarnsim.New(yarnsim.Config{NodeLabelsDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	as, _ := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: filepath.Join(t.TempDir(), "exclude.xml")})
	addr, err := as.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = as.Close() })
	client, _ := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	admin, _ := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	c, err := yarn.NewCordon(yarn.CordonConfig{Client: client, Admin: yarn.RMAdminLabeler{Client: admin}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := c.Available(ctx); ok || !strings.Contains(why, "yarn.node-labels.enabled=true") {
		t.Fatalf("Available on an RM without node labels = %v, %q", ok, why)
	}

	cases := []struct {
		refuse, want string
	}{
		// AdminService's and CommonNodeLabelsManager's messages (Hadoop 3.3.6, 3.5.0).
		{"java.io.IOException: Error when invoke method=replaceLabelsOnNode because distributed node label configuration is enabled.", "configuration-type=centralized"},
		{"java.io.IOException: Exclusivity cannot be modified for an existing label with : gpubroker-cordon", "non-exclusive"},
	}
	for _, tc := range cases {
		e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{})
		l := &simLabeler{sim: e.sim, refuse: tc.refuse}
		e.withLabeler(t, l, time.Minute)
		ok, why := e.cordon.Available(ctx)
		if ok || !strings.Contains(why, tc.want) {
			t.Errorf("Available with %q = %v, %q; want false naming %q", tc.refuse, ok, why, tc.want)
		}
		l.refuse = ""
		if ok, _ := e.cordon.Available(ctx); ok {
			t.Errorf("a recognised refusal was probed again")
		}
		if err := e.d.Cordon(ctx, "g1"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Cordon without the cordon = %v, want the reason", err)
		}
	}
	// An unknown failure (the RM down) is no verdict: probed again.
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{})
	l := &simLabeler{sim: e.sim, refuse: "connection refused"}
	e.withLabeler(t, l, time.Minute)
	if ok, _ := e.cordon.Available(ctx); ok {
		t.Fatal("Available through a failing admin port")
	}
	l.refuse = ""
	e.clk.Add(2 * time.Minute)
	if ok, why := e.cordon.Available(ctx); !ok {
		t.Fatalf("Available after the RM came back = %v, %q", ok, why)
	}
}

// TestCordonProbeRefusesFairScheduler: the FairScheduler ignores node
// labels, so a cordon there would hold nothing.
func TestCordonProbeRefusesFairScheduler(t *testing.T) {
	ctx := testCtx(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"scheduler":{"schedulerInfo":{"type":"fairScheduler"}}}`))
	}))
	t.Cleanup(srv.Close)
	client, _ := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	l := &countingLabeler{}
	c, err := yarn.NewCordon(yarn.CordonConfig{Client: client, Admin: l})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := c.Available(ctx); ok || !strings.Contains(why, "CapacityScheduler") {
		t.Fatalf("Available under the FairScheduler = %v, %q", ok, why)
	}
	if len(l.calls) != 0 {
		t.Fatalf("label calls %q under the FairScheduler: want none", l.calls)
	}
}

// countingLabeler counts the label calls it gets and answers none.
type countingLabeler struct{ calls []string }

func (l *countingLabeler) AddExclusiveLabel(_ context.Context, name string) error {
	l.calls = append(l.calls, "add "+name)
	return nil
}

func (l *countingLabeler) ReplaceLabelsOnNode(context.Context, map[string][]string, bool) error {
	l.calls = append(l.calls, "replace")
	return nil
}

// TestCordonEnsureReappliesAMissingLabel: a host the observation lists
// without the label (lost across a failover) gets it back; a host that
// still has it, or is not listed, is left alone; the hold starts again.
func TestCordonEnsureReappliesAMissingLabel(t *testing.T) {
	ctx := testCtx(t)
	e := newCordonEnv(t, []string{"g1", "g2"}, time.Minute, yarn.DecommissionConfig{})
	side := yarn.NewSide(e.client, yarn.MapOptions{}).WithCordon(e.cordon)
	if err := e.d.Cordon(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	observe := func() {
		if _, err := side.Observe(ctx, broker.TenantIndex{}); err != nil {
			t.Fatal(err)
		}
	}
	observe()
	e.clk.Add(2 * time.Minute)
	if held, ok := e.cordon.HeldFor("g1"); !ok || held != 2*time.Minute {
		t.Fatalf("HeldFor(g1) = %s, %v", held, ok)
	}
	if again, err := e.d.EnsureCordon(ctx, "g1"); err != nil || again {
		t.Fatalf("EnsureCordon on a cordoned host = %v, %v; want nothing done", again, err)
	}
	// The label store lost it.
	if err := e.sim.ReplaceNodeLabels(map[string][]string{"g1": {}}, true); err != nil {
		t.Fatal(err)
	}
	observe()
	if _, ok := e.cordon.HeldFor("g1"); ok {
		t.Fatal("the hold went on while the label was missing")
	}
	if again, err := e.d.EnsureCordon(ctx, "g1"); err != nil || !again {
		t.Fatalf("EnsureCordon after the label was lost = %v, %v; want it re-applied", again, err)
	}
	obs, _ := e.client.Observe(ctx)
	if l := mustNode(t, obs, "g1").Labels; !slices.Equal(l, []string{yarn.DefaultCordonLabel}) {
		t.Fatalf("g1 labels %v after EnsureCordon", l)
	}
	if again, _ := e.d.EnsureCordon(ctx, "unlisted"); again {
		t.Fatal("EnsureCordon labelled a host no observation lists")
	}
}

// TestSideReportsCordonedHostAsNoSides: a host under the cordon is no
// side's, and its partition is its pool's, not the cordon label.
func TestSideReportsCordonedHostAsNoSides(t *testing.T) {
	ctx := testCtx(t)
	e := newCordonEnv(t, []string{"g1", "g2"}, time.Minute, yarn.DecommissionConfig{})
	side := yarn.NewSide(e.client, yarn.MapOptions{}).WithCordon(e.cordon)
	if err := e.d.Cordon(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	obs, err := side.Observe(ctx, broker.TenantIndex{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range obs.Nodes {
		switch {
		case n.Name == "g1" && (n.Owner != "none" || n.Partition != ""):
			t.Errorf("cordoned g1: owner %s, partition %q; want none and the pool's", n.Owner, n.Partition)
		case n.Name == "g2" && n.Owner != "yarn":
			t.Errorf("g2: owner %s, want yarn", n.Owner)
		}
	}
}

// placeholderRM serves a node list the test sets, as an RM that has just
// become active lists its exclude file.
type placeholderRM struct {
	mu    sync.Mutex
	nodes []map[string]any
}

func (p *placeholderRM) set(nodes ...map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nodes = nodes
}

func (p *placeholderRM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(r.URL.Path, "/ws/v1/cluster/scheduler") {
		_, _ = w.Write([]byte(`{"scheduler":{"schedulerInfo":{"type":"capacityScheduler"}}}`))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"nodes": map[string]any{"node": p.nodes}})
}

// TestReleasePlaceholderIsNeverDrained: a DECOMMISSIONED entry that is a
// placeholder (node id host:-1, no HTTP port, version unknown; Hadoop's
// NodesListManager.setDecommissionedNMs) means the RM restarted: Unknown,
// never drained. A real DECOMMISSIONED entry beside it wins; a host whose
// containers were last seen running and that is found SHUTDOWN is
// released with the loss named.
func TestReleasePlaceholderIsNeverDrained(t *testing.T) {
	ctx := testCtx(t)
	rm := &placeholderRM{}
	srv := httptest.NewServer(rm)
	t.Cleanup(srv.Close)
	client, _ := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	ex, _ := yarn.NewExcludeFile(filepath.Join(t.TempDir(), "exclude.xml"))
	sim, _ := yarnsim.New(yarnsim.Config{})
	as, _ := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: ex.Path()})
	addr, err := as.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = as.Close() })
	admin, _ := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	d, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex})
	if err != nil {
		t.Fatal(err)
	}
	placeholder := map[string]any{"id": "g1:-1", "nodeHostName": "g1", "state": "DECOMMISSIONED", "nodeHTTPAddress": "",
		"version": "unknown", "numContainers": 0}
	for _, p := range []map[string]any{
		placeholder,
		{"id": "g1:-1", "nodeHostName": "g1", "state": "DECOMMISSIONED", "nodeHTTPAddress": "g1:-1", "version": "unknown"},
	} {
		rm.set(p)
		st, err := d.Release(ctx, "g1", time.Time{})
		if err != nil || st.Drained || !strings.Contains(st.Unknown, "placeholder") {
			t.Fatalf("Release on a placeholder %v = %+v, %v; want Unknown, not drained", p, st, err)
		}
	}
	real := map[string]any{"id": "g1:45454", "nodeHostName": "g1", "state": "DECOMMISSIONED", "nodeHTTPAddress": "g1:8042",
		"version": "3.3.6", "numContainers": 0}
	rm.set(placeholder, real)
	if st, err := d.Release(ctx, "g1", time.Time{}); err != nil || !st.Drained || len(st.Lost) != 0 {
		t.Fatalf("Release with the real DECOMMISSIONED entry = %+v, %v; want drained, nothing lost", st, err)
	}

	// g2 runs two containers (the NodeManager API does not answer: a
	// count); then a failover shuts its NodeManager down.
	rm.set(map[string]any{"id": "g2:45454", "nodeHostName": "g2", "state": "RUNNING", "nodeHTTPAddress": "127.0.0.1:1",
		"version": "3.3.6", "numContainers": 2})
	if st, err := d.Release(ctx, "g2", time.Time{}); err != nil || st.Drained || len(st.Remaining) != 1 {
		t.Fatalf("Release of busy g2 = %+v, %v", st, err)
	}
	rm.set(map[string]any{"id": "g2:45454", "nodeHostName": "g2", "state": "SHUTDOWN", "nodeHTTPAddress": "127.0.0.1:1",
		"version": "3.3.6", "numContainers": 0})
	st, err := d.Release(ctx, "g2", time.Time{})
	if err != nil || !st.Drained || !slices.Equal(st.Lost, []string{"2 containers"}) {
		t.Fatalf("Release of g2 shut down with its work = %+v, %v; want drained with the loss named", st, err)
	}
}
