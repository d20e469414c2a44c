package broker

import (
	"testing"
	"time"
)

// TestPlanQuotaCountsYARNWork: GPUs held by running YARN containers count
// in their tenant's usage exactly like Kubernetes pods: against its max,
// its guarantee and its weighted fair share, for demand from either side.
func TestPlanQuotaCountsYARNWork(t *testing.T) {
	// A YARN node whose 4 GPUs run containers of tenant ten.
	yarnFull := func(name, ten string) Node {
		return gpuNode(name, gtg, OwnerYARN, 4, 0, work(job(name+"-c1", 2, 0, false, yarnWork, wtenant(ten)),
			job(name+"-c2", 2, 0, false, yarnWork, wtenant(ten))))
	}
	one := []PoolState{gpuPool(gtg, 1, bounds(0, 2))}
	runPlanCases(t, []planCase{
		{
			name: "YARN containers count against the tenant's max for Kubernetes demand",
			snap: snap(one, []Node{yarnFull("n1", "research")}, []Demand{pod("p")},
				tenants(Tenant{Name: "research", MaxGPUs: 4})),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitQuota)},
		},
		{
			name: "YARN containers count against the tenant's max for YARN demand",
			snap: snap(one, []Node{yarnFull("n1", "research")}, []Demand{yarnApp("a/1", 1, 2)},
				tenants(Tenant{Name: "research", MaxGPUs: 5})),
			policy: refPolicy(),
			waits:  []Wait{wait("yarn/a/1", WaitQuota)},
		},
		{
			name: "below the max, the same demand is served",
			snap: snap(one, []Node{yarnFull("n1", "research")}, []Demand{yarnApp("a/1", 1, 2)},
				tenants(Tenant{Name: "research", MaxGPUs: 6})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/a/1")},
		},
		{
			name: "a guarantee used up by YARN containers gives no precedence",
			snap: snap(one, []Node{yarnFull("n1", "a")},
				[]Demand{pod("a", tenant("a"), perUnit(4)), pod("b", tenant("b"), prio(100), perUnit(4))},
				tenants(Tenant{Name: "a", GuaranteedGPUs: 4, MaxGPUs: 100}, Tenant{Name: "b", MaxGPUs: 100})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/b")},
			waits:   []Wait{wait("k8s/a", WaitPriority)},
		},
		{
			name: "fair share: the tenant whose YARN containers hold more waits",
			snap: snap(one, []Node{yarnFull("n1", "a")},
				[]Demand{pod("a", tenant("a"), perUnit(4), seen(time.Hour)), pod("b", tenant("b"), perUnit(4))},
				tenants(Tenant{Name: "a", MaxGPUs: 100}, Tenant{Name: "b", MaxGPUs: 100})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/b")},
			waits:   []Wait{wait("k8s/a", WaitPriority)},
		},
		{
			name: "fair share weighs YARN usage by the tenant's weight",
			snap: snap(one, []Node{yarnFull("n1", "a"), gpuNode("n2", gtg, OwnerYARN, 4, 0, work(job("bw", 2, 0, false, yarnWork, wtenant("b"))))},
				[]Demand{pod("a", tenant("a"), perUnit(4)), pod("b", tenant("b"), perUnit(4), seen(time.Hour))},
				tenants(Tenant{Name: "a", MaxGPUs: 100, Weight: 4}, Tenant{Name: "b", MaxGPUs: 100, Weight: 1})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/a")},
			waits:   []Wait{wait("k8s/b", WaitPriority)},
		},
	})
}
