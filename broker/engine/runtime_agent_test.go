package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// agentWorld has two Kubernetes nodes: n1 holds 3 of its 4 GPUs of work its agent
// measures at 0% utilisation; n2 is empty and protected.
func agentWorld(t *testing.T, measured bool) *rtWorld {
	w := newRTWorld(t, 5)
	w.ledger.policy.ScaleDownMeasured = measured
	w.ledger.policy.ScaleDownUnneeded = broker.Duration(time.Minute)
	for _, n := range []string{"n1", "n2"} {
		w.k8s.join(n, rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
		w.cloud.pools[rtPool].Instances = append(w.cloud.pools[rtPool].Instances, broker.Instance{ID: "i-" + n, Hostname: n, Phase: broker.PhaseActive})
	}
	w.cloud.pools[rtPool].Desired = 2
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "idle-job", Name: "default/idle-job", GPUs: 3, Preemptible: true, CheckpointAge: -1, Class: broker.WorkService}}
	w.k8s.nodes["n1"].GPUsAllocated = 3
	w.ledger.nodes["n2"] = broker.Node{Name: "n2", Protected: true}
	w.ledger.reports["n1"] = broker.NodeReport{Node: "n1", At: t0, GPUs: []broker.GPUReport{
		{Index: 0, Utilisation: 0}, {Index: 1, Utilisation: 0}, {Index: 2, Utilisation: 0}, {Index: 3, Utilisation: 0}}}
	return w
}

func TestRuntimeMeasuredUtilisationReclaimsIdleAllocatedNode(t *testing.T) {
	for _, measured := range []bool{false, true} {
		w := agentWorld(t, measured)
		r := w.runtime()
		for i := 0; i < 3; i++ {
			w.tick(r)
			w.clock.Add(40 * time.Second)
			w.ledger.reports["n1"] = broker.NodeReport{Node: "n1", At: w.clock.Now(), GPUs: w.ledger.reports["n1"].GPUs}
		}
		downs := w.ledger.opsOf(broker.ActScaleDown)
		switch {
		case measured && (len(downs) != 1 || downs[0].Node != "n1"):
			t.Fatalf("with measured utilisation: scale-downs %+v, want n1 reclaimed", downs)
		case !measured && len(downs) != 0:
			t.Fatalf("by allocation (75%% allocated, over the 50%% threshold) n1 must stay: %+v", downs)
		}
	}
}

// twice is report r as the second of two consecutive reports alike: an
// unhealthy verdict needs two.
func twice(r broker.NodeReport) broker.NodeReport {
	p := r
	p.At = r.At.Add(-30 * time.Second)
	r.Previous = &p
	return r
}

// TestRuntimeUnhealthyReportReplacesNode: one report of XID 79 does not
// replace a node (a transient or a false alarm); the second consecutive
// one does.
func TestRuntimeUnhealthyReportReplacesNode(t *testing.T) {
	w := agentWorld(t, false)
	w.ledger.reports["n2"] = broker.NodeReport{Node: "n2", At: t0, GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-x", XIDs: []uint64{79}}}}
	w.ledger.nodes["n2"] = broker.Node{Name: "n2"}
	r := w.runtime()
	for _, a := range w.tick(r).Plan.Actions {
		if a.Kind == broker.ActReplace {
			t.Fatalf("one report of XID 79 replaced %s: %s", a.Node, a.Reason)
		}
	}
	w.ledger.reports["n2"] = twice(w.ledger.reports["n2"])
	rep := w.tick(r)
	var replaced bool
	for _, a := range rep.Plan.Actions {
		if a.Kind == broker.ActReplace && a.Node == "n2" {
			replaced = true
			t.Logf("replace: %s", a.Reason)
		}
	}
	if !replaced {
		t.Fatalf("a node whose agent reports XID 79 must be replaced; plan %+v", rep.Plan.Actions)
	}
}

// TestRuntimeScaleDownOfYARNNodeForgetsIt: after terminating a node taken
// from YARN, the broker forgets its host name (removing it from the
// exclude file), so a later machine reusing the name can join; it does not
// admit it, which would run the NodeManager restart hook against the
// terminated machine.
func TestRuntimeScaleDownOfYARNNodeForgetsIt(t *testing.T) {
	w := newRTWorld(t, 5)
	w.yarn.join("y1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-y1", Hostname: "y1", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	r := w.runtime()
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	w.ticks(r, 1, 5*time.Second) // the fence, then an observation after it
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpDone {
		t.Fatalf("scale-down: %+v", downs)
	}
	if len(w.cloud.terminated) != 1 || len(w.yarn.forgotten) != 1 || w.yarn.forgotten[0] != "y1" || len(w.yarn.admitted) != 0 {
		t.Fatalf("terminated %v, YARN forgot %v and admitted %v; want i-y1 terminated, y1 forgotten and not admitted",
			w.cloud.terminated, w.yarn.forgotten, w.yarn.admitted)
	}
}

type rtCheckpoints map[string]time.Duration

func (c rtCheckpoints) WorkAtRisk(_ context.Context, dir string) (time.Duration, bool) {
	age, ok := c[dir]
	return age, ok
}

// TestRuntimeFillsCheckpointAge: running work naming a checkpoint
// directory gets its age for victim choice; unknown stays the worst case.
func TestRuntimeFillsCheckpointAge(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.k8s.nodes["n1"].Work = []broker.Workload{
		{Source: broker.SourceK8s, Key: "a", GPUs: 1, CheckpointAge: -1, CheckpointDir: "hdfs://nn:8020/ck/a"},
		{Source: broker.SourceK8s, Key: "b", GPUs: 1, CheckpointAge: -1, CheckpointDir: "hdfs://nn:8020/ck/missing"},
		{Source: broker.SourceK8s, Key: "c", GPUs: 1, CheckpointAge: -1},
	}
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.yarn, w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now, Checkpoints: rtCheckpoints{"hdfs://nn:8020/ck/a": 7 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	rep := w.tick(r)
	got := map[string]time.Duration{}
	for _, n := range rep.Snapshot.Nodes {
		for _, wl := range n.Work {
			got[wl.Key] = wl.CheckpointAge
		}
	}
	if got["a"] != 7*time.Minute || got["b"] != -1 || got["c"] != -1 {
		t.Fatalf("checkpoint ages %v, want a=7m, b and c unknown (-1)", got)
	}
}
