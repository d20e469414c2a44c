package broker

import (
	"fmt"
	"slices"
)

// Attrition: a node that idle reclaim may not drain because of the work it
// runs may, by policy, leave without evicting anything. A YARN node is
// decommissioned gracefully with an infinite timeout
// (Policy.YARNDrainByAttrition); a Kubernetes node is cordoned
// (Policy.CordonAndWait). Either way no new work lands, and the node is
// terminated once its work has ended. As soon as demand of its side could
// use the node again, the attrition is cancelled and the node given back
// (ActRecommission). Finite timeouts are only ever used by preemption.

// StepRecommission ends a cancelled attrition: the node is given back to
// its side and the op ends cancelled.
const StepRecommission = "recommission"

// attritionData is the part of an op's step data that attrition reads.
// AttritionOp reports whether op is an open attrition scale-down that has
// not reached termination yet.
func AttritionOp(op *Op) bool {
	if op.State.Terminal() || op.Kind != ActScaleDown || op.Step != StepRelease || len(op.Data) == 0 {
		return false
	}
	d, err := DecodeOpData(op)
	return err == nil && d.Attrition
}

// attritionDowns counts in-flight attrition scale-downs per pool index.
func (pl *planner) attritionDowns() map[int]int {
	out := map[int]int{}
	for i := range pl.s.InFlight {
		op := &pl.s.InFlight[i]
		if !AttritionOp(op) {
			continue
		}
		if ni, ok := pl.nodeIdx[op.Node]; ok && pl.nodes[ni].pool >= 0 {
			out[pl.nodes[ni].pool]++
		}
	}
	return out
}

// resumeAttrition cancels every in-flight attrition whose node pending
// demand of its side could use (it fits the node's free GPUs and its
// constraints), and counts the node as free capacity of that side for this
// plan, so the demand is not served by a new node instead.
func (pl *planner) resumeAttrition() {
	ops := make([]*Op, 0, len(pl.s.InFlight))
	for i := range pl.s.InFlight {
		if op := &pl.s.InFlight[i]; AttritionOp(op) {
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, compareOps)
	resumed := map[int]bool{}
	for _, op := range ops {
		ni, ok := pl.nodeIdx[op.Node]
		if !ok || resumed[ni] {
			continue
		}
		w := &pl.nodes[ni]
		n := w.n
		from := OpDataOf(op).From
		if from == "" || from == OwnerNone {
			from = n.Owner
		}
		side, ok := from.Side()
		switch n.Phase {
		case PhaseActive, PhaseGPUReady, PhaseDraining, PhaseDrained:
		default:
			continue // not serving yet, or already leaving for good
		}
		if !ok || pl.stale(side) || !healthy(n) || n.Down != "" || n.GPUsTotal <= 0 {
			continue
		}
		free := n.FreeGPUs()
		tgt := pl.nodeTarget(int32(ni))
		var user *wdemand
		for _, d := range pl.demand {
			if !d.done && d.cls != nil && d.d.Source == side && d.d.GPUsPerUnit <= free && d.cls.c.matches(side, tgt) {
				user = d
				break
			}
		}
		if user == nil {
			continue
		}
		how := "recommission YARN node %s: cancel its decommission by attrition"
		if side == SourceK8s {
			how = "uncordon node %s: cancel its cordon-and-wait"
		}
		resumed[ni] = true
		pl.removals = append(pl.removals, Action{
			Kind: ActRecommission,
			Pool: n.Pool,
			Node: n.Name,
			From: OwnerNone,
			To:   from,
			Reason: fmt.Sprintf(how+" (op %d), because pending %s demand %s needing %d GPUs per unit could use its %d free GPUs",
				n.Name, op.ID, side, user.id, user.d.GPUsPerUnit, free),
		})
		// The node serves its side again: its free GPUs take pending
		// demand. It stays out of every other action this plan (moving
		// work onto it, transfers, preemption): its op is still open
		// until the executor has recommissioned it.
		w.touched = true
		for _, c := range pl.classes {
			if c.src == side && !c.inFree[ni] && c.c.matches(side, tgt) {
				c.inFree[ni] = true
				c.free = append(c.free, int32(ni))
				c.freeFail = 0
				c.startFree = max(c.startFree, w.free)
			}
		}
	}
}
