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
func victimSet(n *wnode, g int, prio int64) ([]int, bool) {
	f := n.free
	var idx []int
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

// preempt frees g GPUs for one unit of d by evicting strictly lower-priority
// preemptible work on a matching node of d's side, choosing the node whose
// victims lose the fewest GPU-hours. It reports whether a unit was placed.
func (pl *planner) preempt(d *wdemand, g int) bool {
	if !pl.p.Preemption || pl.s.IsStale(d.d.Source) {
		return false
	}
	c := d.cls
	prio := d.d.Priority
	for _, f := range c.pfail {
		if g >= f.gpus && prio <= f.prio {
			return false
		}
	}
	best := int32(-1)
	var bestIdx []int
	var bestCost float64
	for _, ni := range c.own {
		n := &pl.nodes[ni]
		if n.removed || n.n.GPUsTotal < g {
			continue
		}
		if !n.vbuilt {
			pl.buildVictims(n)
		}
		if len(n.victims) == 0 {
			continue
		}
		idx, ok := victimSet(n, g, prio)
		if !ok {
			continue
		}
		if cost := gpuHours(n.victims, idx); best < 0 || cost < bestCost {
			best, bestIdx, bestCost = ni, idx, cost
		}
	}
	if best < 0 {
		c.pfail = append(c.pfail, pfail{gpus: g, prio: prio})
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
	})
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
