package broker

import "testing"

// TestPlanPartitions: YARN node labels are exclusive partitions. Labelled
// demand is served only by nodes of its partition (as the RM reports a
// YARN node's, as its pool names a node's that would join YARN) and by
// pools whose NodeManagers join it; default demand only by the default
// partition. A node is never bought for, or moved into, a partition its
// demand does not use.
func TestPlanPartitions(t *testing.T) {
	const fp = "fast-pool"
	fast := func(p *PoolState) { p.Pool.Partition = "fast" }
	fastDemand := func(d *Demand) { d.Constraints.NodeLabel = "fast" }
	inFast := func(n *Node) { n.Partition = "fast" }
	runPlanCases(t, []planCase{
		{
			name: "each demand buys in the pool of its partition",
			snap: snap([]PoolState{gpuPool(fp, 0, fast), gpuPool(gtg, 0)}, nil,
				[]Demand{yarnApp("a/1", 1, 2, fastDemand), yarnApp("b/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(fp, 1, "yarn/a/1"), up(gtg, 1, "yarn/b/1")},
		},
		{
			name: "default demand is not moved onto a node that would join another partition",
			snap: snap([]PoolState{gpuPool(fp, 1, fast, bounds(0, 1)), gpuPool(gtg, 0, bounds(0, 1))},
				[]Node{gpuNode("n1", fp, OwnerK8s, 4, 0)}, []Demand{yarnApp("b/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "yarn/b/1")},
		},
		{
			name: "labelled demand takes an idle node whose pool joins its partition",
			snap: snap([]PoolState{gpuPool(fp, 1, fast, bounds(0, 1)), gpuPool(gtg, 0, bounds(0, 1))},
				[]Node{gpuNode("n1", fp, OwnerK8s, 4, 0)}, []Demand{yarnApp("a/1", 1, 2, fastDemand)}),
			policy:  refPolicy(),
			actions: []Action{move(fp, "n1", OwnerK8s, OwnerYARN, "yarn/a/1")},
		},
		{
			name: "labelled demand never takes a node bound for the default partition",
			snap: snap([]PoolState{gpuPool(fp, 0, fast, bounds(0, 1)), gpuPool(gtg, 1, bounds(0, 1))},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0)}, []Demand{yarnApp("a/1", 1, 2, fastDemand)}),
			policy:  refPolicy(),
			actions: []Action{up(fp, 1, "yarn/a/1")},
		},
		{
			name: "the RM's partition of a YARN node wins over its pool's",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(0, 2))},
				[]Node{gpuNode("n1", gtg, OwnerYARN, 4, 0, inFast)}, []Demand{yarnApp("a/1", 1, 2, fastDemand), yarnApp("b/1", 1, 2)}),
			policy: refPolicy(),
			// a/1 runs on n1's free GPUs in its partition; b/1 needs a
			// default-partition node.
			actions: []Action{up(gtg, 2, "yarn/b/1")},
			waits:   []Wait{wait("yarn/a/1", WaitScheduler)},
		},
		{
			name: "Kubernetes demand ignores partitions",
			snap: snap([]PoolState{gpuPool(fp, 1, fast, bounds(0, 1))},
				[]Node{gpuNode("n1", fp, OwnerK8s, 4, 0)}, []Demand{pod("p")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitScheduler)},
		},
	})
}
