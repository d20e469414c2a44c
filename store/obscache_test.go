package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// ledgerRow is what a test compares of a live row.
type ledgerRow struct {
	Priority  int64
	Selector  string
	FirstSeen time.Time
}

func ledger(t *testing.T, s *store.Store) map[string]ledgerRow {
	t.Helper()
	page, err := s.ListDemand(context.Background(), store.DemandFilter{Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledgerRow{}
	for _, r := range page.Rows {
		out[r.Key] = ledgerRow{Priority: r.Priority, Selector: r.Constraints.NodeSelector["infra-type"], FirstSeen: r.FirstSeen.UTC()}
	}
	return out
}

func historyReasons(t *testing.T, s *store.Store) map[string]store.CloseReason {
	t.Helper()
	hist, err := s.ListHistory(context.Background(), store.HistoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.CloseReason{}
	for _, h := range hist {
		out[h.Key] = h.Reason
	}
	return out
}

func apply(t *testing.T, s *store.Store, at time.Time, ds ...broker.Demand) store.ApplyResult {
	t.Helper()
	res, err := s.ApplyObservation(context.Background(), store.Observation{Source: broker.SourceK8s, At: at, Demand: ds})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A Store diffs an observation against the last one it applied. When
// another Store (a new leader, or this process after a restart) applied an
// observation in between, the cache is stale and must not be used: here it
// would say "a and b exist unchanged" while the other Store closed a and
// changed b.
func TestApplyObservationCacheIgnoredAfterAnotherStoreApplied(t *testing.T) {
	s1, url := newStore(t)
	mustTenant(t, s1, "training", nil, []string{"ml"})
	s2, err := store.Open(context.Background(), store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	apply(t, s1, t0, pod("a", "training", 1), pod("b", "training", 1))
	if !store.SeenCachedForTest(s1, broker.SourceK8s) {
		t.Fatal("s1 does not cache the observation it applied")
	}
	// The other Store: a gone, b's selector changed, x new.
	b2 := pod("b", "training", 1)
	b2.Constraints.NodeSelector = map[string]string{"infra-type": "gpu-a100"}
	if res := apply(t, s2, t0.Add(5*time.Second), b2, pod("x", "training", 1)); res != (store.ApplyResult{Inserted: 1, Updated: 1, Closed: 1}) {
		t.Fatalf("fresh store's observation: %+v", res)
	}
	// s1 again, with its first view: a back (new first-seen), b as it was.
	t2 := t0.Add(10 * time.Second)
	if res := apply(t, s1, t2, pod("a", "training", 1), pod("b", "training", 1)); res != (store.ApplyResult{Inserted: 1, Updated: 1, Closed: 1}) {
		t.Fatalf("stale cache's observation: %+v, want a inserted, b updated, x closed", res)
	}
	want := map[string]ledgerRow{
		"a": {Priority: 1000, Selector: "gpu", FirstSeen: t2},
		"b": {Priority: 1000, Selector: "gpu", FirstSeen: t0},
	}
	if diff := cmp.Diff(want, ledger(t, s1)); diff != "" {
		t.Fatalf("ledger (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]store.CloseReason{"a": store.CloseVanished, "x": store.CloseVanished}, historyReasons(t, s1)); diff != "" {
		t.Fatalf("history (-want +got):\n%s", diff)
	}
}

// A failed apply drops the cache of its source, and the next observation
// (full path) still gives the right ledger.
func TestApplyObservationCacheDroppedOnError(t *testing.T) {
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	apply(t, s, t0, pod("a", "training", 1), pod("b", "training", 1))

	// An unknown tenant fails the transaction (foreign key) after the
	// cache was consulted.
	_, err := s.ApplyObservation(context.Background(), store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Second),
		Demand: []broker.Demand{pod("a", "training", 1), pod("c", "nobody", 1)}})
	if err == nil {
		t.Fatal("observation with an unknown tenant applied")
	}
	if store.SeenCachedForTest(s, broker.SourceK8s) {
		t.Fatal("cache kept after a failed apply")
	}
	t2 := t0.Add(2 * time.Second)
	b := pod("b", "training", 1)
	b.Priority = 7
	if res := apply(t, s, t2, b, pod("c", "training", 1)); res != (store.ApplyResult{Inserted: 1, Updated: 1, Closed: 1}) {
		t.Fatalf("observation after the error: %+v", res)
	}
	want := map[string]ledgerRow{
		"b": {Priority: 7, Selector: "gpu", FirstSeen: t0},
		"c": {Priority: 1000, Selector: "gpu", FirstSeen: t2},
	}
	if diff := cmp.Diff(want, ledger(t, s)); diff != "" {
		t.Fatalf("ledger (-want +got):\n%s", diff)
	}
	if !store.SeenCachedForTest(s, broker.SourceK8s) {
		t.Fatal("a successful apply did not cache its observation")
	}
}

// When the cache names a key the ledger lacks (it cannot while the
// generation matches; this forces it), the apply falls back to the full
// merge in the same transaction and still counts and closes right.
func TestApplyObservationCacheOutOfStepFallsBack(t *testing.T) {
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	apply(t, s, t0, pod("a", "training", 1), pod("b", "training", 1), pod("c", "training", 1))
	if !store.AddSeenKeyForTest(s, broker.SourceK8s, "ghost") {
		t.Fatal("no cached observation")
	}
	t1 := t0.Add(time.Second)
	if res := apply(t, s, t1, pod("b", "training", 1), pod("d", "training", 1)); res != (store.ApplyResult{Inserted: 1, Closed: 2}) {
		t.Fatalf("observation: %+v, want d inserted, a and c closed", res)
	}
	want := map[string]ledgerRow{
		"b": {Priority: 1000, Selector: "gpu", FirstSeen: t0},
		"d": {Priority: 1000, Selector: "gpu", FirstSeen: t1},
	}
	if diff := cmp.Diff(want, ledger(t, s)); diff != "" {
		t.Fatalf("ledger (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]store.CloseReason{"a": store.CloseVanished, "c": store.CloseVanished}, historyReasons(t, s)); diff != "" {
		t.Fatalf("history (-want +got):\n%s", diff)
	}
}
