package store_test

import (
	"context"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestListOpsFiltersAndPages: the API's view of the journal filters by
// state ("open" is pending and running), kind, pool and node, newest first,
// paged by id; CountOps counts by kind and state for the metric.
func TestListOpsFiltersAndPages(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	insert := func(op broker.Op) broker.Op {
		t.Helper()
		out, err := s.InsertOp(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	up := insert(broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 2, Reason: "2 pods wait"})
	down := insert(broker.Op{Kind: broker.ActScaleDown, Pool: "gpu", Node: "n1", Reason: "idle"})
	failed := insert(broker.Op{Kind: broker.ActScaleDown, Pool: "gpu", Node: "n2", Reason: "idle"})
	failed.State, failed.Step, failed.Attempts, failed.LastError = broker.OpFailed, "terminate", 5, "terminate instance: access denied"
	if _, err := s.AdvanceOp(ctx, failed); err != nil {
		t.Fatal(err)
	}
	other := insert(broker.Op{Kind: broker.ActTransfer, Pool: "cpu", Node: "n3", To: broker.OwnerYARN, Reason: "move"})

	ids := func(f store.OpFilter) []int64 {
		t.Helper()
		ops, err := s.ListOps(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, o := range ops {
			out = append(out, o.ID)
		}
		return out
	}
	eq := func(what string, got []int64, want ...int64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: ids %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: ids %v, want %v", what, got, want)
			}
		}
	}
	eq("all", ids(store.OpFilter{}), other.ID, failed.ID, down.ID, up.ID)
	eq("open", ids(store.OpFilter{State: "open"}), other.ID, down.ID, up.ID)
	eq("failed", ids(store.OpFilter{State: "failed"}), failed.ID)
	eq("kind", ids(store.OpFilter{Kind: string(broker.ActScaleDown)}), failed.ID, down.ID)
	eq("pool", ids(store.OpFilter{Pool: "cpu"}), other.ID)
	eq("node", ids(store.OpFilter{Node: "n1"}), down.ID)
	eq("page 1", ids(store.OpFilter{Limit: 2}), other.ID, failed.ID)
	eq("page 2", ids(store.OpFilter{Limit: 2, BeforeID: failed.ID}), down.ID, up.ID)

	ops, err := s.ListOps(ctx, store.OpFilter{State: "failed"})
	if err != nil {
		t.Fatal(err)
	}
	if o := ops[0]; o.LastError != "terminate instance: access denied" || o.Attempts != 5 || o.Step != "terminate" || o.CreatedAt.IsZero() || o.UpdatedAt.IsZero() {
		t.Fatalf("failed op %+v lacks its step, attempts, error or times", o)
	}

	counts, err := s.CountOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range counts {
		got[string(c.Kind)+"/"+string(c.State)] = c.Count
	}
	want := map[string]int{"scale-up/pending": 1, "scale-down/pending": 1, "scale-down/failed": 1, "transfer/pending": 1}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("counts %v, want %v", got, want)
		}
	}
}
