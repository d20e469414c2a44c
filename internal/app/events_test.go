package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// recordingSink keeps the decisions it is handed.
type recordingSink struct{ got [][]broker.Decision }

func (r *recordingSink) Decisions(_ context.Context, ds []broker.Decision) { r.got = append(r.got, ds) }

// failingLedger is a ledger whose RecordDecisions fails.
type failingLedger struct{ engine.Ledger }

func (failingLedger) RecordDecisions(context.Context, []broker.Decision) error {
	return errors.New("disk full")
}

// TestDecisionTapHandsRecordedDecisionsToSinks: the runtime's ledger,
// wrapped, stores decisions and hands each non-empty batch to the sinks;
// a failed store still reaches them and its error reaches the runtime;
// plan (Preview) gets no sinks.
func TestDecisionTapHandsRecordedDecisionsToSinks(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sink := &recordingSink{}
	m := &Main{st: st, sinks: []decisionSink{sink}}
	l := m.withDecisionSinks(st.Ledger())
	ds := []broker.Decision{{At: time.Now(), Kind: "wait", Demand: "k8s/u1", Reason: "over-quota: tenant ml uses 4 of its 4 GPUs"}}
	if err := l.RecordDecisions(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordDecisions(ctx, nil); err != nil {
		t.Fatal(err)
	}
	stored, err := st.ListDecisions(ctx, store.DecisionFilter{Demand: "k8s/u1"})
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored decisions: %v %v", stored, err)
	}
	if len(sink.got) != 1 || sink.got[0][0].Demand != "k8s/u1" {
		t.Fatalf("sink got %v, want the one non-empty batch", sink.got)
	}
	bad := m.withDecisionSinks(failingLedger{st.Ledger()})
	if err := bad.RecordDecisions(ctx, ds); err == nil || len(sink.got) != 2 {
		t.Errorf("failed record: err %v, sink batches %d", err, len(sink.got))
	}
	m.cfg.Preview = true
	if _, tapped := m.withDecisionSinks(st.Ledger()).(decisionTap); tapped {
		t.Error("plan's preview runtime would write pod events")
	}
}

// TestProvisionTimeReadsTheStoredPolicy: the ETA of ScaleUpTriggered comes
// from the stored policy (edited through the API), not the file's copy.
func TestProvisionTimeReadsTheStoredPolicy(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	file := broker.DefaultPolicy()
	file.MaxProvisionTime = broker.Duration(2 * time.Minute)
	m := &Main{st: st, cfg: Config{Policy: file}}
	stored := broker.DefaultPolicy()
	stored.MaxProvisionTime = broker.Duration(7 * time.Minute)
	if _, err := st.UpdatePolicy(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if got := m.provisionTime(ctx); got != 7*time.Minute {
		t.Errorf("provision time %s, want the stored 7m", got)
	}
}
