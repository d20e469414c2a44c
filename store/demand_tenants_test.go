package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestDemandTenants: demand IDs resolve to their tenants from the live
// ledger and from its history (demand that left it); unknown IDs and
// strings that are no demand ID resolve to nothing.
func TestDemandTenants(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	for _, name := range []string{"ml", "vision"} {
		if _, err := s.CreateTenant(ctx, broker.Tenant{Name: name, MaxGPUs: 8, Weight: 1, Namespaces: []string{name}}); err != nil {
			t.Fatal(err)
		}
	}
	d := func(key, tenant string) broker.Demand {
		return broker.Demand{Source: broker.SourceK8s, Key: key, Name: tenant + "/" + key, Tenant: tenant, Queue: tenant,
			GPUsPerUnit: 1, Units: 1}
	}
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0,
		Demand: []broker.Demand{d("p1", "ml"), d("p2", "vision")}}); err != nil {
		t.Fatal(err)
	}
	// p1 leaves the ledger: only its history knows it now.
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Minute),
		Demand: []broker.Demand{d("p2", "vision")}}); err != nil {
		t.Fatal(err)
	}
	if h, err := s.ListHistory(ctx, store.HistoryFilter{Tenant: "ml"}); err != nil || len(h) != 1 || h[0].Key != "p1" {
		t.Fatalf("history of ml: %+v %v, want p1 closed", h, err)
	}
	got, err := s.DemandTenants(ctx, []string{"k8s/p1", "k8s/p2", "k8s/nope", "yarn/p2", "no-slash", "k8s/p2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"k8s/p1": "ml", "k8s/p2": "vision"}, got); diff != "" {
		t.Fatalf("tenants (-want +got):\n%s", diff)
	}
	if got, err := s.DemandTenants(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
}
