package broker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// victim is one unit of preemptible work on a node, with its cost: a
// workload, or work that must go together — a YARN application with its
// ApplicationMaster (killing the AM ends the application), or a gang of
// batch pods of one controller.
type victim struct {
	ws      []*Workload
	gpus    int
	lost    time.Duration // summed eviction cost (cost.go)
	hours   float64       // GPU-hours lost
	prio    int64         // the highest priority in the unit
	started time.Time     // the latest start in the unit
	taken   bool
}

// appCounts counts the work of every application (Workload.App) on all
// nodes, so a unit can tell whether it holds the whole application.
func (pl *planner) appCounts() map[string]int {
	if pl.apps == nil {
		pl.apps = map[string]int{}
		for i := range pl.nodes {
			for _, w := range pl.nodes[i].n.Work {
				if w.App != "" {
					pl.apps[w.App]++
				}
			}
		}
	}
	return pl.apps
}

// victimUnits groups node n's non-system work into preemption units,
// cheapest first: the fewest GPU-hours lost, then the least work lost, then
// the lowest priority, then the youngest, then key. A YARN AM is never a
// unit of its own: only its whole application is, and only when all of the
// application's work runs on this node. A batch pod that shares its
// controller with other pods is a gang member: the gang is one unit, again
// only when it is whole here. Units with a member that may not be preempted
// are left out; with all set, so is work that frees no GPUs.
func (pl *planner) victimUnits(n *Node, all bool) (units []victim, whole bool) {
	whole = true
	grouped := false
	for i := range n.Work {
		if !n.Work[i].System && n.Work[i].App != "" {
			grouped = true
			break
		}
	}
	if !grouped { // the common case: every workload is a unit of its own
		for i := range n.Work {
			w := &n.Work[i]
			if w.System {
				continue
			}
			if !w.Preemptible {
				whole = false
				continue
			}
			if w.GPUs <= 0 && !all {
				continue
			}
			lost := w.lost(pl.now)
			units = append(units, victim{ws: []*Workload{w}, gpus: max(w.GPUs, 0), lost: lost,
				hours: gpuHoursOf(lost, w.GPUs), prio: w.Priority, started: w.StartedAt})
		}
		sortUnits(units)
		return units, whole
	}
	apps := pl.appCounts()
	groups := map[string][]*Workload{}
	var order []string
	hasAM := map[string]bool{}
	for i := range n.Work {
		w := &n.Work[i]
		if w.System {
			continue
		}
		key := "\x00" + string(w.Source) + "/" + w.Key // a unit of its own
		switch {
		case w.App == "":
		case w.Source == SourceYARN:
			key = "app:" + w.App // grouped below only if its AM is here
		case w.Class != WorkService && apps[w.App] > 1:
			key = "gang:" + w.App
		}
		if w.AM {
			hasAM[key] = true
		}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], w)
	}
	slices.Sort(order)
	add := func(ws []*Workload) {
		u := victim{ws: ws}
		for _, w := range ws {
			if !w.Preemptible {
				whole = false
				return
			}
			lost := w.lost(pl.now)
			u.gpus += max(w.GPUs, 0)
			u.lost = addLost(u.lost, lost)
			u.hours += gpuHoursOf(lost, w.GPUs)
			if w.StartedAt.After(u.started) {
				u.started = w.StartedAt
			}
		}
		u.prio = ws[0].Priority
		for _, w := range ws[1:] {
			u.prio = max(u.prio, w.Priority)
		}
		if u.gpus == 0 && !all {
			return
		}
		units = append(units, u)
	}
	for _, key := range order {
		ws := groups[key]
		// The order of a node's work is not meaningful; victims come out
		// in key order.
		slices.SortFunc(ws, func(a, b *Workload) int { return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Key, b.Key)) })
		app := ws[0].App
		switch {
		case strings.HasPrefix(key, "app:") && !hasAM[key]:
			for _, w := range ws { // containers of an app whose AM runs elsewhere
				add([]*Workload{w})
			}
		case (strings.HasPrefix(key, "app:") || strings.HasPrefix(key, "gang:")) && apps[app] != len(ws):
			// IMPORTANT: never an AM (or part of a gang) unless the whole
			// application is the victim; part of it runs on other nodes.
			whole = false
			if strings.HasPrefix(key, "app:") {
				for _, w := range ws {
					if !w.AM {
						add([]*Workload{w})
					}
				}
			}
		default:
			add(ws)
		}
	}
	sortUnits(units)
	return units, whole
}

// sortUnits orders preemption units cheapest first.
func sortUnits(units []victim) {
	slices.SortFunc(units, func(a, b victim) int {
		return cmp.Or(
			cmp.Compare(a.hours, b.hours),
			cmp.Compare(a.lost, b.lost),
			cmp.Compare(a.prio, b.prio),
			b.started.Compare(a.started),
			cmp.Compare(a.ws[0].Source, b.ws[0].Source),
			cmp.Compare(a.ws[0].Key, b.ws[0].Key),
			cmp.Compare(a.gpus, b.gpus),
		)
	})
}

// buildVictims lists a node's preemption units, cheapest first.
func (pl *planner) buildVictims(n *wnode) {
	n.vbuilt = true
	n.victims, _ = pl.victimUnits(n.n, false)
}

// gpuHours is the work a victim set would lose, in GPU-hours.
func gpuHours(vs []victim, idx []int) float64 {
	h := 0.0
	for _, i := range idx {
		h += vs[i].hours
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
		if v.taken || v.prio >= prio {
			continue
		}
		idx = append(idx, i)
		f += v.gpus
		if f >= g {
			break
		}
	}
	if f < g {
		return nil, false
	}
	for k := len(idx) - 1; k >= 0; k-- {
		if gp := n.victims[idx[k]].gpus; f-gp >= g {
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
// preemptible work: first on a matching node of d's side, choosing the node
// whose victims lose the fewest GPU-hours (then the first node by name);
// else, when ownership transfer is allowed, on a matching node of the other
// side whose work is all preemptible, which is then handed over (see
// preemptAcross). It reports whether a unit was placed. Demand that may not
// preempt (NoPreempt) never does.
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
	if pl.preemptOwn(d, g) || pl.preemptAcross(d, g) {
		return true
	}
	c.pfail = append(c.pfail, pfail{gpus: g, prio: prio})
	return false
}

// preemptOwn preempts on a node of d's own side.
func (pl *planner) preemptOwn(d *wdemand, g int) bool {
	c := d.cls
	prio := d.d.Priority
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
	var victims []Workload
	for _, i := range bestIdx {
		n.victims[i].taken = true
		freed += n.victims[i].gpus
		for _, w := range n.victims[i].ws {
			victims = append(victims, *w)
		}
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
		prev.GPUHoursLost = victimHours(prev.Victims, pl.now)
		prev.Reason = preemptReason(n.n.Name, prev.Victims, d.id, d.d.Priority, d.d.GPUsPerUnit, pl.now)
	} else {
		pl.preempts = append(pl.preempts, Action{
			Kind:         ActPreempt,
			Pool:         n.n.Pool,
			Node:         n.n.Name,
			Victims:      victims,
			Serves:       []string{d.id},
			GPUHoursLost: victimHours(victims, pl.now),
			Reason:       preemptReason(n.n.Name, victims, d.id, d.d.Priority, d.d.GPUsPerUnit, pl.now),
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

// preemptAcross takes a node of the other side for d by preempting all of
// its work: a Kubernetes preemptor of YARN containers, or a YARN preemptor
// of pods. Every non-system workload on the node must be preemptible and of
// strictly lower priority than d, and a YARN AM or a gang only goes with its
// whole application. The node with the fewest GPU-hours lost wins (then
// node order). The plan records one preemption action that evicts the
// victims, then releases the node from its side and admits it to d's side
// (preempt, then transfer), so capacity freed for d never goes back to the
// side it was taken from.
func (pl *planner) preemptAcross(d *wdemand, g int) bool {
	if !pl.p.OwnershipTransfer || pl.stale(SourceYARN) || pl.stale(SourceK8s) {
		return false
	}
	to := ownerOf(d.d.Source)
	prio := d.d.Priority
	// A node this plan already takes for higher-priority demand than its
	// victims may serve more of it.
	for _, t := range pl.transfers {
		if t.victims != nil && t.to == to && t.free >= g && prio > t.prio && d.cls.c.matches(d.d.Source, pl.nodeTarget(t.node)) {
			pl.useTransfer(t, d, g)
			return true
		}
	}
	best, bestHours := int32(-1), 0.0
	var bestVictims []Workload
	var bestPrio int64
	for _, ni := range d.cls.xall {
		n := &pl.nodes[ni]
		if !n.sched || n.idle || n.touched || n.removed || n.busy || n.n.Protected || n.n.GPUsTotal < g {
			continue
		}
		if ps := pl.pools[n.pool].st; !ps.Pool.Sides.Serves(d.d.Source) || ps.Stale != "" {
			continue
		}
		x := pl.wholeNode(ni)
		if !x.ok || x.top >= prio {
			continue
		}
		if best < 0 || x.hours < bestHours {
			best, bestHours, bestVictims, bestPrio = ni, x.hours, x.victims, x.top
		}
	}
	if best < 0 {
		return false
	}
	n := &pl.nodes[best]
	t := &transfer{node: best, from: n.n.Owner, to: to, free: n.n.GPUsTotal, victims: bestVictims, prio: bestPrio}
	pl.startTransfer(t)
	pl.useTransfer(t, d, g)
	return true
}

// xvictim is what taking a node across sides would evict: all its
// non-system work, when all of it may be preempted (ok), with the GPU-hours
// lost and the highest priority among it. A node's work does not change
// while a plan is made, and a node whose work this plan touched is not
// taken across sides, so it is computed once per node.
type xvictim struct {
	built, ok bool
	hours     float64
	top       int64
	victims   []Workload
}

// wholeNode returns node ni's xvictim, computing it on first use.
func (pl *planner) wholeNode(ni int32) *xvictim {
	if pl.xvict == nil {
		pl.xvict = make([]xvictim, len(pl.nodes))
	}
	x := &pl.xvict[ni]
	if x.built {
		return x
	}
	x.built = true
	units, whole := pl.victimUnits(pl.nodes[ni].n, true)
	if !whole || len(units) == 0 {
		return x
	}
	x.ok = true
	for i, u := range units {
		if i == 0 || u.prio > x.top {
			x.top = u.prio
		}
		x.hours += u.hours
		for _, w := range u.ws {
			x.victims = append(x.victims, *w)
		}
	}
	return x
}

// preemptAction is the one action of a preemption across sides: evict the
// victims, release the node from its side, admit it to the other.
func (t *transfer) preemptAction(pl *planner) Action {
	n := pl.nodes[t.node].n
	first := ""
	var prio int64
	var per int
	if len(t.serves) > 0 {
		if d := pl.byIDLookup(t.serves[0]); d != nil {
			first, prio, per = d.id, d.d.Priority, d.d.GPUsPerUnit
		}
	}
	reason := preemptReason(n.Name, t.victims, first, prio, per, pl.now)
	return Action{
		Kind:         ActPreempt,
		Pool:         n.Pool,
		Node:         n.Name,
		From:         t.from,
		To:           t.to,
		Victims:      slices.Clone(t.victims),
		Serves:       slices.Clone(t.serves),
		GPUHoursLost: victimHours(t.victims, pl.now),
		Reason: fmt.Sprintf("%s, then release node %s from %s and hand it to %s for %d pending demand needing %d GPUs",
			reason, n.Name, t.from, t.to, len(t.serves), t.gpus),
	}
}

// byIDLookup finds pending demand by ID.
func (pl *planner) byIDLookup(id string) *wdemand {
	i, ok := slices.BinarySearchFunc(pl.byID, id, func(d *wdemand, id string) int { return cmp.Compare(d.id, id) })
	if !ok {
		return nil
	}
	return pl.byID[i]
}

// victimHours is the work the victims lose, in GPU-hours (cost.go).
func victimHours(victims []Workload, now time.Time) float64 {
	h := 0.0
	for i := range victims {
		h += victims[i].Cost(now).GPUHours
	}
	return h
}

func preemptReason(node string, victims []Workload, demand string, prio int64, perUnit int, now time.Time) string {
	gpus, maxPrio := 0, int64(0)
	var lost time.Duration
	for i := range victims {
		v := &victims[i]
		gpus += v.GPUs
		lost = max(lost, v.Cost(now).Lost)
		if i == 0 || v.Priority > maxPrio {
			maxPrio = v.Priority
		}
	}
	hours := victimHours(victims, now)
	figure := fmt.Sprintf("%.2f", hours)
	if hours > 0 && hours < 0.01 {
		figure = fmt.Sprintf("%.4f", hours)
	}
	return fmt.Sprintf("preempt %d workloads (%d GPUs, priority at most %d) on node %s, losing %s GPU-hours of work (at most %s since a last checkpoint), for demand %s at priority %d needing %d GPUs per unit",
		len(victims), gpus, maxPrio, node, figure, describeLost(lost), demand, prio, perUnit)
}
