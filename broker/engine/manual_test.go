package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

func TestRuntimeManualOperations(t *testing.T) {
	ctx := context.Background()
	w := newRTWorld(t, 5)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.k8s.join(n, rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	}
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "job", Name: "default/job", GPUs: 4}}
	w.k8s.nodes["n1"].GPUsAllocated = 4
	r := w.runtime()
	w.tick(r)

	if err := r.Drain(ctx, "ghost"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	if err := r.Transfer(ctx, "n2", broker.OwnerK8s); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("transfer to the side that owns it: %v", err)
	}
	var ve *broker.ValidationError
	if err := r.Transfer(ctx, "n2", broker.OwnerNone); !errors.As(err, &ve) || ve.Field != "to" {
		t.Fatalf("transfer to none: %v", err)
	}
	if err := r.Drain(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Drain(ctx, "n1"); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("second op on one node: %v", err)
	}
	if err := r.Cordon(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := r.Transfer(ctx, "n3", broker.OwnerYARN); err != nil {
		t.Fatal(err)
	}
	w.clock.Add(time.Second)
	w.tick(r)
	for _, op := range w.ledger.opsOf(broker.ActTransfer) {
		if op.State != broker.OpDone {
			t.Errorf("op %d on %s: %s %s", op.ID, op.Node, op.State, op.LastError)
		}
	}
	if !w.k8s.released["n1"] || len(w.k8s.nodes["n1"].Work) != 0 {
		t.Fatal("drain must cordon and evict")
	}
	if !w.k8s.released["n2"] {
		t.Fatal("cordon must mark the node unschedulable")
	}
	if fmt.Sprint(w.yarn.admitted) != "[n3]" {
		t.Fatalf("transfer: YARN admitted %v", w.yarn.admitted)
	}
}

// TestRuntimeManualTransferNeedsActions: a manual hand-over to a side
// without actions is refused instead of stranding the node.
func TestRuntimeManualTransferNeedsActions(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.tick(r)
	var ve *broker.ValidationError
	if err := r.Transfer(context.Background(), "n1", broker.OwnerYARN); !errors.As(err, &ve) {
		t.Fatalf("transfer to a side without actions: %v", err)
	}
	if len(w.ledger.ops) != 0 {
		t.Fatalf("ops %+v", w.ledger.ops)
	}
}

// TestManualOpRefusesDeadlineJSONCannotHold: a deadline past the year 9999
// cannot be journaled, so ManualOp fails instead of journaling an op whose
// data (and deadline) is empty.
func TestManualOpRefusesDeadlineJSONCannotHold(t *testing.T) {
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if op, err := ManualOp("n1", broker.OwnerYARN, broker.OwnerNone, false, far, "test"); err == nil {
		t.Fatalf("ManualOp with a deadline in the year 10000 = %+v, want an error", op)
	}
	op, err := ManualOp("n1", broker.OwnerYARN, broker.OwnerNone, false, t0.Add(time.Hour), "test")
	if err != nil {
		t.Fatal(err)
	}
	if got := broker.OpDataOf(&op).Deadline; !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("deadline = %v, want %v", got, t0.Add(time.Hour))
	}
}
