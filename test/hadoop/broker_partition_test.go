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

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestBrokerPartitions (yarnsim): labelled and default YARN demand are
// served only from pools of their partition. Two pools, "plain" (default
// partition) and "fast" (partition fast), each with one idle Kubernetes
// node whose NodeManager is decommissioned (its host excluded). A
// labelled app waits while only the plain node is there, takes the fast
// node once it exists, and a default app then takes the plain node, not
// the free GPUs of the fast one; each app's container lands in its
// partition.
func TestBrokerPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	tg := brokerTarget{decomTarget: decomTarget{url: srv.URL, gpus: 4, exclude: filepath.Join(t.TempDir(), "exclude.xml")}}
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: tg.exclude})
	if err != nil {
		t.Fatal(err)
	}
	if tg.admin, err = admin.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	tg.restart = admin.RestartNodeManager
	ex, err := yarn.NewExcludeFile(tg.exclude)
	if err != nil {
		t.Fatal(err)
	}
	plain, fast := "127.0.0.21", "127.0.0.22"
	// Booted machines: excluded from YARN until the broker hands them
	// over; the fast pool's NodeManager joins partition fast.
	for _, spec := range []yarnsim.NodeSpec{{Host: plain, GPUs: 4, MemoryMB: 16384, VCores: 16},
		{Host: fast, GPUs: 4, MemoryMB: 16384, VCores: 16, Labels: []string{"fast"}}} {
		if _, err := ex.Add(spec.Host, 0); err != nil {
			t.Fatal(err)
		}
		if err := admin.StartNodeManager(spec); err != nil {
			t.Fatal(err)
		}
	}
	direct, err := yarn.NewClient(yarn.Config{RMs: []string{tg.url}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{plain, fast} {
		if s := nodeState(t, ctx, direct, h); s != "DECOMMISSIONED" {
			t.Fatalf("booted %s is %s at the RM, want DECOMMISSIONED (excluded)", h, s)
		}
	}

	k8s := &fakeK8s{nodes: map[string]broker.Owner{plain: broker.OwnerK8s}, gpus: 4}
	pol := broker.DefaultPolicy()
	pol.ScaleDownUnneeded = broker.Duration(time.Hour)
	r := newBrokerRigPools(t, ctx, tg, tg.url, direct, pol, k8s,
		poolSpec{name: "plain", hosts: []string{plain}},
		poolSpec{name: "fast", partition: "fast"})
	labelled, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 1, NodeLabel: "fast"}}})
	if err != nil {
		t.Fatal(err)
	}
	noTransferOf := func(node string) func() error {
		return func() error {
			if ops := r.ops(ctx, broker.ActTransfer, node); len(ops) > 0 {
				return fmt.Errorf("node %s handed over to %s (op %d, %s) for %v", node, ops[0].To, ops[0].ID, ops[0].State, ops[0].Serves)
			}
			return nil
		}
	}
	// Only the plain node exists (the fast pool is empty, at a max of
	// 0): the labelled app waits, and never takes the plain node.
	var waited []broker.Wait
	for i := 0; len(waited) == 0 || i < 5; i++ {
		rep, err := r.rt.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := noTransferOf(plain)(); err != nil {
			t.Fatalf("labelled demand took a default-partition node: %v", err)
		}
		for _, w := range rep.Plan.Waits {
			if strings.Contains(w.Demand, labelled) {
				waited = append(waited, w)
			}
		}
		if i > 100 {
			t.Fatal("no wait recorded for the labelled app after 100 ticks")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("labelled app without a fast node: %s: %s", waited[0].Reason, waited[0].Detail)

	// The fast pool grows by one machine, which boots and joins
	// Kubernetes idle.
	if _, err := r.st.UpsertPool(ctx, broker.Pool{Name: "fast", Provider: "test", Group: "fast", GPUModel: "A100",
		GPUsPerNode: 4, MaxNodes: 1, Sides: broker.PoolShared, Partition: "fast"}); err != nil {
		t.Fatal(err)
	}
	k8s.join(fast)
	r.pool.add("fast", fast)
	r.tickUntil(ctx, "the hand-over of "+fast, time.Minute, noTransferOf(plain), func() bool {
		ops := r.ops(ctx, broker.ActTransfer, fast)
		return len(ops) == 1 && ops[0].State == broker.OpDone
	})
	containerIn := func(app, host string) func(*yarn.Observation) error {
		return func(o *yarn.Observation) error {
			a, ok := o.App(app)
			if !ok || len(a.Containers) == 0 {
				return fmt.Errorf("app %s holds no container: %+v", app, a)
			}
			for _, c := range a.Containers {
				if c.Host != host {
					return fmt.Errorf("app %s has a container on %s, want %s", app, c.Host, host)
				}
			}
			return nil
		}
	}
	eventuallyFor(t, ctx, direct, "the labelled app on "+fast, 30*time.Second, 200*time.Millisecond, containerIn(labelled, fast))

	// Default demand: the fast node has 3 free GPUs, but not for it.
	def, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	r.tickUntil(ctx, "the hand-over of "+plain, time.Minute, nil, func() bool {
		ops := r.ops(ctx, broker.ActTransfer, plain)
		return len(ops) == 1 && ops[0].State == broker.OpDone
	})
	eventuallyFor(t, ctx, direct, "the default app on "+plain, 30*time.Second, 200*time.Millisecond, containerIn(def, plain))
	if ops := r.ops(ctx, broker.ActTransfer, fast); len(ops) != 1 || !slices.ContainsFunc(ops[0].Serves, func(d string) bool { return strings.Contains(d, labelled) }) {
		t.Fatalf("hand-over of %s %+v, want one, for the labelled app", fast, ops)
	}
	if ops := r.ops(ctx, broker.ActTransfer, plain); len(ops) != 1 || !slices.ContainsFunc(ops[0].Serves, func(d string) bool { return strings.Contains(d, def) }) {
		t.Fatalf("hand-over of %s %+v, want one, for the default app", plain, ops)
	}
}
