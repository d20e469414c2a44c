package hadoop_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// target is an RM under the contract: yarnsim or a real Hadoop RM, each with
// three NodeManagers of four GPUs on 127.0.0.11-13 and queues root.a and
// root.b.
type target struct {
	url    string
	hosts  []string
	gpus   int
	submit func(ctx context.Context, queue string, prio, containers, gpus int, host string) (string, error)
	finish func(ctx context.Context, appID string) error
	// run starts an app in queue whose one container of gpus GPUs runs on
	// host (for real on Hadoop), returning the app and container ids.
	run  func(ctx context.Context, queue, host string, gpus int) (string, string, error)
	logs func() string
}

// TestContract runs one suite of observations against yarnsim and against
// every Hadoop version in hadoop.Versions(), through the real yarn client.
func TestContract(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) {
		for _, f := range []yarnsim.Flavor{yarnsim.Flavor33, yarnsim.Flavor35} {
			t.Run(string(f), func(t *testing.T) { runContract(t, simTarget(t, f)) })
		}
	})
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) { runContract(t, hadoopTarget(t, v)) })
	}
}

func simTarget(t *testing.T, f yarnsim.Flavor) target {
	sim, err := yarnsim.New(yarnsim.Config{Flavor: f})
	if err != nil {
		t.Fatal(err)
	}
	tg := target{gpus: 4, logs: func() string { return "" }}
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
	tg.submit = func(_ context.Context, queue string, prio, containers, gpus int, host string) (string, error) {
		rs := yarnsim.RequestSpec{Containers: containers, GPUs: gpus}
		if host != "" {
			rs.Hosts = []string{host}
		}
		return sim.Submit(yarnsim.AppSpec{Queue: queue, Priority: int64(prio), Requests: []yarnsim.RequestSpec{rs}})
	}
	tg.finish = func(_ context.Context, id string) error { return sim.Finish(id) }
	// The admin server places a container on a chosen host; it need not
	// listen for that.
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: filepath.Join(t.TempDir(), "exclude.xml")})
	if err != nil {
		t.Fatal(err)
	}
	tg.run = func(_ context.Context, queue, host string, gpus int) (string, string, error) {
		app, err := admin.RunOn(queue, host, gpus, time.Hour)
		if err != nil {
			return "", "", err
		}
		cs, _, err := sim.AppContainers(app)
		if err != nil || len(cs) != 1 {
			return "", "", fmt.Errorf("app %s containers %v: %v", app, cs, err)
		}
		return app, cs[0], nil
	}
	return tg
}

// startHadoop runs a minicluster of three 4-GPU NodeManagers for the test.
func startHadoop(t *testing.T, version string) *hadoop.Cluster {
	return startHadoopWith(t, hadoop.Config{Version: version})
}

// startHadoopWith is startHadoop with more of the launcher's settings
// (its version, directory, nodes and GPUs are filled in).
func startHadoopWith(t *testing.T, cfg hadoop.Config) *hadoop.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	version := cfg.Version
	cfg.Dir, cfg.GPUsPerNode = t.TempDir(), 4
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	c, err := hadoop.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start hadoop %s: %v", version, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func hadoopTarget(t *testing.T, version string) target {
	c := startHadoop(t, version)
	if c.Ready.HadoopVersion != version {
		t.Fatalf("launcher runs Hadoop %s, want %s", c.Ready.HadoopVersion, version)
	}
	return target{
		url: c.Ready.RMWeb, hosts: c.Ready.Nodes, gpus: c.Ready.GPUsPerNode,
		submit: c.Submit, finish: c.Finish,
		run: func(ctx context.Context, queue, host string, gpus int) (string, string, error) {
			return c.Run(ctx, queue, host, gpus, 3600)
		},
		logs: func() string { return c.LogTail(3000) },
	}
}

// eventually polls Observe until check passes or the budget runs out.
func eventually(t *testing.T, ctx context.Context, c *yarn.Client, what string, check func(*yarn.Observation) error) *yarn.Observation {
	t.Helper()
	return eventuallyFor(t, ctx, c, what, 90*time.Second, 250*time.Millisecond, check)
}

// eventuallyFor observes every poll until check accepts the observation or
// budget passes.
func eventuallyFor(t *testing.T, ctx context.Context, c *yarn.Client, what string, budget, poll time.Duration, check func(*yarn.Observation) error) *yarn.Observation {
	t.Helper()
	deadline := time.Now().Add(budget)
	for {
		obs, err := c.Observe(ctx)
		if err == nil {
			if err = check(obs); err == nil {
				return obs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(poll)
	}
}

func runContract(t *testing.T, tg target) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("RM log tail:\n%s", tg.logs())
		}
	}()
	c, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}

	// An idle cluster: three RUNNING nodes with all GPUs free, the queue
	// tree, no GPU demand.
	obs := eventually(t, ctx, c, "idle cluster", func(o *yarn.Observation) error {
		if len(o.Nodes) != len(tg.hosts) {
			return fmt.Errorf("%d nodes, want %d", len(o.Nodes), len(tg.hosts))
		}
		for i, n := range o.Nodes {
			if n.Host != tg.hosts[i] || n.State != "RUNNING" || n.GPUsTotal != tg.gpus || n.GPUsUsed != 0 || n.GPUsAvailable != tg.gpus {
				return fmt.Errorf("node %d = %+v, want host %s RUNNING with %d GPUs free", i, n, tg.hosts[i], tg.gpus)
			}
		}
		return nil
	})
	if obs.Scheduler != "capacityScheduler" {
		t.Errorf("scheduler = %q, want capacityScheduler", obs.Scheduler)
	}
	for _, p := range []string{"root", "root.a", "root.b"} {
		if _, ok := obs.Queue(p); !ok {
			t.Errorf("queue %s missing from %+v", p, obs.Queues)
		}
	}
	if g := obs.PendingGPUs(); g != 0 {
		t.Errorf("idle cluster has %d pending GPUs", g)
	}

	// App A asks for 5 containers of 4 GPUs preferring the first host, so
	// the RM also holds host and rack requests; 3 fit, 2 stay pending.
	idA, err := tg.submit(ctx, "a", 3, 5, 4, tg.hosts[0])
	if err != nil {
		t.Fatalf("submit A: %v", err)
	}
	obs = eventually(t, ctx, c, "app A partly allocated", func(o *yarn.Observation) error {
		a, ok := o.App(idA)
		if !ok {
			return fmt.Errorf("app %s not observed", idA)
		}
		if a.PendingContainers() != 2 {
			return fmt.Errorf("app A pending containers = %d, want 2", a.PendingContainers())
		}
		used := 0
		for _, n := range o.Nodes {
			used += n.GPUsUsed
		}
		if used != 3*tg.gpus {
			return fmt.Errorf("%d GPUs used, want %d", used, 3*tg.gpus)
		}
		return nil
	})
	a, _ := obs.App(idA)
	if a.PendingGPUs() != 8 || a.Priority != 3 || a.QueuePath != "root.a" || a.State != "RUNNING" || a.RunningContainers != 3 {
		t.Errorf("app A = %+v (pending GPUs %d), want 8 pending GPUs, priority 3, queue root.a, RUNNING, 3 running", a, a.PendingGPUs())
	}
	if len(a.Requests) != 1 || a.Requests[0].GPUsPerContainer != 4 || a.Requests[0].Priority != 1 {
		t.Errorf("app A requests = %+v, want one ANY request of 4 GPUs at priority 1", a.Requests)
	}
	// IMPORTANT: app A's AM is unmanaged and never launches what it is
	// given, yet each node counts its container (numContainers, used
	// GPUs): the RM counts allocated-but-not-launched containers, which
	// is what lets yarn.DefaultCordonHold be short.
	for _, n := range obs.Nodes {
		if n.GPUsUsed != tg.gpus || n.GPUsAvailable != 0 || n.Containers != 1 {
			t.Errorf("node %s = %+v, want all %d GPUs used by one container", n.Host, n, tg.gpus)
		}
	}
	// Running work: app A's three containers, one per node, 4 GPUs each,
	// container priority 1; on the broker's nodes, work of tenant alpha
	// at base + app priority.
	if len(a.Containers) != 3 || a.Attempt == "" {
		t.Errorf("app A attempt %q containers %+v, want 3", a.Attempt, a.Containers)
	}
	hostsA := map[string]bool{}
	for _, ct := range a.Containers {
		hostsA[ct.Host] = true
		if ct.GPUs != 4 || ct.Priority != 1 || ct.MemoryMB != 1024 || ct.VCores != 1 || ct.Started.IsZero() || ct.AM {
			t.Errorf("app A container %+v, want 4 GPUs, priority 1, 1024 MB, 1 vcore, a start time", ct)
		}
	}
	if len(hostsA) != 3 {
		t.Errorf("app A containers on %v, want one on each node", hostsA)
	}
	tenants := map[string]broker.Tenant{
		"alpha": {Name: "alpha", BasePriority: 1000, YARNQueues: []string{"root.a"}},
		"beta":  {Name: "beta", BasePriority: 0, YARNQueues: []string{"b"}},
	}
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(tenants)) {
		if n.GPUsAllocated != tg.gpus || len(n.Work) != 1 || n.Work[0].App != idA || n.Work[0].GPUs != tg.gpus ||
			n.Work[0].Tenant != "alpha" || n.Work[0].Priority != 1003 || n.Work[0].Class != broker.WorkBatch || !n.Work[0].Preemptible {
			t.Errorf("broker node %s: allocated %d, work %+v; want one 4-GPU container of app A (alpha, priority 1003)", n.Name, n.GPUsAllocated, n.Work)
		}
	}

	// App B cannot get anything: all GPUs are taken.
	idB, err := tg.submit(ctx, "b", 1, 2, 2, "")
	if err != nil {
		t.Fatalf("submit B: %v", err)
	}
	obs = eventually(t, ctx, c, "app B pending", func(o *yarn.Observation) error {
		b, ok := o.App(idB)
		if !ok || b.PendingGPUs() != 4 || b.PendingContainers() != 2 {
			return fmt.Errorf("app B = %+v, want 2 containers / 4 GPUs pending", b)
		}
		qa, _ := o.Queue("root.a")
		qb, _ := o.Queue("root.b")
		if qa.PendingContainers != 2 || qa.PendingGPUs != 8 || qb.PendingContainers != 2 || qb.PendingGPUs != 4 {
			return fmt.Errorf("queues a %+v, b %+v: want 2/8 and 2/4 pending containers/GPUs", qa, qb)
		}
		return nil
	})
	if g := obs.PendingGPUs(); g != 12 {
		t.Errorf("pending GPUs = %d, want 12", g)
	}

	// The broker's view: one demand per app ANY request.
	ds, unmapped := yarn.MapDemand(obs, yarn.NewQueueMap(tenants), yarn.MapOptions{})
	if len(unmapped) != 0 {
		t.Errorf("unmapped = %+v", unmapped)
	}
	got := map[string]string{}
	for _, d := range ds {
		if err := d.Validate(); err != nil {
			t.Errorf("demand %s: %v", d.Key, err)
		}
		got[d.Key] = fmt.Sprintf("%s prio=%d units=%d gpus=%d", d.Tenant, d.Priority, d.Units, d.GPUsPerUnit)
	}
	want := map[string]string{
		idA + "/1": "alpha prio=1003 units=2 gpus=4",
		idB + "/1": "beta prio=1 units=2 gpus=2",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("demand = %v, want %v", got, want)
	}

	// A finished app leaves the observation.
	if err := tg.finish(ctx, idB); err != nil {
		t.Fatalf("finish B: %v", err)
	}
	eventually(t, ctx, c, "app B gone", func(o *yarn.Observation) error {
		if b, ok := o.App(idB); ok {
			return fmt.Errorf("app B still observed: %+v", b)
		}
		if _, ok := o.App(idA); !ok {
			return fmt.Errorf("app A vanished")
		}
		return nil
	})

	// A container that really runs: 1 GPU on the second node, once app A
	// has released everything. It is the only work in the cluster, on its
	// node, with its GPU; the other nodes are idle.
	if err := tg.finish(ctx, idA); err != nil {
		t.Fatalf("finish A: %v", err)
	}
	eventually(t, ctx, c, "all GPUs free", func(o *yarn.Observation) error {
		for _, n := range o.Nodes {
			if n.GPUsUsed != 0 {
				return fmt.Errorf("node %s uses %d GPUs", n.Host, n.GPUsUsed)
			}
		}
		return nil
	})
	idR, cid, err := tg.run(ctx, "a", tg.hosts[1], 1)
	if err != nil {
		t.Fatalf("run a container: %v", err)
	}
	obs = eventually(t, ctx, c, "running container observed", func(o *yarn.Observation) error {
		r, ok := o.App(idR)
		if !ok || len(r.Containers) != 1 {
			return fmt.Errorf("app %s = %+v, want one container", idR, r)
		}
		return nil
	})
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(tenants)) {
		if n.Name != tg.hosts[1] {
			if len(n.Work) != 0 || n.GPUsAllocated != 0 {
				t.Errorf("idle node %s: allocated %d, work %+v", n.Name, n.GPUsAllocated, n.Work)
			}
			continue
		}
		if n.GPUsAllocated != 1 || len(n.Work) != 1 || n.Work[0].Key != cid || n.Work[0].App != idR || n.Work[0].GPUs != 1 ||
			n.Work[0].Tenant != "alpha" || n.Work[0].StartedAt.IsZero() {
			t.Errorf("node %s: allocated %d, work %+v; want container %s of app %s with 1 GPU", n.Name, n.GPUsAllocated, n.Work, cid, idR)
		}
	}
}
