package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Runtime scenarios for the lifecycle and executor safety rules (issue 13,
// and the executor side of issue 12).

// machine adds a running instance of the pool and joins it to side.
func (w *rtWorld) machine(side *rtSide, name string) {
	side.join(name, rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	p := w.cloud.pools[rtPool]
	p.Instances = append(p.Instances, broker.Instance{ID: "i-" + name, Hostname: name, Phase: broker.PhaseActive})
	p.Desired++
}

// ticks runs n ticks, d apart.
func (w *rtWorld) ticks(r *Runtime, n int, d time.Duration) {
	w.t.Helper()
	for range n {
		w.clock.Add(d)
		w.tick(r)
	}
}

func (w *rtWorld) setMin(min int) {
	w.cloud.pools[rtPool].Pool.MinNodes = min
	w.ledger.pools[0].Pool.MinNodes = min
}

func (w *rtWorld) decisionsOf(kind string) []broker.Decision {
	var out []broker.Decision
	for _, d := range w.ledger.decisions {
		if d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// TestRuntimeDeadNodeIsReplacedAfterTimeout: a Kubernetes node whose
// kubelet stops absorbs no demand (the pool buys for it) and is replaced
// after the unhealthy node timeout: cordoned, not drained (its work is
// lost with the machine), its replacement bought first, then terminated.
func TestRuntimeDeadNodeIsReplacedAfterTimeout(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "n1")
	r := w.runtime()
	w.tick(r)
	w.k8s.nodes["n1"].Down, w.k8s.nodes["n1"].DownSince = "kubelet stopped posting node status", w.clock.Now()
	w.k8s.submit(trainingPod("p", 2, 0))
	rep := w.tick(r)
	if len(rep.Journaled) != 1 || rep.Journaled[0].Kind != broker.ActScaleUp || rep.Journaled[0].Target != 2 {
		t.Fatalf("demand must buy a node instead of waiting for the dead one: journaled %+v, waits %+v", rep.Journaled, rep.Plan.Waits)
	}
	w.ticks(r, 12, time.Minute)
	reps := w.ledger.opsOf(broker.ActReplace)
	if len(reps) != 1 || reps[0].State != broker.OpDone {
		t.Fatalf("replace ops %+v, want one done", reps)
	}
	if !slices.Contains(w.cloud.terminated, "i-n1") || !w.k8s.released["n1"] {
		t.Fatalf("terminated %v, cordoned %v: the dead node must be cordoned and terminated", w.cloud.terminated, w.k8s.released)
	}
	if w.k8s.releases["n1"] != 0 {
		t.Fatalf("a dead node was drained %d times; its work cannot leave a dead machine", w.k8s.releases["n1"])
	}
}

// TestRuntimeReplaceAtPoolMinBuysTheReplacementFirst: the cloud refuses a
// terminate that would take the pool below its min (as AWS does). Today's
// executor retried that terminate forever while the planner's scale-up to
// restore the min waited behind it; now the replacement is bought first.
func TestRuntimeReplaceAtPoolMinBuysTheReplacementFirst(t *testing.T) {
	w := newRTWorld(t, 5)
	w.setMin(1)
	w.machine(w.k8s, "n1")
	w.ledger.reports["n1"] = twice(broker.NodeReport{Node: "n1", At: t0, GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-0", XIDs: []uint64{79}}}})
	r := w.runtime()
	w.ticks(r, 6, 5*time.Second)
	for _, o := range w.ledger.ops {
		if !o.State.Terminal() {
			t.Fatalf("op %d (%s, step %s) still open: %s", o.ID, o.Kind, o.Step, o.LastError)
		}
	}
	reps := w.ledger.opsOf(broker.ActReplace)
	if len(reps) != 1 || reps[0].State != broker.OpDone {
		t.Fatalf("replace ops %+v", reps)
	}
	if fmt.Sprint(w.cloud.setCalls) != "[2]" || fmt.Sprint(w.cloud.terminated) != "[i-n1]" || w.cloud.pools[rtPool].Desired != 1 {
		t.Fatalf("SetDesired %v, terminated %v, desired %d: want the surge to 2, then i-n1 terminated back to 1",
			w.cloud.setCalls, w.cloud.terminated, w.cloud.pools[rtPool].Desired)
	}
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 0 {
		t.Fatalf("no scale-up may be planned to restore the min behind a replacement: %+v", ups)
	}
}

// TestRuntimeReplaceSurgeStaysWithinClusterMax: a replace whose pool may
// grow but whose cluster is at its GPU max terminates first and buys the
// replacement after: the desired capacity never goes above the cluster's
// max, even while the terminate is pending.
func TestRuntimeReplaceSurgeStaysWithinClusterMax(t *testing.T) {
	w := newRTWorld(t, 5)
	w.ledger.policy.ClusterMaxGPUs = 8
	w.machine(w.k8s, "n1")
	w.machine(w.k8s, "n2")
	w.ledger.reports["n1"] = twice(broker.NodeReport{Node: "n1", At: t0, GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-0", XIDs: []uint64{79}}}})
	r := w.runtime()
	for range 8 {
		w.ticks(r, 1, 5*time.Second)
		if d := w.cloud.pools[rtPool].Desired; d*4 > 8 {
			t.Fatalf("desired %d nodes (%d GPUs) over the cluster max of 8 GPUs; SetDesired calls %v", d, d*4, w.cloud.setCalls)
		}
	}
	reps := w.ledger.opsOf(broker.ActReplace)
	if len(reps) != 1 || fmt.Sprint(w.cloud.terminated) != "[i-n1]" {
		t.Fatalf("replace ops %+v, terminated %v: want n1 replaced", reps, w.cloud.terminated)
	}
	for _, c := range w.cloud.setCalls {
		if c > 2 {
			t.Fatalf("SetDesired %v: a surge above the cluster max", w.cloud.setCalls)
		}
	}
}

// TestRuntimeReplaceWithKeepDesiredTerminator: a provider that terminates
// without a decrement replaces the instance itself; no surge.
func TestRuntimeReplaceWithKeepDesiredTerminator(t *testing.T) {
	w := newRTWorld(t, 1)
	w.setMin(1)
	w.machine(w.k8s, "n1")
	w.ledger.reports["n1"] = twice(broker.NodeReport{Node: "n1", At: t0, GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-0", ECCUncorrected: 3}}})
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.yarn, w.k8s},
		Pools: rtKeepCloud{w.cloud}, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.ticks(r, 3, 5*time.Second)
	if reps := w.ledger.opsOf(broker.ActReplace); len(reps) != 1 || reps[0].State != broker.OpDone {
		t.Fatalf("replace ops %+v", reps)
	}
	if len(w.cloud.setCalls) != 0 || fmt.Sprint(w.cloud.terminated) != "[i-n1]" || w.cloud.pools[rtPool].Desired != 1 {
		t.Fatalf("SetDesired %v, terminated %v, desired %d", w.cloud.setCalls, w.cloud.terminated, w.cloud.pools[rtPool].Desired)
	}
}

// TestRuntimeReplaceAtMinAndMaxEnds: with min = max and no way to
// terminate without a decrement, the replacement cannot proceed: the op
// ends failed with the reason and the node goes back to its side. (The
// planner does not propose such a replacement; the op here is one the
// journal held from before the pool's bounds changed.)
func TestRuntimeReplaceAtMinAndMaxEnds(t *testing.T) {
	w := newRTWorld(t, 1)
	w.setMin(1)
	w.machine(w.k8s, "n1")
	w.ledger.reports["n1"] = broker.NodeReport{Node: "n1", At: t0, GPUs: []broker.GPUReport{{Index: 0, UUID: "GPU-0", XIDs: []uint64{48}}}}
	r := w.runtime()
	if rep := w.tick(r); len(rep.Plan.Actions) != 0 {
		t.Fatalf("plan %+v: a replacement that cannot proceed must not be planned", rep.Plan.Actions)
	}
	if _, err := w.ledger.InsertOp(context.Background(), broker.Op{Kind: broker.ActReplace, Pool: rtPool, Node: "n1", Reason: "test",
		State: broker.OpPending, Step: broker.StepRelease, Data: []byte(`{"from":"k8s","instance_id":"i-n1"}`)}); err != nil {
		t.Fatal(err)
	}
	w.ticks(r, 2, 5*time.Second)
	reps := w.ledger.opsOf(broker.ActReplace)
	if len(reps) == 0 || reps[0].State != broker.OpFailed || !strings.Contains(reps[0].LastError, "min and max") {
		t.Fatalf("replace ops %+v, want failed for min = max", reps)
	}
	if !slices.Contains(w.k8s.admitted, "n1") || len(w.cloud.terminated) != 0 {
		t.Fatalf("admitted %v, terminated %v: the node must be given back, not terminated", w.k8s.admitted, w.cloud.terminated)
	}
}

// TestRuntimeInstanceThatNeverRegistersIsTerminated: one instance that
// never joins is terminated after the max provision time instead of
// keeping its pool in backoff for as long as it exists.
func TestRuntimeInstanceThatNeverRegistersIsTerminated(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.submit(trainingPod("p", 2, 0))
	r := w.runtime()
	w.tick(r) // buys i-0001, which never boots
	w.ticks(r, 17, time.Minute)
	if !slices.Contains(w.cloud.terminated, "i-0001") {
		t.Fatalf("terminated %v: the instance that never registered must go", w.cloud.terminated)
	}
	w.ticks(r, 2, time.Minute)
	if calls := w.cloud.setCalls; len(calls) < 2 {
		t.Fatalf("SetDesired calls %v: the pool must buy again once the bad instance is gone", calls)
	}
}

// TestRuntimeCapacityPresentButNotScheduling: a pod its scheduler refuses
// for a reason capacity does not fix gets one node, then is recorded as
// "capacity present but not scheduling" and the node is reclaimed.
func TestRuntimeCapacityPresentButNotScheduling(t *testing.T) {
	w := newRTWorld(t, 5)
	why := "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint"
	w.k8s.refuse["p"] = why
	w.k8s.submit(trainingPod("p", 2, 0))
	r := w.runtime()
	w.tick(r)
	w.boot(w.k8s)
	w.ticks(r, 12, time.Minute)
	var recorded bool
	for _, d := range w.decisionsOf("wait") {
		if strings.Contains(d.Reason, "capacity present but not scheduling: "+why) {
			recorded = true
		}
	}
	if !recorded {
		t.Fatalf("no wait says capacity present but not scheduling; waits %+v", w.ledger.waits)
	}
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 {
		t.Fatalf("scale-ups %+v, want exactly one", ups)
	}
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || downs[0].State != broker.OpDone {
		t.Fatalf("scale-downs %+v: the node bought for demand that cannot use it must be reclaimed", downs)
	}
}

// TestRuntimeTerminatesByInstanceID: the Kubernetes node name differs from
// the instance's host name (the node was matched by its providerID). The
// terminate uses the instance id from the provider's instance map.
func TestRuntimeTerminatesByInstanceID(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.join("ip-10-0-0-7.ec2.internal", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.k8s.nodes["ip-10-0-0-7.ec2.internal"].InstanceID = "i-0abc"
	p := w.cloud.pools[rtPool]
	p.Instances, p.Desired = []broker.Instance{{ID: "i-0abc", Hostname: "ip-10-0-0-7", Phase: broker.PhaseActive}}, 1
	r := w.runtime()
	w.tick(r)
	w.ticks(r, 2, 6*time.Minute)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpDone || fmt.Sprint(w.cloud.terminated) != "[i-0abc]" {
		t.Fatalf("scale-down %+v, terminated %v; want i-0abc terminated", downs, w.cloud.terminated)
	}
}

// TestRuntimeUnresolvableInstanceIsGivenBack: a drained node whose
// instance cannot be resolved is reported and given back, not stranded.
func TestRuntimeUnresolvableInstanceIsGivenBack(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil) // no instance in any pool
	r := w.runtime()
	w.tick(r)
	if _, err := w.ledger.InsertOp(context.Background(), broker.Op{Kind: broker.ActScaleDown, Pool: rtPool, Node: "n1", Reason: "test",
		State: broker.OpPending, Step: broker.StepRelease, Data: []byte(`{"from":"k8s"}`)}); err != nil {
		t.Fatal(err)
	}
	w.ticks(r, 2, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if downs[0].State != broker.OpFailed || !strings.Contains(downs[0].LastError, "no cloud instance") || !strings.Contains(downs[0].LastError, "given back") {
		t.Fatalf("scale-down %+v: want failed, reported and given back", downs[0])
	}
	if !slices.Contains(w.k8s.admitted, "n1") || w.k8s.released["n1"] {
		t.Fatalf("admitted %v, released %v: the node must be uncordoned", w.k8s.admitted, w.k8s.released)
	}
}

// twoPools adds a second, H100 pool to the world.
func (w *rtWorld) twoPools() {
	second := broker.PoolState{Pool: broker.Pool{Name: "h100-group", Provider: "aws", Group: "h100-group", GPUModel: "H100", GPUsPerNode: 4,
		MaxNodes: 5, Sides: broker.PoolShared, Labels: map[string]string{"infra-type": "gpu"}}}
	w.ledger.pools = append(w.ledger.pools, second)
	w.cloud.pools[second.Pool.Name] = &second
}

// TestRuntimeStalePoolOthersAct: one group's describe fails. That pool is
// stale: its idle node is not reclaimed and it does not grow, its GPUs
// still count; the other pool grows for demand; the tick does not fail.
// When the whole describe fails, the tick still runs.
func TestRuntimeStalePoolOthersAct(t *testing.T) {
	w := newRTWorld(t, 5)
	w.twoPools()
	w.ledger.policy.ClusterMaxGPUs = 8
	w.machine(w.k8s, "a1")
	r := w.runtime()
	w.tick(r)
	w.cloud.stale = map[string]string{rtPool: "describe group gpu-training-group: Throttling"}
	h100 := trainingPod("h", 4, 0)
	h100.Constraints.GPUModels = []string{"H100"}
	h100b := trainingPod("h2", 4, 0)
	h100b.Constraints.GPUModels = []string{"H100"}
	w.k8s.submit(h100)
	w.k8s.submit(h100b)
	w.ticks(r, 3, 3*time.Minute)
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 0 {
		t.Fatalf("scaled down a node of a stale pool: %+v", downs)
	}
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].Pool != "h100-group" || ups[0].Target != 1 {
		t.Fatalf("scale-ups %+v: want h100-group to 1 only (the stale pool's 4 GPUs count against the max of 8)", ups)
	}
	if st := r.Status(); st.StalePools[rtPool] == "" {
		t.Fatalf("status must name the stale pool: %+v", st)
	}
	w.cloud.stale = nil
	w.cloud.failAll = errors.New("RequestExpired")
	if _, err := r.Tick(context.Background()); err != nil {
		t.Fatalf("a failing describe must not fail the tick: %v", err)
	}
}

// TestRuntimeFailingStepEnds: a scale-up whose SetDesired keeps failing
// ends failed with its last error and frees the pool's slot.
func TestRuntimeFailingStepEnds(t *testing.T) {
	w := newRTWorld(t, 5)
	w.cloud.failSet = errors.New("connection reset by peer")
	w.k8s.submit(trainingPod("p", 2, 0))
	r := w.runtime()
	w.ticks(r, 60, 30*time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) == 0 || ups[0].State != broker.OpFailed || !strings.Contains(ups[0].LastError, "connection reset by peer") {
		t.Fatalf("scale-up ops %+v, want the first failed with the last error", ups)
	}
	w.cloud.failSet = nil
	w.ticks(r, 2, 30*time.Second)
	ups = w.ledger.opsOf(broker.ActScaleUp)
	if last := ups[len(ups)-1]; last.State.Terminal() && last.State != broker.OpDone || len(w.cloud.setCalls) == 0 {
		t.Fatalf("after recovery: %+v, SetDesired %v", ups, w.cloud.setCalls)
	}
}

// TestRuntimeUnknownReleaseIsNeverTerminated: YARN cannot tell whether a
// node is decommissioned (the RM does not list the host). Even with
// ForceAfterDrainTimeout the node is never terminated; the op waits until
// its deadline, then ends failed and gives the node back.
func TestRuntimeUnknownReleaseIsNeverTerminated(t *testing.T) {
	w := newRTWorld(t, 5)
	w.ledger.policy.ForceAfterDrainTimeout = true
	w.machine(w.yarn, "y1")
	r := w.runtime()
	w.tick(r)
	w.yarn.unknown = "the ResourceManager does not list host y1"
	w.ticks(r, 40, time.Minute)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) == 0 {
		t.Fatal("no scale-down was journaled")
	}
	if len(w.cloud.terminated) != 0 {
		t.Fatalf("terminated %v while the release was unknown", w.cloud.terminated)
	}
	if downs[0].State != broker.OpFailed || !strings.Contains(downs[0].LastError, "does not list host y1") {
		t.Fatalf("scale-down %+v: want failed at its deadline with the reason", downs[0])
	}
	if !slices.Contains(w.yarn.admitted, "y1") {
		t.Fatalf("YARN admitted %v: the node must be given back", w.yarn.admitted)
	}
}

// blockedDrain makes a reclaimable Kubernetes node whose drain a PDB holds.
func blockedDrain(t *testing.T) (*rtWorld, *Runtime) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "busy")
	w.k8s.nodes["busy"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "cpu-only", Name: "default/cpu-only", CheckpointAge: -1, Class: broker.WorkService}}
	w.k8s.drainBlocked = true
	r := w.runtime()
	w.tick(r)
	w.ticks(r, 1, 6*time.Minute)
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || downs[0].Step != broker.StepRelease {
		t.Fatalf("want a scale-down in its drain, got %+v", downs)
	}
	return w, r
}

// TestRuntimeScaleDownDoesNotHoldBackScaleUps: a drain in progress does not
// delay a scale-up of its pool; the capacity set accounts for the removal
// to come, so the pool ends where the plan wanted it.
func TestRuntimeScaleDownDoesNotHoldBackScaleUps(t *testing.T) {
	w, r := blockedDrain(t)
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	w.ticks(r, 1, 5*time.Second)
	if fmt.Sprint(w.cloud.setCalls) != "[2]" {
		t.Fatalf("SetDesired %v while the drain runs, want [2] (target 1 plus the removal to come)", w.cloud.setCalls)
	}
	w.k8s.drainBlocked = false
	w.ticks(r, 2, 5*time.Second)
	if fmt.Sprint(w.cloud.terminated) != "[i-busy]" || w.cloud.pools[rtPool].Desired != 1 {
		t.Fatalf("terminated %v, desired %d; want i-busy gone and the new node kept", w.cloud.terminated, w.cloud.pools[rtPool].Desired)
	}
	// The scale-up set 2 (its target and the removal to come); once the
	// removal is done, its one node being gpu-ready ends it: it must not
	// wait for the second instance until its deadline.
	w.boot(w.yarn)
	w.ticks(r, 2, 5*time.Second)
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 || ups[0].State != broker.OpDone {
		t.Fatalf("scale-ups %+v: want the one done once its node is ready and the removal it counted has finished", ups)
	}
}

// TestRuntimePendingScaleDownCancelledForNewDemand: demand that fits a node
// still draining for a scale-down takes it back: the scale-down ends
// cancelled, the node is uncordoned, nothing is bought.
func TestRuntimePendingScaleDownCancelledForNewDemand(t *testing.T) {
	w, r := blockedDrain(t)
	w.k8s.submit(trainingPod("p", 4, 0))
	w.ticks(r, 2, 5*time.Second)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if downs[0].State != broker.OpCancelled || !slices.Contains(w.k8s.admitted, "busy") {
		t.Fatalf("scale-down %+v, admitted %v: want cancelled and the node given back", downs[0], w.k8s.admitted)
	}
	if len(w.cloud.setCalls) != 0 || len(w.cloud.terminated) != 0 {
		t.Fatalf("SetDesired %v, terminated %v: nothing may be bought or terminated", w.cloud.setCalls, w.cloud.terminated)
	}
	if w.ledger.closed["k8s/p"] != "scheduled" {
		t.Fatalf("the pod must run on the node given back; closed %v", w.ledger.closed)
	}
	if st := r.Status(); st.OpsCancelled != 1 {
		t.Fatalf("status %+v, want one cancelled op", st)
	}
}

// TestRuntimeScaleUpStaysLinkedUntilGPUReady: while the node bought for a
// pod boots, an idle YARN node appears. The pod waits for its node (the
// scale-up op stays open and linked) instead of taking the YARN node.
func TestRuntimeScaleUpStaysLinkedUntilGPUReady(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.yarn, "y1")
	w.yarn.nodes["y1"].Work = []broker.Workload{{Source: broker.SourceYARN, Key: "c1", GPUs: 4, CheckpointAge: -1}}
	w.yarn.nodes["y1"].GPUsAllocated = 4
	w.k8s.submit(trainingPod("p", 4, 0))
	r := w.runtime()
	w.tick(r)
	w.yarn.finish("c1")
	w.ticks(r, 3, 10*time.Second)
	if ops := w.ledger.opsOf(broker.ActTransfer); len(ops) != 0 {
		t.Fatalf("the pod took the YARN node while its own boots: %+v", ops)
	}
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].State.Terminal() || ups[0].Step != broker.StepAwaitReady {
		t.Fatalf("scale-up %+v: want one open, awaiting gpu-ready", ups)
	}
	w.boot(w.k8s)
	w.ticks(r, 1, 10*time.Second)
	if ups := w.ledger.opsOf(broker.ActScaleUp); ups[0].State != broker.OpDone || w.ledger.closed["k8s/p"] != "scheduled" {
		t.Fatalf("scale-up %+v, closed %v: want done once the node is ready, and the pod on it", ups, w.ledger.closed)
	}
}

// TestRuntimeScaleUpWaitsForInstancesToLaunch: a group takes a while to
// launch the instances its new desired capacity asks for. Until they
// exist none of them is in flight, yet the scale-up must stay open and
// linked to its demand: ending it then let the pod buy a second node (seen
// on the real control plane with awssim's launch delay).
func TestRuntimeScaleUpWaitsForInstancesToLaunch(t *testing.T) {
	w := newRTWorld(t, 5)
	w.cloud.launchLater = true
	w.k8s.submit(trainingPod("p", 2, 0))
	r := w.runtime()
	w.ticks(r, 4, 2*time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].State.Terminal() {
		t.Fatalf("scale-ups %+v: want one, still open while the group launches", ups)
	}
	if !strings.Contains(ups[0].LastError, "launch its instances") {
		t.Fatalf("scale-up waits with %q, want it to say it waits for the launch", ups[0].LastError)
	}
	if len(w.cloud.setCalls) != 1 {
		t.Fatalf("SetDesired calls %v: the pod bought more than one node", w.cloud.setCalls)
	}
	w.cloud.launch(rtPool)
	w.boot(w.k8s)
	w.ticks(r, 2, 2*time.Second)
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 || ups[0].State != broker.OpDone || len(w.cloud.setCalls) != 1 {
		t.Fatalf("scale-ups %+v, SetDesired %v: want the one scale-up done once its node is ready", ups, w.cloud.setCalls)
	}
}

// TestRuntimeBothSidesClaimANode: a node both sides list as theirs is
// raised (decision, status counter) and cordoned on the side without work.
func TestRuntimeBothSidesClaimANode(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.yarn, "n1")
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.yarn.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceYARN, Key: "c1", GPUs: 1, CheckpointAge: -1}}
	w.yarn.nodes["n1"].GPUsAllocated = 1
	r := w.runtime()
	rep := w.tick(r)
	if len(rep.Conflicts) != 1 || rep.Conflicts[0].Keep != broker.OwnerYARN || rep.Conflicts[0].Release != broker.OwnerK8s {
		t.Fatalf("conflicts %+v, want n1 kept by YARN (its work) and released by Kubernetes", rep.Conflicts)
	}
	if len(w.decisionsOf("conflict")) != 1 || r.Status().ClaimConflicts != 1 {
		t.Fatalf("decisions %+v, status %+v: the conflict must be recorded and counted", w.decisionsOf("conflict"), r.Status())
	}
	if st := r.Status(); len(st.ClaimConflictNodes) != 1 || st.ClaimConflictNodes[0] != "n1" {
		t.Fatalf("status names %v, want n1 while both sides claim it", st.ClaimConflictNodes)
	}
	if !w.k8s.released["n1"] || w.yarn.released["n1"] {
		t.Fatalf("k8s released %v, yarn released %v: cordon Kubernetes only", w.k8s.released, w.yarn.released)
	}
	w.ticks(r, 1, 5*time.Second)
	if st := r.Status(); st.ClaimConflicts != 1 || len(st.ClaimConflictNodes) != 0 {
		t.Fatalf("status %+v: the conflict must be resolved after the cordon and no node named", st)
	}
}

// TestRuntimeScaleDownReleasesEverySide: both sides hold the node; the
// scale-down drains both before terminating.
func TestRuntimeScaleDownReleasesEverySide(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.yarn, "n1")
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.k8s.released["n1"] = true // cordoned on Kubernetes, but a pod still runs
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "late", Name: "default/late", CheckpointAge: -1}}
	w.k8s.drainBlocked = true
	r := w.runtime()
	w.tick(r)
	if _, err := w.ledger.InsertOp(context.Background(), broker.Op{Kind: broker.ActScaleDown, Pool: rtPool, Node: "n1", Reason: "test",
		State: broker.OpPending, Step: broker.StepRelease, Data: []byte(`{"from":"yarn"}`)}); err != nil {
		t.Fatal(err)
	}
	w.ticks(r, 3, 5*time.Second)
	if len(w.cloud.terminated) != 0 {
		t.Fatalf("terminated %v while a Kubernetes pod still runs on the node", w.cloud.terminated)
	}
	w.k8s.drainBlocked = false
	w.ticks(r, 2, 5*time.Second)
	if w.k8s.releases["n1"] == 0 || w.yarn.releases["n1"] == 0 || fmt.Sprint(w.cloud.terminated) != "[i-n1]" {
		t.Fatalf("releases k8s %d yarn %d, terminated %v: want both released, then terminated",
			w.k8s.releases["n1"], w.yarn.releases["n1"], w.cloud.terminated)
	}
}

// rtAdmitSide is a side whose Admit takes effect only when ready says so
// (a NodeManager that must restart and re-register).
type rtAdmitSide struct {
	*rtSide
	ready bool
}

func (s *rtAdmitSide) Admitted(_ context.Context, node string) (bool, string, error) {
	if s.ready {
		return true, "", nil
	}
	return false, "host " + node + " is not RUNNING in the ResourceManager", nil
}

func admitWorld(t *testing.T) (*rtWorld, *rtAdmitSide, *Runtime) {
	w := newRTWorld(t, 1)
	w.machine(w.k8s, "n1")
	ys := &rtAdmitSide{rtSide: w.yarn}
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{ys, w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.tick(r)
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	w.ticks(r, 1, time.Second)
	return w, ys, r
}

// TestRuntimeHandOverWaitsUntilAdmitted: the hand-over to YARN stays open
// (and its demand linked) until YARN lists the node schedulable.
func TestRuntimeHandOverWaitsUntilAdmitted(t *testing.T) {
	w, ys, r := admitWorld(t)
	w.ticks(r, 3, 10*time.Second)
	ops := w.ledger.opsOf(broker.ActTransfer)
	if len(ops) != 1 || ops[0].State.Terminal() || ops[0].Step != broker.StepAwaitAdmitted {
		t.Fatalf("transfer %+v: want open in %s", ops, broker.StepAwaitAdmitted)
	}
	ys.ready = true
	w.ticks(r, 1, 10*time.Second)
	if ops := w.ledger.opsOf(broker.ActTransfer); ops[0].State != broker.OpDone {
		t.Fatalf("transfer %+v: want done once admitted", ops[0])
	}
}

// TestRuntimeHandOverNotAdmittedIsGivenBack: past the op's deadline the
// node goes back to Kubernetes and the op fails with the reason.
func TestRuntimeHandOverNotAdmittedIsGivenBack(t *testing.T) {
	w, _, r := admitWorld(t)
	for i := 0; i < 40 && !w.ledger.opsOf(broker.ActTransfer)[0].State.Terminal(); i++ {
		if n := len(w.ledger.opsOf(broker.ActTransfer)); n != 1 {
			t.Fatalf("%d hand-overs while the first is open", n)
		}
		w.ticks(r, 1, time.Minute)
	}
	ops := w.ledger.opsOf(broker.ActTransfer)
	if ops[0].State != broker.OpFailed || !strings.Contains(ops[0].LastError, "not RUNNING") {
		t.Fatalf("transfer %+v: want failed with YARN's word", ops[0])
	}
	if !slices.Contains(w.k8s.admitted, "n1") || !w.yarn.released["n1"] {
		t.Fatalf("k8s admitted %v, yarn released %v: want the node back on Kubernetes and cordoned on YARN", w.k8s.admitted, w.yarn.released)
	}
}

// TestRuntimeNoActionsNoTransfer: YARN has no actions configured (no admin
// address or exclude file): its demand does not take a Kubernetes node,
// which would be cordoned for a side that can never admit it.
func TestRuntimeNoActionsNoTransfer(t *testing.T) {
	w := newRTWorld(t, 1)
	w.machine(w.k8s, "n1")
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.tick(r)
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	rep := w.tick(r)
	if ops := w.ledger.opsOf(broker.ActTransfer); len(ops) != 0 || w.k8s.released["n1"] {
		t.Fatalf("transfer %+v to a side without actions", ops)
	}
	if len(rep.Plan.Waits) != 1 || !strings.Contains(rep.Plan.Waits[0].Detail, "ownership transfer is off") {
		t.Fatalf("waits %+v: want the reason", rep.Plan.Waits)
	}
}

// TestRuntimeEveryOpHasADeadline: every journaled op carries its deadline
// in its step data.
func TestRuntimeEveryOpHasADeadline(t *testing.T) {
	w, _ := blockedDrain(t)
	r := w.runtime()
	w.k8s.submit(trainingPod("big", 8, 0)) // unsatisfiable: no op
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	w.ticks(r, 1, time.Second)
	if len(w.ledger.ops) < 2 {
		t.Fatalf("ops %+v", w.ledger.ops)
	}
	for _, o := range w.ledger.ops {
		d := broker.OpDataOf(&o)
		if d.Expires.IsZero() || !d.Expires.After(o.CreatedAt) {
			t.Errorf("op %d (%s) has no deadline: %s", o.ID, o.Kind, o.Data)
		}
	}
}

// TestRuntimeScaleUpSupersedesOneAwaitingGPUReady: a scale-up that only
// waits for its machines to become gpu-ready does not hold the pool's
// scale-up slot: new demand's scale-up takes over, and keeps the first
// demand linked.
func TestRuntimeScaleUpSupersedesOneAwaitingGPUReady(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.submit(trainingPod("p1", 4, 0))
	r := w.runtime()
	w.tick(r)
	w.k8s.submit(trainingPod("p2", 4, 0))
	w.ticks(r, 1, 5*time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 2 || ups[0].State != broker.OpDone || ups[1].Target != 2 || ups[1].State.Terminal() {
		t.Fatalf("scale-ups %+v: want the first superseded by one to 2", ups)
	}
	if fmt.Sprint(ups[1].Serves) != "[k8s/p1 k8s/p2]" {
		t.Fatalf("the new scale-up serves %v, want both pods", ups[1].Serves)
	}
	if fmt.Sprint(w.cloud.setCalls) != "[1 2]" {
		t.Fatalf("SetDesired %v", w.cloud.setCalls)
	}
}

// TestRuntimeMissingGroupIsStale: a configured group the cloud does not
// return is stale with its last-known size, not dropped from the count.
func TestRuntimeMissingGroupIsStale(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "n1")
	r := w.runtime()
	w.tick(r)
	delete(w.cloud.pools, rtPool)
	rep := w.tick(r)
	ps, ok := findPool(rep.Snapshot.Pools, rtPool)
	if !ok || ps.Stale != "group not found at the cloud provider" || ps.Desired != 1 || len(ps.Instances) != 1 {
		t.Fatalf("pool %+v: want stale with its last-known desired capacity and instance", ps)
	}
}

// TestRuntimeScaleUpHandsBackWhatDidNotLaunch: the group cannot launch the
// node a scale-up asked for (insufficient capacity) and backs off. The
// scale-up hands the unlaunched order back and ends failed, saying why, so
// the provider's retries cannot buy a second machine for a demand that is
// planned again elsewhere (test/chaos, seed 3: two open scale-ups serving
// one demand, and three machines for two pods).
func TestRuntimeScaleUpHandsBackWhatDidNotLaunch(t *testing.T) {
	w := newRTWorld(t, 5)
	w.cloud.launchLater = true
	w.cloud.now = w.clock.Now
	w.k8s.submit(trainingPod("p", 2, 0))
	r := w.runtime()
	w.ticks(r, 2, 2*time.Second)
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 || ups[0].State.Terminal() || len(w.cloud.setCalls) != 1 {
		t.Fatalf("scale-ups %+v, SetDesired %v: want one open scale-up waiting for its launch", ups, w.cloud.setCalls)
	}
	w.cloud.backoffUntil = map[string]time.Time{rtPool: w.clock.Now().Add(5 * time.Minute)}
	w.ticks(r, 2, 2*time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].State != broker.OpFailed || !strings.Contains(ups[0].LastError, "handed back from 1 to 0") {
		t.Fatalf("scale-ups %+v: want the one scale-up failed, its unlaunched node handed back", ups)
	}
	if got := w.cloud.setCalls; len(got) != 2 || got[1] != 0 {
		t.Fatalf("SetDesired %v: want the raise to 1, then the hand-back to 0", got)
	}
	// The backoff ends, the group's launch would have come now: nothing
	// is left ordered, and the pod's next scale-up is its only one.
	w.clock.Add(5 * time.Minute)
	w.cloud.launch(rtPool)
	if ps, _ := w.cloud.Pools(context.Background()); ps[0].InService() != 0 {
		t.Fatalf("pool %+v: a machine launched for the order handed back", ps[0])
	}
	w.ticks(r, 1, 2*time.Second)
	open := 0
	for _, op := range w.ledger.opsOf(broker.ActScaleUp) {
		if !op.State.Terminal() {
			open++
		}
	}
	if open != 1 {
		t.Fatalf("scale-ups %+v: want exactly one open after the backoff", w.ledger.opsOf(broker.ActScaleUp))
	}
}

// TestRuntimeHandBackKeepsLaunchedMachinesAndNeedsAFreshPool: the hand-back
// lowers the desired capacity only by the machines that never launched —
// never below the machines that exist (a lower desired capacity makes the
// group terminate one) — and never on a pool the cloud cannot show now
// (stale: whether the order launched is unknown).
func TestRuntimeHandBackKeepsLaunchedMachinesAndNeedsAFreshPool(t *testing.T) {
	w := newRTWorld(t, 5)
	w.cloud.launchLater = true
	w.cloud.now = w.clock.Now
	w.k8s.submit(trainingPod("p1", 4, 0))
	w.k8s.submit(trainingPod("p2", 4, 0))
	r := w.runtime()
	w.ticks(r, 2, 2*time.Second)
	if got := w.cloud.setCalls; len(got) != 1 || got[0] != 2 {
		t.Fatalf("SetDesired %v: want one scale-up to 2 nodes", got)
	}
	// One of the two machines launches, then the group backs off; the
	// cloud cannot be read for a while.
	w.cloud.mu.Lock()
	p := w.cloud.pools[rtPool]
	p.Instances = append(p.Instances, broker.Instance{ID: "i-1", Hostname: "node-i-1", Phase: broker.PhaseBooting})
	w.cloud.stale = map[string]string{rtPool: "describe failed"}
	w.cloud.staleWithLast = true
	w.cloud.mu.Unlock()
	w.cloud.backoffUntil = map[string]time.Time{rtPool: w.clock.Now().Add(5 * time.Minute)}
	w.ticks(r, 2, 2*time.Second)
	if got := w.cloud.setCalls; len(got) != 1 {
		t.Fatalf("SetDesired %v on a stale pool: nothing may be handed back while the pool is unknown", got)
	}
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 || ups[0].State.Terminal() {
		t.Fatalf("scale-ups %+v: want the one still open while the pool is stale", ups)
	}
	w.cloud.mu.Lock()
	w.cloud.stale = nil
	w.cloud.mu.Unlock()
	w.ticks(r, 2, 2*time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].State != broker.OpFailed || !strings.Contains(ups[0].LastError, "handed back from 2 to 1") {
		t.Fatalf("scale-ups %+v: want it failed, handing back only the machine that did not launch", ups)
	}
	if got := w.cloud.setCalls; len(got) != 2 || got[1] != 1 || len(w.cloud.terminated) != 0 {
		t.Fatalf("SetDesired %v, terminated %v: want the hand-back to 1 (the machine that exists), none terminated", got, w.cloud.terminated)
	}
}

// strandedWorld has one node n1 that Kubernetes released (the broker's
// cordon) and no op holds: owned by nobody, drained since t0.
func strandedWorld(t *testing.T) (*rtWorld, *Runtime) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "n1")
	w.k8s.mu.Lock()
	w.k8s.released["n1"] = true
	n := w.k8s.nodes["n1"]
	n.Phase, n.PhaseSince = broker.PhaseDrained, t0
	w.k8s.mu.Unlock()
	return w, w.runtime()
}

// TestRuntimeStrandedNodeIsTerminated: a node the broker left cordoned
// and owned by nobody (an op ended without giving it back) is not paid
// for forever: once unneeded it is scaled down and its instance
// terminated, with no side asked to release work it does not run.
func TestRuntimeStrandedNodeIsTerminated(t *testing.T) {
	w, r := strandedWorld(t)
	w.ticks(r, 2, time.Second)
	if len(w.cloud.terminated) != 0 {
		t.Fatalf("terminated %v before the unneeded time", w.cloud.terminated)
	}
	w.ticks(r, 6, 5*time.Minute)
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].Node != "n1" || downs[0].State != broker.OpDone || fmt.Sprint(w.cloud.terminated) != "[i-n1]" {
		t.Fatalf("scale-downs %+v, terminated %v: want n1 scaled down and terminated", downs, w.cloud.terminated)
	}
}

// TestRuntimeStrandedNodeServesPendingDemand: a node the broker left
// cordoned on both sides (no op holds it, it runs nothing) is handed to
// pending YARN demand once settled, instead of a purchase: the transfer
// releases nothing (no side holds it) and YARN admits it.
func TestRuntimeStrandedNodeServesPendingDemand(t *testing.T) {
	w, r := strandedWorld(t)
	w.ticks(r, 3, 40*time.Second) // settled, not yet unneeded
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	for i := 0; i < 4 && len(w.ledger.opsOf(broker.ActTransfer)) == 0; i++ {
		w.ticks(r, 1, 10*time.Second)
	}
	// The NodeManager registers once admitted; the demand runs there.
	w.yarn.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.ticks(r, 3, 10*time.Second)
	xs := w.ledger.opsOf(broker.ActTransfer)
	if len(xs) != 1 || xs[0].Node != "n1" || xs[0].To != broker.OwnerYARN || xs[0].State != broker.OpDone {
		t.Fatalf("transfers %+v: want n1 handed to yarn", xs)
	}
	if !slices.Contains(w.yarn.admitted, "n1") || w.k8s.releases["n1"] != 0 {
		t.Fatalf("yarn admitted %v, k8s releases of n1 %d: want n1 admitted to yarn and nothing drained", w.yarn.admitted, w.k8s.releases["n1"])
	}
	if ups, downs := w.ledger.opsOf(broker.ActScaleUp), w.ledger.opsOf(broker.ActScaleDown); len(ups) != 0 || len(downs) != 0 || len(w.cloud.terminated) != 0 {
		t.Fatalf("scale-ups %+v, scale-downs %+v, terminated %v: want none", ups, downs, w.cloud.terminated)
	}
}
