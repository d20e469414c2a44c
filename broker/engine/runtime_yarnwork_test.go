package engine

import (
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestRuntimeFillsYARNCheckpointAge: YARN containers naming their app's
// checkpoint directory get its age like pods do, and their GPUs stay on
// the node in the snapshot (the work the planner weighs).
func TestRuntimeFillsYARNCheckpointAge(t *testing.T) {
	w := newRTWorld(t, 5)
	w.yarn.join("nm1", rtPool, 4, nil, nil)
	w.yarn.nodes["nm1"].GPUsAllocated = 3
	w.yarn.nodes["nm1"].Work = []broker.Workload{
		{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", App: "application_1_0001", GPUs: 2, Class: broker.WorkBatch,
			CheckpointAge: -1, CheckpointDir: "hdfs://nn:8020/ck/train"},
		{Source: broker.SourceYARN, Key: "container_1_0002_01_000002", App: "application_1_0002", GPUs: 1, Class: broker.WorkBatch, CheckpointAge: -1},
	}
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.yarn, w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now, Checkpoints: rtCheckpoints{"hdfs://nn:8020/ck/train": 4 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	rep := w.tick(r)
	got := map[string]time.Duration{}
	for _, n := range rep.Snapshot.Nodes {
		if n.Name == "nm1" && n.GPUsAllocated != 3 {
			t.Errorf("nm1 allocated %d GPUs, want 3", n.GPUsAllocated)
		}
		for _, wl := range n.Work {
			got[wl.Key] = wl.CheckpointAge
		}
	}
	if got["container_1_0001_01_000002"] != 4*time.Minute || got["container_1_0002_01_000002"] != -1 {
		t.Fatalf("checkpoint ages %v, want the tagged container's 4m and the other unknown (-1)", got)
	}
}
