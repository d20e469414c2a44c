package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// migrateTasks is a migration's evict step (broker/migrate.go): the node
// is cordoned first (YARN: the cordon label, journaled; Kubernetes:
// cordon), so no new work and no restarted task lands on it; then each
// task is stopped at its next checkpoint: once the latest observation
// shows a checkpoint written after the cordon (data.MigrateFrom) and at
// most the policy's window old, so it loses only the time the broker took
// to see that checkpoint; once all are stopped the op releases the node.
//
// IMPORTANT: a task is never stopped on a stale or missing observation,
// nor with an unknown checkpoint, one older than the window, or one
// written before the cordon (stopping it then would throw away the work
// since): it waits for its next one. A
// task told to stop is stopped to the end (YARN: FORCEFUL_SHUTDOWN after
// the grace). The op's deadline (the max wait) gives the node back,
// uncordoned, with whatever has not checkpointed still running there.
func (r *Runtime) migrateTasks(ctx context.Context, s *stepCtx, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	from, ok := s.data.From.Side()
	if !ok || r.actions[from] == nil {
		return s.fail(fmt.Sprintf("migration off node %s: no actions configured for its side %q", op.Node, s.data.From))
	}
	act := r.actions[from]
	if !s.data.Prepared {
		if r.caps(from).CordonsVictims {
			// IMPORTANT: the cordon, never the exclude file, holds a
			// YARN node while its tasks move: it survives an RM failover
			// and keeps the node RUNNING for the container signals.
			if why := r.cordonUnavailable(ctx, from); why != "" {
				return s.fail(fmt.Sprintf("migration off %s node %s needs the %s cordon to hold it while its tasks move: %s", from, op.Node, from, why))
			}
			if next, progressed, done := r.cordonNode(ctx, s, from, act); !done {
				return next, progressed
			}
		} else if err := act.Cordon(ctx, op.Node); err != nil {
			return s.retry(err)
		}
		// Prepared: giving up from here gives the node back.
		s.data.Prepared = true
		s.op = s.save()
	}
	if s.data.MigrateFrom.IsZero() {
		// Cordoned (by the evict step for Kubernetes, above for YARN):
		// from now on each task stops at its next checkpoint.
		s.data.MigrateFrom = s.now
		s.op = s.save()
	}
	window := policy.MigrateWindow.D()
	var waiting []string
	left := s.data.Victims[:0:0]
	for i, w := range s.data.Victims {
		cur, seen, fresh := r.observedWork(from, op.Node, w)
		if !fresh {
			left = append(left, w)
			waiting = append(waiting, fmt.Sprintf("%s (%s cannot tell: its observation is stale, or the node holds work it cannot name)", w.Name, from))
			continue
		}
		if !seen {
			// It ended on its own: nothing to stop.
			s.data.Stopped = append(s.data.Stopped, fmt.Sprintf("%s %s ended before it was stopped", w.Source, w.Name))
			continue
		}
		stopping := slices.Contains(s.data.Stopping, w.Key)
		if !stopping && !checkpointedSince(cur, s.now, s.data.MigrateFrom, window) {
			left = append(left, w)
			waiting = append(waiting, fmt.Sprintf("%s (next checkpoint)", w.Name))
			continue
		}
		if !stopping {
			// Journaled before the signal: after a crash the task is
			// stopped to the end, not left half-signalled.
			s.data.Stopping = append(s.data.Stopping, w.Key)
			s.op = s.save()
			r.log.Info("migrating task right after its checkpoint", "op", op.ID, "node", op.Node, "task", w.Name, "checkpoint_age", cur.CheckpointAge)
		}
		var err error
		if m, ok := act.(MigrationEvicter); ok {
			err = m.EvictForMigration(ctx, op.Node, w)
		} else {
			err = act.Evict(ctx, op.Node, w)
		}
		switch {
		case err == nil:
			s.data.Stopped = append(s.data.Stopped, howStopped(act, w))
		case errors.Is(err, broker.ErrInProgress):
			left = append(left, w)
			waiting = append(waiting, fmt.Sprintf("%s (stopping)", w.Name))
		default:
			s.data.Victims = append(left, s.data.Victims[i:]...)
			return s.retry(err)
		}
	}
	s.data.Victims = left
	if len(left) > 0 {
		return s.waitFor(2*time.Second, fmt.Sprintf("migration off node %s waits for %v", op.Node, waiting))
	}
	return s.moveTo(broker.StepRelease)
}

// checkpointSlack absorbs the clock's grain in checkpointedSince: a
// checkpoint annotation holds whole seconds, and a step runs a moment
// after the observation that read the ages.
const checkpointSlack = 2 * time.Second

// checkpointedSince reports whether w, as observed at about now, has a
// checkpoint written at or after from (less checkpointSlack) and at most
// window old: the moment a migration may stop it, losing only the time
// since that checkpoint.
func checkpointedSince(w broker.Workload, now, from time.Time, window time.Duration) bool {
	if w.CheckpointAge < 0 || w.CheckpointAge > window {
		return false
	}
	return !now.Add(-w.CheckpointAge).Before(from.Add(-checkpointSlack))
}

// observedWork finds workload w on node in the latest merged nodes (whose
// checkpoint ages the tick read from the checkpoint store): the current
// record, whether the node still runs it, and whether that can be trusted
// (w's side is not stale, its side lists the node, and where w is missing
// the node holds nothing its side cannot name).
func (r *Runtime) observedWork(side broker.Source, node string, w broker.Workload) (broker.Workload, bool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, stale := r.seen.stale[side]; stale {
		return broker.Workload{}, false, false
	}
	// IMPORTANT: only the side's own listing of the node says what runs
	// there: a new active RM that has not heard from the node's
	// NodeManager yet lists nothing of it, and the merged node (from the
	// cloud and the store) then shows no work.
	if !slices.ContainsFunc(r.seen.lastGood[side].Nodes, func(n broker.Node) bool { return n.Name == node }) {
		return broker.Workload{}, false, false
	}
	for _, n := range r.seen.lastNodes {
		if n.Name != node {
			continue
		}
		unlisted := false
		for _, x := range n.Work {
			if x.Source == w.Source && x.Key == w.Key {
				return x, true, true
			}
			unlisted = unlisted || x.Unlisted
		}
		// IMPORTANT: w missing beside work the side cannot name (an app
		// the RM recovers after a restart) is not proof that w ended.
		return broker.Workload{}, false, !unlisted
	}
	return broker.Workload{}, false, false
}
