package engine

import (
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
