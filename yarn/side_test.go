package yarn_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestSideAgainstSimulator polls yarnsim through the real client: pending
// demand maps to the tenant of its queue, an unmapped queue is reported,
// allocated demand closes as scheduled and finished apps as finished.
func TestSideAgainstSimulator(t *testing.T) {
	ctx := context.Background()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	client, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	side := yarn.NewSide(client, yarn.MapOptions{})
	idx := broker.NewTenantIndex([]broker.Tenant{
		{Name: "training", BasePriority: 100, MaxGPUs: 10, Weight: 1, YARNQueues: []string{"root.a"}}})

	a, err := sim.Submit(yarnsim.AppSpec{Name: "train", Queue: "root.a", Priority: 5,
		Tags:     []string{"gpubroker.io/checkpoint-dir=hdfs://nn:8020/ckpt/train"},
		Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.Submit(yarnsim.AppSpec{Name: "other", Queue: "root.b", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := side.Observe(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Demand) != 1 || obs.Demand[0].Tenant != "training" || obs.Demand[0].GPUs() != 4 || obs.Demand[0].Priority != 105 {
		t.Fatalf("demand: %+v", obs.Demand)
	}
	if len(obs.Ignored) != 1 || obs.Ignored[0].Demand != "yarn/"+b {
		t.Fatalf("ignored: %+v", obs.Ignored)
	}
	// A 4-GPU NodeManager joins: the app's containers are allocated.
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "nm-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	obs, err = side.Observe(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	// Which demand left is the ledger's to say; the side says why.
	if len(obs.Demand) != 0 || obs.Departed == nil || obs.Departed(a+"/1") != "scheduled" {
		t.Fatalf("after allocation: demand %+v", obs.Demand)
	}
	if r := obs.Departed("application_0_9999/1"); r != "finished" {
		t.Fatalf("demand of an app that is gone left as %q, want finished", r)
	}
	if len(obs.Nodes) != 1 || obs.Nodes[0].GPUsAllocated != 4 {
		t.Fatalf("nodes: %+v", obs.Nodes)
	}
	// Its two containers are the node's work: tenant, unified priority,
	// the app's checkpoint directory.
	if ws := obs.Nodes[0].Work; len(ws) != 2 {
		t.Fatalf("work: %+v", ws)
	}
	for _, w := range obs.Nodes[0].Work {
		if w.App != a || w.Tenant != "training" || w.Priority != 105 || w.GPUs != 2 || !w.Preemptible ||
			w.CheckpointDir != "hdfs://nn:8020/ckpt/train" || w.CheckpointAge != -1 || w.StartedAt.IsZero() {
			t.Errorf("work %+v", w)
		}
	}
	// A failing RM is an error, never an empty observation.
	sim.SetFault(yarnsim.FaultHTML)
	if _, err := side.Observe(ctx, idx); err == nil {
		t.Fatal("an RM answering HTML must be an error")
	}
}
