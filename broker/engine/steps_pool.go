package engine

// The steps that change a pool's capacity: a scale-up's set-desired,
// await-instances and await-ready (with the hand-back of a pool in
// backoff), a replace's surge, and every removal's terminate and forget.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// setDesired sets a scale-up's absolute target. The target was planned as
// if the pool's pending removals had already terminated; each of those
// will still lower the desired capacity by one, so the value set now adds
// them back. Only when that would pass the pool's max does the scale-up
// wait for them, so a drain in progress does not hold the pool's
// scale-ups back.
func (r *Runtime) setDesired(ctx context.Context, s *stepCtx, pools []broker.PoolState, open []broker.Op) (broker.Op, bool) {
	op := s.op
	ps, found := findPool(pools, op.Pool)
	if found && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	pending, first := pendingRemovals(op, open)
	target := op.Target + pending
	if found && ps.Desired > target {
		// IMPORTANT: a scale-up never lowers the group. Its desired
		// capacity went above what this op planned (raised outside the
		// broker): end the op, so the next plan starts from the group.
		return s.fail(fmt.Sprintf("pool %s wants %d nodes, more than the %d this scale-up planned: not lowering it; planning again", op.Pool, ps.Desired, target))
	}
	if first != nil && found && ps.Pool.MaxNodes > 0 && target > ps.Pool.MaxNodes {
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for the removal of node %s (op %d) before resizing: %d would pass the pool's max of %d",
			first.Node, first.ID, target, ps.Pool.MaxNodes))
	}
	err := r.cfg.Pools.SetDesired(ctx, op.Pool, target)
	var be *broker.BackoffError
	if errors.As(err, &be) {
		if berr := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, be.Until, be.Reason); berr != nil {
			return s.retry(berr)
		}
		return s.fail("pool backs off: " + be.Reason)
	}
	if err != nil {
		return s.retry(err)
	}
	s.data.SetAt, s.data.SetTo = s.now, target
	return s.moveTo(broker.StepAwaitInstances)
}

// pendingRemovals counts the open ops of op's pool that will remove one of
// its instances with a decrement (a scale-down draining or terminating; a
// replace that surged), and returns the first of them.
func pendingRemovals(op broker.Op, open []broker.Op) (int, *broker.Op) {
	pending := 0
	var first *broker.Op
	for i := range open {
		o := &open[i]
		if o.Pool != op.Pool || o.ID == op.ID || !broker.PendingRemoval(o) {
			continue
		}
		pending++
		if first == nil {
			first = o
		}
	}
	return pending, first
}

// handBack ends a scale-up whose pool backs off (the provider could not
// launch: insufficient capacity, a launch that failed) before all its
// machines exist. IMPORTANT: the provider keeps retrying a desired capacity
// it could not reach, while the planner no longer counts it as on its way
// and plans the demand elsewhere: the order that did not launch is handed
// back first, or the retry would later buy a second machine for the same
// demand. The desired capacity is lowered by the missing machines, never
// below the machines that exist (a lower value would terminate one) nor the
// pool's min; raising it again is refused during the backoff.
func (r *Runtime) handBack(ctx context.Context, s *stepCtx, ps broker.PoolState, missing int) (broker.Op, bool) {
	op := s.op
	to := max(ps.Desired-missing, ps.InService(), ps.Pool.MinNodes)
	if to < ps.Desired {
		if err := r.cfg.Pools.SetDesired(ctx, op.Pool, to); err != nil {
			return s.retry(fmt.Errorf("hand back the %d nodes of pool %s that did not launch: %w", missing, op.Pool, err))
		}
	}
	why := ps.BackoffReason
	if why == "" {
		why = "the provider asked to back off"
	}
	return s.fail(fmt.Sprintf("pool %s backs off until %s (%s) with %d of its nodes not launched; desired capacity handed back from %d to %d",
		op.Pool, ps.BackoffUntil.UTC().Format(time.RFC3339), why, missing, ps.Desired, to))
}

// awaitInstances waits for the provider to report a scale-up's new desired capacity (or its instances).
func (r *Runtime) awaitInstances(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// The provider reports the new desired capacity (or the instances).
	fresh, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		return s.waitFor(5*time.Second, "observe pools: "+err.Error())
	}
	ps, ok := findPool(fresh, op.Pool)
	if ok && ps.Stale == "" && (ps.Desired >= op.Target || ps.InService() >= op.Target) {
		return s.moveTo(broker.StepAwaitReady)
	}
	if s.now.Sub(s.data.SetAt) > e.policy.MaxProvisionTime.D() {
		reason := fmt.Sprintf("pool %s has %d of %d instances %s after setting the desired capacity", op.Pool, ps.InService(), op.Target, e.policy.MaxProvisionTime)
		if err := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, s.now.Add(e.policy.MaxProvisionTime.D()), reason); err != nil {
			return s.retry(err)
		}
		return s.fail(reason)
	}
	return s.waitFor(time.Second, "")
}

// awaitReady keeps a scale-up open until its pool's machines are gpu-ready.
func (r *Runtime) awaitReady(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// IMPORTANT: the op stays e.open, serving its demand, until the
	// pool's machines are gpu-ready (docs/design.md, arbitration rule 4): the planner keeps
	// the ordered capacity for that demand, so it does not take another
	// node meanwhile while the new one idles.
	fresh, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		return s.waitFor(5*time.Second, "observe pools: "+err.Error())
	}
	ps, _ := findPool(fresh, op.Pool)
	// The desired capacity is set before the provider has launched the
	// instances: until they exist, none of them can be in flight, and
	// ending now would let the demand buy a second node.
	want := s.data.SetTo
	if want == 0 {
		want = op.Target
	}
	// SetTo counted the pool's removals still to come; one that has
	// finished since took its instance with it (a terminate with a
	// decrement), so it is no longer to be waited for.
	if pending, _ := pendingRemovals(op, e.open); op.Target+pending < want {
		want = op.Target + pending
	}
	if have := ps.InService(); have < want {
		if ps.Stale == "" && ps.BackoffUntil.After(s.now) {
			return r.handBack(ctx, s, ps, want-have)
		}
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for pool %s to launch its instances (%d of %d)", op.Pool, have, want))
	}
	if n := r.poolInFlight(ps); n > 0 {
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for %d nodes of pool %s to become gpu-ready", n, op.Pool))
	}
	return s.done()
}

// surge buys a replace's replacement first: the desired capacity goes up
// by one, and the terminate's decrement takes it back, so a pool at its
// minimum never refuses the terminate and never waits for a scale-up that
// waits for it. Providers that terminate without a decrement skip it.
//
// The surge stays within the pool's max and the policy's cluster GPU max
// (counted over every pool's desired capacity as the provider answers
// it); where it cannot, the terminate goes first.
func (r *Runtime) surge(ctx context.Context, s *stepCtx, pools []broker.PoolState, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	if _, ok := r.cfg.Pools.(KeepDesiredTerminator); ok {
		return s.moveTo(broker.StepTerminate)
	}
	if s.data.SurgeTo == 0 {
		fresh, err := r.cfg.Pools.Pools(ctx)
		if err != nil {
			return s.waitFor(5*time.Second, "observe pools: "+err.Error())
		}
		ps, ok := findPool(fresh, op.Pool)
		clusterGPUs := 0
		for _, p := range fresh {
			clusterGPUs += p.Desired * p.Pool.GPUsPerNode
		}
		// IMPORTANT: a surge never takes the cluster over its GPU max
		// (chaos, seed 1: a replace surged a cluster at 24 of 24 GPUs to
		// 28 while its terminate failed).
		withinCluster := policy.ClusterMaxGPUs <= 0 || clusterGPUs+ps.Pool.GPUsPerNode <= policy.ClusterMaxGPUs
		switch {
		case !ok || ps.Stale != "":
			return s.waitFor(5*time.Second, fmt.Sprintf("pool %s is not observed at the cloud provider", op.Pool))
		case withinCluster && (ps.Pool.MaxNodes <= 0 || ps.Desired+1 <= ps.Pool.MaxNodes):
			// IMPORTANT: persist the surge before setting it, so a resumed
			// step sets the same absolute value and the planner and the
			// pool's scale-ups count the decrement still to come.
			s.data.SurgeTo = ps.Desired + 1
			return s.save(), true
		case ps.Desired-1 >= ps.Pool.MinNodes:
			// At the pool's or the cluster's max: the terminate's
			// decrement keeps the pool within min.
			return s.moveTo(broker.StepTerminate)
		default:
			return s.giveUp(fmt.Sprintf("pool %s is at its min and max of %d nodes and the provider cannot terminate without lowering the desired capacity", op.Pool, ps.Desired))
		}
	}
	if ps, ok := findPool(pools, op.Pool); ok && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	if err := r.cfg.Pools.SetDesired(ctx, op.Pool, s.data.SurgeTo); err != nil {
		return s.retry(err)
	}
	return s.moveTo(broker.StepTerminate)
}

// terminate removes the node's instance, by the id from the provider's
// instance map, once every side has released it.
func (r *Runtime) terminate(ctx context.Context, s *stepCtx, pools []broker.PoolState) (broker.Op, bool) {
	op := s.op
	if s.data.InstanceID == "" {
		// IMPORTANT: never guess an instance from a host name. A node
		// whose instance is unknown is given back, not left cordoned.
		return s.giveUp(fmt.Sprintf("node %s has no cloud instance in the provider's instance map to terminate", op.Node))
	}
	if ps, ok := findPool(pools, op.Pool); ok && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	// IMPORTANT: only reached after release reported the node drained on
	// every side that held it (or the policy forces it after the drain
	// timeout, never for a release the side could not confirm).
	var err error
	if kd, ok := r.cfg.Pools.(KeepDesiredTerminator); ok && op.Kind == broker.ActReplace {
		err = kd.TerminateKeepDesired(ctx, op.Pool, s.data.InstanceID)
	} else {
		err = r.cfg.Pools.Terminate(ctx, op.Pool, s.data.InstanceID)
	}
	if err != nil {
		return s.retry(err)
	}
	if len(r.forgetters(s.data)) > 0 {
		return s.moveTo(broker.StepForget)
	}
	return s.done()
}

// forgetters returns the sides that held the op's node and keep something
// of it after releasing it (Forgetter: YARN's exclude file).
func (r *Runtime) forgetters(d broker.OpData) []broker.Source {
	var out []broker.Source
	for _, o := range append(slices.Clone(d.Released), d.From) {
		side, ok := o.Side()
		if _, forgets := r.actions[side].(Forgetter); ok && forgets && !slices.Contains(out, side) {
			out = append(out, side)
		}
	}
	return out
}

// forget takes a terminated YARN host out of the exclude file and the RM's node list.
func (r *Runtime) forget(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// The terminated machine's host stays in YARN's exclude file
	// otherwise, and a later machine that reuses its name (cloud
	// hostnames follow private IPs) would be refused by the RM.
	// IMPORTANT: Forget, never Admit: admitting would run the side's
	// NodeManager restart hook against a machine being terminated.
	for _, side := range r.forgetters(s.data) {
		if err := r.actions[side].(Forgetter).Forget(ctx, op.Node); err != nil {
			return s.retry(err)
		}
		// IMPORTANT: a cordon still on the terminated host (a release
		// forced after the drain timeout) comes off too: a later machine
		// that reuses the host name would otherwise start cordoned.
		if err := r.uncordonNode(ctx, s, side); err != nil {
			return s.retry(err)
		}
	}
	return s.done()
}
