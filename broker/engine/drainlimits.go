package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// PlannedReleaser is implemented by SideActions whose drain can compare
// the work it finds on a node with the work the plan saw there (the
// Kubernetes side lists the node's pods live on every drain step). A
// release of a planned scale-down or transfer goes through it, so that a
// pod bound after the plan's observation is never evicted as if the plan
// had chosen it.
type PlannedReleaser interface {
	// ReleasePlanned is Release with the plan's work ("source/key"); work
	// outside it stops the drain and comes back in Unplanned.
	ReleasePlanned(ctx context.Context, node string, deadline time.Time, planned []string) (broker.ReleaseStatus, error)
}

// release releases node from act, comparing with the plan's work when the
// op was planned (Guarded) and the side can compare.
func release(ctx context.Context, act SideActions, node string, deadline time.Time, data broker.OpData) (broker.ReleaseStatus, error) {
	if pr, ok := act.(PlannedReleaser); ok && data.Guarded && !data.Cancel && !data.CordonOnly {
		return pr.ReleasePlanned(ctx, node, deadline, data.Planned)
	}
	return act.Release(ctx, node, deadline)
}

// unplannedWork ends a release whose drain found work the plan did not
// see: the node is given back to its side and the op ends cancelled with
// the work named, as when the fence's check finds it (fence.go).
func (r *Runtime) unplannedWork(s *stepCtx, side broker.Source, work []string) (broker.Op, bool) {
	op := s.op
	why := fmt.Sprintf("the drain of node %s found work the plan did not see (%s): the node is given back, not drained", op.Node, strings.Join(work, ", "))
	r.log.Warn("unplanned work on a node being released", "op", op.ID, "kind", op.Kind, "node", op.Node, "side", side, "work", work)
	return s.giveBack(why, true)
}

// givesBackOnTimeout reports whether a drain whose time ran out gives the
// node back to its side instead of failing with it cordoned: a transfer or
// a preemption always does; a scale-down does when disruption budgets
// blocked it and the policy does not force — a node left cordoned and
// owned by nobody would serve no one, and the planner would never choose
// it again.
func givesBackOnTimeout(op broker.Op, st broker.ReleaseStatus, policy broker.Policy) bool {
	switch op.Kind {
	case broker.ActTransfer, broker.ActPreempt, broker.ActMigrate:
		// A migration whose emptied node will not drain gives it back:
		// its tasks already restarted elsewhere, and the node serves
		// its side again.
		return true
	case broker.ActScaleDown:
		return !policy.ForceAfterDrainTimeout && strings.HasPrefix(st.BlockedBy, "PodDisruptionBudget")
	}
	return false
}

// fenceSeen reports whether side's observation of node n shows the fence,
// on a side whose observation does (SideCaps.ShowsFence: Kubernetes' owner
// taint, so the node no longer reads as owned by the side). An observation
// that started after the fence but was read from a watch cache that had
// not yet received the cordon cannot tell what the scheduler bound before
// it: only one that shows the cordon has caught up with it.
func fenceSeen(caps SideCaps, side broker.Source, n broker.Node) bool {
	owner, owned := n.Owner.Side()
	return !caps.ShowsFence || !owned || owner != side
}
