package replay

import (
	"cmp"
	"math"
	"slices"

	"github.com/gpubroker/gpubroker/broker"
)

// This file is the sides' schedulers, the same for every policy.

// schedule is both sides' schedulers: pending work, highest priority then
// oldest first, on the schedulable node of its side that fits and that the
// placement (World.Placement: spread or pack) prefers;
// kube-scheduler preempts for Kubernetes pods that fit nowhere.
func (s *sim) schedule() {
	for i := range s.pending {
		s.scheduleSide(i)
	}
}

func (s *sim) scheduleSide(i int) {
	q := s.pending[i]
	if len(q) == 0 {
		return
	}
	// Drop what is no longer pending.
	k := 0
	for _, t := range q {
		if t.state == taskPending {
			q[k] = t
			k++
		}
	}
	q = q[:k]
	s.pending[i] = q
	side := broker.Sources[i]
	var cands []*node
	for _, n := range s.nodes {
		if n.side == side && n.schedulable() {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return
	}
	for _, t := range q {
		// A nomination lasts until the victims are gone.
		if n := t.nominated; n != nil && (n.evicting == 0 || n.phase != broker.PhaseActive) {
			t.nominated = nil
		}
	}
	maxFree := 0
	minVictim := int64(math.MaxInt64)
	for _, n := range cands {
		maxFree = max(maxFree, n.free())
		if side == broker.SourceK8s {
			for _, v := range n.tasks {
				if v.state == taskRunning && v.preemptible {
					minVictim = min(minVictim, v.prio)
				}
			}
		}
	}
	if maxFree == 0 {
		top := int64(math.MinInt64)
		for _, t := range q {
			top = max(top, t.prio)
		}
		if side != broker.SourceK8s || top <= minVictim {
			return // nothing fits and nothing can be preempted
		}
	}
	slices.SortFunc(q, comparePending)
	blocked := map[blockKey]bool{}
	noVictims := map[blockKey]bool{}
	placed := false
	for _, t := range q {
		// The queue is by priority: once nothing is free and this task
		// outranks no preemptible work, neither does any after it.
		if maxFree == 0 && (side != broker.SourceK8s || t.prio <= minVictim) {
			break
		}
		if t.state != taskPending {
			continue
		}
		bk := keyOf(t, 0)
		if maxFree > 0 && !blocked[bk] {
			var best *node
			for _, n := range cands {
				if n.free() >= t.GPUs && n.fits(t, s.models) && (best == nil || s.better(n, best)) {
					best = n
				}
			}
			if best != nil {
				wasMax := best.free() == maxFree
				s.start(t, best)
				placed = true
				if wasMax {
					maxFree = 0
					for _, n := range cands {
						maxFree = max(maxFree, n.free())
					}
				}
				continue
			}
			blocked[bk] = true
		}
		if side == broker.SourceK8s && t.nominated == nil && t.prio > minVictim {
			pk := keyOf(t, t.prio)
			if !noVictims[pk] && !s.kubePreempt(t, cands) {
				noVictims[pk] = true
			}
		}
	}
	if placed {
		k = 0
		for _, t := range q {
			if t.state == taskPending {
				q[k] = t
				k++
			}
		}
		s.pending[i] = q[:k]
	}
}

// better reports whether the side's scheduler prefers node a to node b for
// a task both fit. Spread (the default of both schedulers: kube-scheduler's
// NodeResourcesFit LeastAllocated scoring, the CapacityScheduler placing
// on the node that heartbeats with room) takes the node with the largest
// share of its GPUs free; pack (kube-scheduler MostAllocated, the
// CapacityScheduler's multi-node placement by utilisation) the one with
// the fewest GPUs free. Ties keep the earlier node.
func (s *sim) better(a, b *node) bool {
	if s.w.Placement == PlacementPack {
		return a.free() < b.free()
	}
	return a.free()*b.gpus > b.free()*a.gpus
}

func comparePending(a, b *task) int {
	return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.since, b.since), cmp.Compare(a.idx, b.idx))
}

// blockKey groups pending tasks that fit the same nodes: when one fails
// to fit (or to find victims, with its priority), the rest fail alike.
type blockKey struct {
	gpus   int
	models string
	prio   int64
}

func keyOf(t *task, prio int64) blockKey {
	return blockKey{gpus: t.GPUs, models: t.models, prio: prio}
}

// kubePreempt is kube-scheduler's preemption: on the node where evicting
// strictly lower-priority preemptible pods makes room with the lowest
// highest victim priority, then fewest victims, evict the lowest-priority,
// youngest pods first; the pod is nominated there.
func (s *sim) kubePreempt(t *task, cands []*node) bool {
	var best *node
	var bestVictims []*task
	var bestMax int64
	for _, n := range cands {
		if !n.fits(t, s.models) || n.gpus < t.GPUs {
			continue
		}
		free := n.free()
		var vs []*task
		for _, v := range n.tasks {
			if v.state == taskRunning && v.preemptible && v.prio < t.prio {
				vs = append(vs, v)
			}
		}
		sum := free
		for _, v := range vs {
			sum += v.GPUs
		}
		if sum < t.GPUs {
			continue
		}
		slices.SortFunc(vs, func(a, b *task) int {
			return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(b.startedAt, a.startedAt), cmp.Compare(a.idx, b.idx))
		})
		var take []*task
		var mx int64 = math.MinInt64
		for _, v := range vs {
			if free >= t.GPUs {
				break
			}
			take = append(take, v)
			free += v.GPUs
			mx = max(mx, v.prio)
		}
		if best == nil || mx < bestMax || (mx == bestMax && len(take) < len(bestVictims)) {
			best, bestVictims, bestMax = n, take, mx
		}
	}
	if best == nil {
		return false
	}
	for _, v := range bestVictims {
		s.evict(v, "preempt")
	}
	t.nominated = best
	return true
}

// updateUnderused keeps each active node's underused-since time: GPU
// allocation at or under the scale-down threshold (the merge's rule).
func (s *sim) updateUnderused() {
	for _, n := range s.nodes {
		if n.phase == broker.PhaseActive && n.op == nil && n.gpus > 0 &&
			float64(n.used)/float64(n.gpus) <= s.p.ScaleDownUtilisation {
			if !n.under {
				n.under, n.underSince = true, s.now
			}
		} else {
			n.under = false
		}
	}
}
