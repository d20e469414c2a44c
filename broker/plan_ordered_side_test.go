package broker

import (
	"testing"
	"time"
)

// TestPlanOrderedNodeThatRegisteredWithTheOtherSide: every machine of a
// shared pool boots into one side (Kubernetes here) and is handed to the
// other once ready. A node that an in-flight scale-up ordered for YARN
// demand still serves that demand after it registered with Kubernetes (it
// is transferred once ready): buying another node for the demand would buy
// twice (found by test/chaos, seed 8: the second node idled and was scaled
// down). A node on its way that no op ordered for the demand, or that cannot be
// handed over, does not count for the other side.
func TestPlanOrderedNodeThatRegisteredWithTheOtherSide(t *testing.T) {
	booting := gpuNode("n1", gtg, OwnerK8s, 0, 0, phase(PhaseRegistered, time.Minute))
	order := inflight(Op{ID: 7, Kind: ActScaleUp, Pool: gtg, Target: 1, Step: StepAwaitReady, Serves: []string{"yarn/a"}, State: OpRunning})
	noXfer := refPolicy()
	noXfer.OwnershipTransfer = false
	runPlanCases(t, []planCase{
		{
			name:   "the ordered node serves the demand it was ordered for",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting}, []Demand{yarnApp("a", 1, 4)}, order),
			policy: refPolicy(),
			waits:  []Wait{wait("yarn/a", WaitInFlight)},
		},
		{
			name:    "not ordered for it: the node does not count",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting}, []Demand{yarnApp("a", 1, 4)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/a")},
		},
		{
			name:    "without ownership transfer the node cannot be handed over",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{booting}, []Demand{yarnApp("a", 1, 4)}, order),
			policy:  noXfer,
			actions: []Action{up(gtg, 2, "yarn/a")},
		},
	})
}
