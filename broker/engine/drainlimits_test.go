package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// lagK8s is the Kubernetes side seen through a watch cache that lags: the
// observation hides work (hidden, by key) and, with lagCordon, the cordon.
// Its release compares the live work (the side's own) with the plan's, as
// k8s.Side's does.
type lagK8s struct {
	*rtSide
	hidden    map[string]bool
	lagCordon bool
	// planned records each ReleasePlanned call's plan.
	planned [][]string
}

var _ PlannedReleaser = (*lagK8s)(nil)

func (l *lagK8s) Observe(ctx context.Context, idx broker.TenantIndex) (broker.SideObservation, error) {
	obs, err := l.rtSide.Observe(ctx, idx)
	for i := range obs.Nodes {
		n := &obs.Nodes[i]
		n.Work = slices.DeleteFunc(n.Work, func(w broker.Workload) bool { return l.hidden[w.Key] })
		if l.lagCordon {
			n.Owner = broker.OwnerK8s
		}
	}
	return obs, err
}

func (l *lagK8s) ReleasePlanned(ctx context.Context, node string, deadline time.Time, planned []string) (broker.ReleaseStatus, error) {
	l.planned = append(l.planned, planned)
	l.mu.Lock()
	var unplanned []string
	if n := l.nodes[node]; n != nil {
		for _, w := range n.Work {
			if !w.System && !slices.Contains(planned, string(w.Source)+"/"+w.Key) {
				unplanned = append(unplanned, w.Name)
			}
		}
	}
	l.mu.Unlock()
	if len(unplanned) > 0 {
		return broker.ReleaseStatus{Unplanned: unplanned}, l.Cordon(ctx, node)
	}
	return l.Release(ctx, node, deadline)
}

// lagWorld has one idle Kubernetes node n1 seen through lag, ticked to
// one tick before the planner scales it down.
func lagWorld(t *testing.T) (*rtWorld, *lagK8s, *Runtime) {
	w := newRTWorld(t, 5)
	lag := &lagK8s{rtSide: w.k8s, hidden: map[string]bool{}}
	w.machine(w.k8s, "n1")
	r, err := NewRuntime(RuntimeConfig{
		Observers: []SideObserver{w.yarn, lag}, Actions: []SideActions{w.yarn, lag},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.tick(r)
	w.ticks(r, 1, 4*time.Minute)
	if len(w.ledger.opsOf(broker.ActScaleDown)) != 0 {
		t.Fatal("scaled down before the unneeded time")
	}
	return w, lag, r
}

// TestRuntimeDrainGivesBackOnWorkThePlanDidNotSee: a pod the watch cache
// has not delivered (bound just before the cordon) is in no observation,
// so neither the plan nor the fence's check sees it; the drain's live list
// does, evicts nothing, and the node is given back (cancelled, pod named).
func TestRuntimeDrainGivesBackOnWorkThePlanDidNotSee(t *testing.T) {
	w, lag, r := lagWorld(t)
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "uid-late", Name: "default/late", GPUs: 2, CheckpointAge: -1, Class: broker.WorkService}}
	lag.hidden["uid-late"] = true
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 4, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "default/late") {
		t.Fatalf("scale-downs %+v: want one, cancelled, naming the pod the plan did not see", downs)
	}
	if len(lag.planned) == 0 || slices.Contains(lag.planned[0], "k8s/uid-late") {
		t.Fatalf("plans released with %v: want the plan's work, without the late pod", lag.planned)
	}
	if w.k8s.releases["n1"] != 0 || len(w.k8s.nodes["n1"].Work) != 1 || len(w.cloud.terminated) != 0 {
		t.Fatalf("drains %d, work %+v, terminated %v: the late pod must keep running", w.k8s.releases["n1"], w.k8s.nodes["n1"].Work, w.cloud.terminated)
	}
	if w.k8s.released["n1"] || !slices.Contains(w.k8s.admitted, "n1") {
		t.Fatalf("cordoned %v, admitted %v: want the node given back", w.k8s.released["n1"], w.k8s.admitted)
	}
}

// TestRuntimeFenceWaitsForAnObservationShowingTheCordon: an observation
// that started after the cordon but does not show it (the watch cache has
// not caught up) is no proof that nothing landed: the release waits.
func TestRuntimeFenceWaitsForAnObservationShowingTheCordon(t *testing.T) {
	w, lag, r := lagWorld(t)
	lag.lagCordon = true
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 4, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || w.k8s.releases["n1"] != 0 || len(lag.planned) != 0 {
		t.Fatalf("scale-downs %+v, drains %d: want the release waiting for the cordon to show", downs, w.k8s.releases["n1"])
	}
	lag.lagCordon = false
	w.ticks(r, 4, 5*time.Second)
	if downs = w.ledger.opsOf(broker.ActScaleDown); downs[0].State != broker.OpDone || len(w.cloud.terminated) != 1 {
		t.Fatalf("scale-down %+v, terminated %v: want it done once the cordon shows", downs[0], w.cloud.terminated)
	}
}

// TestRuntimePDBBlockedScaleDownGivesNodeBack: a scale-down whose drain a
// PodDisruptionBudget holds past the drain timeout gives the node back to
// Kubernetes (uncordoned, owner restored) and fails with the budget named,
// instead of leaving it cordoned and owned by nobody.
func TestRuntimePDBBlockedScaleDownGivesNodeBack(t *testing.T) {
	w, r := blockedDrain(t)
	w.ticks(r, 20, 5*time.Second) // past the 1 min drain timeout
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if downs[0].State != broker.OpFailed || !strings.Contains(downs[0].LastError, "given back") || !strings.Contains(downs[0].LastError, "PodDisruptionBudget default/pdb") {
		t.Fatalf("scale-down %s: %q; want failed, given back, naming the budget", downs[0].State, downs[0].LastError)
	}
	if w.k8s.released["busy"] || !slices.Contains(w.k8s.admitted, "busy") || len(w.cloud.terminated) != 0 {
		t.Fatalf("cordoned %v, admitted %v, terminated %v: want the node given back", w.k8s.released["busy"], w.k8s.admitted, w.cloud.terminated)
	}
}

// TestRuntimeDrainGoesOnWithThePlannedCPUWork: the plan's work includes
// CPU pods, so a drain comparing the live work with it does not take a CPU
// pod the plan saw for work that landed after it.
func TestRuntimeDrainGoesOnWithThePlannedCPUWork(t *testing.T) {
	w, lag, r := lagWorld(t)
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "uid-cpu", Name: "default/cpu", CheckpointAge: -1, Class: broker.WorkService}}
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 4, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpDone || len(w.cloud.terminated) != 1 {
		t.Fatalf("scale-downs %+v, terminated %v: want the node drained and terminated", downs, w.cloud.terminated)
	}
	if len(lag.planned) == 0 || !slices.Contains(lag.planned[0], "k8s/uid-cpu") {
		t.Fatalf("plans released with %v: want the CPU pod in the plan's work", lag.planned)
	}
}
