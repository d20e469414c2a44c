package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestFleetCordonOnlyIsJournaled: the planner's cordon of a faulty fleet
// host (a cordon-only transfer to no side) is journaled as such, and the
// executor cordons the host on its side without draining it: its work
// runs on, and the op ends done.
func TestFleetCordonOnlyIsJournaled(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "n1")
	w.k8s.mu.Lock()
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "default/train", Tenant: "training", GPUs: 4}}
	w.k8s.nodes["n1"].GPUsAllocated = 4
	w.k8s.mu.Unlock()
	r := w.runtime()
	w.ticks(r, 1, time.Second)
	ops := r.journal(context.Background(), w.clock.Now(), rtPolicy(), []broker.Action{{Kind: broker.ActTransfer, Pool: rtPool,
		Node: "n1", From: broker.OwnerK8s, To: broker.OwnerNone, CordonOnly: true, Reason: "cordon unhealthy node n1 of fleet pool"}})
	if len(ops) != 1 || !broker.OpDataOf(&ops[0]).CordonOnly {
		t.Fatalf("journaled %+v: want one cordon-only op", ops)
	}
	w.ticks(r, 3, time.Second)
	xs := w.ledger.opsOf(broker.ActTransfer)
	w.k8s.mu.Lock()
	defer w.k8s.mu.Unlock()
	if len(xs) != 1 || xs[0].State != broker.OpDone || !w.k8s.released["n1"] || w.k8s.releases["n1"] != 0 || len(w.k8s.nodes["n1"].Work) != 1 {
		t.Fatalf("ops %+v, cordoned %v, drains %d, work %v: want n1 cordoned, nothing drained, its op done",
			xs, w.k8s.released["n1"], w.k8s.releases["n1"], w.k8s.nodes["n1"].Work)
	}
}
