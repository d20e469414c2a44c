package broker

// Capacity by side is one rule, used by the executor's capacity samples
// (the dashboard's time series) and by the API's capacity summary, so the
// two never disagree about what is busy, idle, in flight or pending.

// NodeGPUs is how one node counts in capacity by side.
type NodeGPUs struct {
	// Side is the side it counts for: its owner, or OwnerNone for a node
	// no side owns (in transfer, unregistered).
	Side Owner
	// InFlight is set for an ordered or booting node (PhaseRequested,
	// PhaseBooting, PhaseRegistered): Total counts as in flight, not as
	// busy or idle.
	InFlight bool
	// Total is the node's GPUs; an in-flight node that does not advertise
	// GPUs yet counts its pool's GPUs per node.
	Total int
	// Busy and Idle split Total for a node that is not in flight: GPUs
	// allocated to running work, and the rest.
	Busy, Idle int
}

// CountNodeGPUs reports how n counts in capacity by side, given its pool's
// GPUs per node (0 when the pool is unknown). It reports false for a node
// that counts nowhere: terminating, gone, or down (a down node is neither
// capacity nor capacity on its way).
func CountNodeGPUs(n *Node, gpusPerNode int) (NodeGPUs, bool) {
	if n.Phase == PhaseTerminating || n.Phase == PhaseGone || n.Down != "" {
		return NodeGPUs{}, false
	}
	c := NodeGPUs{Side: n.Owner, Total: n.GPUsTotal}
	if c.Side != OwnerYARN && c.Side != OwnerK8s {
		c.Side = OwnerNone
	}
	if n.Phase.InFlight() {
		c.InFlight = true
		if c.Total == 0 {
			c.Total = gpusPerNode
		}
		return c, true
	}
	c.Busy = min(max(n.GPUsAllocated, 0), c.Total)
	c.Idle = c.Total - c.Busy
	return c, true
}

// SideCapacity is the nodes and GPUs of one side, and the GPUs its pending
// demand asks for.
type SideCapacity struct {
	Side          Owner
	Nodes         int
	NodesInFlight int
	GPUsTotal     int
	GPUsBusy      int
	GPUsIdle      int
	GPUsInFlight  int
	// GPUsPending is the GPUs (units × GPUs per unit) of the side's
	// pending demand; none for OwnerNone.
	GPUsPending int
}

// CapacitySides is the order CapacityBySide reports sides in.
var CapacitySides = [3]Owner{OwnerYARN, OwnerK8s, OwnerNone}

// CapacityBySide sums nodes by the side they count for (CountNodeGPUs, with
// GPUs per node from pools) and pending demand by its source, for YARN,
// Kubernetes and none, in that order.
func CapacityBySide(nodes []Node, pools []Pool, pending []Demand) [3]SideCapacity {
	perNode := make(map[string]int, len(pools))
	for _, p := range pools {
		perNode[p.Name] = p.Units()
	}
	var out [3]SideCapacity
	at := map[Owner]*SideCapacity{}
	for i, o := range CapacitySides {
		out[i].Side = o
		at[o] = &out[i]
	}
	for i := range nodes {
		c, ok := CountNodeGPUs(&nodes[i], perNode[nodes[i].Pool])
		if !ok {
			continue
		}
		s := at[c.Side]
		s.Nodes++
		s.GPUsTotal += c.Total
		if c.InFlight {
			s.NodesInFlight++
			s.GPUsInFlight += c.Total
			continue
		}
		s.GPUsBusy += c.Busy
		s.GPUsIdle += c.Idle
	}
	for src, gpus := range PendingGPUs(pending) {
		if s := at[Owner(src)]; s != nil && s.Side != OwnerNone {
			s.GPUsPending += gpus
		}
	}
	return out
}

// PendingGPUs is the one rule for the GPUs pending demand asks for: the
// sum over the live demand of units × GPUs per unit (Demand.GPUs), whether
// a gang or not, by source. CapacityBySide (the executor's samples) uses
// it; the store's DemandSummary computes the same sum in SQL over the live
// ledger for the API's pending_gpus, and a store test on PostgreSQL
// (TestDemandSummaryIsPendingGPUs) holds the two to the same answer.
func PendingGPUs(demand []Demand) map[Source]int {
	out := map[Source]int{}
	for i := range demand {
		out[demand[i].Source] += demand[i].GPUs()
	}
	return out
}

// CapacitySamples is the snapshot's capacity by side as the samples the
// executor records each tick, one per side of CapacitySides.
func CapacitySamples(s *Snapshot) []CapacitySample {
	pools := make([]Pool, len(s.Pools))
	for i := range s.Pools {
		pools[i] = s.Pools[i].Pool
	}
	sides := CapacityBySide(s.Nodes, pools, s.Demand)
	out := make([]CapacitySample, len(sides))
	for i, c := range sides {
		out[i] = CapacitySample{At: s.Now, Side: string(c.Side), GPUsBusy: c.GPUsBusy, GPUsIdle: c.GPUsIdle,
			GPUsInFlight: c.GPUsInFlight, GPUsPending: c.GPUsPending}
	}
	return out
}
