package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func pod(key, tenant string, gpus int) broker.Demand {
	return broker.Demand{
		Source: broker.SourceK8s, Key: key, Name: "ml/" + key, Tenant: tenant, Queue: "ml",
		Priority: 1000, GPUsPerUnit: gpus, Units: 1, Preemptible: true,
		Constraints: broker.Constraints{NodeSelector: map[string]string{"infra-type": "gpu"}},
	}
}

func keys(rows []store.DemandRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Key)
	}
	return out
}

func TestApplyObservationLifecycle(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})

	res, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0,
		Demand: []broker.Demand{pod("a", "training", 2), pod("b", "training", 1), pod("c", "training", 4)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.ApplyResult{Inserted: 3}); res != want {
		t.Fatalf("first observation: %+v, want %+v", res, want)
	}

	// 90 s later: a is scheduled, c vanished without a known reason, b changed
	// its priority, d is new.
	b := pod("b", "training", 1)
	b.Priority = 1000000
	t1 := t0.Add(90 * time.Second)
	res, err = s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t1,
		Demand: []broker.Demand{b, pod("d", "training", 8)},
		Closed: map[string]store.CloseReason{"a": store.CloseScheduled}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.ApplyResult{Inserted: 1, Updated: 1, Closed: 2}); res != want {
		t.Fatalf("second observation: %+v, want %+v", res, want)
	}
	page, err := s.ListDemand(ctx, store.DemandFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b", "d"}, keys(page.Rows)); diff != "" {
		t.Fatalf("live ledger (-want +got):\n%s", diff)
	}
	got := page.Rows[0]
	if !got.FirstSeen.Equal(t0) || !got.LastSeen.Equal(t1) || got.Priority != 1000000 {
		t.Fatalf("b: first %s last %s priority %d; want first %s last %s priority 1000000", got.FirstSeen, got.LastSeen, got.Priority, t0, t1)
	}
	if got.Constraints.NodeSelector["infra-type"] != "gpu" {
		t.Fatalf("constraints lost: %+v", got.Constraints)
	}

	hist, err := s.ListHistory(ctx, store.HistoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]store.CloseReason{}
	for _, h := range hist {
		reasons[h.Key] = h.Reason
		if h.Waited != 90*time.Second {
			t.Errorf("%s waited %s, want 90s", h.Key, h.Waited)
		}
		if !h.ClosedAt.Equal(t1) {
			t.Errorf("%s closed at %s, want %s", h.Key, h.ClosedAt, t1)
		}
	}
	if diff := cmp.Diff(map[string]store.CloseReason{"a": store.CloseScheduled, "c": store.CloseVanished}, reasons); diff != "" {
		t.Fatalf("close reasons (-want +got):\n%s", diff)
	}
}

func TestApplyObservationIdempotent(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	obs := store.Observation{Source: broker.SourceK8s, At: t0, Demand: []broker.Demand{pod("a", "training", 2), pod("b", "training", 2)}}
	if _, err := s.ApplyObservation(ctx, obs); err != nil {
		t.Fatal(err)
	}
	obs.At = t0.Add(time.Second)
	res, err := s.ApplyObservation(ctx, obs)
	if err != nil {
		t.Fatal(err)
	}
	if res != (store.ApplyResult{}) {
		t.Fatalf("re-applying the same demand changed rows: %+v", res)
	}
	page, _ := s.ListDemand(ctx, store.DemandFilter{})
	if len(page.Rows) != 2 || !page.Rows[0].FirstSeen.Equal(t0) {
		t.Fatalf("re-apply must keep rows and first-seen: %+v", page.Rows)
	}
}

func TestApplyObservationSourcesAreSeparate(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", []string{"root.ml"}, []string{"ml"})
	y := broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", GPUsPerUnit: 2, Units: 3, Gang: true}
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: t0, Demand: []broker.Demand{y}}); err != nil {
		t.Fatal(err)
	}
	// An empty Kubernetes observation must not close YARN demand.
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0}); err != nil {
		t.Fatal(err)
	}
	page, _ := s.ListDemand(ctx, store.DemandFilter{Source: broker.SourceYARN})
	if len(page.Rows) != 1 || page.Rows[0].GPUs() != 6 || !page.Rows[0].Gang {
		t.Fatalf("YARN demand: %+v", page.Rows)
	}
}

func TestApplyObservationRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0, Demand: []broker.Demand{pod("a", "training", 1)}}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		obs   store.Observation
		field string
	}{
		{"zero gpus", store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Second), Demand: []broker.Demand{pod("x", "training", 0)}}, "demand[0].gpus_per_unit"},
		{"duplicate key", store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Second), Demand: []broker.Demand{pod("x", "training", 1), pod("x", "training", 1)}}, "demand[1].key"},
		{"wrong source", store.Observation{Source: broker.SourceYARN, At: t0.Add(time.Second), Demand: []broker.Demand{pod("x", "training", 1)}}, "demand[0].source"},
		{"bad reason", store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Second), Closed: map[string]store.CloseReason{"a": "gone"}}, "closed[a]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ve *broker.ValidationError
			if _, err := s.ApplyObservation(ctx, tc.obs); !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("got %v, want a validation error on %s", err, tc.field)
			}
		})
	}
	// An unknown tenant is a conflict, and the whole observation is rolled
	// back: the existing row stays and nothing is half-applied.
	_, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Second), Demand: []broker.Demand{pod("y", "nobody", 1)}})
	if !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("unknown tenant: got %v, want ErrConflict", err)
	}
	// An observation older than the applied one is refused.
	_, err = s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0.Add(-time.Second)})
	if !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("older observation: got %v, want ErrConflict", err)
	}
	page, _ := s.ListDemand(ctx, store.DemandFilter{})
	if diff := cmp.Diff([]string{"a"}, keys(page.Rows)); diff != "" {
		t.Fatalf("failed observations must change nothing (-want +got):\n%s", diff)
	}
}

func TestListDemandPaginationAndFilters(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	mustTenant(t, s, "research", nil, []string{"lab"})
	// 25 demands arriving one second apart, alternating tenants; several
	// share a first-seen time to exercise the id tie-break.
	var want []string
	for i := 0; i < 25; i++ {
		var ds []broker.Demand
		page, _ := s.ListDemand(ctx, store.DemandFilter{Limit: 1000})
		for _, r := range page.Rows {
			ds = append(ds, r.Demand)
		}
		tenant := "training"
		if i%2 == 1 {
			tenant = "research"
		}
		k1, k2 := fmt.Sprintf("p%02da", i), fmt.Sprintf("p%02db", i)
		ds = append(ds, pod(k1, tenant, 1), pod(k2, tenant, 1))
		want = append(want, k1, k2)
		if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0.Add(time.Duration(i) * time.Second), Demand: ds}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	pages := 0
	for {
		page, err := s.ListDemand(ctx, store.DemandFilter{Limit: 7, After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, keys(page.Rows)...)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if pages != 8 {
		t.Errorf("50 rows in pages of 7: got %d pages, want 8", pages)
	}
	// Within one first-seen second the order is by id (insertion order), so
	// compare as sets per second by sorting both: keys sort the same way.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("paged keys (-want +got):\n%s", diff)
	}

	page, err := s.ListDemand(ctx, store.DemandFilter{Tenant: "research", MinWait: 20 * time.Second, Now: t0.Add(24 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// research demand arrived at odd seconds; waited >= 20s at t0+24s means first seen <= t0+4s: seconds 1 and 3.
	if diff := cmp.Diff([]string{"p01a", "p01b", "p03a", "p03b"}, keys(page.Rows)); diff != "" {
		t.Fatalf("filtered (-want +got):\n%s", diff)
	}

	var ve *broker.ValidationError
	if _, err := s.ListDemand(ctx, store.DemandFilter{Limit: 5000}); !errors.As(err, &ve) || ve.Field != "limit" {
		t.Fatalf("limit 5000: %v", err)
	}
	if _, err := s.ListDemand(ctx, store.DemandFilter{After: "not-a-cursor"}); !errors.As(err, &ve) || ve.Field != "after" {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestSetWaitReasons(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0, Demand: []broker.Demand{pod("a", "training", 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWaitReasons(ctx, []broker.Wait{{Demand: "k8s/a", Reason: broker.WaitQuota, Detail: "tenant training uses 8 of 8 GPUs"}}); err != nil {
		t.Fatal(err)
	}
	page, _ := s.ListDemand(ctx, store.DemandFilter{WaitReason: string(broker.WaitQuota)})
	if len(page.Rows) != 1 || page.Rows[0].WaitDetail != "tenant training uses 8 of 8 GPUs" {
		t.Fatalf("wait reason not recorded: %+v", page.Rows)
	}
}

// TestApplyObservationDepartedOnBothPaths: the reasons Departed gives
// reach the history on the diff path (the Store applied the previous
// observation) and on the full merge (another Store did), and Departed is
// asked only about keys that left.
func TestApplyObservationDepartedOnBothPaths(t *testing.T) {
	ctx := context.Background()
	s1, url := newStore(t)
	mustTenant(t, s1, "training", nil, []string{"ml"})
	s2, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	var asked []string
	departed := func(key string) store.CloseReason {
		asked = append(asked, key)
		return store.ClosePreempted
	}
	k := broker.SourceK8s
	apply := func(s *store.Store, at time.Time, keys ...string) {
		t.Helper()
		obs := store.Observation{Source: k, At: at, Departed: departed}
		for _, key := range keys {
			obs.Demand = append(obs.Demand, pod(key, "training", 1))
		}
		if _, err := s.ApplyObservation(ctx, obs); err != nil {
			t.Fatal(err)
		}
	}
	apply(s1, t0, "a", "b", "c")
	apply(s1, t0.Add(time.Minute), "b", "c") // diff path: a left
	apply(s2, t0.Add(2*time.Minute), "c")    // full merge: b left
	hist, err := s1.ListHistory(ctx, store.HistoryFilter{Source: k})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.CloseReason{}
	for _, h := range hist {
		got[h.Key] = h.Reason
	}
	if len(got) != 2 || got["a"] != store.ClosePreempted || got["b"] != store.ClosePreempted {
		t.Errorf("history: %v, want a and b preempted", got)
	}
	if !slices.Equal(asked, []string{"a", "b"}) {
		t.Errorf("Departed asked about %v, want [a b] (only keys that left)", asked)
	}
}
