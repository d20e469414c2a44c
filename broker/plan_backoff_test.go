package broker

import (
	"testing"
	"time"
)

// TestPlanBackoffDesiredIsNotOnItsWay: a pool whose launches fail keeps a
// desired capacity it cannot reach. Only machines that exist are capacity
// on their way; the rest must not make demand wait "in flight" for nodes
// that are not coming.
func TestPlanBackoffDesiredIsNotOnItsWay(t *testing.T) {
	booting := gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, time.Minute))
	runPlanCases(t, []planCase{
		{
			name:   "desired 2, no instance, launches failing: the pod waits for the backoff",
			snap:   snap([]PoolState{gpuPool(gtg, 2, backoffFor(5*time.Minute))}, nil, []Demand{pod("p1")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitBackoff)},
		},
		{
			name:   "desired 2, one instance booting: the machine that exists still counts",
			snap:   snap([]PoolState{gpuPool(gtg, 2, backoffFor(5*time.Minute))}, []Node{booting}, []Demand{pod("p1")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitInFlight)},
		},
		{
			name:   "without backoff the desired capacity is on its way",
			snap:   snap([]PoolState{gpuPool(gtg, 2)}, nil, []Demand{pod("p1")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitInFlight)},
		},
	})
}

// TestPlanBackoffScaleUpHandsBackBeforeBuyingElsewhere: a scale-up of a
// pool that then backs off still holds its order for the machines that
// did not launch, and the provider retries it. Its demand waits for the op
// to hand that order back instead of buying in another pool at once: both
// orders would be filled (found by test/chaos, seed 3).
func TestPlanBackoffScaleUpHandsBackBeforeBuyingElsewhere(t *testing.T) {
	up := Op{ID: 14, Kind: ActScaleUp, Pool: gtg, Target: 1, Step: StepAwaitReady, State: OpRunning, Serves: []string{"k8s/p1"}}
	other := gpuPool("gpu-b", 0)
	runPlanCases(t, []planCase{
		{
			name: "the scale-up's pool backs off with its node not launched: the pod waits for the hand-back",
			snap: snap([]PoolState{gpuPool(gtg, 1, backoffFor(5*time.Minute)), other}, nil, []Demand{pod("p1")},
				inflight(up)),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitInFlight)},
		},
		{
			name:    "once the op has ended, the pod buys in the pool that does not back off",
			snap:    snap([]PoolState{gpuPool(gtg, 0, backoffFor(5*time.Minute)), other}, nil, []Demand{pod("p1")}),
			policy:  refPolicy(),
			actions: []Action{{Kind: ActScaleUp, Pool: "gpu-b", Target: 1, Serves: []string{"k8s/p1"}}},
		},
		{
			name: "its machine exists (booting): it is capacity on its way, as before",
			snap: snap([]PoolState{gpuPool(gtg, 1, backoffFor(5*time.Minute)), other},
				[]Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, time.Minute))}, []Demand{pod("p1")},
				inflight(up)),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitInFlight)},
		},
	})
}
