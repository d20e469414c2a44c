package cloud_test

import (
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// TestPlannerSkipsPoolInBackoff feeds what the provider observed into the
// real planner: with the cheaper pool out of capacity, demand buys a node
// from the other pool instead.
func TestPlannerSkipsPoolInBackoff(t *testing.T) {
	b := simBackend(t, awssim.Config{LaunchRetry: time.Hour})
	createGroup(t, b, groupSpec{name: "cheap", max: 4, tags: map[string]string{
		cloud.TagPool: "cheap", cloud.TagGPUsPerNode: "4", cloud.TagPrice: "10"}})
	createGroup(t, b, groupSpec{name: "dear", max: 4, tags: map[string]string{
		cloud.TagPool: "dear", cloud.TagGPUsPerNode: "4", cloud.TagPrice: "30"}})
	p := newProvider(t, b, cloud.Config{Discover: true})

	plan := func(pods ...string) broker.Plan {
		states, err := p.Pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		s := &broker.Snapshot{
			Now:     now,
			Tenants: map[string]broker.Tenant{"ml": {Name: "ml", MaxGPUs: 64, Weight: 1}},
			Pools:   states,
		}
		for _, pod := range pods {
			s.Demand = append(s.Demand, broker.Demand{Source: broker.SourceK8s, Key: pod, Name: pod, Tenant: "ml",
				GPUsPerUnit: 4, Units: 1, FirstSeen: now.Add(-time.Minute), LastSeen: now})
		}
		pol := broker.DefaultPolicy()
		pol.Expander = broker.ExpanderPrice
		return broker.MakePlan(s, pol)
	}
	scaled := func(pl broker.Plan) []string {
		var out []string
		for _, a := range pl.Actions {
			if a.Kind == broker.ActScaleUp {
				out = append(out, a.Pool)
			}
		}
		return out
	}

	if got := scaled(plan("pod-1")); len(got) != 1 || got[0] != "cheap" {
		t.Fatalf("healthy pools: scale-ups %v, want the cheap pool", got)
	}
	// The cheap pool was asked for a node for pod-1, but AWS has no
	// capacity; the next demand goes to the dear pool.
	b.sim.FailLaunches("cheap", -1, "")
	if err := p.SetDesired(t.Context(), "cheap", 1); err != nil {
		t.Fatal(err)
	}
	pl := plan("pod-1", "pod-2")
	if got := scaled(pl); len(got) != 1 || got[0] != "dear" {
		t.Errorf("cheap pool backs off: scale-ups %v, want the dear pool; plan %+v", got, pl)
	}
}
