package broker

import (
	"strings"
	"testing"
	"time"
)

// fleetPool is a fleet pool of size owned hosts, 4 GPUs each, as package
// fleet reports it: its min, max and desired capacity are the hosts present.
func fleetPool(name string, size int) PoolState {
	ps := gpuPool(name, size, bounds(size, size))
	ps.Pool.Provider, ps.Pool.Group = ProviderFleet, ""
	return ps
}

// TestFleetPools: a fleet of owned hosts is shared by hand-overs and never
// bought, shrunk or terminated; a cloud pool beside it bursts only when no
// host of the fleet can be handed over; a faulty host is cordoned and
// reported, a dead one reported.
func TestFleetPools(t *testing.T) {
	const fl, burst = "fleet", "burst"
	idleK8s := gpuNode("h1", fl, OwnerK8s, 4, 0, underused(time.Hour))
	busyK8s := gpuNode("h2", fl, OwnerK8s, 4, 4)
	busyYARN := gpuNode("h3", fl, OwnerYARN, 4, 4)
	runPlanCases(t, []planCase{
		{
			name: "YARN demand takes the fleet's idle Kubernetes host",
			snap: snap([]PoolState{fleetPool(fl, 3)}, []Node{idleK8s, busyK8s, busyYARN},
				[]Demand{yarnApp("app1", 1, 4)}),
			policy:  refPolicy(),
			actions: []Action{move(fl, "h1", OwnerK8s, OwnerYARN, "yarn/app1")},
		},
		{
			name:   "an idle host of the fleet is never scaled down",
			snap:   snap([]PoolState{fleetPool(fl, 3)}, []Node{idleK8s, busyK8s, busyYARN}, nil),
			policy: refPolicy(),
		},
		{
			name: "the fleet full: the cloud pool beside it bursts",
			snap: snap([]PoolState{fleetPool(fl, 2), gpuPool(burst, 0)}, []Node{busyK8s, busyYARN},
				[]Demand{yarnApp("app1", 1, 4)}),
			policy:  refPolicy(noPreemption),
			actions: []Action{up(burst, 1, "yarn/app1")},
		},
		{
			name: "the fleet full and no cloud: the demand waits for a hand-over",
			snap: snap([]PoolState{fleetPool(fl, 2)}, []Node{busyK8s, busyYARN},
				[]Demand{yarnApp("app1", 1, 4, notGang)}),
			policy: refPolicy(noPreemption),
			waits:  []Wait{wait("yarn/app1", WaitPoolMax)},
		},
		{
			name: "a faulty host is cordoned, its work left to end",
			snap: snap([]PoolState{fleetPool(fl, 3)},
				[]Node{idleK8s, gpuNode("h2", fl, OwnerK8s, 4, 4, unhealthy("XID 79")), busyYARN}, nil),
			policy:  refPolicy(),
			actions: []Action{{Kind: ActTransfer, Pool: fl, Node: "h2", From: OwnerK8s, To: OwnerNone, CordonOnly: true}},
		},
		{
			name: "a dead host is reported, never replaced",
			snap: snap([]PoolState{fleetPool(fl, 3)},
				[]Node{idleK8s, busyK8s, gpuNode("h3", fl, OwnerYARN, 4, 0, func(n *Node) {
					n.Down, n.DownSince = "LOST", t0.Add(-time.Hour)
				})}, nil),
			policy: refPolicy(),
		},
	})

	p := MakePlan(snap([]PoolState{fleetPool(fl, 2)}, []Node{busyK8s, busyYARN}, []Demand{yarnApp("app1", 1, 4, notGang)}), refPolicy(noPreemption))
	if len(p.Waits) != 1 || !strings.Contains(p.Waits[0].Detail, "waiting for a node of the fleet to be handed over") {
		t.Errorf("waits %+v: the detail must say the demand waits for a hand-over", p.Waits)
	}
	p = MakePlan(snap([]PoolState{fleetPool(fl, 3)}, []Node{idleK8s, busyK8s, gpuNode("h3", fl, OwnerYARN, 4, 0, func(n *Node) {
		n.Down, n.DownSince = "LOST", t0.Add(-time.Hour)
	})}, nil), refPolicy())
	found := false
	for _, k := range p.Kept {
		found = found || k.Node == "h3" && strings.Contains(k.Reason, "fleet has no cloud to replace it")
	}
	if !found {
		t.Errorf("kept %+v: the dead host must be reported", p.Kept)
	}
}
