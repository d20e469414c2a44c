package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestRuntimeEvictInProgressWaitsWithoutCountingAttempts: a victim whose
// eviction answers ErrInProgress (a YARN container told to shut down and
// still running) more times than maxStepAttempts is waited for, not
// retried as a failure: the op never counts an attempt and ends done, with
// the node handed over.
func TestRuntimeEvictInProgressWaitsWithoutCountingAttempts(t *testing.T) {
	w := newRTWorld(t, 1)
	w.yarnHost("y1", broker.Workload{Source: broker.SourceYARN, Key: "container_1", Name: "container_1", Tenant: "training",
		GPUs: 4, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-2 * time.Hour), CheckpointAge: -1})
	w.yarn.evictInProgress = maxStepAttempts + 2
	r := w.runtime()
	w.k8s.submit(trainingPod("elastic-gpu-training", 2, 1000000))
	for i := 0; i < 3*maxStepAttempts; i++ {
		w.tick(r)
		ops := w.ledger.opsOf(broker.ActPreempt)
		if len(ops) != 1 {
			t.Fatalf("tick %d: want one preemption, got %+v", i, ops)
		}
		if ops[0].Attempts != 0 || ops[0].State == broker.OpFailed {
			t.Fatalf("tick %d: an eviction in progress counted as a failed attempt: %+v", i, ops[0])
		}
		if ops[0].State == broker.OpDone {
			break
		}
		w.clock.Add(3 * time.Second)
	}
	ops := w.ledger.opsOf(broker.ActPreempt)
	if ops[0].State != broker.OpDone || w.yarn.evictCalls["container_1"] != maxStepAttempts+3 {
		t.Fatalf("preemption %+v after %d Evict calls, want done after %d", ops[0], w.yarn.evictCalls["container_1"], maxStepAttempts+3)
	}
	if len(w.k8s.admitted) != 1 || w.k8s.admitted[0] != "y1" {
		t.Fatalf("admitted to k8s %v, want y1 handed over", w.k8s.admitted)
	}
}

// racingK8s is a Kubernetes side whose scheduler binds pending pods to
// the space an evicted victim frees at once, as kube-scheduler does on a
// node that is not cordoned.
type racingK8s struct{ *rtSide }

func (s racingK8s) Evict(ctx context.Context, node string, w broker.Workload) error {
	if err := s.rtSide.Evict(ctx, node, w); err != nil {
		return err
	}
	s.mu.Lock()
	s.schedule()
	s.mu.Unlock()
	return nil
}

// TestRuntimePreemptAcrossCordonsK8sNodeBeforeEvicting: a preemption
// taking a Kubernetes node for YARN demand cordons the node before it
// evicts the victim, so a pending pod is not bound in the freed space and
// then evicted by the release's drain (work no preemption names); the node
// is handed to YARN.
func TestRuntimePreemptAcrossCordonsK8sNodeBeforeEvicting(t *testing.T) {
	w, r := k8sPreemptWorld(t)
	// A pod of the same low priority as the victim, waiting for space.
	w.k8s.submit(trainingPod("next-pod", 4, 0))
	for i := 0; i < 10; i++ {
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActPreempt); len(ops) == 1 && ops[0].State.Terminal() {
			break
		}
		w.clock.Add(5 * time.Second)
	}
	ops := w.ledger.opsOf(broker.ActPreempt)
	if len(ops) != 1 || ops[0].State != broker.OpDone || !slices.Equal(w.yarn.admitted, []string{"k1"}) {
		t.Fatalf("preemptions %+v, yarn admitted %v: want k1 handed to yarn", ops, w.yarn.admitted)
	}
	if !slices.Equal(w.k8s.evicted, []string{"victim"}) {
		t.Fatalf("evicted %v, want only the victim", w.k8s.evicted)
	}
	for _, d := range w.k8s.pending {
		if d.Key == "next-pod-again" {
			t.Fatalf("next-pod was bound to k1 after the victim left and drained by the release: pending %+v", w.k8s.pending)
		}
	}
}

// k8sPreemptWorld has one Kubernetes node k1 running a low-priority
// victim and YARN demand that may preempt it across sides.
func k8sPreemptWorld(t *testing.T) (*rtWorld, *Runtime) {
	w := newRTWorld(t, 1)
	w.k8s.join("k1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-k1", Hostname: "k1", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	w.k8s.nodes["k1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "victim", Name: "default/victim", Tenant: "training",
		GPUs: 4, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1}}
	w.k8s.nodes["k1"].GPUsAllocated = 4
	ks := racingK8s{w.k8s}
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, ks}, Actions: []SideActions{w.yarn, ks},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_9/1", Name: "application_9", Tenant: "training",
		Queue: "root.training", Priority: 1000000, GPUsPerUnit: 4, Units: 1})
	return w, r
}

// TestRuntimePreemptAcrossGivesCordonedK8sNodeBackWhenEvictionNeverEnds:
// the node cordoned for the eviction goes back to Kubernetes (uncordoned)
// when the victim never stops before the op's deadline.
func TestRuntimePreemptAcrossGivesCordonedK8sNodeBackWhenEvictionNeverEnds(t *testing.T) {
	w, r := k8sPreemptWorld(t)
	w.k8s.evictInProgress = 1 << 20
	for i := 0; i < 40; i++ {
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActPreempt); len(ops) == 1 && ops[0].State.Terminal() {
			break
		}
		w.clock.Add(time.Minute)
	}
	ops := w.ledger.opsOf(broker.ActPreempt)
	if len(ops) != 1 || ops[0].State != broker.OpFailed || !strings.Contains(ops[0].LastError, "given back to k8s") {
		t.Fatalf("preemptions %+v: want one, failed with k1 given back to k8s", ops)
	}
	if w.k8s.released["k1"] || !slices.Contains(w.k8s.admitted, "k1") || len(w.yarn.admitted) != 0 {
		t.Fatalf("k1 cordoned %v, k8s admitted %v, yarn admitted %v: want k1 uncordoned on k8s", w.k8s.released["k1"], w.k8s.admitted, w.yarn.admitted)
	}
}
