package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Seed is what a ledger holds before a case runs: the configuration the
// tick loop reads but never writes (the API and the configuration write it).
type Seed struct {
	Policy  broker.Policy
	Pools   []broker.Pool
	Tenants []broker.Tenant
}

// Ledger is one opened ledger with the read-backs the suite needs for what
// engine.Ledger writes but does not read (the API reads it from the store).
type Ledger struct {
	engine.Ledger
	// Closed reports why the demand with ID id (source/key) left the
	// ledger, and false while it has not.
	Closed func(t *testing.T, id string) (reason string, ok bool)
	// Decisions returns the recorded decisions, oldest first.
	Decisions func(t *testing.T) []broker.Decision
	// Waits returns the recorded wait reason of each live demand by ID.
	Waits func(t *testing.T) map[string]broker.Wait
	// Samples returns the recorded capacity samples, oldest first.
	Samples func(t *testing.T) []broker.CapacitySample
	// SaveReport stores a node agent's report as the API does.
	SaveReport func(t *testing.T, r broker.NodeReport)
}

// Open returns a fresh, empty ledger holding seed.
type Open func(t *testing.T, seed Seed) Ledger

// t0 has whole seconds, so every implementation stores it exactly.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func seed() Seed {
	p := broker.DefaultPolicy()
	p.ScaleDownUtilisation = 0.25
	p.DrainTimeout = broker.Duration(7 * time.Minute)
	return Seed{
		Policy: p,
		Pools: []broker.Pool{
			{Name: "a100", Provider: "aws", Group: "asg-a100", GPUModel: "A100", GPUsPerNode: 8, MinNodes: 1, MaxNodes: 10, Sides: broker.PoolShared},
			{Name: "h100", Provider: "aws", Group: "asg-h100", GPUModel: "H100", GPUsPerNode: 8, MinNodes: 0, MaxNodes: 4, Sides: broker.PoolK8s},
		},
		Tenants: []broker.Tenant{
			{Name: "training", MaxGPUs: 64, Weight: 1, YARNQueues: []string{"root.training"}, Namespaces: []string{"ml", "ml-dev"}},
			{Name: "analytics", MaxGPUs: 16, Weight: 1, YARNQueues: []string{"root.analytics"}},
		},
	}
}

func demand(src broker.Source, key string, gpus int) broker.Demand {
	d := broker.Demand{Source: src, Key: key, Name: key, Tenant: "training", Priority: 100, GPUsPerUnit: gpus, Units: 1, Preemptible: true}
	if src == broker.SourceK8s {
		d.Name, d.Queue = "ml/"+key, "ml"
	} else {
		d.Queue = "root.training"
	}
	return d
}

func id(src broker.Source, key string) string { return string(src) + "/" + key }

// Run runs every case of the contract against ledgers from open, each case
// on a ledger of its own.
func Run(t *testing.T, open Open) {
	cases := []struct {
		name string
		run  func(t *testing.T, l Ledger)
	}{
		{"TenantIndex", tenantIndex},
		{"Policy", policy},
		{"PoolSettingsAndBackoff", poolSettings},
		{"FirstSeenKeptAcrossObservations", firstSeenKept},
		{"DepartureClosesWithReason", departure},
		{"DepartureReasonsFromTheObservation", departedReasons},
		{"DemandThatReturnsIsNew", returns},
		{"SourcesAreSeparate", sourcesSeparate},
		{"UnknownCloseReasonIsRefused", unknownReason},
		{"OlderObservationIsRefused", olderObservation},
		{"WaitReasons", waitReasons},
		{"NodesPhaseSinceMovesOnPhaseChange", nodes},
		{"OneOpenOpPerNodeAndPoolScaleUp", oneOpenOp},
		{"AdvanceOpKeepsIntentAndNeverRevives", advanceOp},
		{"InsertOpNeedsKindAndReason", insertInvalid},
		{"Decisions", decisions},
		{"Samples", samples},
		{"LatestReportsNewestWins", reports},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open(t, seed())) })
	}
}

func apply(t *testing.T, l Ledger, obs broker.SideObservation) {
	t.Helper()
	if err := l.ApplyDemand(context.Background(), obs); err != nil {
		t.Fatalf("apply %s observation at %s: %v", obs.Source, obs.At, err)
	}
}

func firstSeen(t *testing.T, l Ledger) map[string]time.Time {
	t.Helper()
	fs, err := l.DemandFirstSeen(context.Background())
	if err != nil {
		t.Fatalf("first seen: %v", err)
	}
	return fs
}

func tenantIndex(t *testing.T, l Ledger) {
	idx, err := l.TenantIndex(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Tenants) != 2 || idx.Tenants["training"].MaxGPUs != 64 || idx.Tenants["analytics"].MaxGPUs != 16 {
		t.Errorf("tenants: %+v", idx.Tenants)
	}
	wantQ := map[string]string{"root.training": "training", "root.analytics": "analytics"}
	wantN := map[string]string{"ml": "training", "ml-dev": "training"}
	if !equalMaps(idx.Queues, wantQ) || !equalMaps(idx.Namespaces, wantN) {
		t.Errorf("queues %v, namespaces %v; want %v, %v", idx.Queues, idx.Namespaces, wantQ, wantN)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func policy(t *testing.T, l Ledger) {
	p, err := l.Policy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := seed().Policy
	if p.ScaleDownUtilisation != want.ScaleDownUtilisation || p.DrainTimeout != want.DrainTimeout ||
		p.Expander != want.Expander || p.MaxProvisionTime != want.MaxProvisionTime {
		t.Errorf("policy: got %+v, want %+v", p, want)
	}
}

func poolSettings(t *testing.T, l Ledger) {
	ctx := context.Background()
	list := func() map[string]broker.PoolState {
		t.Helper()
		ps, err := l.PoolSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]broker.PoolState{}
		for _, p := range ps {
			out[p.Pool.Name] = p
		}
		return out
	}
	ps := list()
	if len(ps) != 2 {
		t.Fatalf("pools: %+v", ps)
	}
	if a := ps["a100"]; a.Pool.MinNodes != 1 || a.Pool.MaxNodes != 10 || a.Pool.GPUsPerNode != 8 || a.Pool.Group != "asg-a100" ||
		a.Pool.Sides != broker.PoolShared || !a.BackoffUntil.IsZero() {
		t.Errorf("a100: %+v", a)
	}
	until := t0.Add(10 * time.Minute)
	if err := l.SetPoolBackoff(ctx, "h100", until, "InsufficientInstanceCapacity"); err != nil {
		t.Fatal(err)
	}
	if h := list()["h100"]; !h.BackoffUntil.Equal(until) || h.BackoffReason != "InsufficientInstanceCapacity" {
		t.Errorf("h100 after backoff: until %s reason %q", h.BackoffUntil, h.BackoffReason)
	}
	if a := list()["a100"]; !a.BackoffUntil.IsZero() {
		t.Errorf("a backoff of h100 reached a100: %+v", a)
	}
	if err := l.SetPoolBackoff(ctx, "h100", time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	if h := list()["h100"]; !h.BackoffUntil.IsZero() {
		t.Errorf("a zero until must clear the backoff: %+v", h)
	}
	if err := l.SetPoolBackoff(ctx, "nope", until, "x"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("backoff of an unknown pool: got %v, want ErrNotFound", err)
	}
}

func firstSeenKept(t *testing.T, l Ledger) {
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0, Demand: []broker.Demand{demand(k, "a", 2), demand(k, "b", 1)}})
	grown := demand(k, "a", 4) // the same key, changed
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute), Demand: []broker.Demand{grown, demand(k, "b", 1), demand(k, "c", 1)}})
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(2 * time.Minute), Demand: []broker.Demand{grown, demand(k, "b", 1), demand(k, "c", 1)}})
	fs := firstSeen(t, l)
	want := map[string]time.Time{id(k, "a"): t0, id(k, "b"): t0, id(k, "c"): t0.Add(time.Minute)}
	if len(fs) != len(want) {
		t.Fatalf("first seen: %v, want %v", fs, want)
	}
	for i, w := range want {
		if !fs[i].Equal(w) {
			t.Errorf("first seen of %s: %s, want %s (kept from the first observation)", i, fs[i], w)
		}
	}
}

func departure(t *testing.T, l Ledger) {
	y := broker.SourceYARN
	apply(t, l, broker.SideObservation{Source: y, At: t0, Demand: []broker.Demand{demand(y, "app-1", 2), demand(y, "app-2", 1), demand(y, "app-3", 1)}})
	apply(t, l, broker.SideObservation{Source: y, At: t0.Add(time.Minute), Demand: []broker.Demand{demand(y, "app-3", 1)},
		Closed: map[string]broker.CloseReason{"app-1": broker.CloseScheduled}})
	fs := firstSeen(t, l)
	if len(fs) != 1 || !fs[id(y, "app-3")].Equal(t0) {
		t.Errorf("live demand after departure: %v, want only %s", fs, id(y, "app-3"))
	}
	for key, want := range map[string]string{"app-1": "scheduled", "app-2": "vanished"} {
		if r, ok := l.Closed(t, id(y, key)); !ok || r != want {
			t.Errorf("%s closed: %q %v, want %q", key, r, ok, want)
		}
	}
	if r, ok := l.Closed(t, id(y, "app-3")); ok {
		t.Errorf("live demand app-3 reads as closed (%q)", r)
	}
}

func departedReasons(t *testing.T, l Ledger) {
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0,
		Demand: []broker.Demand{demand(k, "a", 1), demand(k, "b", 1), demand(k, "c", 1), demand(k, "d", 1)}})
	var mu sync.Mutex
	asked := map[string]bool{}
	departed := func(key string) broker.CloseReason {
		mu.Lock()
		defer mu.Unlock()
		asked[key] = true
		switch key {
		case "a":
			return "preempted"
		case "b":
			return "scheduled"
		}
		return ""
	}
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute), Demand: []broker.Demand{demand(k, "d", 1)},
		Closed: map[string]broker.CloseReason{"a": broker.CloseDeleted, "d": broker.CloseScheduled}, Departed: departed})
	for key, want := range map[string]string{"a": "deleted", "b": "scheduled", "c": "vanished"} {
		if r, ok := l.Closed(t, id(k, key)); !ok || r != want {
			t.Errorf("%s closed: %q %v, want %q (Closed, then Departed, else vanished)", key, r, ok, want)
		}
	}
	if _, ok := l.Closed(t, id(k, "d")); ok {
		t.Errorf("a reason for demand still pending closed it")
	}
	if asked["d"] || !asked["b"] || !asked["c"] {
		t.Errorf("Departed must be asked about every key that left and no other: asked %v", asked)
	}
	err := l.ApplyDemand(context.Background(), broker.SideObservation{Source: k, At: t0.Add(2 * time.Minute),
		Departed: func(string) broker.CloseReason { return "teleported" }})
	if err == nil {
		t.Fatal("an unknown reason from Departed must be refused")
	}
	if fs := firstSeen(t, l); len(fs) != 1 {
		t.Errorf("a refused observation changed the ledger: %v", fs)
	}
}

func returns(t *testing.T, l Ledger) {
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0, Demand: []broker.Demand{demand(k, "a", 1)}})
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute)})
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(2 * time.Minute), Demand: []broker.Demand{demand(k, "a", 1)}})
	if fs := firstSeen(t, l); !fs[id(k, "a")].Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("demand that left and came back: first seen %s, want %s", fs[id(k, "a")], t0.Add(2*time.Minute))
	}
}

func sourcesSeparate(t *testing.T, l Ledger) {
	k, y := broker.SourceK8s, broker.SourceYARN
	apply(t, l, broker.SideObservation{Source: y, At: t0, Demand: []broker.Demand{demand(y, "app-1", 1)}})
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute), Demand: []broker.Demand{demand(k, "app-1", 1)}})
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(2 * time.Minute)})
	fs := firstSeen(t, l)
	if len(fs) != 1 || !fs[id(y, "app-1")].Equal(t0) {
		t.Errorf("an observation of k8s closed YARN demand: %v", fs)
	}
	if _, ok := l.Closed(t, id(y, "app-1")); ok {
		t.Errorf("YARN demand closed by a Kubernetes observation")
	}
}

func unknownReason(t *testing.T, l Ledger) {
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0, Demand: []broker.Demand{demand(k, "a", 1), demand(k, "b", 1)}})
	err := l.ApplyDemand(context.Background(), broker.SideObservation{Source: k, At: t0.Add(time.Minute),
		Demand: []broker.Demand{demand(k, "b", 1)}, Closed: map[string]broker.CloseReason{"a": "teleported"}})
	if err == nil {
		t.Fatal("an unknown close reason must be refused")
	}
	if fs := firstSeen(t, l); len(fs) != 2 {
		t.Errorf("a refused observation changed the ledger: %v", fs)
	}
}

func olderObservation(t *testing.T, l Ledger) {
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute), Demand: []broker.Demand{demand(k, "a", 1)}})
	err := l.ApplyDemand(context.Background(), broker.SideObservation{Source: k, At: t0})
	if !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("an observation older than the applied one: got %v, want ErrConflict", err)
	}
	if fs := firstSeen(t, l); len(fs) != 1 {
		t.Errorf("a refused older observation closed demand: %v", fs)
	}
	apply(t, l, broker.SideObservation{Source: k, At: t0.Add(time.Minute), Demand: []broker.Demand{demand(k, "a", 1)}})
}

func waitReasons(t *testing.T, l Ledger) {
	ctx := context.Background()
	k := broker.SourceK8s
	apply(t, l, broker.SideObservation{Source: k, At: t0, Demand: []broker.Demand{demand(k, "a", 1), demand(k, "b", 1)}})
	if err := l.SetWaitReasons(ctx, []broker.Wait{{Demand: id(k, "a"), Reason: broker.WaitQuota, Detail: "tenant training at max_gpus"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetWaitReasons(ctx, []broker.Wait{{Demand: id(k, "b"), Reason: broker.WaitInFlight, Detail: "scale-up of a100"}}); err != nil {
		t.Fatal(err)
	}
	w := l.Waits(t)
	if w[id(k, "a")].Reason != broker.WaitQuota || w[id(k, "a")].Detail != "tenant training at max_gpus" {
		t.Errorf("demand not named must keep its wait reason: %+v", w[id(k, "a")])
	}
	if w[id(k, "b")].Reason != broker.WaitInFlight {
		t.Errorf("wait of b: %+v", w[id(k, "b")])
	}
}

func nodes(t *testing.T, l Ledger) {
	ctx := context.Background()
	node := broker.Node{Name: "ip-10-0-0-1", InstanceID: "i-1", Pool: "a100", Owner: broker.OwnerK8s, Phase: broker.PhaseActive,
		GPUModel: "A100", GPUsTotal: 8, GPUsAllocated: 2, UnderusedSince: t0}
	save := func(n broker.Node, now time.Time) {
		t.Helper()
		if err := l.SaveNodes(ctx, []broker.Node{n}, now); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() map[string]broker.Node {
		t.Helper()
		ns, err := l.StoredNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]broker.Node{}
		for _, n := range ns {
			out[n.Name] = n
		}
		return out
	}
	save(node, t0)
	got := stored()[node.Name]
	if got.Pool != "a100" || got.InstanceID != "i-1" || got.Owner != broker.OwnerK8s || got.GPUsTotal != 8 ||
		!got.PhaseSince.Equal(t0) || !got.UnderusedSince.Equal(t0) {
		t.Errorf("stored node: %+v", got)
	}
	save(node, t0.Add(time.Minute))
	if got := stored()[node.Name]; !got.PhaseSince.Equal(t0) {
		t.Errorf("phase since moved without a phase change: %s", got.PhaseSince)
	}
	node.Phase, node.Owner = broker.PhaseDraining, broker.OwnerNone
	save(node, t0.Add(2*time.Minute))
	if got := stored()[node.Name]; got.Phase != broker.PhaseDraining || !got.PhaseSince.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("after the phase change: phase %s since %s", got.Phase, got.PhaseSince)
	}
	node.Phase = broker.PhaseGone
	save(node, t0.Add(3*time.Minute))
	if got, ok := stored()[node.Name]; ok {
		t.Errorf("a gone node is still listed: %+v", got)
	}
}

func insert(t *testing.T, l Ledger, op broker.Op) broker.Op {
	t.Helper()
	got, err := l.InsertOp(context.Background(), op)
	if err != nil {
		t.Fatalf("insert %s op: %v", op.Kind, err)
	}
	return got
}

func openIDs(t *testing.T, l Ledger) []int64 {
	t.Helper()
	ops, err := l.OpenOps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, o := range ops {
		out = append(out, o.ID)
	}
	slices.Sort(out)
	return out
}

func oneOpenOp(t *testing.T, l Ledger) {
	ctx := context.Background()
	down := insert(t, l, broker.Op{Kind: broker.ActScaleDown, Pool: "a100", Node: "n1", Reason: "idle", Step: broker.StepRelease})
	if down.ID == 0 || down.State != broker.OpPending || down.Reason != "idle" || down.Node != "n1" {
		t.Errorf("inserted op: %+v", down)
	}
	if _, err := l.InsertOp(ctx, broker.Op{Kind: broker.ActTransfer, Node: "n1", To: broker.OwnerYARN, Reason: "demand", Step: broker.StepRelease}); !errors.Is(err, broker.ErrConflict) {
		t.Errorf("a second open op on node n1: got %v, want ErrConflict", err)
	}
	up := insert(t, l, broker.Op{Kind: broker.ActScaleUp, Pool: "a100", Target: 3, Reason: "demand", Step: broker.StepSetDesired})
	if _, err := l.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "a100", Target: 4, Reason: "more", Step: broker.StepSetDesired}); !errors.Is(err, broker.ErrConflict) {
		t.Errorf("a second open scale-up of a100: got %v, want ErrConflict", err)
	}
	other := insert(t, l, broker.Op{Kind: broker.ActScaleUp, Pool: "h100", Target: 1, Reason: "demand", Step: broker.StepSetDesired})
	if got, want := openIDs(t, l), []int64{down.ID, up.ID, other.ID}; !slices.Equal(got, want) {
		t.Errorf("open ops %v, want %v", got, want)
	}
}

func advanceOp(t *testing.T, l Ledger) {
	ctx := context.Background()
	op := insert(t, l, broker.Op{Kind: broker.ActScaleDown, Pool: "a100", Node: "n1", Reason: "idle", Serves: []string{"k8s/a"}, Step: broker.StepRelease})
	data, _ := json.Marshal(broker.OpData{From: broker.OwnerK8s, InstanceID: "i-1", Prepared: true})
	next := op
	next.State, next.Step, next.Data, next.Attempts, next.LastError = broker.OpRunning, broker.StepTerminate, data, 2, "throttled"
	next.NextAttempt = t0.Add(time.Minute)
	next.Reason, next.Node, next.Pool = "rewritten", "n2", "h100" // intent: must not change
	got, err := l.AdvanceOp(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != broker.OpRunning || got.Step != broker.StepTerminate || got.Attempts != 2 || got.LastError != "throttled" ||
		!got.NextAttempt.Equal(t0.Add(time.Minute)) {
		t.Errorf("progress after advance: %+v", got)
	}
	if d := broker.OpDataOf(&got); d.InstanceID != "i-1" || !d.Prepared || d.From != broker.OwnerK8s {
		t.Errorf("step data after advance: %+v", d)
	}
	if got.Reason != "idle" || got.Node != "n1" || got.Pool != "a100" || !slices.Equal(got.Serves, []string{"k8s/a"}) {
		t.Errorf("advance changed the op's intent: %+v", got)
	}
	got.State = broker.OpDone
	if _, err := l.AdvanceOp(ctx, got); err != nil {
		t.Fatal(err)
	}
	if ids := openIDs(t, l); len(ids) != 0 {
		t.Errorf("a done op is still open: %v", ids)
	}
	got.State, got.Step = broker.OpRunning, broker.StepRelease
	if _, err := l.AdvanceOp(ctx, got); !errors.Is(err, broker.ErrConflict) {
		t.Errorf("advancing a done op: got %v, want ErrConflict (terminal ops are never revived)", err)
	}
	again := insert(t, l, broker.Op{Kind: broker.ActScaleDown, Pool: "a100", Node: "n1", Reason: "idle again", Step: broker.StepRelease})
	if again.ID == op.ID {
		t.Errorf("a new op on n1 reused the done op's id %d", op.ID)
	}
}

func insertInvalid(t *testing.T, l Ledger) {
	ctx := context.Background()
	var ve *broker.ValidationError
	if _, err := l.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Node: "n1"}); !errors.As(err, &ve) || ve.Field != "reason" {
		t.Errorf("an op without a reason: got %v, want a validation error on reason", err)
	}
	if _, err := l.InsertOp(ctx, broker.Op{Node: "n1", Reason: "x"}); !errors.As(err, &ve) || ve.Field != "kind" {
		t.Errorf("an op without a kind: got %v, want a validation error on kind", err)
	}
	if ids := openIDs(t, l); len(ids) != 0 {
		t.Errorf("a refused op was journaled: %v", ids)
	}
}

func decisions(t *testing.T, l Ledger) {
	ds := []broker.Decision{
		{At: t0, Tick: 1, Kind: string(broker.ActScaleUp), Pool: "a100", Tenant: "training", Reason: "pending demand needs 8 GPUs"},
		{At: t0.Add(time.Second), Tick: 1, Kind: "wait", Demand: "k8s/a", Reason: "quota"},
	}
	if err := l.RecordDecisions(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordDecisions(context.Background(), nil); err != nil {
		t.Fatalf("recording no decisions: %v", err)
	}
	got := l.Decisions(t)
	if len(got) != 2 {
		t.Fatalf("decisions: %+v", got)
	}
	for i := range ds {
		if got[i].Kind != ds[i].Kind || got[i].Reason != ds[i].Reason || got[i].Pool != ds[i].Pool ||
			got[i].Demand != ds[i].Demand || got[i].Tick != ds[i].Tick || !got[i].At.Equal(ds[i].At) {
			t.Errorf("decision %d: got %+v, want %+v", i, got[i], ds[i])
		}
	}
}

func samples(t *testing.T, l Ledger) {
	ss := []broker.CapacitySample{
		{At: t0, Side: "k8s", GPUsBusy: 6, GPUsIdle: 2, GPUsInFlight: 8, GPUsPending: 4},
		{At: t0, Side: "yarn", GPUsBusy: 1, GPUsIdle: 7},
	}
	if err := l.RecordSamples(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
	got := l.Samples(t)
	slices.SortFunc(got, func(a, b broker.CapacitySample) int { return a.At.Compare(b.At)*2 + cmpString(a.Side, b.Side) })
	if len(got) != 2 {
		t.Fatalf("samples: %+v", got)
	}
	for i := range ss {
		g := got[i]
		g.At = g.At.UTC()
		if g != ss[i] {
			t.Errorf("sample %d: got %+v, want %+v", i, g, ss[i])
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func reports(t *testing.T, l Ledger) {
	r := func(node string, at time.Time, util float64) broker.NodeReport {
		return broker.NodeReport{Node: node, At: at, AgentVersion: "1", DriverVersion: "550",
			GPUs: []broker.GPUReport{{Index: 0, Utilisation: util}}}
	}
	l.SaveReport(t, r("n1", t0.Add(time.Minute), 0.5))
	l.SaveReport(t, r("n1", t0, 0.1)) // older, arriving late
	l.SaveReport(t, r("n2", t0, 0.9))
	got, err := l.LatestReports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["n1"].At.Equal(t0.Add(time.Minute)) || got["n1"].GPUs[0].Utilisation != 0.5 || got["n2"].GPUs[0].Utilisation != 0.9 {
		t.Errorf("latest reports: %+v", got)
	}
}
