package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// cancelAttrition starts giving the node of an ActRecommission back: the
// open attrition op on it moves to the recommission step, which the
// executor runs next.
func (r *Runtime) cancelAttrition(ctx context.Context, a broker.Action) {
	ops, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		r.log.Error("read journal to cancel attrition", "node", a.Node, "err", err)
		return
	}
	for _, op := range ops {
		to, ok := broker.InterruptTo(op.Kind, broker.ActRecommission, op.Step)
		if op.Node != a.Node || !broker.AttritionOp(&op) || !ok {
			continue
		}
		data, err := broker.DecodeOpData(&op)
		if err != nil {
			r.log.Error("read attrition op", "op", op.ID, "err", err)
			return
		}
		data.CancelReason = a.Reason
		if op.Data, err = broker.EncodeOpData(data); err != nil {
			r.log.Error("cancel attrition", "op", op.ID, "node", a.Node, "err", err)
			return
		}
		op.Step, op.Attempts, op.LastError, op.NextAttempt = to, 0, "", time.Time{}
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
// side it was leaving (YARN: the journaled labels restored in place of the
// cordon, and the host out of the exclude file should an older release
// have put it there; Kubernetes: uncordon) and ends the op cancelled.
func (r *Runtime) recommissionStep(ctx context.Context, s *stepCtx) (broker.Op, bool) {
	op, data, now := s.op, s.data, s.now
	if side, ok := data.From.Side(); ok && r.actions[side] != nil {
		err := r.actions[side].Admit(ctx, op.Node)
		if err == nil {
			err = r.uncordonNode(ctx, s, side)
		}
		if err != nil {
			s.op.Attempts++
			s.op.LastError = err.Error()
			s.op.NextAttempt = now.Add(backoff(s.op.Attempts))
			r.log.Warn("op step failed, will retry", "op", op.ID, "kind", op.Kind, "step", op.Step, "attempt", s.op.Attempts, "err", err)
			return s.save(), false
		}
	}
	s.op.State, s.op.NextAttempt = broker.OpCancelled, time.Time{}
	s.op.LastError = "attrition cancelled: " + data.CancelReason
	r.log.Info("attrition cancelled", "op", op.ID, "node", op.Node, "reason", data.CancelReason)
	return s.save(), false
}

// releaseStep releases op's node from side. An attrition release evicts
// nothing: on YARN the node is held by the cordon (applied by the release
// step before this) and decommissioned once it is empty; on Kubernetes
// the node is cordoned, and drained (its remaining services evicted) only
// once no batch, bare or do-not-disrupt work is left on it in the latest
// observation.
func (r *Runtime) releaseStep(ctx context.Context, act SideActions, side broker.Source, node string, data broker.OpData, policy broker.Policy, now time.Time) (broker.ReleaseStatus, error) {
	if !data.Attrition {
		return release(ctx, act, node, data.Deadline, data) // drainlimits.go
	}
	if r.caps(side).ReleasesByAttrition {
		// IMPORTANT: the zero deadline: an attrition has none, and such a
		// release (YARN's) never gives a busy host a finite timeout.
		return act.Release(ctx, node, time.Time{})
	}
	if err := act.Cordon(ctx, node); err != nil {
		return broker.ReleaseStatus{}, err
	}
	r.mu.Lock()
	var left []string
	seen := false
	for _, n := range r.seen.lastGood[side].Nodes {
		if n.Name != node {
			continue
		}
		seen = true
		for i := range n.Work {
			w := &n.Work[i]
			if !w.System && (w.Class != broker.WorkService || w.DoNotDisrupt != "") {
				left = append(left, w.Name)
			}
		}
	}
	r.mu.Unlock()
	if !seen {
		return broker.ReleaseStatus{Unknown: fmt.Sprintf("node %s is not in the latest %s observation", node, side)}, nil
	}
	if len(left) > 0 {
		return broker.ReleaseStatus{Remaining: left, BlockedBy: "cordon-and-wait: batch work still running"}, nil
	}
	return release(ctx, act, node, now.Add(policy.DrainTimeout.D()), data)
}
