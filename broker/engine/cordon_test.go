package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Runtime scenarios for the YARN cordon (issue 30): a busy node is held
// with the cordon label, never the exclude file; undoing it restores the
// host's labels from the journal; without a cordon busy nodes are left
// alone.

// cordonWorld has YARN node y1 in partition gpu, running one 1-GPU
// container for an hour, behind an rmSide.
func cordonWorld(t *testing.T) (*rtWorld, *rmSide, *Runtime) {
	w := newRTWorld(t, 5)
	w.ledger.policy.YARNDrainByAttrition = true
	w.yarnHost("y1", broker.Workload{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", Name: "container_1_0001_01_000002",
		Tenant: "training", App: "application_1_0001", GPUs: 1, Preemptible: true, Class: broker.WorkBatch,
		StartedAt: t0.Add(-2 * time.Hour), CheckpointAge: -1})
	rm := newRMSide(w.yarn, "")
	rm.labels["y1"] = []string{"gpu"}
	return w, rm, w.runtimeWith(rm, rm)
}

// TestRuntimeAttritionHoldsWithTheCordon: a drain by attrition holds the
// busy node with the cordon label, never the exclude file, however long
// it runs; when YARN demand could use the node, the attrition is
// cancelled and the host's labels [gpu] are restored exactly.
func TestRuntimeAttritionHoldsWithTheCordon(t *testing.T) {
	w, rm, r := cordonWorld(t)
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	for range 6 {
		w.clock.Add(time.Hour)
		w.tick(r)
	}
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || !rm.cordoned("y1") {
		t.Fatalf("ops %+v, RM saw %q: want one open attrition holding y1 with the cordon", downs, rm.log)
	}
	if logIndex(rm.log, "exclude") >= 0 || len(rm.killed) != 0 || len(w.yarn.nodes["y1"].Work) != 1 {
		t.Fatalf("RM saw %q, killed %v: want the busy host never excluded, its container running", rm.log, rm.killed)
	}
	if d := broker.OpDataOf(&downs[0]); d.Cordon == nil || !slices.Equal(d.Cordon.Prior, []string{"gpu"}) || !d.Cordon.Applied {
		t.Fatalf("journaled cordon %+v: want prior [gpu], applied", d.Cordon)
	}
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_2/1", Name: "application_2", Tenant: "training",
		Queue: "root.training", GPUsPerUnit: 2, Units: 1})
	w.clock.Add(5 * time.Second)
	w.tick(r)
	downs = w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled {
		t.Fatalf("want the attrition cancelled, got %+v", downs)
	}
	if rm.cordoned("y1") || !slices.Contains(rm.log, "uncordon y1 [gpu]") {
		t.Fatalf("RM saw %q, labels %v: want y1 back in partition gpu", rm.log, rm.labels["y1"])
	}
}

// TestRuntimeNoCordonLeavesBusyYARNNodesAlone: where the cluster offers
// no cordon, yarn_drain_by_attrition is off: the busy node is neither
// cordoned nor excluded nor scaled down.
func TestRuntimeNoCordonLeavesBusyYARNNodesAlone(t *testing.T) {
	w, rm, r := cordonWorld(t)
	rm.noCordon = "node labels are disabled on the RM (set yarn.node-labels.enabled=true)"
	w.tick(r)
	for range 6 {
		w.clock.Add(time.Hour)
		w.tick(r)
	}
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 0 {
		t.Fatalf("scale-downs %+v of a busy YARN node without a cordon", downs)
	}
	if len(rm.log) != 0 {
		t.Fatalf("RM saw %q: want y1 left alone", rm.log)
	}
}

// idleCordonWorld has an idle YARN node y1 (partition gpu) behind an
// rmSide; the policy forces a terminate after the drain timeout.
func idleCordonWorld(t *testing.T) (*rtWorld, *rmSide, *Runtime) {
	w := newRTWorld(t, 5)
	w.ledger.policy.ForceAfterDrainTimeout = true
	w.machine(w.yarn, "y1")
	rm := newRMSide(w.yarn, "")
	rm.labels["y1"] = []string{"gpu"}
	return w, rm, w.runtimeWith(rm, rm)
}

// TestRuntimeUnknownReleaseAfterTheFenceIsNeverForced: the RM stops
// telling (a failover, a placeholder) after the fence passed: the release
// never counts as drained nor, past the drain timeout, as forced; the op
// ends failed at its deadline and gives y1 back with its labels.
func TestRuntimeUnknownReleaseAfterTheFenceIsNeverForced(t *testing.T) {
	w, rm, r := idleCordonWorld(t)
	w.tick(r)
	for range 20 {
		w.clock.Add(time.Minute)
		w.tick(r)
		if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) == 1 && slices.Contains(broker.OpDataOf(&downs[0]).Checked, broker.OwnerYARN) {
			break
		}
	}
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || !slices.Contains(broker.OpDataOf(&downs[0]).Checked, broker.OwnerYARN) {
		t.Fatalf("scale-downs %+v, RM saw %q: want one past its fence", downs, rm.log)
	}
	rm.mu.Lock()
	rm.unknown = "the RM lists host y1 only as a DECOMMISSIONED placeholder"
	rm.mu.Unlock()
	w.ticks(r, 40, time.Minute)
	if len(w.cloud.terminated) != 0 {
		t.Fatalf("terminated %v while the release was unknown", w.cloud.terminated)
	}
	downs = w.ledger.opsOf(broker.ActScaleDown)
	if downs[0].State != broker.OpFailed || !strings.Contains(downs[0].LastError, "placeholder") {
		t.Fatalf("scale-down %+v: want failed at its deadline with the reason", downs[0])
	}
	if !slices.Contains(rm.log, "admit y1") || !slices.Contains(rm.log, "uncordon y1 [gpu]") {
		t.Fatalf("RM saw %q: want y1 given back with its labels", rm.log)
	}
}

// TestRuntimeFenceCountsEveryYARNContainer: an idle YARN node's
// scale-down is fenced with the cordon; an ApplicationMaster (0 GPUs)
// that landed after the plan stops it: the node is given back, its labels
// restored, nothing excluded or killed.
func TestRuntimeFenceCountsEveryYARNContainer(t *testing.T) {
	w, rm, r := idleCordonWorld(t)
	// The AM lands just before the cordon takes effect.
	rm.onCordon = func(node string) {
		rm.mu.Lock()
		defer rm.mu.Unlock()
		n := rm.nodes[node]
		if len(n.Work) == 0 {
			n.Work = append(n.Work, broker.Workload{Source: broker.SourceYARN, Key: "container_1_0007_01_000001",
				Name: "container_1_0007_01_000001", Tenant: "training", App: "application_1_0007", AM: true, Class: broker.WorkBatch, CheckpointAge: -1})
		}
	}
	w.tick(r)
	w.ticks(r, 20, time.Minute)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpCancelled || !strings.Contains(downs[0].LastError, "container_1_0007_01_000001") {
		t.Fatalf("scale-downs %+v, RM saw %q: want y1 given back naming the AM that landed", downs, rm.log)
	}
	if logIndex(rm.log, "exclude") >= 0 || len(rm.killed) != 0 || !slices.Contains(rm.log, "uncordon y1 [gpu]") {
		t.Fatalf("RM saw %q, killed %v: want the cordon undone, nothing excluded or killed", rm.log, rm.killed)
	}
}

// TestRuntimeIdleYARNNodeIsDecommissionedThenTerminated: an idle node's
// scale-down cordons it, excludes it only once empty, restores its labels
// once DECOMMISSIONED, then terminates the instance.
func TestRuntimeIdleYARNNodeIsDecommissionedThenTerminated(t *testing.T) {
	w, rm, r := idleCordonWorld(t)
	w.ledger.policy.ForceAfterDrainTimeout = false
	w.tick(r)
	w.ticks(r, 40, 10*time.Second)
	if !slices.Equal(w.cloud.terminated, []string{"i-y1"}) {
		t.Fatalf("terminated %v, RM saw %q: want i-y1", w.cloud.terminated, rm.log)
	}
	cordon, exclude, dec, un := logIndex(rm.log, "cordon y1"), logIndex(rm.log, "exclude y1"), logIndex(rm.log, "decommissioned y1"), logIndex(rm.log, "uncordon y1")
	if cordon < 0 || exclude < cordon || dec < exclude || un < dec || rm.log[un] != "uncordon y1 [gpu]" {
		t.Fatalf("RM saw %q: want cordon, exclude, DECOMMISSIONED, labels [gpu] restored, in that order", rm.log)
	}
}

// TestRuntimeWorkLostToAFailoverIsRecorded: a node under attrition whose
// NodeManager an RM failover shut down with its container is released,
// and the op and the decisions record what was lost (containers, apps,
// GPU-hours) instead of terminating silently.
func TestRuntimeWorkLostToAFailoverIsRecorded(t *testing.T) {
	w, rm, r := cordonWorld(t)
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || !rm.cordoned("y1") {
		t.Fatalf("ops %+v: want an attrition holding y1", downs)
	}
	rm.mu.Lock()
	rm.lose = "y1"
	rm.mu.Unlock()
	w.ticks(r, 5, 10*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	lost := broker.OpDataOf(&downs[0]).Lost
	if lost == nil || !slices.Equal(lost.Containers, []string{"container_1_0001_01_000002"}) || !slices.Equal(lost.Apps, []string{"application_1_0001"}) || lost.GPUHours < 2 {
		t.Fatalf("op %+v lost %+v: want the container, its app and its >= 2 GPU-hours", downs[0], lost)
	}
	if ds := w.decisionsOf("loss"); len(ds) != 1 || !strings.Contains(ds[0].Reason, "container_1_0001_01_000002") {
		t.Fatalf("loss decisions %+v", ds)
	}
}
