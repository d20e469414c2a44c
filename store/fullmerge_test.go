package store_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// cold applies obs through a Store of its own, so it takes the full merge
// (binary COPY and one merge statement), never the diff path.
func cold(t *testing.T, url string, obs store.Observation) store.ApplyResult {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.ApplyObservation(ctx, obs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// rowVersions maps each live key to its tuple's xmin: a row the merge
// rewrote gets a new one.
func rowVersions(t *testing.T, url string) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, xmin::text FROM demand`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, x string
		if err := rows.Scan(&k, &x); err != nil {
			t.Fatal(err)
		}
		out[k] = x
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The full merge (a new leader, a restart) must write every attribute of
// every row exactly (the binary COPY encodes each column itself), insert new
// keys with first-seen = now, update changed rows in place keeping their
// first-seen, leave unchanged rows untouched, and close each key that left
// with Closed's reason, then Departed's, else vanished.
func TestApplyObservationFullMergeRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t)
	mustTenant(t, s, "training", nil, []string{"ml"})
	mustTenant(t, s, "infer", nil, []string{"inf"})
	rich := pod("rich", "training", 8)
	rich.Name, rich.Queue, rich.Priority, rich.Units, rich.Gang, rich.Preemptible = "ml/rich-ünïcode", "q\"1", -7, 3, true, false
	rich.Constraints = broker.Constraints{
		GPUModels:    []string{"a100", "h100"},
		NodeSelector: map[string]string{"infra-type": "gpu", "zone": "zürich", "a": `x"y\z`},
		Affinity: []broker.AffinityTerm{{Requirements: []broker.LabelRequirement{
			{Key: "gpu", Operator: "In", Values: []string{"1", "2"}}, {Key: "ssd", Operator: "Exists"}}}},
		Tolerations: []broker.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}, {Key: "x", Value: "y"}},
		NodeLabel:   "gpu&big",
	}
	changed := pod("changed", "training", 1)
	first := []broker.Demand{rich, pod("same", "training", 2), changed,
		pod("sched", "training", 1), pod("preempt", "training", 1), pod("gone", "training", 1)}
	if res := cold(t, url, store.Observation{Source: broker.SourceK8s, At: t0, Demand: first}); res != (store.ApplyResult{Inserted: 6}) {
		t.Fatalf("first observation: %+v, want 6 inserted", res)
	}
	before := rowVersions(t, url)

	changed.Tenant, changed.Priority = "infer", 5
	changed.Constraints.NodeSelector = map[string]string{"infra-type": "gpu-a100"}
	next := []broker.Demand{rich, pod("same", "training", 2), changed, pod("new", "infer", 4)}
	t1 := t0.Add(time.Minute)
	var asked []string
	res := cold(t, url, store.Observation{Source: broker.SourceK8s, At: t1, Demand: next,
		Closed: map[string]store.CloseReason{"sched": store.CloseScheduled, "same": store.CloseDeleted},
		Departed: func(key string) store.CloseReason {
			asked = append(asked, key)
			if key == "preempt" {
				return store.ClosePreempted
			}
			return ""
		}})
	if want := (store.ApplyResult{Inserted: 1, Updated: 1, Closed: 3}); res != want {
		t.Fatalf("second observation: %+v, want %+v", res, want)
	}
	if cmp.Diff([]string{"gone", "preempt"}, slices.Sorted(slices.Values(asked))) != "" {
		t.Errorf("Departed asked about %v, want gone and preempt (the keys that left and Closed does not name)", asked)
	}

	page, err := s.ListDemand(ctx, store.DemandFilter{Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]broker.Demand{}
	for _, r := range page.Rows {
		got[r.Key] = r.Demand
	}
	for _, d := range next {
		g, ok := got[d.Key]
		if !ok {
			t.Errorf("%s is not in the ledger", d.Key)
			continue
		}
		wantFirst := t0
		if d.Key == "new" {
			wantFirst = t1
		}
		if !g.FirstSeen.Equal(wantFirst) {
			t.Errorf("%s first seen %s, want %s", d.Key, g.FirstSeen, wantFirst)
		}
		g.FirstSeen, g.LastSeen = time.Time{}, time.Time{}
		if diff := cmp.Diff(d, g); diff != "" {
			t.Errorf("%s as stored (-observed +stored):\n%s", d.Key, diff)
		}
	}
	if len(got) != len(next) {
		t.Errorf("ledger holds %v, want the %d observed keys", slices.Sorted(maps.Keys(got)), len(next))
	}
	after := rowVersions(t, url)
	for _, k := range []string{"rich", "same"} {
		if before[k] != after[k] {
			t.Errorf("%s did not change but was rewritten (xmin %s → %s)", k, before[k], after[k])
		}
	}
	if before["changed"] == after["changed"] {
		t.Error("changed was not rewritten")
	}
	want := map[string]store.CloseReason{"sched": store.CloseScheduled, "preempt": store.ClosePreempted, "gone": store.CloseVanished}
	if diff := cmp.Diff(want, historyReasons(t, s)); diff != "" {
		t.Errorf("history reasons (-want +got):\n%s", diff)
	}

	// The same observation again, cold: nothing to write.
	if res := cold(t, url, store.Observation{Source: broker.SourceK8s, At: t1.Add(time.Minute), Demand: next}); res != (store.ApplyResult{}) {
		t.Errorf("unchanged observation: %+v, want nothing written", res)
	}
	if diff := cmp.Diff(after, rowVersions(t, url)); diff != "" {
		t.Errorf("an unchanged observation rewrote rows (-before +after):\n%s", diff)
	}
}
