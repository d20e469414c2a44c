package hadoop_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	// seconds and then finishes with its app.
	run func(ctx context.Context, host string, gpus, seconds int) error
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
	tg.run = func(_ context.Context, host string, gpus, seconds int) error {
		_, err := admin.RunOn("a", host, gpus, time.Duration(seconds)*time.Second)
		return err
	}
	tg.restart = admin.RestartNodeManager
	return tg
}

func hadoopDecomTarget(t *testing.T, version string) decomTarget {
	c := startHadoop(t, version)
	return decomTarget{
		url: c.Ready.RMWeb, admin: c.Ready.RMAdmin, exclude: c.Ready.ExcludePath,
		hosts: c.Ready.Nodes, gpus: c.Ready.GPUsPerNode,
		run: func(ctx context.Context, host string, gpus, seconds int) error {
			_, _, err := c.Run(ctx, "a", host, gpus, seconds)
			return err
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
	d, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: c, Admin: admin, Exclude: ex})
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
	if err := tg.run(ctx, h0, 2, 6); err != nil {
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

	// 2. Recommission: the host leaves the file, the RM refreshes, the
	// NodeManager (restarted by its service manager) registers again.
	if err := d.Admit(ctx, h0); err != nil {
		t.Fatalf("admit %s: %v", h0, err)
	}
	if err := d.Admit(ctx, h0); err != nil {
		t.Fatalf("admit %s again: %v", h0, err)
	}
	if ok, _ := ex.Contains(h0); ok {
		t.Fatalf("%s still in the exclude file", h0)
	}
	if err := tg.restart(ctx, h0); err != nil {
		t.Fatalf("restart %s: %v", h0, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = d.Recommission(rctx, h0, 200*time.Millisecond)
	rcancel()
	if err != nil {
		t.Fatalf("recommission %s: %v", h0, err)
	}
	waitNode(t, ctx, c, h0, "recommissioned "+h0, time.Minute, running(tg.gpus))

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
	if err := tg.run(ctx, h2, 1, 600); err != nil {
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
