package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestDemandSummaryIsPendingGPUs binds the store's SQL for pending GPUs
// (DemandSummary, the API's pending_gpus) to broker.PendingGPUs (the
// executor's pending samples): for varied demand (multi-unit YARN asks, a
// gang, pods of several tenants, a row that changes its units, rows that
// close) the summary's GPUs, in total and per tenant, are what the broker
// rule gives for the demand still live.
func TestDemandSummaryIsPendingGPUs(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	mustTenant(t, s, "ml", []string{"root.ml"}, []string{"ml"})
	mustTenant(t, s, "cv", []string{"root.cv"}, []string{"cv"})
	mustTenant(t, s, "nlp", []string{"root.nlp"}, []string{"nlp"})
	yarn := func(key, tenant string, prio int64, units, gpus int, gang bool) broker.Demand {
		return broker.Demand{Source: broker.SourceYARN, Key: key, Name: key, Tenant: tenant, Queue: "root." + tenant,
			Priority: prio, GPUsPerUnit: gpus, Units: units, Gang: gang}
	}
	pod := func(key, tenant string, prio int64, gpus int) broker.Demand {
		return broker.Demand{Source: broker.SourceK8s, Key: key, Name: tenant + "/" + key, Tenant: tenant, Queue: tenant,
			Priority: prio, GPUsPerUnit: gpus, Units: 1}
	}
	steps := []struct {
		src    broker.Source
		demand []broker.Demand
	}{
		{broker.SourceYARN, []broker.Demand{
			yarn("app_1/1", "ml", 100, 3, 2, false), yarn("app_2/1", "ml", 100, 4, 8, true),
			yarn("app_3/1", "cv", 50, 1, 1, false), yarn("app_4/2", "nlp", 7, 6, 4, false)}},
		{broker.SourceK8s, []broker.Demand{
			pod("p1", "ml", 100, 2), pod("p2", "ml", 100, 1), pod("p3", "cv", 10, 8), pod("p4", "nlp", 7, 4)}},
		// app_3 closes, app_1 grows to 5 units; p2 and p4 close.
		{broker.SourceYARN, []broker.Demand{
			yarn("app_1/1", "ml", 100, 5, 2, false), yarn("app_2/1", "ml", 100, 4, 8, true), yarn("app_4/2", "nlp", 7, 6, 4, false)}},
		{broker.SourceK8s, []broker.Demand{pod("p1", "ml", 100, 2), pod("p3", "cv", 10, 8)}},
	}
	live := map[broker.Source][]broker.Demand{}
	for i, st := range steps {
		if _, err := s.ApplyObservation(ctx, obsOf(st.src, t0.Add(time.Duration(i)*time.Minute), st.demand...)); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		live[st.src] = st.demand
	}
	all := append(append([]broker.Demand(nil), live[broker.SourceYARN]...), live[broker.SourceK8s]...)

	gs, err := s.DemandSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sqlByTenant, sqlTotal := map[string]int{}, 0
	for _, g := range gs {
		sqlByTenant[g.Tenant] += g.GPUs
		sqlTotal += g.GPUs
	}
	total := 0
	for _, g := range broker.PendingGPUs(all) {
		total += g
	}
	// 5×2 + 4×8 + 6×4 + 2 + 8: the closed rows and app_1's old size do not count.
	if total != 76 || sqlTotal != total {
		t.Fatalf("pending GPUs: DemandSummary %d, broker.PendingGPUs %d, want both 76 (groups %+v)", sqlTotal, total, gs)
	}
	for _, tenant := range []string{"ml", "cv", "nlp"} {
		var mine []broker.Demand
		for _, d := range all {
			if d.Tenant == tenant {
				mine = append(mine, d)
			}
		}
		want := 0
		for _, g := range broker.PendingGPUs(mine) {
			want += g
		}
		if sqlByTenant[tenant] != want {
			t.Errorf("tenant %s: DemandSummary %d GPUs, broker.PendingGPUs %d", tenant, sqlByTenant[tenant], want)
		}
	}
}
