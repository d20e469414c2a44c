package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func obsOf(src broker.Source, at time.Time, ds ...broker.Demand) store.Observation {
	return store.Observation{Source: src, At: at, Demand: ds}
}

func closedFilter(minWait time.Duration) store.ClosedFilter {
	return store.ClosedFilter{MinWait: minWait}
}

func report(node string, at time.Time, util float64) broker.NodeReport {
	return broker.NodeReport{Node: node, At: at, AgentVersion: "1", DriverVersion: "550.54",
		GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-" + node, Product: "H100", Utilisation: util}}}
}

func TestReportsLatestWins(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.LatestReport(ctx, "n1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("no report yet: got %v, want ErrNotFound", err)
	}
	if ok, err := s.SaveReport(ctx, report("n1", t0, 0.25)); err != nil || !ok {
		t.Fatalf("save: %v %v", ok, err)
	}
	if ok, err := s.SaveReport(ctx, report("n1", t0.Add(time.Minute), 0.75)); err != nil || !ok {
		t.Fatalf("save newer: %v %v", ok, err)
	}
	// An older report arriving late must not replace the newer one.
	if ok, err := s.SaveReport(ctx, report("n1", t0.Add(-time.Minute), 0.5)); err != nil || ok {
		t.Fatalf("save older: got %v %v, want ignored", ok, err)
	}
	if _, err := s.SaveReport(ctx, report("n2", t0, 0.1)); err != nil {
		t.Fatal(err)
	}
	r, err := s.LatestReport(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !r.At.Equal(t0.Add(time.Minute)) || r.GPUs[0].Utilisation != 0.75 || r.DriverVersion != "550.54" {
		t.Fatalf("latest of n1: %+v", r)
	}
	all, err := s.LatestReports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["n1"].GPUs[0].Utilisation != 0.75 || all["n2"].GPUs[0].UUID != "GPU-n2" {
		t.Fatalf("latest reports: %+v", all)
	}
}

func TestReportValidation(t *testing.T) {
	s, _ := newStore(t)
	r := report("n1", t0, 1.5)
	_, err := s.SaveReport(context.Background(), r)
	var ve *broker.ValidationError
	if !errors.As(err, &ve) || ve.Field != "gpus[0].utilisation" {
		t.Fatalf("bad utilisation: got %v", err)
	}
}

func TestDemandSummaryAndClosed(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	mustTenant(t, s, "ml", []string{"root.ml"}, []string{"ml"})
	mk := func(key string, prio int64, gpus int) broker.Demand {
		return broker.Demand{Source: broker.SourceK8s, Key: key, Name: "ml/" + key, Tenant: "ml", Queue: "ml",
			Priority: prio, GPUsPerUnit: gpus, Units: 1}
	}
	obs := obsOf(broker.SourceK8s, t0, mk("a", 10, 2), mk("b", 10, 4), mk("c", 99, 1))
	if _, err := s.ApplyObservation(ctx, obs); err != nil {
		t.Fatal(err)
	}
	gs, err := s.DemandSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].Priority != 99 || gs[0].GPUs != 1 || gs[1].Count != 2 || gs[1].GPUs != 6 || !gs[1].OldestSeen.Equal(t0) {
		t.Fatalf("summary: %+v", gs)
	}
	// a closes after 10 minutes, b after 1 minute.
	if _, err := s.ApplyObservation(ctx, obsOf(broker.SourceK8s, t0.Add(time.Minute), mk("a", 10, 2), mk("c", 99, 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyObservation(ctx, obsOf(broker.SourceK8s, t0.Add(10*time.Minute), mk("c", 99, 1))); err != nil {
		t.Fatal(err)
	}
	cs, err := s.ListClosed(ctx, closedFilter(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Key != "a" || cs[0].Waited != 10*time.Minute {
		t.Fatalf("closed with min wait 5m: %+v", cs)
	}
	cs, err = s.ListClosed(ctx, closedFilter(0))
	if err != nil || len(cs) != 2 {
		t.Fatalf("all closed: %+v %v", cs, err)
	}
	var ve *broker.ValidationError
	if _, err := s.ListClosed(ctx, closedFilter(-time.Second)); !errors.As(err, &ve) || ve.Field != "min_wait" {
		t.Fatalf("negative min wait: %v", err)
	}
	n, err := s.GetNode(ctx, "nope")
	if !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("missing node: %+v %v", n, err)
	}
}

func TestDemandSeries(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	mustTenant(t, s, "ml", nil, []string{"ml"})
	mustTenant(t, s, "cv", nil, []string{"cv"})
	mk := func(key, tenant string, prio int64, gpus int) broker.Demand {
		return broker.Demand{Source: broker.SourceK8s, Key: key, Tenant: tenant, Priority: prio, GPUsPerUnit: gpus, Units: 1}
	}
	// a: pending from t0 to t0+20m; b: from t0+10m on; c: from t0+10m to t0+20m.
	steps := []store.Observation{
		obsOf(broker.SourceK8s, t0, mk("a", "ml", 5, 2)),
		obsOf(broker.SourceK8s, t0.Add(10*time.Minute), mk("a", "ml", 5, 2), mk("b", "ml", 5, 1), mk("c", "cv", 9, 4)),
		obsOf(broker.SourceK8s, t0.Add(20*time.Minute), mk("b", "ml", 5, 1)),
	}
	for _, o := range steps {
		if _, err := s.ApplyObservation(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := s.DemandSeries(ctx, t0.Add(-5*time.Minute), t0.Add(25*time.Minute), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, p := range ps {
		got[p.At.Sub(t0).String()+" "+p.Tenant] += p.GPUs
	}
	want := map[string]int{
		"0s ml": 2, "5m0s ml": 2, "10m0s ml": 3, "10m0s cv": 4, "15m0s ml": 3, "15m0s cv": 4,
		"20m0s ml": 1, "25m0s ml": 1,
	}
	if len(got) != len(want) {
		t.Fatalf("series: got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("series at %s: got %d GPUs, want %d (all: %v)", k, got[k], v, got)
		}
	}
	var ve *broker.ValidationError
	if _, err := s.DemandSeries(ctx, t0, t0.Add(time.Hour), time.Second); !errors.As(err, &ve) || ve.Field != "step" {
		t.Fatalf("too many steps: %v", err)
	}
}

// TestReportsKeepThePreviousAndIgnoreRetries: the report before the latest
// is kept (an unhealthy verdict needs two consecutive reports); a retry of
// the latest sample (same "at") is ignored, so one sample sent twice never
// counts as two reports. Receive times are the database's.
func TestReportsKeepThePreviousAndIgnoreRetries(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	if _, err := s.SaveReport(ctx, report("n1", t0, 0.25)); err != nil {
		t.Fatal(err)
	}
	all, err := s.LatestReports(ctx)
	if err != nil || all["n1"].Previous != nil || all["n1"].ReceivedAt.Before(before) {
		t.Fatalf("first report: %+v %v", all["n1"], err)
	}
	if ok, err := s.SaveReport(ctx, report("n1", t0.Add(time.Minute), 0.75)); err != nil || !ok {
		t.Fatalf("second: %v %v", ok, err)
	}
	if ok, err := s.SaveReport(ctx, report("n1", t0.Add(time.Minute), 0.75)); err != nil || ok {
		t.Fatalf("a retry of the latest sample: got %v %v, want ignored", ok, err)
	}
	all, err = s.LatestReports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := all["n1"]
	if got.Previous == nil || !got.Previous.At.Equal(t0) || got.Previous.GPUs[0].Utilisation != 0.25 ||
		got.Previous.ReceivedAt.IsZero() || got.ReceivedAt.Before(got.Previous.ReceivedAt) {
		t.Fatalf("latest %+v previous %+v: want the first report as previous, with its receive time", got, got.Previous)
	}
}

// TestPruneReports: the report of a node the broker no longer knows (no
// node row, or a gone one) is deleted once it has not been refreshed for
// the retention; a live node's report, or a recent one, is kept.
func TestPruneReports(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now()
	if err := s.UpsertNodes(ctx, []broker.Node{
		{Name: "live-1", Owner: broker.OwnerK8s, Phase: broker.PhaseActive, Utilisation: -1, Healthy: true},
		{Name: "gone-2", Owner: broker.OwnerNone, Phase: broker.PhaseGone, Utilisation: -1, Healthy: true},
	}, now); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"live-1", "gone-1", "gone-2"} {
		if _, err := s.SaveReport(ctx, report(n, t0, 0.5)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PruneReports(ctx, now.Add(-store.ReportRetention)); err != nil || n != 0 {
		t.Fatalf("prune of reports received just now: %d %v, want none", n, err)
	}
	if n, err := s.PruneReports(ctx, now.Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("prune: %d %v, want the reports of gone-1 and gone-2", n, err)
	}
	all, err := s.LatestReports(ctx)
	if err != nil || len(all) != 1 || all["live-1"].Node != "live-1" {
		t.Fatalf("left: %+v %v, want live-1's report only", all, err)
	}
}
