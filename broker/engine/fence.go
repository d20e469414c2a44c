package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// fenceSettle is how long after a node's fence an observation must have
// started before the executor trusts what it shows about the node: work
// the side's scheduler bound just before the fence reaches a watch within
// it.
const fenceSettle = time.Second

// guardsLanding reports whether the release of a node from side must
// first fence it and check a fresh observation for work that landed after
// the plan. A scale-down or transfer is planned on a node the plan saw
// idle (or running only the work it chose to move): between that
// observation and the moment the side stops placing work there — a tick,
// or an API server outage while the cordon is retried — the side's
// scheduler can place new work on it, which the drain would then evict
// (or a YARN decommission leave to the next RM failover). An operator's drain means to
// move the node's work (and ops journaled before this guard existed carry
// no plan to compare with); a manual cordon evicts nothing; a YARN drain
// by attrition never kills (the cordon holds the node until it is empty).
func guardsLanding(op broker.Op, d broker.OpData, caps SideCaps) bool {
	if !d.Guarded || op.Kind != broker.ActScaleDown && op.Kind != broker.ActTransfer {
		return false
	}
	if d.CordonOnly || d.Cancel {
		return false
	}
	return !(d.Attrition && caps.ReleasesByAttrition)
}

// fenceAndCheck fences node on side (Kubernetes: cordon, evicting nothing;
// YARN: the cordon label, journaled first, where the cluster offers it —
// never the exclude file, whose decommission a failover turns into a
// kill; without the cordon, the release itself, which decommissions only
// an empty host), then waits for an observation that started after the
// fence. If that observation shows work on the node that the plan did not
// see (on YARN any container, CPU ones and ApplicationMasters included),
// the node is given back to its side and the op ends cancelled with the
// work named; otherwise the release goes on.
func (r *Runtime) fenceAndCheck(ctx context.Context, s *stepCtx, o broker.Owner, side broker.Source, act SideActions, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	if !slices.Contains(s.data.Fenced, o) {
		_, labelled := r.cordoner(side)
		if labelled && r.cordonUnavailable(ctx, side) == "" {
			// IMPORTANT: the cordon, not the exclude file: it keeps
			// whatever landed running while the check looks.
			if op, progressed, done := r.cordonNode(ctx, s, side, act); !done {
				return op, progressed
			}
		} else if r.caps(side).FencesByRelease {
			st, err := r.releaseStep(ctx, act, side, op.Node, s.data, policy, s.now)
			if err != nil {
				return s.retry(err)
			}
			if st.Unknown != "" {
				// IMPORTANT: a refresh the RM may not have taken (a failover,
				// a standby) has not stopped placement: the fence time
				// starts only once the RM confirms the decommission.
				return s.waitFor(5*time.Second, fmt.Sprintf("%s cannot tell whether node %s is decommissioning: %s", side, op.Node, st.Unknown))
			}
		} else if err := act.Cordon(ctx, op.Node); err != nil {
			return s.retry(err)
		}
		s.data.Fenced = append(s.data.Fenced, o)
		s.data.FencedAt = s.now
		return s.waitFor(fenceSettle, fmt.Sprintf("node %s fenced on %s; waiting for an observation taken after the fence", op.Node, side))
	}
	landed, fresh := r.workLanded(side, op.Node, s.data)
	if !fresh {
		// IMPORTANT: an observation that may predate the fence (or a stale
		// side's last one) cannot tell that nothing landed: wait, until
		// the op's deadline.
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for an observation of %s taken after node %s was fenced at %s",
			side, op.Node, s.data.FencedAt.UTC().Format(time.RFC3339)))
	}
	if len(landed) > 0 {
		why := fmt.Sprintf("work landed on node %s after the plan (%s): the node is given back, not drained", op.Node, strings.Join(landed, ", "))
		r.log.Warn("work landed on a node being released", "op", op.ID, "kind", op.Kind, "node", op.Node, "side", side, "work", landed)
		return s.giveBack(why, true)
	}
	s.data.Checked = append(s.data.Checked, o)
	return s.save(), true
}

// workLanded lists the work on node in side's latest observation that
// the op's plan did not see: any non-system work, GPU or not (a YARN CPU
// container or 0-GPU AM dies at the fence's timeout as surely). fresh is false when that observation started
// before the fence settled or the side is stale. A node the side no longer
// lists runs nothing there; the release then decides (gone, or unknown).
func (r *Runtime) workLanded(side broker.Source, node string, d broker.OpData) (landed []string, fresh bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen.stale[side] != "" || r.seen.observedFrom[side].Before(d.FencedAt.Add(fenceSettle)) {
		return nil, false
	}
	for _, n := range r.seen.lastGood[side].Nodes {
		if n.Name != node {
			continue
		}
		if !fenceSeen(r.caps(side), side, n) { // drainlimits.go
			return nil, false
		}
		for _, w := range n.Work {
			if w.System || !counts(r.caps(side), w) || slices.Contains(d.Planned, workID(w)) {
				continue
			}
			name := w.Name
			if name == "" {
				name = w.Key
			}
			landed = append(landed, name)
		}
		return landed, true
	}
	return nil, true
}

// plannedWork is the work the plan saw on an action's node (the tick's
// observations, which the plan was made from), and its victims: all
// non-system work, since a drain that compares the live work with it
// (PlannedReleaser) must not take a CPU pod for unplanned work.
func (r *Runtime) plannedWork(a broker.Action) []string {
	var ids []string
	for _, v := range a.Victims {
		ids = append(ids, workID(v))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, src := range broker.Sources {
		for _, n := range r.seen.lastGood[src].Nodes {
			if n.Name != a.Node {
				continue
			}
			for _, w := range n.Work {
				if !w.System && !slices.Contains(ids, workID(w)) {
					ids = append(ids, workID(w))
				}
			}
		}
	}
	return ids
}

// counts reports whether w is work the fence compares: GPU work, and on a
// side that CountsAllWork (YARN) any work.
func counts(caps SideCaps, w broker.Workload) bool {
	return w.GPUs > 0 || caps.CountsAllWork
}

func workID(w broker.Workload) string { return string(w.Source) + "/" + w.Key }
