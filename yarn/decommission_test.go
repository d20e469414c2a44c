package yarn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// clock is a settable clock for the Decommissioner and the admin server.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// decomEnv is yarnsim's REST and admin ports with a Decommissioner on
// them; requests records the REST calls other than GETs of the node list.
type decomEnv struct {
	sim    *yarnsim.Sim
	admin  *yarnsim.AdminServer
	client *yarn.Client
	ex     *yarn.ExcludeFile
	d      *yarn.Decommissioner
	clk    *clock

	// cordon, set by newCordonEnv, labels hosts in the simulator.
	cordon  *yarn.Cordon
	labeler yarn.Labeler
	rmadmin *rmadmin.Client
	cfg     yarn.DecommissionConfig

	mu       sync.Mutex
	requests []string
	// noSignal makes the RM answer the container signal API with 404, as
	// an RM that does not serve it; dropSignals answers 200 and forwards
	// nothing, as when the NodeManager never gets the signal.
	noSignal, dropSignals bool
	// recovering answers every app's state ACCEPTED and every container
	// report 404, as a new active RM may before an app's AM re-registers.
	recovering bool
}

func (e *decomEnv) calls(method string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range e.requests {
		if strings.HasPrefix(r, method+" ") {
			out = append(out, r)
		}
	}
	return out
}

func newDecomEnv(t *testing.T, exName string, hosts []string, cfg yarn.DecommissionConfig) *decomEnv {
	t.Helper()
	e := &decomEnv{clk: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	h := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws/v1/cluster/nodes" {
			e.mu.Lock()
			e.requests = append(e.requests, r.Method+" "+r.URL.Path)
			noSignal, drop, recovering := e.noSignal, e.dropSignals, e.recovering
			e.mu.Unlock()
			if recovering && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/state") {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"state":"ACCEPTED"}`))
				return
			}
			if recovering && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/containers/") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"RemoteException":{"exception":"NotFoundException","message":"container not found"}}`))
				return
			}
			if noSignal && strings.Contains(r.URL.Path, "/signal/") {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte("<html><head><title>Not Found</title></head></html>"))
				return
			}
			if drop && strings.Contains(r.URL.Path, "/signal/") {
				w.WriteHeader(http.StatusOK)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	exPath := filepath.Join(t.TempDir(), exName)
	as, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: exPath, Tick: 5 * time.Millisecond, Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := as.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = as.Close() })
	e.sim, e.admin = sim, as
	e.client, _ = yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	admin, _ := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	e.ex, _ = yarn.NewExcludeFile(exPath)
	cfg.Client, cfg.Admin, cfg.Exclude, cfg.Now = e.client, admin, e.ex, e.clk.Now
	if e.d, err = yarn.NewDecommissioner(cfg); err != nil {
		t.Fatal(err)
	}
	e.cfg, e.rmadmin = cfg, admin
	return e
}

// simLabeler calls yarnsim's label store in process, as the RM's admin
// protocol would; refuse, when set, is the RM's answer to every call
// instead (a refusal yarnsim does not model, an unreachable RM).
type simLabeler struct {
	sim    *yarnsim.Sim
	refuse string
}

func (l *simLabeler) AddExclusiveLabel(_ context.Context, name string) error {
	if l.refuse != "" {
		return errors.New(l.refuse)
	}
	return l.sim.AddClusterLabels([]yarnsim.ClusterLabel{{Name: name, Exclusive: true}})
}

func (l *simLabeler) ReplaceLabelsOnNode(_ context.Context, m map[string][]string, failOnUnknown bool) error {
	if l.refuse != "" {
		return errors.New(l.refuse)
	}
	return l.sim.ReplaceNodeLabels(m, failOnUnknown)
}

// newCordonEnv is newDecomEnv with the cordon: node labels set through
// the admin protocol (yarnsim's addToClusterNodeLabels and
// replaceLabelsOnNodes), a hold on the test's clock.
func newCordonEnv(t *testing.T, hosts []string, hold time.Duration, cfg yarn.DecommissionConfig) *decomEnv {
	t.Helper()
	e := newDecomEnv(t, "exclude.xml", hosts, cfg)
	return e.withLabeler(t, yarn.RMAdminLabeler{Client: e.rmadmin}, hold)
}

// withLabeler gives e a cordon that sets labels through l.
func (e *decomEnv) withLabeler(t *testing.T, l yarn.Labeler, hold time.Duration) *decomEnv {
	t.Helper()
	e.labeler = l
	c, err := yarn.NewCordon(yarn.CordonConfig{Client: e.client, Admin: e.labeler, Hold: hold, Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.cordon = c
	cfg := e.cfg
	cfg.Cordon = c
	if e.d, err = yarn.NewDecommissioner(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// until polls cond every 5ms for at most a minute.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDecommissionerSideActions drives the SideActions contract the way
// the executor does (repeated calls) against yarnsim's REST and admin
// ports: a busy host never enters the exclude file, whatever the
// deadline; an empty one does, without a timeout, and is released only
// once DECOMMISSIONED; Cordon labels a host without stopping its work.
func TestDecommissionerSideActions(t *testing.T) {
	ctx := testCtx(t)
	e := newCordonEnv(t, []string{"g1", "g2", "g3"}, time.Minute, yarn.DecommissionConfig{})
	var act engine.SideActions = e.d

	// g1 runs a container for 300 ms: Release waits for it under the
	// cordon, with a deadline already past too.
	if _, err := e.admin.RunOn("a", "g1", 2, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := act.Cordon(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	for _, deadline := range []time.Time{{}, e.clk.Now().Add(-time.Hour)} {
		st, err := act.Release(ctx, "g1", deadline)
		if err != nil {
			t.Fatal(err)
		}
		if st.Drained || len(st.Remaining) != 1 || st.Unknown != "" {
			t.Fatalf("Release of a busy host = %+v, want one container remaining", st)
		}
		if hs, _ := e.ex.Hosts(); len(hs) != 0 {
			t.Fatalf("exclude file = %+v while g1 runs a container: want it empty", hs)
		}
	}
	until(t, "g1 empty", func() bool {
		st, err := act.Release(ctx, "g1", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Remaining) == 0
	})
	// Empty, but the cordon has not held for the hold: not excluded yet.
	if st, _ := act.Release(ctx, "g1", time.Time{}); st.Drained || !strings.Contains(st.BlockedBy, "hold") {
		t.Fatalf("Release of g1 empty before the hold = %+v", st)
	}
	if hs, _ := e.ex.Hosts(); len(hs) != 0 {
		t.Fatalf("exclude file = %+v before the hold", hs)
	}
	e.clk.Add(time.Minute)
	until(t, "drained g1", func() bool {
		st, err := act.Release(ctx, "g1", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})
	if to, ok := excluded(t, e.ex, "g1"); !ok || to >= 0 && to > time.Second {
		t.Fatalf("g1 excluded %v with %s, want -1 (or the short timeout once empty)", ok, to)
	}

	// Cordon labels g2: its container runs on, and a new default-partition
	// ask does not land there.
	if _, err := e.admin.RunOn("a", "g2", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	prior, err := e.d.CordonPrior(ctx, "g2")
	if err != nil || len(prior) != 0 {
		t.Fatalf("CordonPrior(g2) = %v, %v; want the default partition", prior, err)
	}
	for range 2 {
		if err := act.Cordon(ctx, "g2"); err != nil {
			t.Fatal(err)
		}
	}
	if s := state(t, ctx, e.client, "g2"); s != "RUNNING" {
		t.Fatalf("g2 is %s after Cordon, want RUNNING", s)
	}
	obs, err := e.client.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := obs.Node("g2"); n.Containers != 1 || !slices.Equal(n.Labels, []string{yarn.DefaultCordonLabel}) {
		t.Fatalf("g2 after Cordon: %d containers, labels %v", n.Containers, n.Labels)
	}
	if err := e.d.Uncordon(ctx, "g2", prior); err != nil {
		t.Fatal(err)
	}
	if obs, _ = e.client.Observe(ctx); len(mustNode(t, obs, "g2").Labels) != 0 {
		t.Fatalf("g2 labels after Uncordon: %v, want none", mustNode(t, obs, "g2").Labels)
	}
	// An unreachable admin port is an error, not a silent success.
	e.admin.Close()
	if _, err := e.d.Decommission(ctx, "g2", time.Minute); err == nil {
		t.Fatal("decommission with the admin port closed succeeded")
	}
}

func mustNode(t *testing.T, obs *yarn.Observation, host string) yarn.Node {
	t.Helper()
	n, ok := obs.Node(host)
	if !ok {
		t.Fatalf("no node %s", host)
	}
	return n
}

// TestReleaseDrainedOnlyWhenDecommissioned: an idle node is reported
// drained only once the RM lists it DECOMMISSIONED, never while it is
// still DECOMMISSIONING or RUNNING.
func TestReleaseDrainedOnlyWhenDecommissioned(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{})
	deadline := e.clk.Now().Add(10 * time.Minute)
	calls := 0
	until(t, "drained g1", func() bool {
		calls++
		st, err := e.d.Release(ctx, "g1", deadline)
		if err != nil {
			t.Fatal(err)
		}
		if s := state(t, ctx, e.client, "g1"); st.Drained && s != "DECOMMISSIONED" {
			t.Fatalf("Release reported drained with g1 %s", s)
		}
		return st.Drained
	})
	t.Logf("drained after %d Release calls", calls)
	// Once DECOMMISSIONED, a SHUTDOWN or LOST node without containers
	// also counts as gone; one with containers does not.
	if err := e.sim.AddNode(yarnsim.NodeSpec{Host: "g2", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetNodeState("g2", "LOST"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.d.Release(ctx, "g2", deadline); err != nil || !st.Drained {
		t.Fatalf("Release of a LOST node without containers = %+v, %v; want drained", st, err)
	}
}

// TestReleaseUnknownIsNeverDrained: a host the RM does not list (RM
// restart, failover), or a refresh that reaches only a standby, is
// reported Unknown with the reason, never drained.
func TestReleaseUnknownIsNeverDrained(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{})
	deadline := e.clk.Now().Add(10 * time.Minute)
	if _, err := e.admin.RunOn("a", "g1", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if st, err := e.d.Release(ctx, "g1", deadline); err != nil || st.Drained || st.Unknown != "" {
		t.Fatalf("first Release = %+v, %v", st, err)
	}
	// The RM restarts and has not seen g1's NodeManager again yet.
	if err := e.sim.RemoveNode("g1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		st, err := e.d.Release(ctx, "g1", deadline)
		if err != nil {
			t.Fatal(err)
		}
		if st.Drained || !strings.Contains(st.Unknown, "does not list host g1") {
			t.Fatalf("Release of an unlisted host = %+v, want Unknown, not drained", st)
		}
	}
	// A host YARN never knew is unknown too.
	if st, _ := e.d.Release(ctx, "never-seen", deadline); st.Drained || st.Unknown == "" {
		t.Fatalf("Release(never-seen) = %+v, want Unknown", st)
	}
	// The NodeManager registers again (still excluded): the decommission
	// goes on and ends drained.
	if err := e.sim.AddNode(yarnsim.NodeSpec{Host: "g1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	until(t, "drained g1", func() bool {
		st, err := e.d.Release(ctx, "g1", deadline)
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})

	// refreshNodes reaches only a standby: unknown, and the node is not
	// drained whatever the file says.
	e.admin.SetStandby(true)
	st, err := e.d.Release(ctx, "g2", deadline)
	if err != nil || st.Drained || !strings.Contains(st.Unknown, "StandbyException") {
		t.Fatalf("Release through a standby = %+v, %v; want Unknown naming the StandbyException", st, err)
	}
	if s := state(t, ctx, e.client, "g2"); s != "RUNNING" {
		t.Fatalf("g2 is %s after a refresh that failed", s)
	}
	e.admin.SetStandby(false)
	// The REST API fails: unknown too.
	e.sim.SetFault(yarnsim.FaultServerError)
	if st, err := e.d.Release(ctx, "g2", deadline); err != nil || st.Drained || st.Unknown == "" {
		t.Fatalf("Release with the REST API failing = %+v, %v; want Unknown", st, err)
	}
	e.sim.SetFault(yarnsim.FaultNone)
	until(t, "drained g2", func() bool {
		st, err := e.d.Release(ctx, "g2", deadline)
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})
}

// TestReleaseWithoutCordonLeavesBusyHostsAlone: without a cordon a busy
// host never enters the exclude file (an RM failover would shut its
// NodeManager down with its containers), whatever the deadline, while an
// idle one is decommissioned without a timeout; the plain exclude file,
// which cannot say -1, is refused.
func TestReleaseWithoutCordonLeavesBusyHostsAlone(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{})
	if _, err := e.admin.RunOn("a", "g1", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, deadline := range []time.Time{{}, e.clk.Now().Add(time.Second), e.clk.Now().Add(-time.Hour)} {
		st, err := e.d.Release(ctx, "g1", deadline)
		if err != nil || st.Drained || len(st.Remaining) != 1 {
			t.Fatalf("Release(g1, %s) = %+v, %v", deadline, st, err)
		}
	}
	e.clk.Add(5 * time.Hour)
	if s := state(t, ctx, e.client, "g1"); s != "RUNNING" {
		t.Fatalf("busy g1 is %s, want left RUNNING", s)
	}
	if _, err := e.d.Release(ctx, "g2", e.clk.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if to, ok := excluded(t, e.ex, "g2"); !ok || to >= 0 {
		t.Fatalf("idle g2 excluded %v with %s, want -1", ok, to)
	}
	if hs, _ := e.ex.Hosts(); len(hs) != 1 {
		t.Fatalf("exclude file = %+v, want g2 alone", hs)
	}
	until(t, "g2 released", func() bool {
		st, err := e.d.Release(ctx, "g2", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})

	// The plain exclude file has no timeouts: an infinite one is refused
	// rather than left to the RM's default, which would cut work off.
	p := newDecomEnv(t, "exclude.txt", []string{"g1"}, yarn.DecommissionConfig{})
	if st, err := p.d.Release(ctx, "g1", time.Time{}); err == nil || !strings.Contains(err.Error(), "XML form") {
		t.Fatalf("infinite Release with a plain exclude file = %+v, %v; want an error", st, err)
	}
	if ok, _ := p.ex.Contains("g1"); ok {
		t.Fatal("g1 excluded through a plain file without a timeout")
	}
}

// TestAdmitRestartsNodeManager: after a full decommission the NodeManager
// is down; Admit takes the host out of the file, refreshes and runs the
// restart hook, and Admitted is true only once the RM lists the node
// RUNNING with its GPUs.
func TestAdmitRestartsNodeManager(t *testing.T) {
	ctx := testCtx(t)
	var hookMu sync.Mutex
	var hooked []string
	var hookErr error
	var e *decomEnv
	e = newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{
		RestartInterval: time.Minute,
		RestartNodeManager: func(ctx context.Context, host string) error {
			hookMu.Lock()
			hooked = append(hooked, host)
			err := hookErr
			hookMu.Unlock()
			if err != nil {
				return err
			}
			// The hook runs after the refresh: the host is out of the file.
			if ok, _ := e.ex.Contains(host); ok {
				t.Errorf("restart hook ran with %s still excluded", host)
			}
			return e.admin.RestartNodeManager(ctx, host)
		}})
	hookRuns := func() int {
		hookMu.Lock()
		defer hookMu.Unlock()
		return len(hooked)
	}
	// A quick hand-over had set its GPUs to 0; a restart registers them
	// again.
	if err := e.d.SetGPUs(ctx, "g1", 0, -1); err != nil {
		t.Fatal(err)
	}
	if ok, why, err := e.d.Admitted(ctx, "g1"); err != nil || ok || !strings.Contains(why, "RUNNING without yarn.io/gpu") {
		t.Fatalf("Admitted with 0 GPUs = %v %q %v", ok, why, err)
	}
	until(t, "drained g1", func() bool {
		st, err := e.d.Release(ctx, "g1", e.clk.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})
	if ok, why, err := e.d.Admitted(ctx, "g1"); err != nil || ok || !strings.Contains(why, "exclude file") {
		t.Fatalf("Admitted while excluded = %v %q %v", ok, why, err)
	}
	// A refresh alone does not bring a DECOMMISSIONED NodeManager back.
	if _, err := e.ex.Remove("g1"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Admit(ctx, "g1"); err != nil { // nothing to refresh: only the hook
		t.Fatal(err)
	}
	if n := hookRuns(); n != 1 {
		t.Fatalf("restart hook ran %d times, want once", n)
	}
	if err := e.sim.SetNodeState("g1", "DECOMMISSIONED"); err != nil { // it did not come up
		t.Fatal(err)
	}
	if ok, why, _ := e.d.Admitted(ctx, "g1"); ok || !strings.Contains(why, "DECOMMISSIONED") {
		t.Fatalf("Admitted of a down NodeManager = %v %q", ok, why)
	}
	if n := hookRuns(); n != 1 {
		t.Fatalf("restart hook ran %d times within the restart interval, want once", n)
	}
	// A second Admit within the interval does not restart it again; a
	// new decommission cycle does.
	if err := e.d.Admit(ctx, "g1"); err != nil || hookRuns() != 1 {
		t.Fatalf("second Admit: %v, hook runs %d, want 1", err, hookRuns())
	}
	if _, err := e.d.Decommission(ctx, "g1", time.Minute); err != nil {
		t.Fatal(err)
	}
	hookMu.Lock()
	hooked = nil
	hookMu.Unlock()
	if err := e.d.Admit(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if n := hookRuns(); n != 1 {
		t.Fatalf("restart hook ran %d times, want once", n)
	}
	if ok, why, err := e.d.Admitted(ctx, "g1"); err != nil || !ok {
		t.Fatalf("Admitted after the restart = %v %q %v", ok, why, err)
	}
	obs, _ := e.client.Observe(ctx)
	if n, _ := obs.Node("g1"); n.State != "RUNNING" || n.GPUsTotal != 4 {
		t.Fatalf("g1 after the restart: %s with %d GPUs, want RUNNING with 4", n.State, n.GPUsTotal)
	}
	// Admit of a RUNNING node does not restart it.
	if err := e.d.Admit(ctx, "g1"); err != nil || hookRuns() != 1 {
		t.Fatalf("Admit of a RUNNING node: %v, hook runs %d", err, hookRuns())
	}

	// A failing hook: Admit succeeds (the host may be gone for good),
	// Admitted names the failure and retries only every RestartInterval.
	until(t, "drained g1", func() bool {
		st, err := e.d.Release(ctx, "g1", e.clk.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})
	hookMu.Lock()
	hooked, hookErr = nil, errors.New("ssh: connect to host g1: no route to host")
	hookMu.Unlock()
	if err := e.d.Admit(ctx, "g1"); err != nil {
		t.Fatalf("Admit with a failing hook: %v", err)
	}
	ok, why, err := e.d.Admitted(ctx, "g1")
	if err != nil || ok || !strings.Contains(why, "no route to host") {
		t.Fatalf("Admitted after a failed hook = %v %q %v", ok, why, err)
	}
	if n := hookRuns(); n != 1 {
		t.Fatalf("hook ran %d times within the restart interval, want 1", n)
	}
	e.clk.Add(time.Minute)
	hookMu.Lock()
	hookErr = nil
	hookMu.Unlock()
	if ok, why, err := e.d.Admitted(ctx, "g1"); err != nil || ok {
		t.Fatalf("Admitted right after the retried hook = %v %q %v (the RM lists it on the next look)", ok, why, err)
	}
	if n := hookRuns(); n != 2 {
		t.Fatalf("hook ran %d times after the interval, want 2", n)
	}
	if ok, why, err := e.d.Admitted(ctx, "g1"); err != nil || !ok {
		t.Fatalf("Admitted after the retried hook = %v %q %v", ok, why, err)
	}

	// Forget (a terminated host) clears the exclude file without the hook.
	until(t, "drained g1", func() bool {
		st, err := e.d.Release(ctx, "g1", e.clk.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return st.Drained
	})
	before := hookRuns()
	if err := e.d.Forget(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.ex.Contains("g1"); ok || hookRuns() != before || state(t, ctx, e.client, "g1") != "DECOMMISSIONED" {
		t.Fatalf("after Forget: excluded %v, hook runs %d (was %d), g1 %s", ok, hookRuns(), before, state(t, ctx, e.client, "g1"))
	}
}

// TestNodeManagerRestartCommand runs a real command with the host as its
// last argument, bounded by its timeout.
func TestNodeManagerRestartCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "args")
	script := filepath.Join(dir, "restart-nm")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+out+"\n[ \"$2\" = bad ] && { echo no such unit >&2; exit 3; }\n[ \"$2\" = slow ] && sleep 30\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hook, err := yarn.NodeManagerRestartCommand([]string{script, "--unit=hadoop-yarn-nodemanager"}, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := hook(t.Context(), "gpu-7"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "--unit=hadoop-yarn-nodemanager gpu-7\n" {
		t.Fatalf("hook got arguments %q", b)
	}
	if err := hook(t.Context(), "bad"); err == nil || !strings.Contains(err.Error(), "no such unit") {
		t.Fatalf("failing hook: %v, want its output in the error", err)
	}
	if err := hook(t.Context(), "slow"); err == nil || !strings.Contains(err.Error(), "did not finish within 500ms") {
		t.Fatalf("slow hook: %v, want the timeout", err)
	}
	if _, err := yarn.NodeManagerRestartCommand(nil, time.Second); err == nil {
		t.Fatal("empty command accepted")
	}
}

// TestEvictContainerGracefulThenForceful: Evict sends GRACEFUL_SHUTDOWN,
// waits EvictGrace, then FORCEFUL_SHUTDOWN, and reports done only once the
// RM no longer lists the container.
func TestEvictContainerGracefulThenForceful(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	app, err := e.admin.RunOn("a", "g1", 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.sim.IgnoreGracefulShutdown(app) // the process traps SIGTERM
	cs, err := e.sim.Containers(app)
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers of %s = %+v, %v", app, cs, err)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: app, GPUs: 2}
	for range 2 {
		if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
			t.Fatalf("Evict within the grace = %v, want in progress", err)
		}
	}
	if got := e.calls("POST"); len(got) != 1 || !strings.HasSuffix(got[0], "/signal/GRACEFUL_SHUTDOWN") {
		t.Fatalf("signals within the grace: %q, want one GRACEFUL_SHUTDOWN", got)
	}
	e.clk.Add(30 * time.Second)
	if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict after the grace = %v, want in progress", err)
	}
	if got := e.calls("POST"); len(got) != 2 || !strings.HasSuffix(got[1], "/signal/FORCEFUL_SHUTDOWN") {
		t.Fatalf("signals after the grace: %q, want FORCEFUL_SHUTDOWN second", got)
	}
	until(t, "the NodeManager's heartbeat to deliver FORCEFUL_SHUTDOWN", func() bool { _, err := e.sim.Containers(app); return err != nil })
	if err := e.d.Evict(ctx, "g1", w); err != nil {
		t.Fatalf("Evict of a stopped container = %v, want done", err)
	}
	if len(e.calls("PUT")) != 0 {
		t.Fatalf("an app was killed: %q", e.calls("PUT"))
	}
	obs, _ := e.client.Observe(ctx)
	if n, _ := obs.Node("g1"); n.Containers != 0 || n.GPUsUsed != 0 {
		t.Fatalf("g1 after the eviction: %d containers, %d GPUs used", n.Containers, n.GPUsUsed)
	}

	// A container whose signals are lost: after FORCEFUL_SHUTDOWN and
	// another grace, its app is killed, since the container is all of it
	// (RunOn's apps have one container).
	e.mu.Lock()
	e.dropSignals, e.requests = true, nil
	e.mu.Unlock()
	app, err = e.admin.RunOn("a", "g1", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ = e.sim.Containers(app)
	w = broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: app}
	for range 3 { // graceful, forceful, then nothing within the grace
		if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
			t.Fatalf("Evict = %v, want in progress", err)
		}
		e.clk.Add(20 * time.Second)
	}
	if len(e.calls("PUT")) != 0 {
		t.Fatalf("app killed within the grace after FORCEFUL_SHUTDOWN: %q", e.calls("PUT"))
	}
	e.clk.Add(20 * time.Second)
	if err := e.d.Evict(ctx, "g1", w); err != nil && !errors.Is(err, broker.ErrInProgress) {
		t.Fatal(err)
	}
	if got := e.calls("PUT"); len(got) != 1 || !strings.Contains(got[0], app) {
		t.Fatalf("PUT calls: %q, want %s killed after its container survived FORCEFUL_SHUTDOWN", got, app)
	}
	if err := e.d.Evict(ctx, "g1", w); err != nil {
		t.Fatalf("Evict after the kill = %v, want done", err)
	}
}

// TestEvictOnDecommissioningNodeWaitsItsGraceThenKillsApp: the RM drops
// container signals to a DECOMMISSIONING node (Hadoop 3.3.6 and 3.5.0
// alike), so Evict sends none there: a container it did not signal before
// the decommission gets EvictGrace from now (one signalled while the node
// was RUNNING gets it from its GRACEFUL_SHUTDOWN, which the RM still
// delivers), then its app is killed: the container is all of it (an app
// that runs other containers is not: TestEvictNeverKillsAnApplicationThat
// IsNotAllVictim).
func TestEvictOnDecommissioningNodeWaitsItsGraceThenKillsApp(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	app, err := e.admin.RunOn("a", "g1", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.sim.Containers(app)
	if st, err := e.d.Decommission(ctx, "g1", yarn.InfiniteTimeout); err != nil || st.Done {
		t.Fatalf("Decommission(g1, infinite) = %+v, %v", st, err)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: app}
	for range 2 {
		if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
			t.Fatalf("Evict on a decommissioning node within the grace = %v, want in progress", err)
		}
		e.clk.Add(10 * time.Second)
	}
	if len(e.calls("POST")) != 0 || len(e.calls("PUT")) != 0 {
		t.Fatalf("signals %q, kills %q within the grace on a decommissioning node: want none", e.calls("POST"), e.calls("PUT"))
	}
	e.clk.Add(10 * time.Second)
	for i := 0; ; i++ {
		err := e.d.Evict(ctx, "g1", w)
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrInProgress) || i > 3 {
			t.Fatalf("Evict on a decommissioning node after the grace = %v", err)
		}
	}
	if len(e.calls("POST")) != 0 {
		t.Fatalf("signals sent to a decommissioning node: %q", e.calls("POST"))
	}
	if got := e.calls("PUT"); len(got) != 1 || !strings.Contains(got[0], app) {
		t.Fatalf("PUT calls: %q, want %s killed", got, app)
	}
	until(t, "g1 decommissioned", func() bool { return state(t, ctx, e.client, "g1") == "DECOMMISSIONED" })
}

// TestEvictUnderCordonStopsOnlyTheContainer: the order the executor uses
// for a preemption taking a YARN node. The cordon first (the node stays
// RUNNING, so the RM delivers GRACEFUL_SHUTDOWN), then the signal: the
// container stops without its app killed, the freed space takes no
// pending container of another application (no ask names the cordon
// label), and only once the cordon has held the empty node for the hold
// does it enter the exclude file, and then get the short timeout that
// ends the RM's wait for the victim's application.
func TestEvictUnderCordonStopsOnlyTheContainer(t *testing.T) {
	ctx := testCtx(t)
	e := newCordonEnv(t, []string{"g1"}, time.Minute, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	victim, err := e.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := e.sim.Submit(yarnsim.AppSpec{Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.sim.Containers(victim)
	if len(cs) != 1 || cs[0].Host != "g1" {
		t.Fatalf("victim containers %+v, want one on g1", cs)
	}
	if err := e.d.Cordon(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: victim, GPUs: 4}
	for i := 0; ; i++ {
		err := e.d.Evict(ctx, "g1", w)
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrInProgress) || i > 2000 {
			t.Fatalf("Evict under the cordon = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := e.calls("PUT"); len(got) != 0 {
		t.Fatalf("kills %q: want the container stopped by its signal", got)
	}
	if q, _ := e.sim.Containers(queued); len(q) != 0 {
		t.Fatalf("queued app %s got %+v on the cordoned node", queued, q)
	}
	st, err := e.d.Release(ctx, "g1", time.Time{})
	if err != nil || st.Drained || len(st.Remaining) != 0 {
		t.Fatalf("Release(g1) on the empty node = %+v, %v", st, err)
	}
	if ok, _ := e.ex.Contains("g1"); ok {
		t.Fatal("g1 excluded before the cordon held it for the hold")
	}
	e.clk.Add(time.Minute)
	until(t, "g1 DECOMMISSIONED", func() bool {
		st, err := e.d.Release(ctx, "g1", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		e.clk.Add(time.Second) // the short timeout runs on the RM's clock
		return st.Drained
	})
	if to, ok := excluded(t, e.ex, "g1"); !ok || to != time.Second {
		t.Fatalf("g1 excluded %v with %s, want the short timeout once empty", ok, to)
	}
}

// TestEvictKillsApplication: an AM (the whole app is the victim), and any
// container on an RM without the signal API, is stopped by killing its
// application; done once the RM reports it KILLED.
func TestEvictKillsApplication(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{})
	app, err := e.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.sim.Containers(app)
	if len(cs) != 2 {
		t.Fatalf("containers of %s: %+v", app, cs)
	}
	am := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: app, AM: true}
	if err := e.d.Evict(ctx, cs[0].Host, am); !errors.Is(err, broker.ErrInProgress) && err != nil {
		t.Fatalf("Evict(AM) = %v", err)
	}
	if got := e.calls("PUT"); len(got) != 1 || got[0] != "PUT /ws/v1/cluster/apps/"+app+"/state" {
		t.Fatalf("PUT calls: %q, want the app's state", got)
	}
	if len(e.calls("POST")) != 0 {
		t.Fatalf("the AM was signalled instead of its app killed: %q", e.calls("POST"))
	}
	if err := e.d.Evict(ctx, cs[0].Host, am); err != nil {
		t.Fatalf("Evict(AM) after the kill = %v, want done", err)
	}
	if _, err := e.sim.Containers(app); err == nil {
		t.Fatalf("%s still runs", app)
	}

	// An RM without the signal API: the container's app is killed.
	e.mu.Lock()
	e.noSignal = true
	e.mu.Unlock()
	app2, err := e.admin.RunOn("b", "g2", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ = e.sim.Containers(app2)
	w := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID}
	for range 2 {
		err = e.d.Evict(ctx, "g2", w)
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrInProgress) {
			t.Fatalf("Evict without the signal API = %v", err)
		}
	}
	if err != nil {
		t.Fatalf("Evict without the signal API not done: %v", err)
	}
	if got := e.calls("PUT"); len(got) != 2 || !strings.Contains(got[1], app2) {
		t.Fatalf("PUT calls: %q, want %s killed", got, app2)
	}
	// A victim that is not on the node named: refused, nothing signalled.
	app3, err := e.admin.RunOn("a", "g1", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ = e.sim.Containers(app3)
	before := len(e.calls("POST")) + len(e.calls("PUT"))
	if err := e.d.Evict(ctx, "g2", broker.Workload{Key: cs[0].ID, App: app3}); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("Evict of a container on g1 from g2 = %v, want a conflict", err)
	}
	if after := len(e.calls("POST")) + len(e.calls("PUT")); after != before {
		t.Fatalf("a misplaced victim was signalled or killed")
	}
	// Nothing to name: an error, not a silent success.
	if err := e.d.Evict(ctx, "g2", broker.Workload{Key: "pod/x"}); err == nil {
		t.Fatal("Evict of a workload without ids succeeded")
	}
}

func state(t *testing.T, ctx context.Context, c *yarn.Client, host string) string {
	t.Helper()
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := obs.Node(host)
	return n.State
}

// excluded returns host's timeout in the exclude file.
func excluded(t *testing.T, ex *yarn.ExcludeFile, host string) (time.Duration, bool) {
	t.Helper()
	hs, err := ex.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Name == host {
			return h.Timeout, true
		}
	}
	return 0, false
}

// TestPlaceholderOfAnEmptyExcludedHostIsReleased: a new active RM lists
// every excluded host only as its placeholder and shuts its NodeManager
// down for good. A host the broker put in the exclude file because it was
// empty under the cordon's hold is released by that (nothing lost); one
// excluded any other way (busy, an operator's entry) stays unknown. A new
// leader, which does not remember, trusts only the short timeout the
// broker writes for an empty host.
func TestPlaceholderOfAnEmptyExcludedHostIsReleased(t *testing.T) {
	ctx := testCtx(t)
	e := newCordonEnv(t, []string{"g1", "g2"}, time.Minute, yarn.DecommissionConfig{})
	if _, err := e.admin.RunOn("a", "g2", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Decommission(ctx, "g2", yarn.InfiniteTimeout); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Cordon(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	until(t, "empty g1 in the exclude file", func() bool {
		e.clk.Add(30 * time.Second)
		if _, err := e.d.Release(ctx, "g1", time.Time{}); err != nil {
			t.Fatal(err)
		}
		in, err := e.ex.Contains("g1")
		return err == nil && in
	})
	if st, err := e.d.Release(ctx, "g2", time.Time{}); err != nil || len(st.Remaining) == 0 {
		t.Fatalf("Release(g2) before the failover = %+v, %v; want its container remaining", st, err)
	}
	if err := e.admin.RestartRM(); err != nil {
		t.Fatal(err)
	}
	if !e.sim.Placeholder("g1") || !e.sim.Placeholder("g2") {
		t.Fatal("the new RM does not list g1 and g2 as placeholders")
	}
	if st, err := e.d.Release(ctx, "g2", time.Time{}); err != nil || st.Drained || st.Unknown == "" {
		t.Fatalf("Release(g2), excluded busy = %+v, %v; want unknown", st, err)
	}
	if st, err := e.d.Release(ctx, "g1", time.Time{}); err != nil || !st.Drained || len(st.Lost) != 0 {
		t.Fatalf("Release(g1), excluded empty = %+v, %v; want drained, nothing lost", st, err)
	}

	// A new leader: the -1 entry proves nothing; the short timeout does.
	d2, err := yarn.NewDecommissioner(func() yarn.DecommissionConfig { c := e.cfg; c.Cordon = e.cordon; return c }())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d2.Release(ctx, "g1", time.Time{}); err != nil || st.Drained {
		t.Fatalf("new leader: Release(g1) with a -1 entry = %+v, %v; want unknown", st, err)
	}
	if _, err := e.ex.Add("g1", time.Second); err != nil {
		t.Fatal(err)
	}
	if st, err := d2.Release(ctx, "g1", time.Time{}); err != nil || !st.Drained {
		t.Fatalf("new leader: Release(g1) with the short-timeout entry = %+v, %v; want drained", st, err)
	}
	if st, err := d2.Release(ctx, "g2", time.Time{}); err != nil || st.Drained {
		t.Fatalf("new leader: Release(g2) = %+v, %v; want unknown", st, err)
	}

	// A placeholder that stays one past the settle is released: its
	// NodeManager was told to shut down; the work last seen there is
	// named lost, for the op to record.
	e.clk.Add(yarn.DefaultPlaceholderSettle - time.Second)
	if st, err := e.d.Release(ctx, "g2", time.Time{}); err != nil || st.Drained {
		t.Fatalf("Release(g2) within the settle = %+v, %v; want unknown", st, err)
	}
	e.clk.Add(time.Second)
	if st, err := e.d.Release(ctx, "g2", time.Time{}); err != nil || !st.Drained || len(st.Lost) == 0 {
		t.Fatalf("Release(g2) past the settle = %+v, %v; want drained with its container lost", st, err)
	}
}

// TestEvictDoesNotTakeARecoveringContainerForGone: while a new active RM
// recovers the victim's application (listed ACCEPTED, the container not
// known yet), Evict is in progress, never done: the container still runs.
// Once the RM knows it again, Evict signals it as usual.
func TestEvictDoesNotTakeARecoveringContainerForGone(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	app, err := e.admin.RunOn("a", "g1", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := e.sim.Containers(app)
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers of %s = %+v, %v", app, cs, err)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: cs[0].ID, App: app, GPUs: 1}
	e.mu.Lock()
	e.recovering = true
	e.mu.Unlock()
	for range 3 {
		if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
			t.Fatalf("Evict while the RM recovers the app = %v, want in progress", err)
		}
	}
	e.mu.Lock()
	e.recovering = false
	e.mu.Unlock()
	if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict once the RM knows the container = %v, want in progress (signalled)", err)
	}
	if got := e.calls("POST"); len(got) != 1 || !strings.HasSuffix(got[0], "/signal/GRACEFUL_SHUTDOWN") {
		t.Fatalf("signals: %q, want one GRACEFUL_SHUTDOWN once the RM knows the container", got)
	}
}
