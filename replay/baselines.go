package replay

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// autoscalerCtl is the per-side baseline: on each side the cluster
// autoscaler's rules, with that side's own pools (s.poolFor) and no moves
// or preemption across sides.
//
//   - every ScanInterval it looks; pods pending at least NewPodHold that
//     fit neither free GPUs nor nodes already on their way are bin-packed
//     onto new nodes, the pool chosen per pod by least waste (the smallest
//     node that fits), within the pool's max;
//   - a node whose GPU allocation has stayed at or under the threshold for
//     the unneeded time is removed if its work fits on the side's other
//     nodes: empty nodes up to 10 a scan, one busy node a scan (drained
//     through the same release step model as gpubroker's);
//   - preemption is kube-scheduler's alone (the world's), inside
//     Kubernetes; YARN does not preempt.
//
// Not modelled, in the baseline's favour: scale-down-delay-after-add, and
// the time a cloud API call takes.
//
// With safe set it keeps gpubroker's consolidation rule: it never drains a
// YARN node that runs containers (its RM would kill them at the graceful
// timeout), and drains a busy Kubernetes node only when its pods lose at
// most the policy's consolidation.max_work_lost in all (time since their
// last checkpoints, summed, as the planner counts it).
type autoscalerCtl struct {
	safe     bool
	lastScan time.Duration
	scanned  bool
}

// nextScan is the first scan time at or after t.
func (c *autoscalerCtl) nextScan(s *sim, t time.Duration) time.Duration {
	p := s.w.ScanInterval
	return (t + p - 1) / p * p
}

func (c *autoscalerCtl) wake(s *sim) time.Duration {
	w := never
	// A change since the last scan is looked at by the next scan; a scan
	// that sees nothing new decides nothing new.
	if s.changed {
		at := c.nextScan(s, s.now)
		if c.scanned && at == c.lastScan {
			at += s.w.ScanInterval
		}
		w = at
	}
	unneeded := s.p.ScaleDownUnneeded.D()
	for _, n := range s.nodes {
		if n.under && n.op == nil {
			if at := n.underSince + unneeded; at > s.now {
				w = min(w, c.nextScan(s, at))
			}
		}
	}
	for i := range s.pending {
		for _, t := range s.pending[i] {
			if t.state == taskPending {
				if at := t.since + s.w.NewPodHold; at > s.now {
					w = min(w, c.nextScan(s, at))
				}
			}
		}
	}
	return w
}

func (c *autoscalerCtl) tick(s *sim) {
	if s.now%s.w.ScanInterval != 0 || (c.scanned && c.lastScan == s.now) {
		return
	}
	c.scanned, c.lastScan = true, s.now
	s.changed = false
	for _, side := range broker.Sources {
		c.scaleUp(s, side)
		c.scaleDown(s, side)
	}
}

// vnode is a node in the autoscaler's scale-up simulation.
type vnode struct {
	pool int
	free int
}

func (c *autoscalerCtl) scaleUp(s *sim, side broker.Source) {
	var pods []*task
	for _, t := range s.pending[sideIdx(side)] {
		if t.state == taskPending && t.nominated == nil && s.now-t.since >= s.w.NewPodHold {
			pods = append(pods, t)
		}
	}
	if len(pods) == 0 {
		return
	}
	slices.SortFunc(pods, comparePending)
	count := make([]int, len(s.pools))
	var upcoming []*vnode
	for _, n := range s.nodes {
		if s.poolFor[n.pool] != side {
			continue
		}
		if n.phase != broker.PhaseTerminating && n.phase != broker.PhaseGone {
			count[n.pool]++
		}
		if n.phase == broker.PhaseBooting || n.phase == broker.PhaseRegistered {
			upcoming = append(upcoming, &vnode{pool: n.pool, free: s.pools[n.pool].GPUsPerNode})
		}
	}
	var fresh []*vnode
	fits := func(t *task, v *vnode) bool {
		return v.free >= t.GPUs && (len(t.Models) == 0 || slices.Contains(t.Models, s.models[v.pool]))
	}
	for _, t := range pods {
		placed := false
		for _, set := range [][]*vnode{upcoming, fresh} {
			for _, v := range set {
				if fits(t, v) {
					v.free -= t.GPUs
					placed = true
					break
				}
			}
			if placed {
				break
			}
		}
		if placed {
			continue
		}
		best := -1
		for pi, p := range s.pools {
			if s.poolFor[pi] != side || p.GPUsPerNode < t.GPUs || count[pi] >= p.MaxNodes ||
				(len(t.Models) > 0 && !slices.Contains(t.Models, p.GPUModel)) {
				continue
			}
			if best < 0 || p.GPUsPerNode < s.pools[best].GPUsPerNode {
				best = pi
			}
		}
		if best < 0 {
			continue // no node group can take it: the pod stays pending
		}
		count[best]++
		fresh = append(fresh, &vnode{pool: best, free: s.pools[best].GPUsPerNode - t.GPUs})
	}
	for _, v := range fresh {
		s.launch(v.pool, side, side)
	}
}

func (c *autoscalerCtl) scaleDown(s *sim, side broker.Source) {
	unneeded := s.p.ScaleDownUnneeded.D()
	var cands []*node
	count := make([]int, len(s.pools))
	for _, n := range s.nodes {
		if s.poolFor[n.pool] == side && n.phase != broker.PhaseTerminating && n.phase != broker.PhaseGone && n.op == nil {
			count[n.pool]++
		}
		if n.side == side && n.under && n.op == nil && s.now-n.underSince >= unneeded {
			cands = append(cands, n)
		}
	}
	slices.SortFunc(cands, func(a, b *node) int {
		return cmp.Or(cmp.Compare(a.used, b.used), cmp.Compare(a.underSince, b.underSince), cmp.Compare(a.id, b.id))
	})
	empty, busy := 0, 0
	for _, n := range cands {
		if count[n.pool]-1 < s.pools[n.pool].MinNodes {
			continue
		}
		if n.used == 0 {
			if empty >= 10 {
				continue
			}
			empty++
		} else {
			if busy >= 1 || (c.safe && !c.safeToDrain(s, n)) || !c.fitsElsewhere(s, n) {
				continue
			}
			busy++
		}
		count[n.pool]--
		s.release(n, broker.ActScaleDown, broker.OwnerNone, nil)
	}
}

// safeToDrain reports whether draining busy node n keeps the consolidation
// rule: never a YARN node with containers, a Kubernetes node only when its
// running pods lose at most max_work_lost in all.
func (c *autoscalerCtl) safeToDrain(s *sim, n *node) bool {
	if n.side == broker.SourceYARN {
		return len(n.tasks) == 0
	}
	var lost time.Duration
	for _, t := range n.tasks {
		if t.state == taskRunning {
			lost += s.checkpointAge(t)
		}
	}
	return lost <= s.p.MaxWorkLost.D()
}

// fitsElsewhere reports whether n's running work fits the free GPUs of the
// side's other schedulable nodes (largest first, fullest node first).
func (c *autoscalerCtl) fitsElsewhere(s *sim, n *node) bool {
	free := map[*node]int{}
	var peers []*node
	for _, p := range s.nodes {
		if p != n && p.side == n.side && p.schedulable() {
			free[p] = p.free()
			peers = append(peers, p)
		}
	}
	work := slices.Clone(n.tasks)
	slices.SortFunc(work, func(a, b *task) int { return cmp.Compare(b.GPUs, a.GPUs) })
	for _, t := range work {
		var best *node
		for _, p := range peers {
			if free[p] >= t.GPUs && p.fits(t, s.models) && (best == nil || free[p] < free[best]) {
				best = p
			}
		}
		if best == nil {
			return false
		}
		free[best] -= t.GPUs
	}
	return true
}

// staticCtl is the static split: its nodes are placed, running, before the
// first arrival and never change.
type staticCtl struct{}

func (staticCtl) tick(*sim)               {}
func (staticCtl) wake(*sim) time.Duration { return never }
