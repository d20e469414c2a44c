package yarn_test

import (
	"errors"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestEvictRelistsContainers: after Evict stops a container whose app asks
// again at once (the replacement lands on the same node with the same
// size, so the app list and the node's GPU use look as before), the next
// poll of the same client lists the replacement, not the evicted
// container from its cache.
func TestEvictRelistsContainers(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1"}, yarn.DecommissionConfig{})
	app, err := e.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	listed := func() []yarn.Container {
		t.Helper()
		obs, err := e.client.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := obs.App(app)
		return a.Containers
	}
	before := listed()
	if len(before) != 1 || before[0].Host != "g1" {
		t.Fatalf("containers before = %+v, want one on g1", before)
	}
	if again := listed(); len(again) != 1 || again[0].ID != before[0].ID {
		t.Fatalf("a second poll lists %+v, want %s", again, before[0].ID)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: before[0].ID, App: app, GPUs: 4}
	if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict = %v, want in progress after GRACEFUL_SHUTDOWN", err)
	}
	until(t, "the NodeManager's heartbeat to deliver the signal", func() bool {
		cs, _ := e.sim.Containers(app)
		return len(cs) == 1 && cs[0].ID != before[0].ID
	})
	cs, err := e.sim.Containers(app)
	if err != nil || len(cs) != 1 || cs[0].ID == before[0].ID || cs[0].Host != "g1" {
		t.Fatalf("sim containers after the signal = %+v, %v: want a replacement on g1", cs, err)
	}
	if after := listed(); len(after) != 1 || after[0].ID != cs[0].ID {
		t.Fatalf("poll after the eviction lists %+v, want the replacement %s", after, cs[0].ID)
	}
	if err := e.d.Evict(ctx, "g1", w); err != nil {
		t.Fatalf("Evict of the stopped container = %v, want done", err)
	}
}
