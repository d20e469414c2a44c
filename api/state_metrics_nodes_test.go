package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// TestNodeMetricsDownAndClaimed: gpubroker_node_unhealthy is 1 for a node
// its side reports down (kubelet NotReady, NodeManager LOST) even though
// its agent says its GPUs are fine, and gpubroker_node_claim_conflict
// names the nodes the leader's last tick saw claimed by both sides (1),
// every other node 0, a claimed node not yet stored 1 too; a follower
// exports none of it.
func TestNodeMetricsDownAndClaimed(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	if err := e.st.UpsertNodes(ctx, []broker.Node{{Name: "ip-10-0-0-2", InstanceID: "i-2", Pool: "gpu-training-group",
		Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, GPUsAllocated: 1,
		Utilisation: 0.2, Healthy: true, Down: "NodeManager LOST", DownSince: e.now.Add(-time.Minute)}}, e.now); err != nil {
		t.Fatal(err)
	}
	e.rt.set(func(f *fakeRuntime) {
		f.status = engine.RuntimeStatus{Leader: true, LastTick: time.Now(), ClaimConflicts: 2,
			ClaimConflictNodes: []string{"ip-10-0-0-1", "ip-10-0-0-77"}}
	})
	m := scrape(t, e, "")
	for series, v := range map[string]float64{
		`gpubroker_node_unhealthy{node="ip-10-0-0-2",pool="gpu-training-group"}`: 1,
		`gpubroker_node_unhealthy{node="ip-10-0-0-1",pool="gpu-training-group"}`: 0,
		`gpubroker_node_claim_conflict{node="ip-10-0-0-1"}`:                      1,
		`gpubroker_node_claim_conflict{node="ip-10-0-0-77"}`:                     1,
		`gpubroker_node_claim_conflict{node="ip-10-0-0-2"}`:                      0,
		`gpubroker_node_claim_conflict{node="ip-10-0-0-3"}`:                      0,
	} {
		got, ok := m[series]
		if !ok {
			t.Errorf("/metrics lacks %s", series)
		} else if got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	// The node's answer says why it counts as unhealthy.
	r := e.call("GET", "/api/v1/nodes/ip-10-0-0-2", "admin", nil)
	want(t, r, 200, "get the down node")
	if r.body["down"] != "NodeManager LOST" || r.body["down_since"] == nil {
		t.Errorf("node answer %s: want down and down_since", r.raw)
	}

	e.rt.set(func(f *fakeRuntime) { f.status.Leader = false })
	for series := range scrape(t, e, "") {
		if strings.HasPrefix(series, "gpubroker_node_claim_conflict") {
			t.Errorf("a follower exports %s", series)
		}
	}
}

// TestPoolRepairsPausedMetric: gpubroker_pool_repairs_paused is 0 while at
// most 20% of a pool's nodes (rounded up to a node) are unhealthy, 1 once
// more are, counting nodes down on their side and nodes their agent
// reports faulty alike, as the planner does.
func TestPoolRepairsPausedMetric(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	const series = `gpubroker_pool_repairs_paused{pool="gpu-training-group"}`
	check := func(what string, want float64) {
		t.Helper()
		if got, ok := scrape(t, e, "")[series]; !ok || got != want {
			t.Fatalf("%s: %s = %v (exported %v), want %v", what, series, got, ok, want)
		}
	}
	check("all healthy", 0)
	// One of three down: the one node a three-node pool may repair.
	if err := e.st.UpsertNodes(ctx, []broker.Node{{Name: "ip-10-0-0-2", InstanceID: "i-2", Pool: "gpu-training-group",
		Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, Utilisation: 0.2,
		Healthy: true, Down: "NodeManager LOST", DownSince: e.now.Add(-time.Minute)}}, e.now); err != nil {
		t.Fatal(err)
	}
	check("one of three down", 0)
	if err := e.st.UpsertNodes(ctx, []broker.Node{{Name: "ip-10-0-0-1", InstanceID: "i-1", Pool: "gpu-training-group",
		Owner: broker.OwnerK8s, Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 4, Utilisation: 0.7,
		Healthy: false, HealthReason: "XID 79"}}, e.now); err != nil {
		t.Fatal(err)
	}
	check("two of three unhealthy", 1)
}
