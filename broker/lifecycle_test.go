package broker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Planner cases for the lifecycle and executor safety rules (issue 13).

func isDown(why string, since time.Duration) func(*Node) {
	return func(n *Node) { n.Down, n.DownSince = why, t0.Add(-since) }
}

func schedReason(r string) func(*Demand) { return func(d *Demand) { d.SchedulerReason = r } }

func capacitySince(id string, ago time.Duration) func(*Snapshot) {
	return func(s *Snapshot) {
		if s.CapacityPresentSince == nil {
			s.CapacityPresentSince = map[string]time.Time{}
		}
		s.CapacityPresentSince[id] = t0.Add(-ago)
	}
}

func noActionsFor(src Source) func(*Snapshot) {
	return func(s *Snapshot) { s.NoActions = map[Source]string{src: "no actions configured for " + string(src)} }
}

func staleAt(why string) func(*PoolState) { return func(p *PoolState) { p.Stale = why } }

// opWith is an in-flight op with step data.
func opWith(id int64, kind ActionKind, pool, node, step string, data OpData) Op {
	raw, _ := json.Marshal(data)
	return Op{ID: id, Kind: kind, Pool: pool, Node: node, State: OpRunning, Step: step, Data: raw}
}

func cancelSD(pool, node string, to Owner, serves ...string) Action {
	return Action{Kind: ActCancelScaleDown, Pool: pool, Node: node, To: to, Serves: serves}
}

func TestPlanDeadNodeIsNotInFlight(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			name: "a NotReady node absorbs no demand: the pool buys a node",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, isDown("kubelet stopped posting node status", time.Minute))},
				[]Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name: "a LOST NodeManager in a registered phase does not back its pool off",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, phase(PhaseRegistered, 20*time.Minute), isDown("NodeManager LOST", time.Minute))},
				[]Demand{yarnApp("application_1_0001/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/application_1_0001/1")},
		},
		{
			name: "a node down past the unhealthy node timeout is replaced",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, isDown("kubelet stopped posting node status", 11*time.Minute))}, nil),
			policy:  refPolicy(),
			actions: []Action{replace(gtg, "n1", OwnerK8s)},
		},
		{
			name: "a down node within the timeout is neither replaced nor scaled down",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, underused(time.Hour), isDown("kubelet stopped posting node status", 5*time.Minute))}, nil),
			policy: refPolicy(),
		},
		{
			name: "a down node on a stale side is not replaced",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, isDown("kubelet stopped posting node status", time.Hour))}, nil, stale(SourceK8s)),
			policy: refPolicy(),
		},
		{
			name: "an instance that never registers at pool min is replaced, not scaled below min",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(1, 5))},
				[]Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, 20*time.Minute))}, nil),
			policy:  refPolicy(),
			actions: []Action{replace(gtg, "n1", OwnerNone)},
		},
		{
			name: "an instance that never registers is not removed while a side is stale",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, 20*time.Minute))}, nil, stale(SourceYARN)),
			policy: refPolicy(),
		},
	})
}

func TestPlanReplaceAtPoolMinDoesNotRestoreMinBehindIt(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			// Today's planner counted the replacement as a removal and
			// planned a scale-up to restore the minimum, which waited
			// behind a terminate the cloud refuses below min.
			name: "an open replacement keeps the pool at its size",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(1, 5))},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, unhealthy("XID 79"))}, nil,
				inflight(opWith(1, ActReplace, gtg, "n1", StepRelease, OpData{From: OwnerK8s}))),
			policy: refPolicy(),
		},
		{
			name: "a replacement that surged counts its decrement to come",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(1, 5))},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, unhealthy("XID 79")),
					gpuNode("n2", gtg, OwnerNone, 4, 0, phase(PhaseBooting, time.Minute))},
				[]Demand{pod("p")},
				inflight(opWith(1, ActReplace, gtg, "n1", StepTerminate, OpData{From: OwnerK8s, SurgeTo: 2}))),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitInFlight)},
		},
	})
}

func TestPlanCapacityPresentButNotScheduling(t *testing.T) {
	why := "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity"
	idle := gpuNode("n1", gtg, OwnerK8s, 4, 0, underused(time.Hour))
	runPlanCases(t, []planCase{
		{
			name: "within the placement grace the demand keeps its node",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{idle}, []Demand{pod("p", schedReason(why))},
				capacitySince("k8s/p", time.Minute)),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitScheduler)},
		},
		{
			name: "past the grace it is recorded as not scheduling and the node is reclaimed",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{idle}, []Demand{pod("p", schedReason(why))},
				capacitySince("k8s/p", 4*time.Minute)),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "n1", OwnerK8s)},
			waits:   []Wait{wait("k8s/p", WaitNotScheduling)},
		},
		{
			name: "demand that does not schedule buys nothing",
			snap: snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{pod("p", schedReason(why))},
				capacitySince("k8s/p", time.Hour)),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitNotScheduling)},
		},
	})
	p := MakePlan(snap([]PoolState{gpuPool(gtg, 1)}, []Node{idle}, []Demand{pod("p", schedReason(why))},
		capacitySince("k8s/p", 4*time.Minute)), refPolicy())
	if len(p.Waits) != 1 || !strings.HasPrefix(p.Waits[0].Detail, "capacity present but not scheduling: "+why) {
		t.Fatalf("wait %+v, want the scheduler's reason", p.Waits)
	}
}

func TestPlanStalePool(t *testing.T) {
	a100 := func(name string, alloc int, opts ...func(*Node)) Node {
		return gpuNode(name, "stale-pool", OwnerK8s, 4, alloc, opts...)
	}
	h100 := func(p *PoolState) { p.Pool.GPUModel = "H100" }
	runPlanCases(t, []planCase{{
		// The stale pool's 8 GPUs still count against the cluster max of
		// 12: the fresh pool grows by one node only. Nothing happens to
		// the stale pool: no scale-down of its idle node, no growth to
		// its minimum.
		name: "a stale pool is left alone and still counts; the others act",
		snap: snap([]PoolState{
			gpuPool("stale-pool", 2, bounds(3, 5), staleAt("describe group stale-pool: throttled")),
			gpuPool("fresh-pool", 0, h100),
		}, []Node{a100("s1", 4), a100("s2", 0, underused(time.Hour))},
			[]Demand{pod("p1", perUnit(4), models("H100")), pod("p2", perUnit(4), models("H100"), seen(30*time.Second))}),
		policy: refPolicy(noPreemption, func(p *Policy) { p.ClusterMaxGPUs = 12 }),
		actions: []Action{
			up("fresh-pool", 1, "k8s/p1"),
		},
		waits: []Wait{wait("k8s/p2", WaitPriority)},
	}})
}

func TestPlanNoPreemptDemandNeverPreempts(t *testing.T) {
	full := gpuNode("n1", gtg, OwnerK8s, 4, 0, work(job("low", 4, 0, true)))
	runPlanCases(t, []planCase{
		{
			name:    "preemptionPolicy PreemptLowerPriority preempts",
			snap:    snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{full}, []Demand{pod("p", prio(1000), perUnit(4))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("low", 4, 0, true)}, "k8s/p")},
		},
		{
			name:   "preemptionPolicy Never does not",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{full}, []Demand{pod("p", prio(1000), perUnit(4), noPreempt)}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitNoPreemptible)},
		},
	})
}

func TestPlanPendingScaleDownIsCancelledForNewDemand(t *testing.T) {
	draining := gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDraining, time.Minute))
	runPlanCases(t, []planCase{
		{
			name: "demand that fits a node still draining for a scale-down takes it back instead of buying",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{draining}, []Demand{pod("p")},
				inflight(opWith(1, ActScaleDown, gtg, "n1", StepRelease, OpData{From: OwnerK8s}))),
			policy:  refPolicy(),
			actions: []Action{cancelSD(gtg, "n1", OwnerK8s, "k8s/p")},
		},
		{
			name: "a scale-down that reached the cloud is not cancelled",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{draining}, []Demand{pod("p")},
				inflight(opWith(1, ActScaleDown, gtg, "n1", StepTerminate, OpData{From: OwnerK8s}))),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p")},
		},
		{
			name: "demand of the other side does not cancel it",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{draining}, []Demand{yarnApp("application_1_0001/1", 1, 2)},
				inflight(opWith(1, ActScaleDown, gtg, "n1", StepRelease, OpData{From: OwnerK8s}))),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "yarn/application_1_0001/1")},
		},
	})
}

// TestPlanMigrationYieldsToLatencySensitiveDemand: a migration still
// waiting in its evict step for its tasks' checkpoints holds a cordoned
// node, half used, with free GPUs. Demand that may not be preempted (LS,
// Guaranteed) and fills the node past the underused threshold takes it
// back rather than wait for a boot; demand that would leave it underused,
// batch demand, and a migration past its evict step do not.
func TestPlanMigrationYieldsToLatencySensitiveDemand(t *testing.T) {
	migrating := gpuNode("n1", gtg, OwnerK8s, 4, 1, phase(PhaseDraining, time.Minute))
	evicting := opWith(1, ActMigrate, gtg, "n1", StepEvict, OpData{From: OwnerK8s})
	runPlanCases(t, []planCase{
		{
			name:    "LS demand that fits the migrating node cancels the migration instead of buying",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{migrating}, []Demand{pod("p")}, inflight(evicting)),
			policy:  refPolicy(),
			actions: []Action{cancelSD(gtg, "n1", OwnerK8s, "k8s/p")},
		},
		{
			name:    "LS demand that leaves the node underused waits for a node of its own",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{migrating}, []Demand{pod("p", perUnit(1))}, inflight(evicting)),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p")},
		},
		{
			name: "batch demand waits for a node of its own",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{migrating},
				[]Demand{pod("p", func(d *Demand) { d.Preemptible = true })}, inflight(evicting)),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p")},
		},
		{
			name: "a migration whose node is released already is not cancelled",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{migrating}, []Demand{pod("p")},
				inflight(opWith(1, ActMigrate, gtg, "n1", StepRelease, OpData{From: OwnerK8s}))),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p")},
		},
	})
}

func TestPlanTransferOffForASideWithoutActions(t *testing.T) {
	idleYARN := gpuNode("y1", gtg, OwnerYARN, 4, 0)
	c := planCase{
		name:   "no YARN actions: the idle YARN node is not handed to Kubernetes",
		snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{idleYARN}, []Demand{pod("p")}, noActionsFor(SourceYARN)),
		policy: refPolicy(noPreemption),
		waits:  []Wait{wait("k8s/p", WaitPoolMax)},
	}
	runPlanCases(t, []planCase{c})
	p := MakePlan(c.snap, c.policy)
	if len(p.Waits) != 1 || !strings.Contains(p.Waits[0].Detail, "ownership transfer is off because a side has no actions configured") {
		t.Fatalf("waits %+v: the detail must say why no transfer", p.Waits)
	}
}
