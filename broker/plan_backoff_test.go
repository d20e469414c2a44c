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
