package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// attritionSide is a YARN side whose Release honours the deadline as the
// RM does: a zero deadline (an infinite graceful timeout) stops new
// containers but kills none, so the node stays decommissioning until its
// work ends. It records every deadline it was given.
type attritionSide struct {
	*rtSide
	mu        sync.Mutex
	deadlines []time.Time
}

func (s *attritionSide) Release(ctx context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error) {
	s.mu.Lock()
	s.deadlines = append(s.deadlines, deadline)
	s.mu.Unlock()
	if !deadline.IsZero() {
		return s.rtSide.Release(ctx, node, deadline)
	}
	if err := s.rtSide.Cordon(ctx, node); err != nil {
		return broker.ReleaseStatus{}, err
	}
	s.rtSide.mu.Lock()
	defer s.rtSide.mu.Unlock()
	var left []string
	if n := s.nodes[node]; n != nil {
		for _, w := range n.Work {
			if !w.System {
				left = append(left, w.Key)
			}
		}
	}
	return broker.ReleaseStatus{Drained: len(left) == 0, Remaining: left}, nil
}

func (s *attritionSide) allZero() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.deadlines {
		if !d.IsZero() {
			return len(s.deadlines), false
		}
	}
	return len(s.deadlines), true
}

func (w *rtWorld) runtimeWith(yarn SideObserver, yarnActs SideActions) *Runtime {
	w.t.Helper()
	r, err := NewRuntime(RuntimeConfig{
		Observers: []SideObserver{yarn, w.k8s}, Actions: []SideActions{yarnActs, w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// yarnHost adds a YARN NodeManager of the pool with one running container.
func (w *rtWorld) yarnHost(name string, c broker.Workload) {
	w.yarn.join(name, rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = append(w.cloud.pools[rtPool].Instances, broker.Instance{ID: "i-" + name, Hostname: name, Phase: broker.PhaseActive})
	w.cloud.pools[rtPool].Desired++
	n := w.yarn.nodes[name]
	n.Work = []broker.Workload{c}
	n.GPUsAllocated = c.GPUs
}

// TestRuntimeAttritionHasNoTimeoutAndIsCancelledForDemand: with
// yarn_drain_by_attrition a busy YARN node is released with a zero deadline
// (the infinite graceful timeout), the op outlives the drain timeout without
// failing or terminating anything, and YARN demand that fits the node
// cancels it: the node is recommissioned and the demand lands there.
func TestRuntimeAttritionHasNoTimeoutAndIsCancelledForDemand(t *testing.T) {
	w := newRTWorld(t, 5)
	w.ledger.policy.YARNDrainByAttrition = true
	ys := &attritionSide{rtSide: w.yarn}
	w.yarnHost("y1", broker.Workload{Source: broker.SourceYARN, Key: "container_1", Name: "container_1", Tenant: "training",
		GPUs: 1, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1})
	r := w.runtimeWith(ys, ys)
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || downs[0].Step != broker.StepRelease {
		t.Fatalf("want one attrition scale-down in its release, got %+v", downs)
	}
	if n, zero := ys.allZero(); n == 0 || !zero {
		t.Fatalf("YARN release deadlines %v: want only zero deadlines (infinite graceful timeout)", ys.deadlines)
	}
	// Far past the drain timeout: still waiting, nothing killed or terminated.
	for range 3 {
		w.clock.Add(5 * time.Minute)
		w.tick(r)
	}
	downs = w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || len(w.cloud.terminated) != 0 || len(w.yarn.nodes["y1"].Work) != 1 {
		t.Fatalf("attrition must wait for the work: ops %+v, terminated %v, work %+v", downs, w.cloud.terminated, w.yarn.nodes["y1"].Work)
	}
	// YARN demand that fits y1 arrives: the attrition is cancelled.
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_2/1", Name: "application_2", Tenant: "training",
		Queue: "root.training", GPUsPerUnit: 2, Units: 1})
	w.clock.Add(5 * time.Second)
	w.tick(r)
	downs = w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "attrition cancelled") {
		t.Fatalf("want the attrition cancelled, got %+v", downs)
	}
	if len(w.yarn.admitted) != 1 || w.yarn.admitted[0] != "y1" {
		t.Fatalf("recommissioned %v, want [y1]", w.yarn.admitted)
	}
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 0 {
		t.Fatalf("bought a node although y1 came back: %+v", ups)
	}
	w.clock.Add(5 * time.Second)
	w.tick(r)
	if reason := w.ledger.closed["yarn/application_2/1"]; reason != "scheduled" {
		t.Fatalf("demand closed as %q, want scheduled on the recommissioned node", reason)
	}
}

// TestRuntimePreemptsAcrossSidesAndHandsNodeOver: a Kubernetes pod at
// priority 1000000 preempts a YARN container at priority 0 on a full pool;
// one op evicts the container, releases the node from YARN and admits it to
// Kubernetes, and its decision records the GPU-hours lost.
func TestRuntimePreemptsAcrossSidesAndHandsNodeOver(t *testing.T) {
	w := newRTWorld(t, 1)
	w.yarnHost("y1", broker.Workload{Source: broker.SourceYARN, Key: "container_1", Name: "container_1", Tenant: "training",
		GPUs: 4, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-2 * time.Hour), CheckpointAge: -1})
	r := w.runtime()
	w.k8s.submit(trainingPod("elastic-gpu-training", 2, 1000000))
	w.tick(r)
	ops := w.ledger.opsOf(broker.ActPreempt)
	if len(ops) != 1 || ops[0].Node != "y1" || ops[0].To != broker.OwnerK8s || ops[0].State != broker.OpDone {
		t.Fatalf("want one finished preemption handing y1 to k8s, got %+v", ops)
	}
	if len(w.yarn.evicted) != 1 || w.yarn.evicted[0] != "container_1" {
		t.Fatalf("evicted %v, want the YARN container", w.yarn.evicted)
	}
	// The op records what actually stopped.
	var data broker.OpData
	if err := json.Unmarshal(ops[0].Data, &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Stopped) != 1 || !strings.Contains(data.Stopped[0], "container_1") {
		t.Fatalf("op records stopped %q, want container_1", data.Stopped)
	}
	if !w.yarn.released["y1"] || len(w.k8s.admitted) != 1 || w.k8s.admitted[0] != "y1" {
		t.Fatalf("released on YARN %v, admitted to k8s %v: want y1 released, then admitted", w.yarn.released, w.k8s.admitted)
	}
	var found bool
	for _, d := range w.ledger.decisions {
		if d.Kind != string(broker.ActPreempt) {
			continue
		}
		var a broker.Action
		if err := json.Unmarshal(d.Detail, &a); err != nil {
			t.Fatal(err)
		}
		found = a.GPUHoursLost > 7.99 && a.GPUHoursLost < 8.01 && strings.Contains(d.Reason, "8.00 GPU-hours")
	}
	if !found {
		t.Fatalf("no preemption decision recording 8 GPU-hours lost: %+v", w.ledger.decisions)
	}
}

// TestRuntimeRecordsWhyANodeIsKept: a note is recorded once, not every tick.
func TestRuntimeRecordsWhyANodeIsKept(t *testing.T) {
	w := newRTWorld(t, 5)
	w.yarnHost("y1", broker.Workload{Source: broker.SourceYARN, Key: "container_1", Name: "container_1", Tenant: "training",
		GPUs: 1, Preemptible: true, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1})
	r := w.runtime()
	for range 4 {
		w.tick(r)
		w.clock.Add(3 * time.Minute)
	}
	var kept []broker.Decision
	for _, d := range w.ledger.decisions {
		if d.Kind == "kept" {
			kept = append(kept, d)
		}
	}
	if len(kept) != 1 || kept[0].Node != "y1" || !strings.Contains(kept[0].Reason, "idle reclaim never stops YARN work") {
		t.Fatalf("kept decisions %+v, want one for y1", kept)
	}
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 0 {
		t.Fatalf("a YARN node running a GPU container was scaled down: %+v", downs)
	}
}

// TestRuntimeCordonAndWaitEvictsNothingUntilBatchWorkEnds: with
// consolidation.cordon_and_wait a Kubernetes node whose batch pod would lose
// more than max_work_lost is cordoned, nothing is evicted while the pod
// runs (well past the drain timeout), and the node is drained and
// terminated once the pod has finished.
func TestRuntimeCordonAndWaitEvictsNothingUntilBatchWorkEnds(t *testing.T) {
	w := newRTWorld(t, 5)
	w.ledger.policy.CordonAndWait = true
	w.k8s.join("k1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = append(w.cloud.pools[rtPool].Instances, broker.Instance{ID: "i-k1", Hostname: "k1", Phase: broker.PhaseActive})
	w.cloud.pools[rtPool].Desired = 1
	n := w.k8s.nodes["k1"]
	n.Work = []broker.Workload{{Source: broker.SourceK8s, Key: "train-0", Name: "ml/train-0", Tenant: "training", GPUs: 1,
		Preemptible: true, Class: broker.WorkBatch, App: "Job/ml/train", StartedAt: t0.Add(-3 * time.Hour), CheckpointAge: -1}}
	n.GPUsAllocated = 1
	r := w.runtime()
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	for range 3 {
		w.clock.Add(5 * time.Minute)
		w.tick(r)
	}
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || !w.k8s.released["k1"] {
		t.Fatalf("want k1 cordoned by an open cordon-and-wait op, got ops %+v, released %v", downs, w.k8s.released)
	}
	if len(w.k8s.nodes["k1"].Work) != 1 || len(w.k8s.evicted) != 0 || len(w.cloud.terminated) != 0 {
		t.Fatalf("cordon-and-wait evicted or terminated: work %+v, evicted %v, terminated %v", w.k8s.nodes["k1"].Work, w.k8s.evicted, w.cloud.terminated)
	}
	w.k8s.finish("train-0")
	for range 2 {
		w.clock.Add(5 * time.Second)
		w.tick(r)
	}
	if downs = w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || downs[0].State != broker.OpDone || len(w.cloud.terminated) != 1 {
		t.Fatalf("after the batch pod ended: ops %+v, terminated %v; want the node reclaimed", downs, w.cloud.terminated)
	}
}
