package engine

// The steps that move a node: release (cordon, fence, drain on every side
// that holds it), admit and await-admitted on the receiving side, a
// preemption's evict, and give-back.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// release takes the node away from every side that holds it (From first).
func (r *Runtime) release(ctx context.Context, s *stepCtx, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	if s.data.Deadline.IsZero() {
		s.data.Deadline = s.now.Add(policy.DrainTimeout.D())
	}
	if !s.data.Prepared {
		return r.prepareRelease(s)
	}
	sides := s.data.Sides
	if len(sides) == 0 && s.data.From != broker.OwnerNone {
		sides = []broker.Owner{s.data.From}
	}
	for _, o := range sides {
		if slices.Contains(s.data.Released, o) {
			continue
		}
		side, ok := o.Side()
		if !ok {
			continue
		}
		act := r.actions[side]
		if act == nil {
			return s.fail(fmt.Sprintf("no actions configured for %s, which holds node %s", side, op.Node))
		}
		if guardsLanding(op, s.data, r.caps(side)) && !slices.Contains(s.data.Checked, o) {
			return r.fenceAndCheck(ctx, s, o, side, act, policy)
		}
		if s.data.CordonOnly || (s.data.Down && r.nodeDown(op.Node) != "") {
			// A manual cordon; or a replace of a node that is down, whose
			// work is already lost: nothing can drain from a dead machine.
			if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {
				return next, progressed
			}
			if s.data.CordonOnly {
				return s.done()
			}
			s.data.Released = append(s.data.Released, o)
			continue
		}
		if _, labelled := r.cordoner(side); labelled {
			// IMPORTANT: a side with a cordon holds the node with it while
			// its work ends; the release decommissions only what is empty.
			// Without one, a busy node is left alone: an attrition has
			// nothing to hold it with and is given back.
			if why := r.cordonUnavailable(ctx, side); why == "" {
				if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {
					return next, progressed
				}
			} else if s.data.Attrition {
				return s.giveUp(fmt.Sprintf("drain by attrition of node %s needs the %s cordon: %s", op.Node, side, why))
			}
		}
		var st broker.ReleaseStatus
		var err error
		if from, ok := r.victimsUnderCordon(op, s.data); ok && side == from && !s.data.Attrition {
			st, err = r.releaseVictimsNode(ctx, act, s)
		} else {
			st, err = r.releaseStep(ctx, act, side, op.Node, s.data, policy, s.now)
		}
		if err != nil {
			return s.retry(err)
		}
		s.data.Remaining, s.data.BlockedBy = st.Remaining, st.BlockedBy
		if len(st.Unplanned) > 0 {
			return r.unplannedWork(s, side, st.Unplanned) // drainlimits.go
		}
		if st.Unknown != "" {
			// IMPORTANT: unknown is never drained, and never forced: wait
			// for the side to tell, until the op's deadline.
			return s.waitFor(5*time.Second, fmt.Sprintf("%s cannot tell whether node %s is released: %s", side, op.Node, st.Unknown))
		}
		if st.Drained {
			if len(st.Lost) > 0 && s.data.Lost == nil {
				// IMPORTANT: never silently: what the side lost is in the
				// op and the decisions before the node goes on.
				r.recordLoss(ctx, s, side, st.Lost)
			}
			// The side keeps the released node out (YARN: the exclude
			// file, its NodeManager DECOMMISSIONED): the cordon is undone
			// now, so the host's labels are its own again.
			if err := r.uncordonNode(ctx, s, side); err != nil {
				return s.retry(err)
			}
			r.log.Info("node released", "op", op.ID, "node", op.Node, "side", side)
			s.data.Released = append(s.data.Released, o)
			continue
		}
		if !s.data.Attrition && s.now.After(s.data.Deadline) {
			why := fmt.Sprintf("drain of %s from %s timed out after %s with %d workloads left", op.Node, side, policy.DrainTimeout, len(st.Remaining))
			if st.BlockedBy != "" {
				why += ", blocked by " + st.BlockedBy
			}
			if givesBackOnTimeout(op, st, policy) { // drainlimits.go
				// IMPORTANT: a transfer (or a preemption handing the node
				// across, or a scale-down blocked by a disruption budget)
				// that cannot drain gives the node back to its side, so no
				// node stays half-drained and owned by nobody. The why is
				// kept: giveBack records it as the op's failure.
				return s.giveBack(why, false)
			}
			if policy.ForceAfterDrainTimeout {
				r.log.Warn("drain timed out, terminating as the policy allows", "node", op.Node, "remaining", st.Remaining)
				s.data.Released = append(s.data.Released, o)
				continue
			}
			return s.fail(why + "; node left cordoned for an operator")
		}
		if from, ok := r.victimsUnderCordon(op, s.data); ok && side == from {
			return s.waitFor(2*time.Second, st.BlockedBy)
		}
		return s.waitFor(2*time.Second, "")
	}
	return releaseDone(s)
}

// prepareRelease decides and persists, before the first Release, which
// sides hold the node and its instance.
func (r *Runtime) prepareRelease(s *stepCtx) (broker.Op, bool) {
	op := s.op
	// IMPORTANT: decide and persist which sides hold the node and its
	// instance before the first Release. A cordoned node reports no
	// owner, so after a crash the owner could no longer be found and
	// the drain skipped.
	if s.data.From == "" {
		s.data.From = r.ownerOf(op.Node)
	}
	if op.Kind == broker.ActScaleDown || op.Kind == broker.ActReplace || op.Kind == broker.ActMigrate {
		s.data.Sides = r.sidesOf(op.Node, s.data.From)
	}
	if s.data.InstanceID == "" {
		s.data.InstanceID = r.instanceOf(op.Node)
	}
	if op.Kind == broker.ActReplace {
		s.data.Down = r.nodeDown(op.Node) != ""
	}
	s.data.Prepared = true
	return s.moveTo(broker.StepRelease)
}

// releaseDone moves an op on once every side released its node: to the
// first step its kind's table names after release (OpSteps: a scale-down
// or migration terminates, a replacement surges, a hand-over is admitted
// by the other side). A preemption on its own side never releases; were
// one here, it would be done.
func releaseDone(s *stepCtx) (broker.Op, bool) {
	spec, ok := broker.OpSteps[s.op.Kind].Step(broker.StepRelease)
	if _, across := s.op.To.Side(); !ok || len(spec.Next) == 0 || s.op.Kind == broker.ActPreempt && !across {
		return s.done()
	}
	return s.moveTo(spec.Next[0])
}

// admit has the receiving side admit a node handed over.
func (r *Runtime) admit(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	if op.To == broker.OwnerNone {
		return s.done() // a manual drain: the node stays with no side
	}
	to, ok := op.To.Side()
	if !ok || r.actions[to] == nil {
		return s.giveUp(fmt.Sprintf("cannot hand node to %q: no actions configured for it", op.To))
	}
	if err := r.actions[to].Admit(ctx, op.Node); err != nil {
		return s.retry(err)
	}
	s.data.Admitted = true
	if _, ok := r.actions[to].(AdmitChecker); ok {
		return s.moveTo(broker.StepAwaitAdmitted)
	}
	return s.done()
}

// awaitAdmitted waits until the receiving side lists the node schedulable.
func (r *Runtime) awaitAdmitted(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// IMPORTANT: a hand-over stays e.open (and its demand linked) until
	// the receiving side lists the node schedulable with its GPUs; the
	// op deadline gives it back otherwise.
	to, _ := op.To.Side()
	ok, why, err := r.actions[to].(AdmitChecker).Admitted(ctx, op.Node)
	if err != nil {
		return s.retry(err)
	}
	if ok {
		return s.done()
	}
	return s.waitFor(5*time.Second, fmt.Sprintf("waiting for %s to list node %s schedulable with its GPUs: %s", to, op.Node, why))
}

// evict stops a preemption's victims, one by one.
func (r *Runtime) evict(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	if op.Kind == broker.ActMigrate && !s.data.Prepared {
		// A migration ends in a terminate: which sides hold the node
		// and its instance are fixed before anything is stopped, as a
		// scale-down's release fixes them.
		s.data.Sides = r.sidesOf(op.Node, s.data.From)
		if s.data.InstanceID == "" {
			s.data.InstanceID = r.instanceOf(op.Node)
		}
	}
	if from, ok := s.data.From.Side(); ok && takesVictimsNode(op, from) && !r.caps(from).CordonsVictims && !s.data.Prepared && r.actions[from] != nil {
		// IMPORTANT: a preemption taking a Kubernetes node across
		// sides, and a migration, cordon it before evicting the
		// victims, as a drain does: otherwise the scheduler binds
		// pending pods (a migrated task's own replacement among them)
		// to the space a victim frees, and the release's drain evicts
		// them, work no op names. (A YARN node is cordoned before its
		// victims are signalled: see cordonVictimsNode.)
		// Prepared: a giving up now gives the node back.
		if err := r.actions[from].Cordon(ctx, op.Node); err != nil {
			return s.retry(err)
		}
		s.data.Prepared = true
		s.op = s.save()
	}
	if op.Kind == broker.ActMigrate {
		return r.migrateTasks(ctx, s, e.policy) // migrate.go
	}
	if from, ok := r.victimsUnderCordon(op, s.data); ok && !s.data.Prepared && r.actions[from] != nil {
		if next, progressed, done := r.cordonVictimsNode(ctx, s, from); !done {
			return next, progressed
		}
		s.data.Prepared = true
		s.op = s.save()
	}
	for len(s.data.Victims) > 0 {
		w := s.data.Victims[0]
		act := r.actions[w.Source]
		if act == nil {
			return s.fail(fmt.Sprintf("no actions configured for %s", w.Source))
		}
		err := act.Evict(ctx, op.Node, w)
		if errors.Is(err, broker.ErrInProgress) {
			// The victim is stopping (a YARN container told to shut
			// down): progress, not a failed attempt.
			return s.waitFor(2*time.Second, err.Error())
		}
		if err != nil {
			return s.retry(err)
		}
		r.log.Info("preempted", "op", op.ID, "node", op.Node, "workload", w.Name, "priority", w.Priority)
		s.data.Stopped = append(s.data.Stopped, howStopped(act, w))
		s.data.Victims = s.data.Victims[1:]
	}
	if _, across := op.To.Side(); across || op.Kind == broker.ActMigrate {
		// A preemption across sides hands the node over; a migration
		// releases and terminates the node it emptied.
		return s.moveTo(broker.StepRelease)
	}
	return s.done()
}

// takesVictimsNode reports whether op empties its node of the victims on
// side from for another use: a preemption handing the node to the other
// side, or a migration (whose emptied node is terminated).
func takesVictimsNode(op broker.Op, from broker.Source) bool {
	if op.Kind == broker.ActMigrate {
		return true
	}
	to, across := op.To.Side()
	return op.Kind == broker.ActPreempt && across && to != from
}

// victimsUnderCordon reports whether op stops its victims under the
// journaled cordon of their side before releasing their node
// (SideCaps.CordonsVictims: YARN's containers), and which side that is.
func (r *Runtime) victimsUnderCordon(op broker.Op, data broker.OpData) (broker.Source, bool) {
	from, ok := data.From.Side()
	if !ok || !r.caps(from).CordonsVictims || !takesVictimsNode(op, from) {
		return "", false
	}
	return from, true
}

// cordonVictimsNode starts a preemption taking a node of a side that
// cordons its victims (YARN): it cordons the node (journaled, see
// cordonNode) and then signals every victim of that side (YARN's Evict's
// first call sends GRACEFUL_SHUTDOWN). It reports done once both are
// under way.
//
// IMPORTANT: the cordon, never the exclude file, holds the node while the
// victims exit: the RM places nothing of another application in the space
// a victim frees (no request names the cordon label), the node stays
// RUNNING so the RM delivers container signals to it (it drops them for a
// DECOMMISSIONING node), and an RM failover keeps the label where it would
// shut an excluded NodeManager down with everything on it. Without a
// cordon the preemption is refused: nothing would keep the freed GPUs for
// the other side.
func (r *Runtime) cordonVictimsNode(ctx context.Context, s *stepCtx, side broker.Source) (broker.Op, bool, bool) {
	act := r.actions[side]
	if why := r.cordonUnavailable(ctx, side); why != "" {
		op, progressed := s.fail(fmt.Sprintf("preemption taking %s node %s needs the %s cordon to hold it while its victims exit: %s", side, s.op.Node, side, why))
		return op, progressed, false
	}
	if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {
		return next, progressed, false
	}
	left := s.data.Victims[:0:0]
	for _, w := range s.data.Victims {
		if w.Source != side {
			left = append(left, w)
			continue
		}
		err := act.Evict(ctx, s.op.Node, w)
		switch {
		case err == nil:
			r.log.Info("preempted", "op", s.op.ID, "node", s.op.Node, "workload", w.Name, "priority", w.Priority)
			s.data.Stopped = append(s.data.Stopped, howStopped(act, w))
		case errors.Is(err, broker.ErrInProgress):
			left = append(left, w)
		default:
			op, progressed := s.retry(err)
			return op, progressed, false
		}
	}
	s.data.Victims = left
	r.log.Info("node cordoned and victims signalled", "op", s.op.ID, "node", s.op.Node, "side", side, "victims", len(left))
	return broker.Op{}, false, true
}

// releaseVictimsNode is the release of a node whose victims, stopped
// under its side's cordon (YARN), are gone: the side's release, which decommissions the node only once it is
// empty under the cordon and with a timeout that cannot kill anything.
//
// IMPORTANT: a container still there is no victim (each was seen gone
// before the release): work of another application. The cordon keeps it
// running and the op waits for it; the drain deadline gives the node back,
// with the containers named in why.
func (r *Runtime) releaseVictimsNode(ctx context.Context, act SideActions, s *stepCtx) (broker.ReleaseStatus, error) {
	st, err := act.Release(ctx, s.op.Node, s.data.Deadline)
	if err != nil || st.Drained || st.Unknown != "" {
		return st, err
	}
	if len(st.Remaining) > 0 {
		st.BlockedBy = fmt.Sprintf("work the preemption does not name runs on the node (%s): the cordon keeps it running, and the node is handed over only once it ends", strings.Join(st.Remaining, ", "))
	}
	return st, nil
}

// giveBack returns the node to the side it came from (taking it from the
// side it was handed to first) and ends the op: failed with the reason
// that stopped it, or cancelled for a cancelled scale-down.
func (r *Runtime) giveBack(ctx context.Context, s *stepCtx) (broker.Op, bool) {
	op := s.op
	if s.data.Admitted {
		if to, ok := op.To.Side(); ok && r.actions[to] != nil {
			if _, labelled := r.cordoner(to); labelled && r.cordonUnavailable(ctx, to) != "" {
				r.log.Warn("cannot cordon the node on the side it was handed to: left as it is", "op", op.ID, "node", op.Node, "side", to)
			} else if next, progressed, done := r.cordonNode(ctx, s, to, r.actions[to]); !done {
				return next, progressed
			}
		}
	}
	from, ok := s.data.From.Side()
	if ok && r.actions[from] != nil {
		if err := r.actions[from].Admit(ctx, op.Node); err != nil {
			return r.giveBackRetry(s, err)
		}
		// IMPORTANT: the cordon the op put on the node comes off only
		// after the side admitted it back, restoring exactly what it had.
		if err := r.uncordonNode(ctx, s, from); err != nil {
			return r.giveBackRetry(s, err)
		}
	}
	if s.data.Cancel {
		s.op.State, s.op.NextAttempt = broker.OpCancelled, time.Time{}
		r.log.Info("op cancelled, node given back", "op", op.ID, "kind", op.Kind, "node", op.Node, "side", s.data.From, "reason", op.LastError)
		return s.save(), false
	}
	why := op.LastError
	if why == "" {
		why = "op abandoned"
	}
	return s.fail(fmt.Sprintf("node given back to %s: %s", s.data.From, why))
}

func (r *Runtime) giveBackRetry(s *stepCtx, err error) (broker.Op, bool) {
	s.op.Attempts++
	if s.op.Attempts >= maxStepAttempts {
		return s.fail(fmt.Sprintf("giving node %s back to %s failed %d times (%s), after: %s", s.op.Node, s.data.From, s.op.Attempts, err, s.op.LastError))
	}
	s.op.NextAttempt = s.now.Add(backoff(s.op.Attempts))
	r.log.Warn("give back failed, will retry", "op", s.op.ID, "node", s.op.Node, "attempt", s.op.Attempts, "err", err)
	return s.save(), false
}
