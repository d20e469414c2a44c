package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func TestOpsJournal(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	op, err := s.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 2, Reason: "2 pods wait", Serves: []string{"k8s/a"},
		Data: json.RawMessage(`{"desired_before":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if op.State != broker.OpPending || op.ID == 0 {
		t.Fatalf("inserted: %+v", op)
	}
	// One open scale-up per pool, one open op per node.
	if _, err := s.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 3, Reason: "again"}); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("second scale-up of one pool: %v", err)
	}
	if _, err := s.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Pool: "gpu", Node: "n1", Reason: "idle"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertOp(ctx, broker.Op{Kind: broker.ActTransfer, Node: "n1", To: broker.OwnerYARN, Reason: "move"}); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("second op on one node: %v", err)
	}
	var ve *broker.ValidationError
	if _, err := s.InsertOp(ctx, broker.Op{Kind: "explode", Reason: "x"}); !errors.As(err, &ve) || ve.Field != "kind" {
		t.Fatalf("bad kind: %v", err)
	}

	op.State, op.Step, op.Attempts = broker.OpRunning, "set-desired", 1
	op.NextAttempt = t0
	if op, err = s.AdvanceOp(ctx, op); err != nil || op.Step != "set-desired" || !op.NextAttempt.Equal(t0) {
		t.Fatalf("advance: %+v %v", op, err)
	}
	open, _ := s.OpenOps(ctx)
	if len(open) != 2 {
		t.Fatalf("open ops: %d, want 2", len(open))
	}
	op.State = broker.OpDone
	if op, err = s.AdvanceOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	op.State = broker.OpRunning
	if _, err := s.AdvanceOp(ctx, op); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("a finished op must not be revived: %v", err)
	}
	// Once done, the pool may be scaled again.
	if _, err := s.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 3, Reason: "more"}); err != nil {
		t.Fatal(err)
	}
}

func TestDecisionsSamplesTokens(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, nil)
	err := s.RecordDecisions(ctx, []broker.Decision{
		{At: t0, Tick: 1, Kind: "wait", Demand: "k8s/a", Tenant: "training", Reason: "over quota"},
		{At: t0, Tick: 1, Kind: string(broker.ActScaleUp), Pool: "gpu", Reason: "2 pods wait", Detail: json.RawMessage(`{"target":2}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := s.ListDecisions(ctx, store.DecisionFilter{Demand: "k8s/a"})
	if err != nil || len(ds) != 1 || ds[0].Reason != "over quota" {
		t.Fatalf("decisions: %+v %v", ds, err)
	}
	if err := s.RecordDecisions(ctx, []broker.Decision{{At: t0, Kind: "wait"}}); err == nil {
		t.Fatal("a decision without reason must be refused")
	}

	if err := s.RecordSamples(ctx, []broker.CapacitySample{{At: t0, Side: "k8s", GPUsBusy: 4, GPUsIdle: 4}, {At: t0, Side: "yarn", GPUsInFlight: 8}}); err != nil {
		t.Fatal(err)
	}
	ss, err := s.Samples(ctx, t0.Add(-time.Minute), t0.Add(time.Minute))
	if err != nil || len(ss) != 2 || ss[0].GPUsBusy != 4 || ss[1].GPUsInFlight != 8 {
		t.Fatalf("samples: %+v %v", ss, err)
	}

	secret, tok, err := s.CreateToken(ctx, "alice", store.RoleTenantAdmin, "training")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Authenticate(ctx, secret)
	if err != nil || got.ID != tok.ID || got.Role != store.RoleTenantAdmin || got.Tenant != "training" {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	if _, err := s.Authenticate(ctx, secret+"x"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("revoked token: %v", err)
	}
	var ve *broker.ValidationError
	if _, _, err := s.CreateToken(ctx, "x", store.RoleViewer, "training"); !errors.As(err, &ve) || ve.Field != "tenant" {
		t.Fatalf("viewer with tenant: %v", err)
	}
	if _, _, err := s.CreateToken(ctx, "x", "root", ""); !errors.As(err, &ve) || ve.Field != "role" {
		t.Fatalf("bad role: %v", err)
	}
}

func TestNodesRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	if _, err := s.UpsertPool(ctx, broker.Pool{Name: "gpu", GPUsPerNode: 4, MaxNodes: 5, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	n := broker.Node{Name: "ip-10-0-0-1", InstanceID: "i-1", Pool: "gpu", Owner: broker.OwnerK8s, Phase: broker.PhaseActive,
		GPUsTotal: 4, GPUsAllocated: 2, Utilisation: 0.4, Healthy: true,
		Work: []broker.Workload{{Source: broker.SourceK8s, Key: "uid", GPUs: 2, Priority: 5, CheckpointAge: -1}}}
	if err := s.UpsertNodes(ctx, []broker.Node{n}, t0); err != nil {
		t.Fatal(err)
	}
	n.GPUsAllocated = 4
	if err := s.UpsertNodes(ctx, []broker.Node{n}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ns, err := s.ListNodes(ctx)
	if err != nil || len(ns) != 1 {
		t.Fatalf("nodes: %+v %v", ns, err)
	}
	if ns[0].GPUsAllocated != 4 || !ns[0].PhaseSince.Equal(t0) || len(ns[0].Work) != 1 || ns[0].Work[0].CheckpointAge != -1 {
		t.Fatalf("node: %+v (phase since must stay at the first time in the phase)", ns[0])
	}
	if err := s.SetNodeProtected(ctx, "ip-10-0-0-1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNodeProtected(ctx, "nope", true); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("protect a missing node: %v", err)
	}
	var ve *broker.ValidationError
	if err := s.UpsertNodes(ctx, []broker.Node{{Name: "x", Phase: "flying", Owner: broker.OwnerNone}}, t0); !errors.As(err, &ve) {
		t.Fatalf("bad phase: %v", err)
	}
}

func TestPruneSamplesAndDecisions(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	old, recent := t0.Add(-8*24*time.Hour), t0.Add(-time.Hour)
	if err := s.RecordSamples(ctx, []broker.CapacitySample{{At: old, Side: "k8s"}, {At: recent, Side: "k8s"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDecisions(ctx, []broker.Decision{{At: old, Kind: "wait", Reason: "old"}, {At: recent, Kind: "wait", Reason: "recent"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PruneSamples(ctx, t0.Add(-7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ss, _ := s.Samples(ctx, old.Add(-time.Hour), t0)
	ds, _ := s.ListDecisions(ctx, store.DecisionFilter{})
	if len(ss) != 1 || !ss[0].At.Equal(recent) || len(ds) != 1 || ds[0].Reason != "recent" {
		t.Fatalf("after pruning: samples %+v, decisions %+v", ss, ds)
	}
}
