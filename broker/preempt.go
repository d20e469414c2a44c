package broker

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// victim is one preemptible workload on a node, with its cost.
type victim struct {
	w     *Workload
	risk  time.Duration
	taken bool
}

// buildVictims lists a node's preemptible non-system work cheapest first:
// least work at risk (time since the last checkpoint, else run time), then
// lowest priority, then youngest, then key.
func (pl *planner) buildVictims(n *wnode) {
	n.vbuilt = true
	for i := range n.n.Work {
		w := &n.n.Work[i]
		if !w.Preemptible || w.System || w.GPUs <= 0 {
			continue
		}
		n.victims = append(n.victims, victim{w: w, risk: w.WorkAtRisk(pl.now)})
	}
	slices.SortFunc(n.victims, func(a, b victim) int {
		return cmp.Or(
			cmp.Compare(a.risk, b.risk),
			cmp.Compare(a.w.Priority, b.w.Priority),
			b.w.StartedAt.Compare(a.w.StartedAt),
			cmp.Compare(a.w.Source, b.w.Source),
			cmp.Compare(a.w.Key, b.w.Key),
			cmp.Compare(a.w.GPUs, b.w.GPUs),
		)
	})
}

// gpuHours is the work a victim set would lose, in GPU-hours.
func gpuHours(vs []victim, idx []int) float64 {
	h := 0.0
	for _, i := range idx {
		h += float64(vs[i].w.GPUs) * vs[i].risk.Hours()
	}
	return h
}

// victimSet chooses the cheapest victims on n, all of priority below prio,
// that free g GPUs with the node's free ones: take victims in cost order
// until the unit fits, then add back every victim not needed after all.
// The victims' indexes are appended to buf[:0].
func victimSet(n *wnode, g int, prio int64, buf []int) ([]int, bool) {
	f := n.free
	idx := buf[:0]
	for i := range n.victims {
		v := &n.victims[i]
		if v.taken || v.w.Priority >= prio {
			continue
		}
		idx = append(idx, i)
		f += v.w.GPUs
		if f >= g {
			break
		}
	}
	if f < g {
		return nil, false
	}
	for k := len(idx) - 1; k >= 0; k-- {
		if gp := n.victims[idx[k]].w.GPUs; f-gp >= g {
			f -= gp
			idx = slices.Delete(idx, k, k+1)
		}
	}
	return idx, true
}

// pkey is one preemption query: GPUs per unit and the preemptor's priority.
type pkey struct {
	gpus int
	prio int64
}

// pitem is a node's cheapest victim set for one query, valid while the
// node's version is still ver.
type pitem struct {
	cost float64
	ni   int32
	ver  uint32
}

// pheap is a min-heap of candidate nodes by cost, then node order. Entries
// go stale when their node changes (nver); a stale entry is re-evaluated
// when it reaches the top. The top fresh entry is the true cheapest node:
// changes that take capacity (free GPUs reserved, victims taken, node
// removed) only make a node dearer or unusable, so its stale entries
// underestimate it and surface early; every change that gives capacity back
// pushes a fresh entry for the node (reopen).
type pheap []pitem

func (h pheap) less(i, j int) bool {
	if h[i].cost != h[j].cost {
		return h[i].cost < h[j].cost
	}
	return h[i].ni < h[j].ni
}

func (h *pheap) push(it pitem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

func (h *pheap) pop() {
	n := len(*h) - 1
	(*h)[0], (*h)[n] = (*h)[n], (*h)[0]
	*h = (*h)[:n]
	h.down(0)
}

func (h pheap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h pheap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// candidate evaluates node ni for query k: the cheapest victims that make
// room (appended to buf[:0]) and their cost in GPU-hours.
func (pl *planner) candidate(ni int32, k pkey, buf []int) ([]int, float64, bool) {
	n := &pl.nodes[ni]
	if n.removed || n.n.GPUsTotal < k.gpus {
		return buf, 0, false
	}
	if !n.vbuilt {
		pl.buildVictims(n)
	}
	if len(n.victims) == 0 {
		return buf, 0, false
	}
	idx, ok := victimSet(n, k.gpus, k.prio, buf)
	if !ok {
		return idx, 0, false
	}
	return idx, gpuHours(n.victims, idx), true
}

// pheapFor returns the class's heap for query k, building it on first use.
func (pl *planner) pheapFor(c *dclass, k pkey) *pheap {
	if h, ok := c.pheaps[k]; ok {
		return h
	}
	h := &pheap{}
	var buf []int
	for _, ni := range c.own {
		idx, cost, ok := pl.candidate(ni, k, buf)
		buf = idx
		if ok {
			*h = append(*h, pitem{cost: cost, ni: ni, ver: pl.nver[ni]})
		}
	}
	for i := len(*h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	if c.pheaps == nil {
		c.pheaps = make(map[pkey]*pheap)
	}
	c.pheaps[k] = h
	return h
}

// preempt frees g GPUs for one unit of d by evicting strictly lower-priority
// preemptible work on a matching node of d's side, choosing the node whose
// victims lose the fewest GPU-hours (then the first node by name). It
// reports whether a unit was placed.
func (pl *planner) preempt(d *wdemand, g int) bool {
	if !pl.p.Preemption || pl.stale(d.d.Source) || d.d.NoPreempt {
		return false
	}
	c := d.cls
	prio := d.d.Priority
	for _, f := range c.pfail {
		if g >= f.gpus && prio <= f.prio {
			return false
		}
	}
	k := pkey{gpus: g, prio: prio}
	h := pl.pheapFor(c, k)
	best := int32(-1)
	var buf []int
	for len(*h) > 0 {
		top := (*h)[0]
		if top.ver == pl.nver[top.ni] {
			best = top.ni
			break
		}
		h.pop()
		idx, cost, ok := pl.candidate(top.ni, k, buf)
		buf = idx
		if ok {
			h.push(pitem{cost: cost, ni: top.ni, ver: pl.nver[top.ni]})
		}
	}
	if best < 0 {
		c.pfail = append(c.pfail, pfail{gpus: g, prio: prio})
		return false
	}
	bestIdx, _, _ := pl.candidate(best, k, nil) // the undo below keeps it
	if len(bestIdx) == 0 {
		// The node has room without preempting; takeFree, which runs
		// first for the same class, would have used it. Never evict nothing.
		return false
	}
	n := &pl.nodes[best]
	freed := 0
	victims := make([]Workload, 0, len(bestIdx))
	for _, i := range bestIdx {
		n.victims[i].taken = true
		freed += n.victims[i].w.GPUs
		victims = append(victims, *n.victims[i].w)
	}
	wasTouched := n.touched
	n.free += freed - g
	n.touched = true
	pl.nver[best]++
	// Merge with this demand's earlier preemption on the same node, if any.
	var prev *Action
	if k := len(pl.preempts) - 1; k >= 0 && pl.preempts[k].Node == n.n.Name && pl.preempts[k].Serves[0] == d.id {
		prev = &pl.preempts[k]
	}
	var prevAction Action
	if prev != nil {
		prevAction = *prev
		prevAction.Victims = slices.Clone(prev.Victims)
		prev.Victims = append(prev.Victims, victims...)
		prev.Reason = preemptReason(n.n.Name, prev.Victims, d, pl.now)
	} else {
		pl.preempts = append(pl.preempts, Action{
			Kind:    ActPreempt,
			Pool:    n.n.Pool,
			Node:    n.n.Name,
			Victims: victims,
			Serves:  []string{d.id},
			Reason:  preemptReason(n.n.Name, victims, d, pl.now),
		})
	}
	if pl.rec {
		pl.undo = append(pl.undo, func() {
			for _, i := range bestIdx {
				n.victims[i].taken = false
			}
			n.free -= freed - g
			n.touched = wasTouched
			if prev != nil {
				*prev = prevAction
			} else {
				pl.preempts = pl.preempts[:len(pl.preempts)-1]
			}
			pl.reopen(best)
		})
	}
	if n.free > 0 {
		pl.reopen(best)
	}
	return true
}

func preemptReason(node string, victims []Workload, d *wdemand, now time.Time) string {
	gpus, maxPrio := 0, int64(0)
	hours := 0.0
	for i, v := range victims {
		gpus += v.GPUs
		hours += float64(v.GPUs) * v.WorkAtRisk(now).Hours()
		if i == 0 || v.Priority > maxPrio {
			maxPrio = v.Priority
		}
	}
	return fmt.Sprintf("preempt %d workloads (%d GPUs, priority at most %d, %.2f GPU-hours at risk since their last checkpoint) on node %s for demand %s at priority %d needing %d GPUs per unit",
		len(victims), gpus, maxPrio, hours, node, d.id, d.d.Priority, d.d.GPUsPerUnit)
}
