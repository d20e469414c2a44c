package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Attrition: a node that idle reclaim may not drain because of the work it
// runs may, by policy, leave without evicting anything. A YARN node is
// decommissioned gracefully with an infinite timeout
// (Policy.YARNDrainByAttrition); a Kubernetes node is cordoned
// (Policy.CordonAndWait). Either way no new work lands, and the node is
// terminated once its work has ended. As soon as demand of its side could
// use the node again, the attrition is cancelled and the node given back
// (ActRecommission). Finite timeouts are only ever used by preemption.

// stepRecommission ends a cancelled attrition: the node is given back to
// its side and the op ends cancelled.
const stepRecommission = "recommission"

// attritionData is the part of an op's step data that attrition reads.
type attritionData struct {
	Attrition bool  `json:"attrition"`
	From      Owner `json:"from"`
}

// attritionOp reports whether op is an open attrition scale-down that has
// not reached termination yet.
func attritionOp(op *Op) bool {
	if op.State.Terminal() || op.Kind != ActScaleDown || op.Step != stepRelease || len(op.Data) == 0 {
		return false
	}
	var d attritionData
	return json.Unmarshal(op.Data, &d) == nil && d.Attrition
}

// attritionDowns counts in-flight attrition scale-downs per pool index.
func (pl *planner) attritionDowns() map[int]int {
	out := map[int]int{}
	for i := range pl.s.InFlight {
		op := &pl.s.InFlight[i]
		if !attritionOp(op) {
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
		if op := &pl.s.InFlight[i]; attritionOp(op) {
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
		var data attritionData
		_ = json.Unmarshal(op.Data, &data)
		from := data.From
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

// cancelAttrition starts giving the node of an ActRecommission back: the
// open attrition op on it moves to the recommission step, which the
// executor runs next.
func (r *Runtime) cancelAttrition(ctx context.Context, a Action) {
	ops, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		r.log.Error("read journal to cancel attrition", "node", a.Node, "err", err)
		return
	}
	for _, op := range ops {
		if op.Node != a.Node || !attritionOp(&op) {
			continue
		}
		var data opData
		if err := json.Unmarshal(op.Data, &data); err != nil {
			r.log.Error("read attrition op", "op", op.ID, "err", err)
			return
		}
		data.CancelReason = a.Reason
		if op.Data, err = encodeOpData(data); err != nil {
			r.log.Error("cancel attrition", "op", op.ID, "node", a.Node, "err", err)
			return
		}
		op.Step, op.Attempts, op.LastError, op.NextAttempt = stepRecommission, 0, "", time.Time{}
		if _, err := r.cfg.Ledger.AdvanceOp(ctx, op); err != nil {
			r.log.Error("cancel attrition", "op", op.ID, "node", a.Node, "err", err)
			return
		}
		r.log.Info("action", "op", op.ID, "kind", a.Kind, "pool", a.Pool, "node", a.Node, "reason", a.Reason)
		return
	}
	r.log.Debug("no attrition in flight to cancel", "node", a.Node)
}

// recommissionStep gives a node whose attrition was cancelled back to the
// side it was leaving (remove from the exclude file and refresh; uncordon)
// and ends the op cancelled.
func (r *Runtime) recommissionStep(ctx context.Context, op Op, data opData, now time.Time) (Op, bool) {
	if side, ok := data.From.Side(); ok && r.actions[side] != nil {
		if err := r.actions[side].Admit(ctx, op.Node); err != nil {
			op.Attempts++
			op.LastError = err.Error()
			op.NextAttempt = now.Add(backoff(op.Attempts))
			r.log.Warn("op step failed, will retry", "op", op.ID, "kind", op.Kind, "step", op.Step, "attempt", op.Attempts, "err", err)
			return op, false
		}
	}
	op.State, op.NextAttempt = OpCancelled, time.Time{}
	op.LastError = "attrition cancelled: " + data.CancelReason
	r.log.Info("attrition cancelled", "op", op.ID, "node", op.Node, "reason", data.CancelReason)
	return op, false
}

// releaseStep releases op's node from side. An attrition release evicts
// nothing: on YARN it is a graceful decommission with an infinite timeout
// (a zero deadline); on Kubernetes the node is cordoned, and drained (its
// remaining services evicted) only once no batch, bare or do-not-disrupt
// work is left on it in the latest observation.
func (r *Runtime) releaseStep(ctx context.Context, act SideActions, side Source, node string, data opData, policy Policy, now time.Time) (ReleaseStatus, error) {
	if !data.Attrition {
		return act.Release(ctx, node, data.Deadline)
	}
	if side == SourceYARN {
		// IMPORTANT: the zero deadline is the YARN side's infinite graceful
		// timeout: the RM never kills the node's containers.
		return act.Release(ctx, node, time.Time{})
	}
	if err := act.Cordon(ctx, node); err != nil {
		return ReleaseStatus{}, err
	}
	r.mu.Lock()
	var left []string
	seen := false
	for _, n := range r.lastGood[side].Nodes {
		if n.Name != node {
			continue
		}
		seen = true
		for i := range n.Work {
			w := &n.Work[i]
			if !w.System && (w.Class != WorkService || w.DoNotDisrupt != "") {
				left = append(left, w.Name)
			}
		}
	}
	r.mu.Unlock()
	if !seen {
		return ReleaseStatus{Unknown: fmt.Sprintf("node %s is not in the latest %s observation", node, side)}, nil
	}
	if len(left) > 0 {
		return ReleaseStatus{Remaining: left, BlockedBy: "cordon-and-wait: batch work still running"}, nil
	}
	return act.Release(ctx, node, now.Add(policy.DrainTimeout.D()))
}
