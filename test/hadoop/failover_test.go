package hadoop_test

import (
	"context"
	"fmt"
	"net/http/httptest"
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

// failTarget is an RM that can be restarted as a failover makes a new
// active RM (work-preserving recovery, the label store and the exclude
// file kept): yarnsim (AdminServer.RestartRM) or a real Hadoop RM
// (Cluster.RestartRM), with three NodeManagers of four GPUs.
type failTarget struct {
	url, admin, exclude string
	hosts               []string
	// run starts an app in queue a whose one container of gpus GPUs (0:
	// a CPU container) runs on host, returning both ids.
	run func(ctx context.Context, host string, gpus int) (app, container string, err error)
	// restartRM makes a new active RM.
	restartRM func(ctx context.Context) error
	// alive reports whether container of app still runs on host, asked
	// of the NodeManager itself where the target has one.
	alive func(ctx context.Context, host, app, container string) (bool, error)
	logs  func() string
}

// TestFailover runs one suite of what a new active RM does to the nodes
// the broker holds, against yarnsim and every Hadoop version: a node under
// the broker's cordon label keeps its GPU and CPU containers and its label
// through two failovers; a host in the exclude file under a graceful
// decommission (timeout -1) becomes the placeholder host:-1, its
// NodeManager is told SHUTDOWN and its container is lost, and the product
// never takes the placeholder for a release; an updateNodeResource total,
// the exclude file and the cluster's labels survive; the cordon comes off
// exactly.
func TestFailover(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) { runFailover(t, simFailTarget(t)) })
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) { runFailover(t, hadoopFailTarget(t, v)) })
	}
}

func simFailTarget(t *testing.T) failTarget {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg := failTarget{exclude: filepath.Join(t.TempDir(), "exclude.xml"), logs: func() string { return "" }}
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
	tg.run = func(_ context.Context, host string, gpus int) (string, string, error) {
		app, err := admin.RunOn("a", host, gpus, time.Hour)
		if err != nil {
			return "", "", err
		}
		cs, err := sim.Containers(app)
		if err != nil || len(cs) != 1 {
			return "", "", fmt.Errorf("containers of %s: %+v, %v", app, cs, err)
		}
		return app, cs[0].ID, nil
	}
	tg.restartRM = func(context.Context) error { return admin.RestartRM() }
	tg.alive = func(_ context.Context, host, app, container string) (bool, error) {
		cs, err := sim.Containers(app)
		if err != nil {
			return false, nil // the app ended with its container
		}
		for _, c := range cs {
			if c.ID == container && c.Host == host {
				return true, nil
			}
		}
		return false, nil
	}
	return tg
}

func hadoopFailTarget(t *testing.T, version string) failTarget {
	c := startHadoopWith(t, hadoop.Config{Version: version, Recovery: true, Cordon: yarn.DefaultCordonLabel})
	return failTarget{
		url: c.Ready.RMWeb, admin: c.Ready.RMAdmin, exclude: c.Ready.ExcludePath, hosts: c.Ready.Nodes,
		run: func(ctx context.Context, host string, gpus int) (string, string, error) {
			return c.Run(ctx, "a", host, gpus, 3600)
		},
		restartRM: func(ctx context.Context) error {
			away, err := c.RestartRM(ctx)
			t.Logf("hadoop %s: the RM was away %s", version, away)
			return err
		},
		alive: func(ctx context.Context, host, _, container string) (bool, error) {
			state, cs, err := c.NodeManagerState(ctx, host)
			if err != nil {
				return false, err
			}
			return state == "STARTED" && slices.Contains(cs, container+"=RUNNING"), nil
		},
		logs: func() string { return c.LogTail(6000) },
	}
}

func runFailover(t *testing.T, tg failTarget) {
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
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	cordon, err := yarn.NewCordon(yarn.CordonConfig{Client: c, Admin: yarn.RMAdminLabeler{Client: admin}, Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := cordon.Available(ctx); !ok {
		t.Fatalf("the cordon is unavailable: %s", why)
	}
	d, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: c, Admin: admin, Exclude: ex, Cordon: cordon,
		RestartNodeManager: func(context.Context, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	a, b, h := tg.hosts[0], tg.hosts[1], tg.hosts[2]
	for _, host := range tg.hosts {
		waitNode(t, ctx, c, host, host+" RUNNING", 2*time.Minute, func(n yarn.Node) error {
			if n.State != "RUNNING" {
				return fmt.Errorf("%s is %s", host, n.State)
			}
			return nil
		})
	}

	// A: a GPU and a CPU container, then the broker's cordon.
	type ctr struct{ app, id string }
	var onA []ctr
	for _, gpus := range []int{1, 0} {
		app, id, err := tg.run(ctx, a, gpus)
		if err != nil {
			t.Fatalf("run a %d-GPU container on %s: %v", gpus, a, err)
		}
		onA = append(onA, ctr{app, id})
	}
	prior, err := d.CordonPrior(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Cordon(ctx, a); err != nil {
		t.Fatalf("cordon %s: %v", a, err)
	}
	// B: a container, then a graceful decommission without a timeout
	// (what the broker did before the cordon, and what an operator's -1
	// does).
	bApp, bID, err := tg.run(ctx, b, 1)
	if err != nil {
		t.Fatalf("run on %s: %v", b, err)
	}
	if _, err := d.Decommission(ctx, b, yarn.InfiniteTimeout); err != nil {
		t.Fatalf("decommission %s: %v", b, err)
	}
	waitNode(t, ctx, c, b, b+" DECOMMISSIONING", time.Minute, func(n yarn.Node) error {
		if n.State != "DECOMMISSIONING" {
			return fmt.Errorf("%s is %s", b, n.State)
		}
		return nil
	})
	// H: updateNodeResource to 2 GPUs.
	if err := d.SetGPUs(ctx, h, 2, -1); err != nil {
		t.Fatalf("set %s to 2 GPUs: %v", h, err)
	}
	cordoned := func(n yarn.Node) error {
		if n.State != "RUNNING" || !slices.Contains(n.Labels, yarn.DefaultCordonLabel) || n.Containers != 2 {
			return fmt.Errorf("%s is %s with labels %v and %d containers, want RUNNING under the cordon with 2", a, n.State, n.Labels, n.Containers)
		}
		return nil
	}
	waitNode(t, ctx, c, a, a+" under the cordon", time.Minute, cordoned)
	// updateNodeResource survives a new RM only once the NodeManager has
	// heard the new total in a heartbeat answer and resyncs with it: a
	// restart within a heartbeat of it brought 127.0.0.13 back with 4
	// GPUs on Hadoop 3.3.6. Twelve heartbeats (250 ms here) are plenty.
	time.Sleep(3 * time.Second)

	for round := 1; round <= 2; round++ {
		if err := tg.restartRM(ctx); err != nil {
			t.Fatalf("failover %d: %v", round, err)
		}
		// B: only the placeholder, which is never a release.
		eventuallyFor(t, ctx, c, fmt.Sprintf("failover %d: %s listed as the placeholder", round, b), time.Minute, 200*time.Millisecond, func(o *yarn.Observation) error {
			n, ok := o.Node(b)
			if !ok || n.State != "DECOMMISSIONED" {
				return fmt.Errorf("%s = %+v (listed %v)", b, n, ok)
			}
			return nil
		})
		rs, err := d.Release(ctx, b, time.Now())
		if err != nil || rs.Drained || !strings.Contains(rs.Unknown, "placeholder") {
			t.Fatalf("failover %d: Release(%s) = %+v, %v; want Unknown naming the placeholder, never drained", round, b, rs, err)
		}
		// B's NodeManager was told SHUTDOWN: its container is lost.
		deadline := time.Now().Add(time.Minute)
		for {
			ok, err := tg.alive(ctx, b, bApp, bID)
			if err == nil && !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("failover %d: container %s on the excluded %s still runs (%v); a new active RM shuts its NodeManager down", round, bID, b, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// A: RUNNING under the cordon with both containers, on the RM
		// and on its NodeManager.
		waitNode(t, ctx, c, a, fmt.Sprintf("failover %d: %s back under the cordon", round, a), time.Minute, cordoned)
		for _, x := range onA {
			if ok, err := tg.alive(ctx, a, x.app, x.id); err != nil || !ok {
				t.Fatalf("failover %d: container %s on the cordoned %s is gone (%v)", round, x.id, a, err)
			}
		}
		rs, err = d.Release(ctx, a, time.Now())
		if err != nil || rs.Drained || rs.Unknown != "" || len(rs.Remaining) == 0 {
			t.Fatalf("failover %d: Release(%s) = %+v, %v; want its containers remaining", round, a, rs, err)
		}
		// H keeps its updateNodeResource total.
		waitNode(t, ctx, c, h, fmt.Sprintf("failover %d: %s with 2 GPUs", round, h), time.Minute, func(n yarn.Node) error {
			if n.State != "RUNNING" || n.GPUsTotal != 2 {
				return fmt.Errorf("%s is %s with %d GPUs", h, n.State, n.GPUsTotal)
			}
			return nil
		})
		// The exclude file is the RM's file on disk; the cordon label is
		// in the label store.
		if in, err := ex.Contains(b); err != nil || !in {
			t.Fatalf("failover %d: %s in the exclude file = %v, %v; want it kept", round, b, in, err)
		}
		if ok, why := cordon.Available(ctx); !ok {
			t.Fatalf("failover %d: the cordon is unavailable: %s", round, why)
		}
	}

	// The cordon comes off exactly: A back in its prior partition.
	if err := d.Uncordon(ctx, a, prior); err != nil {
		t.Fatalf("uncordon %s: %v", a, err)
	}
	waitNode(t, ctx, c, a, a+" out of the cordon", time.Minute, func(n yarn.Node) error {
		if n.State != "RUNNING" || !slices.Equal(n.Labels, prior) {
			return fmt.Errorf("%s is %s with labels %v, want RUNNING with %v", a, n.State, n.Labels, prior)
		}
		return nil
	})
	for _, x := range onA {
		if ok, err := tg.alive(ctx, a, x.app, x.id); err != nil || !ok {
			t.Fatalf("container %s on %s is gone after the uncordon (%v)", x.id, a, err)
		}
	}
}
