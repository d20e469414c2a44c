package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func TestLedgerAdapter(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", []string{"root.training"}, []string{"ml"})
	l := s.Ledger()
	idx, err := l.TenantIndex(ctx)
	if err != nil || idx.Queues["root.training"] != "training" || idx.Namespaces["ml"] != "training" {
		t.Fatalf("tenant index: %+v %v", idx, err)
	}
	obs := broker.SideObservation{Source: broker.SourceK8s, At: t0, Demand: []broker.Demand{pod("a", "training", 2), pod("b", "training", 1)}}
	if err := l.ApplyDemand(ctx, obs); err != nil {
		t.Fatal(err)
	}
	fs, err := l.DemandFirstSeen(ctx)
	if err != nil || len(fs) != 2 || !fs["k8s/a"].Equal(t0) {
		t.Fatalf("first seen: %v %v", fs, err)
	}
	obs = broker.SideObservation{Source: broker.SourceK8s, At: t0.Add(time.Minute), Demand: []broker.Demand{pod("b", "training", 1)},
		Closed: map[string]broker.CloseReason{"a": broker.CloseScheduled}}
	if err := l.ApplyDemand(ctx, obs); err != nil {
		t.Fatal(err)
	}
	hist, _ := s.ListHistory(ctx, store.HistoryFilter{})
	if len(hist) != 1 || hist[0].Reason != "scheduled" || hist[0].Waited != time.Minute {
		t.Fatalf("history: %+v", hist)
	}
	obs.Closed = map[string]broker.CloseReason{"b": "teleported"}
	if err := l.ApplyDemand(ctx, obs); err == nil {
		t.Fatal("an unknown close reason must be refused")
	}
	if err := l.RecordSamples(ctx, []broker.CapacitySample{{At: t0, Side: "k8s", GPUsBusy: 2}}); err != nil {
		t.Fatal(err)
	}
	pol, err := l.Policy(ctx)
	if err != nil || pol.Expander != broker.ExpanderLeastWaste {
		t.Fatalf("policy: %+v %v", pol, err)
	}
}
