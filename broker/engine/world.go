package engine

// Look-ups into the world the runtime last observed: who owns a node,
// which sides hold it, its instance, whether it is down, a pool's
// machines in flight.

import (
	"slices"

	"github.com/gpubroker/gpubroker/broker"
)

// ownerOf finds the side to drain node from in the last good
// observations: the side that owns it, else a side that lists it at all (a
// node cordoned there still runs that side's work), else OwnerNone.
func (r *Runtime) ownerOf(node string) broker.Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed := broker.OwnerNone
	for _, src := range broker.Sources {
		for _, n := range r.seen.lastGood[src].Nodes {
			if n.Name != node {
				continue
			}
			if n.Owner != broker.OwnerNone {
				return n.Owner
			}
			if listed == broker.OwnerNone {
				listed = broker.Owner(src)
			}
		}
	}
	return listed
}

// sidesOf lists every side whose last good observation lists node, from
// first: a removal releases all of them before the terminate.
func (r *Runtime) sidesOf(node string, from broker.Owner) []broker.Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []broker.Owner
	if _, ok := from.Side(); ok {
		out = append(out, from)
	}
	for _, src := range broker.Sources {
		if slices.Contains(out, broker.Owner(src)) {
			continue
		}
		if slices.ContainsFunc(r.seen.lastGood[src].Nodes, func(n broker.Node) bool { return n.Name == node }) {
			out = append(out, broker.Owner(src))
		}
	}
	return out
}

// instanceOf returns node's cloud instance from the latest merged nodes,
// whose instance ids come from the provider's instance map.
func (r *Runtime) instanceOf(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.seen.lastNodes {
		// Pool membership comes from the provider's instance list alone:
		// an instance id a side reports for a node in no pool is not one.
		if n.Name == node && n.Pool != "" {
			return n.InstanceID
		}
	}
	return ""
}

// nodeDown says why node is down in the latest merged nodes, or "".
func (r *Runtime) nodeDown(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.seen.lastNodes {
		if n.Name == node {
			return n.Down
		}
	}
	return ""
}

// poolInFlight counts the pool's machines on their way: instances the
// latest merged nodes do not know yet, or know in an in-flight phase (not
// yet gpu-ready, and not down).
func (r *Runtime) poolInFlight(ps broker.PoolState) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := make(map[string]*broker.Node, len(r.seen.lastNodes))
	for i := range r.seen.lastNodes {
		if id := r.seen.lastNodes[i].InstanceID; id != "" {
			byID[id] = &r.seen.lastNodes[i]
		}
	}
	k := 0
	for _, in := range ps.Instances {
		if in.Phase == broker.PhaseTerminating || in.Phase == broker.PhaseGone {
			continue
		}
		n, ok := byID[in.ID]
		if !ok || (n.Phase.InFlight() && n.Down == "") {
			k++
		}
	}
	return k
}

func findPool(pools []broker.PoolState, name string) (broker.PoolState, bool) {
	i := slices.IndexFunc(pools, func(p broker.PoolState) bool { return p.Pool.Name == name })
	if i < 0 {
		return broker.PoolState{}, false
	}
	return pools[i], true
}
