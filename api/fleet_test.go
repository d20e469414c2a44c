package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// TestCapacityShowsFleet: /capacity shows a fleet pool as such, with the
// side owning each of its nodes, its hand-overs of the last 24 hours (a
// failed one and a manual drain to no side do not count),
// the nodes idling on a side and since when, and the hosts neither side
// lists; /metrics counts those hosts.
func TestCapacityShowsFleet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.UpsertPool(ctx, broker.Pool{Name: "owned", Provider: broker.ProviderFleet, GPUModel: "A100",
		GPUsPerNode: 8, MinNodes: 3, MaxNodes: 3, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	node := func(name string, owner broker.Owner, alloc int, idleFor time.Duration) broker.Node {
		n := broker.Node{Name: name, InstanceID: name, Pool: "owned", Owner: owner, Phase: broker.PhaseActive, GPUModel: "A100",
			GPUsTotal: 8, GPUsAllocated: alloc, Utilisation: -1, Healthy: true}
		if idleFor > 0 {
			n.UnderusedSince = now.Add(-idleFor)
		}
		return n
	}
	if err := e.st.UpsertNodes(ctx, []broker.Node{node("gpu-1", broker.OwnerK8s, 8, 0),
		node("gpu-2", broker.OwnerYARN, 0, 2*time.Hour), node("gpu-3", broker.OwnerK8s, 0, 10*time.Minute)}, now); err != nil {
		t.Fatal(err)
	}
	for _, op := range []broker.Op{
		{Kind: broker.ActTransfer, Pool: "owned", Node: "gpu-2", To: broker.OwnerYARN, State: broker.OpDone},
		{Kind: broker.ActPreempt, Pool: "owned", Node: "gpu-1", To: broker.OwnerK8s, State: broker.OpDone},
		{Kind: broker.ActTransfer, Pool: "owned", Node: "gpu-3", To: broker.OwnerYARN, State: broker.OpFailed},
		{Kind: broker.ActTransfer, Pool: "owned", Node: "gpu-3", To: broker.OwnerNone, State: broker.OpDone},
	} {
		op.Reason = "test"
		if _, err := e.st.InsertOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	e.rt.set(func(f *fakeRuntime) {
		f.status = engine.RuntimeStatus{Leader: true, MissingHosts: map[string][]string{"owned": {"gpu-4"}}}
	})

	r := e.call("GET", "/api/v1/capacity", "viewer", nil)
	want(t, r, 200, "capacity")
	pools := r.body["pools"].([]any)
	if len(pools) != 1 {
		t.Fatalf("pools: %s", r.raw)
	}
	p := pools[0].(map[string]any)
	bySide := p["nodes_by_side"].(map[string]any)
	if p["provider"] != "fleet" || bySide["k8s"] != 2.0 || bySide["yarn"] != 1.0 || p["hand_overs_24h"] != 2.0 {
		t.Fatalf("fleet pool: %v", p)
	}
	idle := p["idle"].([]any)
	if len(idle) != 2 || idle[0].(map[string]any)["node"] != "gpu-2" || idle[0].(map[string]any)["side"] != "yarn" ||
		idle[0].(map[string]any)["idle_seconds"].(float64) < 7100 || idle[1].(map[string]any)["node"] != "gpu-3" {
		t.Fatalf("idle nodes %v: want gpu-2 (on YARN for 2 h), then gpu-3", idle)
	}
	if m := p["missing_hosts"].([]any); len(m) != 1 || m[0] != "gpu-4" {
		t.Fatalf("missing hosts %v, want gpu-4", m)
	}
	if got := scrape(t, e, "")[`gpubroker_pool_hosts_missing{pool="owned"}`]; got != 1 {
		t.Fatalf("gpubroker_pool_hosts_missing = %v, want 1", got)
	}
	// A fleet's bounds are its hosts: a PATCH of them is refused, naming
	// the field and where its size comes from.
	r = e.call("PATCH", "/api/v1/pools/owned", "admin", map[string]any{"max_nodes": 5}, `If-Match: "1"`)
	wantInvalid(t, r, "max_nodes", "fleet bounds")
	if !strings.Contains(r.raw, "fleet pool") {
		t.Fatalf("fleet bounds: %s", r.raw)
	}
}
