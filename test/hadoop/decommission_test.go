package hadoop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// decomTarget is an RM with an admin port and an exclude file: yarnsim or
// a real Hadoop RM, with three NodeManagers of four GPUs.
type decomTarget struct {
	url, admin, exclude string
	hosts               []string
	gpus                int
	// run starts an app whose one container (gpus GPUs) runs on host for
	// seconds and then finishes with its app; it returns both ids.
	run func(ctx context.Context, host string, gpus, seconds int) (app, container string, err error)
	// restart restarts host's NodeManager, as systemd would after a
	// decommission stopped it.
	restart func(ctx context.Context, host string) error
	logs    func() string
}

// TestDecommission runs the graceful decommission, recommission and
// updateNodeResource scenario against yarnsim and every Hadoop version.
func TestDecommission(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) { runDecommission(t, simDecomTarget(t)) })
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) { runDecommission(t, hadoopDecomTarget(t, v)) })
	}
}

func simDecomTarget(t *testing.T) decomTarget {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg := decomTarget{gpus: 4, exclude: filepath.Join(t.TempDir(), "exclude.xml"), logs: func() string { return "" }}
	for i := range 3 {
		h := fmt.Sprintf("127.0.0.%d", 11+i)
		tg.hosts = append(tg.hosts, h)
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4, MemoryMB: 16384, VCores: 16}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	tg.url = srv.URL
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: tg.exclude})
	if err != nil {
		t.Fatal(err)
	}
	if tg.admin, err = admin.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	tg.run = func(_ context.Context, host string, gpus, seconds int) (string, string, error) {
		app, err := admin.RunOn("a", host, gpus, time.Duration(seconds)*time.Second)
		if err != nil {
			return "", "", err
		}
		cs, err := sim.Containers(app)
		if err != nil || len(cs) != 1 {
			return "", "", fmt.Errorf("containers of %s: %+v, %v", app, cs, err)
		}
		return app, cs[0].ID, nil
	}
	tg.restart = admin.RestartNodeManager
	return tg
}

func hadoopDecomTarget(t *testing.T, version string) decomTarget {
	c := startHadoop(t, version)
	return decomTarget{
		url: c.Ready.RMWeb, admin: c.Ready.RMAdmin, exclude: c.Ready.ExcludePath,
		hosts: c.Ready.Nodes, gpus: c.Ready.GPUsPerNode,
		run: func(ctx context.Context, host string, gpus, seconds int) (string, string, error) {
			return c.Run(ctx, "a", host, gpus, seconds)
		},
		restart: c.Restart,
		logs:    func() string { return c.LogTail(6000) },
	}
}

// waitNode polls the RM until host's node passes check.
func waitNode(t *testing.T, ctx context.Context, c *yarn.Client, host, what string, budget time.Duration, check func(yarn.Node) error) yarn.Node {
	t.Helper()
	obs := eventuallyFor(t, ctx, c, what, budget, 200*time.Millisecond, func(o *yarn.Observation) error {
		n, ok := o.Node(host)
		if !ok {
			return fmt.Errorf("node %s not listed", host)
		}
		return check(n)
	})
	n, _ := obs.Node(host)
	return n
}

func runDecommission(t *testing.T, tg decomTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("log tail:\n%s", tg.logs())
		}
	}()
	c, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := rmadmin.New(rmadmin.Config{Addrs: []string{tg.admin}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	// An operator's own entry, which the broker must keep.
	if err := os.WriteFile(tg.exclude, []byte(`<?xml version="1.0"?>
<hosts><host><name>10.99.0.1</name><timeout>77</timeout></host></hosts>
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	// The restart hook restarts a NodeManager as systemd (Restart=always)
	// or the broker's yarn.nodemanager_restart command would.
	d, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: c, Admin: admin, Exclude: ex,
		RestartNodeManager: tg.restart, EvictGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	running := func(gpus int) func(yarn.Node) error {
		return func(n yarn.Node) error {
			if n.State != "RUNNING" || n.GPUsTotal != gpus {
				return fmt.Errorf("node %s is %s with %d GPUs, want RUNNING with %d", n.Host, n.State, n.GPUsTotal, gpus)
			}
			return nil
		}
	}
	withContainers := func(n yarn.Node) error {
		if n.Containers == 0 {
			return fmt.Errorf("node %s runs no container yet", n.Host)
		}
		return nil
	}
	h0, h1, h2 := tg.hosts[0], tg.hosts[1], tg.hosts[2]
	for _, h := range tg.hosts {
		waitNode(t, ctx, c, h, "idle cluster", time.Minute, running(tg.gpus))
	}

	// 1. A node running a GPU container is decommissioned gracefully: it
	// stays DECOMMISSIONING while the container runs, and reaches
	// DECOMMISSIONED when it finishes, nothing cut off.
	if _, _, err := tg.run(ctx, h0, 2, 6); err != nil {
		t.Fatalf("run a container on %s: %v", h0, err)
	}
	waitNode(t, ctx, c, h0, "container running on "+h0, time.Minute, withContainers)
	st := waitDecommissioning(t, ctx, d, h0, 2*time.Minute)
	if len(st.Containers) == 0 {
		t.Fatalf("after the decommission starts: %+v, want DECOMMISSIONING with the container", st)
	}
	hs, err := ex.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	want := []yarn.ExcludedHost{{Name: "10.99.0.1", Timeout: 77 * time.Second}, {Name: h0, Timeout: 2 * time.Minute}}
	if !slices.Equal(hs, want) {
		t.Fatalf("exclude file = %+v, want %+v", hs, want)
	}
	st = waitDecommissioned(t, ctx, d, h0, 2*time.Minute)
	if st.TimedOut || len(st.CutOff) > 0 {
		t.Fatalf("graceful decommission of %s: %+v, want no container cut off", h0, st)
	}
	// Idempotent: again, nothing changes (not even the file).
	before, _ := os.ReadFile(tg.exclude)
	if st, err = d.Decommission(ctx, h0, time.Minute); err != nil || !st.Done {
		t.Fatalf("second decommission of %s: %+v, %v", h0, st, err)
	}
	if after, _ := os.ReadFile(tg.exclude); string(after) != string(before) {
		t.Fatalf("a second decommission rewrote the exclude file:\n%s\nto\n%s", before, after)
	}

	// 2. Recommission: the host leaves the file, the RM refreshes, and
	// Admit runs the restart hook: the NodeManager that the decommission
	// stopped registers again, RUNNING with its GPUs, and only then is
	// it admitted.
	if ok, why, err := d.Admitted(ctx, h0); err != nil || ok {
		t.Fatalf("Admitted(%s) while decommissioned = %v %q %v", h0, ok, why, err)
	}
	if err := d.Admit(ctx, h0); err != nil {
		t.Fatalf("admit %s: %v", h0, err)
	}
	if err := d.Admit(ctx, h0); err != nil {
		t.Fatalf("admit %s again: %v", h0, err)
	}
	if ok, _ := ex.Contains(h0); ok {
		t.Fatalf("%s still in the exclude file", h0)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = d.Recommission(rctx, h0, 200*time.Millisecond)
	rcancel()
	if err != nil {
		t.Fatalf("recommission %s: %v", h0, err)
	}
	waitNode(t, ctx, c, h0, "recommissioned "+h0, time.Minute, running(tg.gpus))
	if ok, why, err := d.Admitted(ctx, h0); err != nil || !ok {
		t.Fatalf("Admitted(%s) after the restart = %v %q %v", h0, ok, why, err)
	}

	// 3. updateNodeResource: yarn.io/gpu to 0 and back.
	if err := d.SetGPUs(ctx, h1, 0, -1); err != nil {
		t.Fatalf("set gpus of %s to 0: %v", h1, err)
	}
	waitNode(t, ctx, c, h1, h1+" with 0 GPUs", time.Minute, running(0))
	if err := d.SetGPUs(ctx, h1, tg.gpus, -1); err != nil {
		t.Fatalf("set gpus of %s back: %v", h1, err)
	}
	waitNode(t, ctx, c, h1, h1+" with its GPUs back", time.Minute, running(tg.gpus))

	// 4. A short graceful timeout on a node with a long container ends
	// DECOMMISSIONED with the container reported cut off.
	if _, _, err := tg.run(ctx, h2, 1, 600); err != nil {
		t.Fatalf("run a long container on %s: %v", h2, err)
	}
	waitNode(t, ctx, c, h2, "long container on "+h2, time.Minute, withContainers)
	waitDecommissioning(t, ctx, d, h2, 3*time.Second)
	st = waitDecommissioned(t, ctx, d, h2, 2*time.Minute)
	if !st.TimedOut || len(st.CutOff) == 0 {
		t.Fatalf("decommission of %s with a 3s timeout: %+v, want the container reported cut off", h2, st)
	}
	t.Logf("cut off on %s: %s", h2, strings.Join(st.CutOff, ", "))
	if hs, _ := ex.Hosts(); !slices.Contains(hs, yarn.ExcludedHost{Name: "10.99.0.1", Timeout: 77 * time.Second}) {
		t.Fatalf("the operator's entry is gone: %+v", hs)
	}

	// 5. Release reports drained only once the RM lists the host
	// DECOMMISSIONED: an idle node, released as the executor does.
	if err := d.Admit(ctx, h2); err != nil { // back from 4 through the restart hook
		t.Fatal(err)
	}
	waitNode(t, ctx, c, h2, h2+" back", 2*time.Minute, running(tg.gpus))
	release := func(host string, deadline time.Time) broker.ReleaseStatus {
		t.Helper()
		st, err := d.Release(ctx, host, deadline)
		if err != nil {
			t.Fatalf("release %s: %v", host, err)
		}
		return st
	}
	rel := waitRelease(t, "idle "+h2+" drained", 2*time.Minute, func() (bool, error) {
		st := release(h2, time.Now().Add(time.Minute))
		if st.Unknown != "" {
			return false, fmt.Errorf("Release(%s) = unknown: %s", h2, st.Unknown)
		}
		if st.Drained {
			if s := nodeState(t, ctx, c, h2); s != "DECOMMISSIONED" {
				return false, fmt.Errorf("Release(%s) reported drained while the RM lists it %s", h2, s)
			}
		}
		return st.Drained, nil
	})
	t.Logf("idle %s: %s", h2, rel)

	// 6. A host the RM does not list is unknown, never drained, also
	// after the refresh took it into the exclude file.
	for range 3 {
		if st := release("127.0.0.99", time.Now().Add(time.Minute)); st.Drained || st.Unknown == "" {
			t.Fatalf("Release of a host the RM does not list = %+v, want Unknown", st)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if _, err := ex.Remove("127.0.0.99"); err != nil {
		t.Fatal(err)
	}

	// 7. A release never puts a busy host into the exclude file (a
	// failover would turn that decommission into a kill): Release of h1
	// with its container reports progress and leaves the file alone. An
	// operator's decommission with an infinite timeout (-1) keeps the
	// container, while a node decommissioned at the same time with a 3s
	// timeout is cut off by the same RM.
	_, cLong, err := tg.run(ctx, h1, 1, 600)
	if err != nil {
		t.Fatalf("run a long container on %s: %v", h1, err)
	}
	waitNode(t, ctx, c, h1, "long container on "+h1, time.Minute, withContainers)
	if _, _, err := tg.run(ctx, h0, 1, 600); err != nil {
		t.Fatalf("run a long container on %s: %v", h0, err)
	}
	waitNode(t, ctx, c, h0, "long container on "+h0, time.Minute, withContainers)
	if st := release(h1, time.Time{}); st.Drained || st.Unknown != "" {
		t.Fatalf("Release(%s, infinite) = %+v", h1, st)
	}
	if hs, _ := ex.Hosts(); slices.ContainsFunc(hs, func(e yarn.ExcludedHost) bool { return e.Name == h1 }) {
		t.Fatalf("Release of busy %s put it into the exclude file: %+v", h1, hs)
	}
	waitDecommissioning(t, ctx, d, h1, -time.Second)
	if hs, _ := ex.Hosts(); !slices.Contains(hs, yarn.ExcludedHost{Name: h1, Timeout: -time.Second}) {
		t.Fatalf("exclude file = %+v, want %s with -1", hs, h1)
	}
	if b, _ := os.ReadFile(tg.exclude); !strings.Contains(string(b), "<timeout>-1</timeout>") {
		t.Fatalf("exclude file:\n%s", b)
	}
	waitDecommissioning(t, ctx, d, h0, 3*time.Second)
	waitDecommissioned(t, ctx, d, h0, 2*time.Minute)
	n := waitNode(t, ctx, c, h1, h1+" still decommissioning", time.Minute, func(n yarn.Node) error {
		if n.State != "DECOMMISSIONING" || n.Containers != 1 {
			return fmt.Errorf("node %s is %s with %d containers, want DECOMMISSIONING with its container", n.Host, n.State, n.Containers)
		}
		return nil
	})
	t.Logf("after %s was cut off at 3s, %s is %s with %d container", h0, h1, n.State, n.Containers)

	// 8. Preemption on a DECOMMISSIONING node: the RM drops container
	// signals there (RMNodeImpl: "Invalid event: SIGNAL_CONTAINER at
	// DECOMMISSIONING"), so Evict sends none and kills the container's app
	// after EvictGrace; the node, empty now, leaves by attrition.
	evict := func(host string, w broker.Workload) int {
		t.Helper()
		calls := 0
		waitRelease(t, "eviction of "+w.Key, 2*time.Minute, func() (bool, error) {
			calls++
			err := d.Evict(ctx, host, w)
			if errors.Is(err, broker.ErrInProgress) {
				return false, nil
			}
			return err == nil, err
		})
		return calls
	}
	n1 := evict(h1, broker.Workload{Source: broker.SourceYARN, Key: cLong, GPUs: 1})
	if s := appState(t, ctx, tg.url, appOf(cLong)); s != "KILLED" {
		t.Fatalf("app of %s on a decommissioning node is %s after the eviction, want KILLED", cLong, s)
	}
	t.Logf("evicted %s on a decommissioning node in %d calls (app killed)", cLong, n1)
	waitRelease(t, h1+" drained after the eviction", 2*time.Minute, func() (bool, error) {
		return release(h1, time.Time{}).Drained, nil
	})

	// 9. Preemption on a RUNNING node: the container signal API stops the
	// container alone (GRACEFUL_SHUTDOWN: its sleep gets SIGTERM), and its
	// app ends normally rather than being killed.
	if err := d.Admit(ctx, h2); err != nil { // back through the restart hook
		t.Fatal(err)
	}
	waitNode(t, ctx, c, h2, h2+" back", 2*time.Minute, running(tg.gpus))
	app, cid, err := tg.run(ctx, h2, 1, 600)
	if err != nil {
		t.Fatalf("run a container on %s: %v", h2, err)
	}
	n2 := evict(h2, broker.Workload{Source: broker.SourceYARN, Key: cid, App: app, GPUs: 1})
	// Its AM sees the container complete and unregisters.
	waitRelease(t, "app "+app+" ended", time.Minute, func() (bool, error) {
		s := appState(t, ctx, tg.url, app)
		if s == "KILLED" {
			return false, fmt.Errorf("app %s was killed, want only its container stopped", app)
		}
		return s == "FINISHED", nil
	})
	t.Logf("evicted %s on a running node in %d calls (container signal)", cid, n2)

	// 10. The whole app is the victim (its AM): the app is killed.
	app, cid, err = tg.run(ctx, h2, 1, 600)
	if err != nil {
		t.Fatalf("run a container on %s: %v", h2, err)
	}
	evict(h2, broker.Workload{Source: broker.SourceYARN, Key: cid, App: app, AM: true})
	if s := appState(t, ctx, tg.url, app); s != "KILLED" {
		t.Fatalf("app %s is %s after its AM was evicted, want KILLED", app, s)
	}
	waitNode(t, ctx, c, h2, "no container on "+h2, time.Minute, func(n yarn.Node) error {
		if n.Containers != 0 {
			return fmt.Errorf("node %s still runs %d containers", n.Host, n.Containers)
		}
		return nil
	})
}

// appOf returns application_<ts>_<n> of container_<ts>_<n>_<attempt>_<c>.
func appOf(cid string) string {
	f := strings.Split(cid, "_")
	return "application_" + f[1] + "_" + f[2]
}

// appState reads /ws/v1/cluster/apps/{id}/state.
func appState(t *testing.T, ctx context.Context, rm, app string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rm+"/ws/v1/cluster/apps/"+app+"/state", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("state of %s: %d: %v", app, resp.StatusCode, err)
	}
	return v.State
}

// waitRelease repeats step every 200ms until it reports done, fails, or
// budget passes; it returns how long it took, for the log.
func waitRelease(t *testing.T, what string, budget time.Duration, step func() (bool, error)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		done, err := step()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if done {
			return time.Since(start).Round(time.Millisecond)
		}
		if time.Since(start) > budget {
			t.Fatalf("no %s after %s", what, budget)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func nodeState(t *testing.T, ctx context.Context, c *yarn.Client, host string) string {
	t.Helper()
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := obs.Node(host)
	return n.State
}

// waitDecommissioning starts a decommission of host with timeout and
// repeats it until the RM has taken it in (the refresh is asynchronous).
func waitDecommissioning(t *testing.T, ctx context.Context, d *yarn.Decommissioner, host string, timeout time.Duration) yarn.DecommissionStatus {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := d.Decommission(ctx, host, timeout)
		if err != nil {
			t.Fatalf("decommission %s: %v", host, err)
		}
		if st.State == "DECOMMISSIONING" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not decommissioning after a minute: %+v", host, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitDecommissioned repeats Decommission (as the executor does) until the
// node is done.
func waitDecommissioned(t *testing.T, ctx context.Context, d *yarn.Decommissioner, host string, budget time.Duration) yarn.DecommissionStatus {
	t.Helper()
	deadline := time.Now().Add(budget)
	for {
		st, err := d.Decommission(ctx, host, time.Minute)
		if err != nil {
			t.Fatalf("decommission %s: %v", host, err)
		}
		if st.Done {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not decommissioned after %s: %+v", host, budget, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
