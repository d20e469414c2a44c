package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// landAfterValidation arranges for a GPU workload to be placed on node
// right after the next tick's validation observed it idle: the tick that
// journals the scale-down (its plan and its validation both saw the node
// idle) and before the executor stops the side from placing work there.
// In the soak (seed 14) the window was an API server outage, during which
// the cordon was retried while the scheduler bound a pod after it.
func landAfterValidation(side *rtSide, node string, w broker.Workload) {
	calls := 0
	side.afterObserve = func(s *rtSide) {
		calls++
		if calls != 2 { // the plan's observation, then the validation's
			return
		}
		n := s.nodes[node]
		n.Work = append(n.Work, w)
		n.GPUsAllocated += w.GPUs
		s.afterObserve = nil
	}
}

// idleWorld has one idle node n1 on the side chosen, ticked to one tick
// before the planner scales it down.
func idleWorld(t *testing.T, side func(*rtWorld) *rtSide) (*rtWorld, *rtSide, *Runtime) {
	w := newRTWorld(t, 5)
	s := side(w)
	w.machine(s, "n1")
	r := w.runtime()
	w.tick(r)
	w.ticks(r, 1, 4*time.Minute)
	if len(w.ledger.opsOf(broker.ActScaleDown)) != 0 {
		t.Fatal("scaled down before the unneeded time")
	}
	return w, s, r
}

// TestRuntimeScaleDownGivesBackNodeWhereWorkLanded: a pod bound to an idle
// node after the plan (and its validation) saw it idle, before the cordon,
// is not evicted by the scale-down's drain: the executor cordons first,
// waits for an observation that started after the cordon, sees GPU work
// the plan did not, and gives the node back (cancelled, work named).
func TestRuntimeScaleDownGivesBackNodeWhereWorkLanded(t *testing.T) {
	w, k, r := idleWorld(t, func(w *rtWorld) *rtSide { return w.k8s })
	landAfterValidation(k, "n1", broker.Workload{Source: broker.SourceK8s, Key: "uid-late", Name: "default/late", GPUs: 2, CheckpointAge: -1})
	w.ticks(r, 1, 2*time.Minute)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 {
		t.Fatalf("scale-downs %+v: want one journaled on the idle node", downs)
	}
	if !k.released["n1"] || k.releases["n1"] != 0 {
		t.Fatalf("after the plan's tick: cordoned %v, drains %d; want cordoned, nothing drained", k.released["n1"], k.releases["n1"])
	}
	w.ticks(r, 3, 5*time.Second)
	downs = w.ledger.opsOf(broker.ActScaleDown)
	if downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "default/late") {
		t.Fatalf("scale-down %s: %q; want cancelled, naming the pod that landed", downs[0].State, downs[0].LastError)
	}
	if k.releases["n1"] != 0 || len(k.evicted) != 0 || !slices.ContainsFunc(k.nodes["n1"].Work, func(x broker.Workload) bool { return x.Key == "uid-late" }) {
		t.Fatalf("drains %d, evicted %v, work %+v: the pod that landed must keep running", k.releases["n1"], k.evicted, k.nodes["n1"].Work)
	}
	if k.released["n1"] || !slices.Contains(k.admitted, "n1") || len(w.cloud.terminated) != 0 {
		t.Fatalf("cordoned %v, admitted %v, terminated %v: want the node given back, nothing terminated", k.released["n1"], k.admitted, w.cloud.terminated)
	}
}

// TestRuntimeScaleDownOfYARNNodeGivesBackWhereContainerLanded: the same on
// YARN, whose fence is the graceful decommission (the RM places nothing
// new on a decommissioning node; its timeout would kill what runs): a
// container placed before the decommission is seen in the next
// observation and the node is recommissioned long before the timeout.
func TestRuntimeScaleDownOfYARNNodeGivesBackWhereContainerLanded(t *testing.T) {
	w, y, r := idleWorld(t, func(w *rtWorld) *rtSide { return w.yarn })
	y.drainBlocked = true // a graceful decommission waits for its containers
	landAfterValidation(y, "n1", broker.Workload{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", Name: "late-app", GPUs: 4, CheckpointAge: -1})
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 3, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "late-app") {
		t.Fatalf("scale-downs %+v: want one, cancelled, naming the app whose container landed", downs)
	}
	if !slices.Contains(y.admitted, "n1") || y.released["n1"] || len(w.cloud.terminated) != 0 {
		t.Fatalf("admitted %v, released %v, terminated %v: want the node recommissioned, nothing terminated", y.admitted, y.released["n1"], w.cloud.terminated)
	}
}

// TestRuntimeYARNFenceCountsContainersWithoutGPUs: a 0-GPU
// ApplicationMaster placed on the node before the fence is work the
// plan did not see, as much as a GPU container: the fence's timeout would
// kill it and its whole application, so the node is given back.
func TestRuntimeYARNFenceCountsContainersWithoutGPUs(t *testing.T) {
	w, y, r := idleWorld(t, func(w *rtWorld) *rtSide { return w.yarn })
	y.drainBlocked = true
	landAfterValidation(y, "n1", broker.Workload{Source: broker.SourceYARN, Key: "container_1_0002_01_000001", Name: "late-am", GPUs: 0,
		CheckpointAge: -1, App: "application_1_0002", AM: true})
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 3, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "late-am") {
		t.Fatalf("scale-downs %+v: want one, cancelled, naming the AM that landed", downs)
	}
	if !slices.Contains(y.admitted, "n1") || len(w.cloud.terminated) != 0 {
		t.Fatalf("admitted %v, terminated %v: want the node recommissioned, nothing terminated", y.admitted, w.cloud.terminated)
	}
}

// TestRuntimeFenceTrustsNoObservationFromBeforeIt: after the cordon, a side
// that cannot be observed (or one observation that began before the fence
// settled) never lets the drain go on: stale is never empty. Once an
// observation after the fence shows the node still idle, it is drained and
// terminated.
func TestRuntimeFenceTrustsNoObservationFromBeforeIt(t *testing.T) {
	w, k, r := idleWorld(t, func(w *rtWorld) *rtSide { return w.k8s })
	w.ticks(r, 1, 2*time.Minute)
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || !k.released["n1"] {
		t.Fatalf("scale-downs %+v, cordoned %v: want one, with the node cordoned", downs, k.released["n1"])
	}
	k.err = errors.New("connection refused")
	w.ticks(r, 5, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if k.releases["n1"] != 0 || len(w.cloud.terminated) != 0 || downs[0].State.Terminal() {
		t.Fatalf("drains %d, terminated %v, op %s %q while Kubernetes is stale: want nothing drained, the op waiting",
			k.releases["n1"], w.cloud.terminated, downs[0].State, downs[0].LastError)
	}
	if !strings.Contains(downs[0].LastError, "waiting for an observation") {
		t.Fatalf("op waits with %q, want it to say it waits for an observation after the fence", downs[0].LastError)
	}
	k.err = nil
	w.ticks(r, 3, 5*time.Second)
	if downs := w.ledger.opsOf(broker.ActScaleDown); downs[0].State != broker.OpDone || len(w.cloud.terminated) != 1 {
		t.Fatalf("scale-down %s %q, terminated %v: want done once a fresh observation shows the node idle", downs[0].State, downs[0].LastError, w.cloud.terminated)
	}
}

// TestRuntimeYARNFenceStartsOnlyWhenTheRMConfirms: while the RM cannot
// tell whether the node is decommissioning (a failover), the fence has not
// started: no fence time is recorded, so an observation from before the
// RM took the decommission can never clear the node.
func TestRuntimeYARNFenceStartsOnlyWhenTheRMConfirms(t *testing.T) {
	w, y, r := idleWorld(t, func(w *rtWorld) *rtSide { return w.yarn })
	y.unknown = "the RM does not list host n1"
	w.ticks(r, 1, 2*time.Minute)
	w.ticks(r, 3, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 {
		t.Fatalf("scale-downs %+v: want one", downs)
	}
	if d := broker.OpDataOf(&downs[0]); len(d.Fenced) != 0 || !d.FencedAt.IsZero() {
		t.Fatalf("op data %+v: no fence may be recorded while the RM cannot tell", d)
	}
	if !strings.Contains(downs[0].LastError, "cannot tell") || len(w.cloud.terminated) != 0 {
		t.Fatalf("op waits with %q, terminated %v: want it waiting for the RM, nothing terminated", downs[0].LastError, w.cloud.terminated)
	}
	y.unknown = ""
	w.ticks(r, 3, 5*time.Second)
	if downs := w.ledger.opsOf(broker.ActScaleDown); downs[0].State != broker.OpDone {
		t.Fatalf("scale-down %s %q: want done once the RM confirms and a fresh look shows the node idle", downs[0].State, downs[0].LastError)
	}
}

// TestWorkLandedTrustsOnlyAnObservationAfterTheFenceSettled: the check
// reads the side's latest observation only when it began after the fence
// had settled (an informer's cache, a bind in flight, may lag the fence);
// one that began earlier, or a stale side, cannot tell that nothing
// landed.
func TestWorkLandedTrustsOnlyAnObservationAfterTheFenceSettled(t *testing.T) {
	w := newRTWorld(t, 2)
	r := w.runtime()
	fenced := w.clock.Now()
	d := broker.OpData{FencedAt: fenced}
	r.mu.Lock()
	r.seen.lastGood[broker.SourceK8s] = broker.SideObservation{Source: broker.SourceK8s,
		Nodes: []broker.Node{{Name: "n1", Owner: broker.OwnerNone, Phase: broker.PhaseActive, GPUsTotal: 4}}}
	r.seen.observedFrom[broker.SourceK8s] = fenced.Add(fenceSettle - time.Millisecond)
	r.mu.Unlock()
	if _, fresh := r.workLanded(broker.SourceK8s, "n1", d); fresh {
		t.Fatal("an observation that began before the fence settled was trusted")
	}
	r.mu.Lock()
	r.seen.observedFrom[broker.SourceK8s] = fenced.Add(fenceSettle)
	r.seen.stale[broker.SourceK8s] = "connection refused"
	r.mu.Unlock()
	if _, fresh := r.workLanded(broker.SourceK8s, "n1", d); fresh {
		t.Fatal("a stale side's last observation was trusted")
	}
	r.mu.Lock()
	delete(r.seen.stale, broker.SourceK8s)
	r.mu.Unlock()
	if landed, fresh := r.workLanded(broker.SourceK8s, "n1", d); !fresh || len(landed) != 0 {
		t.Fatalf("an observation after the fence settled: landed %v, fresh %v; want trusted, nothing landed", landed, fresh)
	}
}
