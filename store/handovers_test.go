package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// TestHandOvers counts, by pool, the nodes moved from one side to the
// other that ended done within the window: transfers and preemptions that
// moved their node, not failed ones, not a drain to no side, not a
// preemption that kept its node, not one older than the window.
func TestHandOvers(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t)
	for _, op := range []broker.Op{
		{Kind: broker.ActTransfer, Pool: "owned", Node: "a", To: broker.OwnerYARN, State: broker.OpDone},
		{Kind: broker.ActPreempt, Pool: "owned", Node: "b", To: broker.OwnerK8s, State: broker.OpDone},
		{Kind: broker.ActPreempt, Pool: "owned", Node: "c", State: broker.OpDone},
		{Kind: broker.ActTransfer, Pool: "owned", Node: "d", To: broker.OwnerYARN, State: broker.OpFailed},
		{Kind: broker.ActTransfer, Pool: "owned", Node: "e", To: broker.OwnerNone, State: broker.OpDone},
		{Kind: broker.ActTransfer, Pool: "gpu", Node: "f", To: broker.OwnerK8s, State: broker.OpDone},
		{Kind: broker.ActTransfer, Pool: "gpu", Node: "old", To: broker.OwnerK8s, State: broker.OpDone},
	} {
		op.Reason = "test"
		if _, err := s.InsertOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE ops SET updated_at = now() - interval '2 days' WHERE node = 'old'`); err != nil {
		t.Fatal(err)
	}
	got, err := s.HandOvers(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["owned"] != 2 || got["gpu"] != 1 {
		t.Fatalf("hand-overs %v, want owned 2 and gpu 1", got)
	}
}

// TestMigratedSince sums the tasks of migrate ops journaled in the window,
// open or ended, stopped or still to stop; other kinds and older
// migrations do not count.
func TestMigratedSince(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t)
	two, err := broker.EncodeOpData(broker.OpData{Victims: []broker.Workload{{Key: "a"}}, Stopped: []string{"b stopped"}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := broker.EncodeOpData(broker.OpData{Victims: []broker.Workload{{Key: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []broker.Op{
		{Kind: broker.ActMigrate, Pool: "gpu", Node: "m1", State: broker.OpDone, Data: two},
		{Kind: broker.ActMigrate, Pool: "gpu", Node: "m2", State: broker.OpRunning, Data: one},
		{Kind: broker.ActMigrate, Pool: "gpu", Node: "old", State: broker.OpDone, Data: two},
		{Kind: broker.ActPreempt, Pool: "gpu", Node: "p", State: broker.OpDone, Data: two},
	} {
		op.Reason, op.Step = "test", broker.StepEvict
		if _, err := s.InsertOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE ops SET created_at = now() - interval '2 hours' WHERE node = 'old'`); err != nil {
		t.Fatal(err)
	}
	got, err := s.MigratedSince(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 {
		t.Fatalf("migrated %d tasks in the hour, want 3 (2 + 1; the older migration and the preemption do not count)", got)
	}
}

// TestDemandDecisionsNameMigrations: `why` for a YARN application's demand
// shows the migration that moved one of its containers (the container
// restarts as the application's demand); another application's does not.
func TestDemandDecisionsNameMigrations(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	a := broker.Action{Kind: broker.ActMigrate, Pool: "gpu", Node: "y1", Reason: "migrate 1 tasks off node y1",
		Victims: []broker.Workload{{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", App: "application_1_0001", GPUs: 1}}}
	detail, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDecisions(ctx, []broker.Decision{{At: time.Now(), Kind: string(broker.ActMigrate), Pool: "gpu", Node: "y1",
		Reason: a.Reason, Detail: detail}}); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour)
	got, err := s.DemandDecisions(ctx, "yarn/application_1_0001/1", since)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != string(broker.ActMigrate) {
		t.Fatalf("decisions of the migrated application %+v, want the migration", got)
	}
	if other, err := s.DemandDecisions(ctx, "yarn/application_1_0002/1", since); err != nil || len(other) != 0 {
		t.Fatalf("decisions of another application %+v (%v), want none", other, err)
	}
}
