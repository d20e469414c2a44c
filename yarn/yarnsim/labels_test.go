package yarnsim_test

import (
	"testing"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestLabelExclusivity: default-partition asks use a non-exclusive
// label's idle nodes, never an exclusive label's; asks for a label the
// queue may not access are refused at submission (CapacityScheduler).
func TestLabelExclusivity(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{
		{Path: "root.a", Capacity: 50, AccessibleLabels: []string{"shared"}},
		{Path: "root.b", Capacity: 50},
	}})
	must(t, err)
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
	must(t, sim.AddClusterLabels([]yarnsim.ClusterLabel{{Name: "cordon", Exclusive: true}, {Name: "shared", Exclusive: false}}))
	must(t, sim.ReplaceNodeLabels(map[string][]string{"n1": {"cordon"}, "n2": {"shared"}}, true))

	// Two 4-GPU default-partition asks: n2 (non-exclusive) takes one, the
	// cordoned n1 none.
	_, err = sim.Submit(yarnsim.AppSpec{Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}})
	must(t, err)
	if _, _, pending := sim.Counts(); pending != 4 {
		t.Fatalf("pending GPUs = %d, want 4 (one on the non-exclusive n2, none on the exclusive n1)", pending)
	}
	// root.a may not ask for the cordon label; root.b inherits "*".
	if _, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 1, NodeLabel: "cordon"}}}); err == nil {
		t.Fatal("root.a asked for a label it may not access and was accepted")
	}
	// Removing the cordon label from the cluster takes it off n1, which
	// takes the pending ask.
	must(t, sim.RemoveClusterLabels([]string{"cordon"}))
	if got := sim.NodeLabels("n1"); len(got) != 0 {
		t.Fatalf("n1 labels = %v after its label was removed", got)
	}
	if _, _, pending := sim.Counts(); pending != 0 {
		t.Fatalf("pending GPUs = %d after n1 left the cordon", pending)
	}
	// A label a queue lists cannot be removed.
	if err := sim.RemoveClusterLabels([]string{"shared"}); err == nil {
		t.Fatal("removed a label root.a may access")
	}
}
