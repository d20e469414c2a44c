package broker

import (
	"testing"
	"time"
)

// TestPlanNodeOnItsWayServesOneSide: a node on its way serves one side
// (each side schedules on its own nodes), so the GPUs that one side's
// demand leaves on it are no capacity for the other side's: counting them
// for both let demand of both sides wait on one node, and when it came up
// one side's demand bought again while the scale-up that ordered the node
// still served it (test/chaos, seed 8). Demand of one side shares it; the
// demand a scale-up ordered it for claims it first, also after it
// registered with the other side (it is handed over once ready).
func TestPlanNodeOnItsWayServesOneSide(t *testing.T) {
	booting := gpuNode("n1", gtg, OwnerNone, 0, 0, phase(PhaseBooting, time.Minute))
	registered := gpuNode("n1", gtg, OwnerK8s, 0, 0, phase(PhaseRegistered, time.Minute))
	order := inflight(Op{ID: 7, Kind: ActScaleUp, Pool: gtg, Target: 1, Step: StepAwaitReady, Serves: []string{"yarn/a"}, State: OpRunning})
	runPlanCases(t, []planCase{
		{
			name:    "the GPUs YARN demand leaves on a booting node are none for a pod",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting}, []Demand{yarnApp("a", 1, 1, seen(2*time.Minute)), pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
		{
			name:   "demand of one side shares a booting node",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting}, []Demand{yarnApp("a", 1, 1, seen(2*time.Minute)), yarnApp("b", 1, 2)}),
			policy: refPolicy(),
			waits:  []Wait{wait("yarn/a", WaitInFlight), wait("yarn/b", WaitInFlight)},
		},
		{
			name: "the node ordered for YARN demand is none for an older, higher-priority pod",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting},
				[]Demand{yarnApp("a", 1, 1), pod("p", prio(100), seen(5*time.Minute))}, order),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
		{
			name: "ordered for YARN demand and registered with Kubernetes: it counts for YARN alone",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{registered},
				[]Demand{yarnApp("a", 1, 1), pod("p", prio(100), seen(5*time.Minute))}, order),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
	})
}

// TestPlanNodeOnItsWayBestFit: demand counts on the node on its way that
// fits it best across all pools, not on the first pool's: a plan then
// does not bind a larger node to one side while a smaller one fits, which
// would buy for the other side's demand that only the larger fits (and
// change the plan whenever another node is ordered; replay's
// TestEventTickingMatchesPeriodicTicking found that).
func TestPlanNodeOnItsWayBestFit(t *testing.T) {
	two := gpuPool("gpu-a", 1, gpus(2))
	one := gpuPool("gpu-b", 1, gpus(1))
	nodes := []Node{
		gpuNode("a1", "gpu-a", OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
		gpuNode("b1", "gpu-b", OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
	}
	runPlanCases(t, []planCase{{
		name:   "the one-GPU YARN unit waits on the one-GPU node, the two-GPU pod on the two-GPU node",
		snap:   snap([]PoolState{two, one}, nodes, []Demand{yarnApp("y", 1, 1, seen(2*time.Minute)), pod("k")}),
		policy: refPolicy(),
		waits:  []Wait{wait("k8s/k", WaitInFlight), wait("yarn/y", WaitInFlight)},
	}, {
		// YARN fills two of three booting nodes, each unit on the fullest
		// node that fits it, and leaves the third whole for the pod.
		name: "within a pool, on the fullest node that fits",
		snap: snap([]PoolState{gpuPool(gtg, 3)},
			[]Node{
				gpuNode("n1", gtg, OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
				gpuNode("n2", gtg, OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
				gpuNode("n3", gtg, OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
			},
			[]Demand{
				yarnApp("a", 1, 2, seen(5*time.Minute)), yarnApp("b", 1, 3, seen(4*time.Minute)),
				yarnApp("c", 1, 1, seen(3*time.Minute)), yarnApp("d", 1, 2, seen(2*time.Minute)),
				pod("e", perUnit(4)),
			}),
		policy: refPolicy(),
		waits: []Wait{wait("k8s/e", WaitInFlight), wait("yarn/a", WaitInFlight), wait("yarn/b", WaitInFlight),
			wait("yarn/c", WaitInFlight), wait("yarn/d", WaitInFlight)},
	}})
}

// TestPlanOrderedDemandBuysNowhereElse: demand that an open scale-up
// serves buys in no other pool while that op is open, so one demand is
// never served by two open scale-ups (test/chaos, seed 8: new machines
// join Kubernetes schedulable, pods took the node ordered for YARN demand
// before it was handed over, and the demand bought again in another pool
// while the op still served it). It waits for the op to end; it may still
// grow the op's own pool (the executor supersedes the op, which keeps
// serving it) and take an idle node of the other side.
func TestPlanOrderedDemandBuysNowhereElse(t *testing.T) {
	order := inflight(Op{ID: 7, Kind: ActScaleUp, Pool: "gpu-a", Target: 2, Step: StepAwaitReady,
		Serves: []string{"yarn/a", "yarn/b"}, State: OpRunning})
	nodes := []Node{
		// The first node up: Kubernetes pods took it.
		gpuNode("a1", "gpu-a", OwnerK8s, 4, 4),
		gpuNode("a2", "gpu-a", OwnerNone, 0, 0, phase(PhaseBooting, time.Minute)),
	}
	demand := []Demand{yarnApp("a", 1, 4, seen(2*time.Minute)), yarnApp("b", 1, 4)}
	runPlanCases(t, []planCase{
		{
			name:   "its pool is at max: it waits for the op, not buying in another pool",
			snap:   snap([]PoolState{gpuPool("gpu-a", 2, bounds(0, 2)), gpuPool("gpu-b", 0)}, nodes, demand, order),
			policy: refPolicy(),
			waits:  []Wait{wait("yarn/a", WaitInFlight), wait("yarn/b", WaitInFlight)},
		},
		{
			name:    "it grows the op's pool, not the cheaper one",
			snap:    snap([]PoolState{gpuPool("gpu-a", 2, bounds(0, 3)), gpuPool("gpu-b", 0, price(5))}, nodes, demand, order),
			policy:  refPolicy(expander(ExpanderPrice)),
			actions: []Action{up("gpu-a", 3, "yarn/b")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
		{
			name: "an idle node of the other side still serves it",
			snap: snap([]PoolState{gpuPool("gpu-a", 2, bounds(0, 2)), gpuPool("gpu-b", 1)},
				append(nodes[:2:2], gpuNode("b1", "gpu-b", OwnerK8s, 4, 0)), demand, order),
			policy:  refPolicy(),
			actions: []Action{move("gpu-b", "b1", OwnerK8s, OwnerYARN, "yarn/b")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
		{
			name:    "demand no op serves buys where the expander says",
			snap:    snap([]PoolState{gpuPool("gpu-a", 2, bounds(0, 3)), gpuPool("gpu-b", 0, price(5))}, nodes, demand),
			policy:  refPolicy(expander(ExpanderPrice)),
			actions: []Action{up("gpu-b", 1, "yarn/b")},
			waits:   []Wait{wait("yarn/a", WaitInFlight)},
		},
	})
}
