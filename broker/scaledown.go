package broker

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// transfer is a node this plan hands from one side to the other.
type transfer struct {
	node     int32
	from, to Owner
	// free is the node's GPUs not yet reserved for demand of the new side.
	free   int
	serves []string
	gpus   int // GPUs of the demand it serves
	// reclaimed says why an underused node with work is moved (scale-down
	// offered to the other side); empty for an idle node.
	reclaimed string
	// victims, when set, is the work preempted on the node before it is
	// handed over (preemption across sides, preempt.go); prio is the
	// priority of the demand that preempts it.
	victims []Workload
	prio    int64
	// lost is the GPU-hours a reclaiming transfer's drain throws away.
	lost float64
}

// startTransfer marks a node as handed over in this plan.
func (pl *planner) startTransfer(t *transfer) {
	n := &pl.nodes[t.node]
	wasTouched := n.touched
	n.removed, n.touched, n.xfer = true, true, t
	pl.nver[t.node]++
	pl.transfers = append(pl.transfers, t)
	if pl.rec {
		pl.undo = append(pl.undo, func() {
			n.removed, n.touched, n.xfer = false, wasTouched, nil
			pl.transfers = pl.transfers[:len(pl.transfers)-1]
			pl.reopen(t.node)
		})
	}
}

// useTransfer reserves g GPUs of a handed-over node for d.
func (pl *planner) useTransfer(t *transfer, d *wdemand, g int) {
	k := len(t.serves)
	if k == 0 || t.serves[k-1] != d.id {
		t.serves = append(t.serves, d.id)
	}
	t.free -= g
	t.gpus += g
	if pl.rec {
		pl.undo = append(pl.undo, func() {
			t.serves = t.serves[:k]
			t.free += g
			t.gpus -= g
		})
	}
}

func (t *transfer) action(pl *planner) Action {
	n := pl.nodes[t.node].n
	if t.victims != nil {
		return t.preemptAction(pl)
	}
	what := fmt.Sprintf("hand idle node %s (%d GPUs of %s, pool %s)", n.Name, n.GPUsTotal, orAny(pl.nodes[t.node].model), n.Pool)
	if t.reclaimed != "" {
		what = fmt.Sprintf("drain underused node %s (%s) and hand it", n.Name, t.reclaimed)
	}
	if t.from == OwnerNone {
		what = fmt.Sprintf("hand stranded node %s (%d GPUs of %s, pool %s; neither side owns it and no op holds it)", n.Name, n.GPUsTotal, orAny(pl.nodes[t.node].model), n.Pool)
	}
	return Action{
		Kind:         ActTransfer,
		Pool:         n.Pool,
		Node:         n.Name,
		From:         t.from,
		To:           t.to,
		Serves:       slices.Clone(t.serves),
		GPUHoursLost: t.lost,
		Reason:       fmt.Sprintf("%s from %s to %s for %d pending demand needing %d GPUs", what, t.from, t.to, len(t.serves), t.gpus),
	}
}

// restoreMin adds nodes to pools below their minimum; demand may use them.
func (pl *planner) restoreMin() {
	for i := range pl.pools {
		wp := &pl.pools[i]
		pool := &wp.st.Pool
		short := pool.MinNodes - (wp.size - wp.pendingDown)
		if short <= 0 || wp.backoff != "" {
			continue
		}
		k := min(short, pl.headroom(i))
		if k <= 0 {
			continue
		}
		wp.add += k
		wp.minAdd += k
		for range k {
			wp.newFree = append(wp.newFree, pool.Units())
		}
		pl.clusterGPUs += k * pool.GPUsPerNode
		pl.modelGPUs[pool.GPUModel] += k * pool.GPUsPerNode
	}
}

// reclaim replaces unhealthy nodes and reclaims underused ones: each is
// first offered to the other side when demand there fits it, otherwise
// drained and terminated. Nodes this plan already uses are left alone, and
// a pool that grows in this plan does not shrink in it.
func (pl *planner) reclaim() {
	pl.replaceUnhealthy() // lifecycle.go

	unneeded := pl.p.ScaleDownUnneeded.D()
	var cands []int32
	for i := range pl.nodes {
		w := &pl.nodes[i]
		n := w.n
		if n.Phase != PhaseActive || !w.owned || w.pool < 0 || w.busy || w.removed || w.touched ||
			n.Protected || !healthy(n) || n.GPUsTotal <= 0 || pl.stale(w.side) {
			continue
		}
		if n.UnderusedSince.IsZero() || pl.now.Sub(n.UnderusedSince) < unneeded {
			continue
		}
		if pl.p.Usage(n) > pl.p.ScaleDownUtilisation {
			continue
		}
		cands = append(cands, int32(i))
	}
	slices.SortStableFunc(cands, func(a, b int32) int {
		na, nb := pl.nodes[a].n, pl.nodes[b].n
		return cmp.Or(
			cmp.Compare(pl.p.Usage(na), pl.p.Usage(nb)),
			na.UnderusedSince.Compare(nb.UnderusedSince),
			cmp.Compare(a, b),
		)
	})
	if len(cands) == 0 {
		return
	}
	poolNodes := make([][]int32, len(pl.pools))
	for i := range pl.nodes {
		if p := pl.nodes[i].pool; p >= 0 {
			poolNodes[p] = append(poolNodes[p], int32(i))
		}
	}
	pendingDownGPUs := 0
	for i := range pl.pools {
		pendingDownGPUs += pl.pools[i].pendingDown * pl.pools[i].st.Pool.GPUsPerNode
	}
	// Attrition scale-downs in flight are not pending removals for the
	// executor (their node may stay for days), but they will remove a node:
	// count them against the pool and cluster minimum.
	attr := pl.attritionDowns()
	for pi, k := range attr {
		pendingDownGPUs += k * pl.pools[pi].st.Pool.GPUsPerNode
	}
	unmet := pl.unmet()
	pl.undo, pl.rec = pl.undo[:0], true
	for _, ni := range cands {
		w := &pl.nodes[ni]
		n := w.n
		wp := &pl.pools[w.pool]
		pool := &wp.st.Pool
		if w.touched || w.removed || wp.add > 0 {
			continue
		}
		why := fmt.Sprintf("%d of %d GPUs allocated, at or under %.0f%% for %s",
			n.GPUsAllocated, n.GPUsTotal, 100*pl.p.ScaleDownUtilisation, pl.now.Sub(n.UnderusedSince).Round(time.Second))
		size := wp.size - wp.pendingDown - wp.downs - attr[w.pool]
		cluster := pl.clusterGPUs - pendingDownGPUs
		atMin := size-1 < pool.MinNodes || cluster-pool.GPUsPerNode < pl.p.ClusterMinGPUs
		nc := consolidationCost(n, pl.now)
		if keep, attrition := pl.consolidation(w, nc); keep != "" {
			moved, block := pl.migrate(ni, nc, poolNodes[w.pool], atMin, why) // migrate.go
			if moved {
				continue
			}
			if !attrition {
				if block != "" {
					keep += "; not migrated: " + block
				}
				pl.keep(n.Name, keep)
				continue
			}
			if atMin {
				continue
			}
			how := "cordon node %s of pool %s and wait for its work to end (consolidation.cordon_and_wait)"
			if w.side == SourceYARN {
				how = "decommission YARN node %s of pool %s by attrition with an infinite graceful timeout (yarn_drain_by_attrition)"
			}
			pl.removeNode(ni, Action{
				Kind:      ActScaleDown,
				Pool:      pool.Name,
				Node:      n.Name,
				From:      n.Owner,
				Attrition: true,
				Reason: fmt.Sprintf(how+": %s (threshold %s); %s, so nothing is evicted: no new work lands, and the node is terminated once its work has ended; pool goes from %d to %d nodes (min %d)",
					n.Name, pool.Name, why, unneeded, keep, size, size-1, pool.MinNodes),
			})
			continue
		}
		mark := len(pl.undo)
		moved, ok := pl.moveWork(ni, poolNodes[w.pool])
		if !ok {
			pl.rollback(mark)
			continue
		}
		if nc.lost > 0 {
			why += fmt.Sprintf("; its work loses %s, within the %s consolidation may lose", describeLost(nc.lost), pl.p.MaxWorkLost)
		}
		if pl.offer(ni, unmet, why) {
			pl.transfers[len(pl.transfers)-1].lost = nc.gpuHours
			continue
		}
		if atMin {
			pl.rollback(mark)
			continue
		}
		work := "it runs no GPU work"
		if moved > 0 {
			work = fmt.Sprintf("its %d GPUs of work fit on other %s nodes", moved, w.side)
		}
		pl.removeNode(ni, Action{
			Kind:         ActScaleDown,
			Pool:         pool.Name,
			Node:         n.Name,
			From:         n.Owner,
			GPUHoursLost: nc.gpuHours,
			Reason: fmt.Sprintf("drain and terminate node %s of pool %s: %s (threshold %s); %s; pool goes from %d to %d nodes (min %d)",
				n.Name, pool.Name, why, unneeded, work, size, size-1, pool.MinNodes),
		})
	}
}

// consolidation decides whether idle reclaim may drain node w, whose work
// costs nc. It returns "" when the node may be drained (if its work fits
// elsewhere); otherwise why not, and whether the node may instead leave by
// attrition: decommissioned (YARN) or cordoned (Kubernetes) without
// evicting anything, terminated when its work has ended.
//
// IMPORTANT: idle reclaim never throws away work beyond the policy. A YARN
// node running any container (GPU or not, an ApplicationMaster too) is
// never drained for idleness (the RM would kill them when a finite
// graceful timeout runs out); a Kubernetes node is
// drained only if its pods lose at most MaxWorkLost in all and none is a
// bare pod or marked do-not-disrupt. Only a recorded preemption for
// higher-priority demand may cut such work short.
func (pl *planner) consolidation(w *wnode, nc nodeCost) (string, bool) {
	n := w.n
	attrition := (w.side == SourceYARN && pl.p.YARNDrainByAttrition) || (w.side == SourceK8s && pl.p.CordonAndWait)
	switch {
	case n.GPUsAllocated > nc.knownGPUs:
		// Unknown is never idle: allocated GPUs without the work that
		// holds them listed could be anything.
		return fmt.Sprintf("%d of its %d allocated GPUs are held by work the %s side does not list; unknown work is never idle",
			n.GPUsAllocated-nc.knownGPUs, n.GPUsAllocated, w.side), false
	case w.side == SourceYARN && nc.work > 0:
		// IMPORTANT: every YARN container counts, not only GPU ones: a
		// CPU executor or a 0-GPU ApplicationMaster dies with the node
		// as surely, and an AM takes its whole application with it.
		if attrition {
			return fmt.Sprintf("it runs %s", nc.yarnWork()), true
		}
		return fmt.Sprintf("runs %s; idle reclaim never stops YARN work (yarn_drain_by_attrition is off)", nc.yarnWork()), false
	case budgetBlock(n) != "": // disruption.go
		return budgetBlock(n) + "; a drain would only wait on it", false
	case nc.never != "":
		if attrition {
			return nc.never, true
		}
		return nc.never + "; consolidation never evicts it", false
	case nc.lost > pl.p.MaxWorkLost.D():
		if attrition {
			return nc.batchReason(), true
		}
		return fmt.Sprintf("%s, more than the %s consolidation may lose (consolidation.max_work_lost)", nc.batchReason(), pl.p.MaxWorkLost), false
	}
	return "", false
}

// keep records why an underused node is not reclaimed.
func (pl *planner) keep(node, reason string) {
	pl.kept = append(pl.kept, NodeNote{Node: node, Reason: "not reclaimed: " + reason})
}

// allocation is the fraction of a node's GPUs held by running work.
// moveWork reserves room for node ni's non-system GPU work on other
// schedulable nodes of the same pool and side (same labels, taints and
// model, so the work's constraints hold there too), largest first. Nodes
// that take work are marked touched so they are not reclaimed after it.
// CPU-only work does not keep a GPU node: it goes to CPU nodes.
func (pl *planner) moveWork(ni int32, peers []int32) (int, bool) {
	total := 0
	for _, wl := range pl.nodes[ni].gpuWork() {
		if _, ok := pl.reserveOn(ni, peers, wl.GPUs); !ok {
			return 0, false
		}
		total += wl.GPUs
	}
	return total, true
}

// gpuWork lists the node's non-system GPU workloads, largest first.
func (w *wnode) gpuWork() []*Workload {
	var out []*Workload
	for i := range w.n.Work {
		if x := &w.n.Work[i]; !x.System && x.GPUs > 0 {
			out = append(out, x)
		}
	}
	slices.SortStableFunc(out, func(a, b *Workload) int { return cmp.Compare(b.GPUs, a.GPUs) })
	return out
}

// mayTake reports whether node pi may take g GPUs of node ni's work now:
// another node of the same side, schedulable, not removed, with room.
func (pl *planner) mayTake(ni, pi int32, g int) bool {
	p := &pl.nodes[pi]
	return pi != ni && p.sched && !p.removed && p.side == pl.nodes[ni].side && p.free >= g
}

// reserveOn reserves g GPUs of node ni's work on the first of peers that
// may take them (mayTake), marking it touched, and returns it.
func (pl *planner) reserveOn(ni int32, peers []int32, g int) (int32, bool) {
	for _, pi := range peers {
		if pl.mayTake(ni, pi, g) {
			pl.reserve(pi, g)
			return pi, true
		}
	}
	return 0, false
}

// reserve takes g GPUs of node pi for work moved there, marking it
// touched (so it is not reclaimed after), undoably.
func (pl *planner) reserve(pi int32, g int) {
	p := &pl.nodes[pi]
	wasTouched := p.touched
	p.free -= g
	p.touched = true
	pl.nver[pi]++
	if pl.rec {
		pl.undo = append(pl.undo, func() { p.free += g; p.touched = wasTouched; pl.reopen(pi) })
	}
}

// unmetQueue is one class's admitted demand that got no capacity, in
// admission order.
type unmetQueue struct {
	cls    *dclass
	demand []*wdemand
	seq    []int // admission positions
	head   int
}

// unmet groups admitted demand with unplaced units by class.
func (pl *planner) unmet() []*unmetQueue {
	byClass := make(map[*dclass]*unmetQueue)
	var out []*unmetQueue
	for i, d := range pl.order {
		if d.done || d.placed() >= d.admitted {
			continue
		}
		q := byClass[d.cls]
		if q == nil {
			q = &unmetQueue{cls: d.cls}
			byClass[d.cls] = q
			out = append(out, q)
		}
		q.demand = append(q.demand, d)
		q.seq = append(q.seq, i)
	}
	return out
}

// offer hands underused node ni to the other side when admitted demand
// there is unmet and fits it, in admission order. Gangs must fit whole.
func (pl *planner) offer(ni int32, unmet []*unmetQueue, why string) bool {
	w := &pl.nodes[ni]
	other := SourceYARN
	if w.side == SourceYARN {
		other = SourceK8s
	}
	if !pl.p.OwnershipTransfer || pl.stale(SourceYARN) || pl.stale(SourceK8s) ||
		!pl.pools[w.pool].st.Pool.Sides.Serves(other) || w.n.Protected {
		return false
	}
	tgt := pl.nodeTarget(ni)
	var qs []*unmetQueue
	var pos []int
	for _, q := range unmet {
		for q.head < len(q.demand) && q.demand[q.head].placed() >= q.demand[q.head].admitted {
			q.head++
		}
		if q.cls.src == other && q.head < len(q.demand) && q.cls.c.matches(other, tgt) {
			qs = append(qs, q)
			pos = append(pos, q.head)
		}
	}
	var t *transfer
	free := w.n.GPUsTotal
	for free > 0 {
		// The next demand in admission order among the matching classes.
		k := -1
		for i, q := range qs {
			if pos[i] < len(q.demand) && (k < 0 || q.seq[pos[i]] < qs[k].seq[pos[k]]) {
				k = i
			}
		}
		if k < 0 {
			break
		}
		d := qs[k].demand[pos[k]]
		pos[k]++
		need := d.admitted - d.placed()
		g := d.d.GPUsPerUnit
		units := min(need, free/g)
		if units == 0 || (d.d.Gang && units < need) {
			continue
		}
		if t == nil {
			t = &transfer{node: ni, from: w.n.Owner, to: ownerOf(other), free: w.n.GPUsTotal, reclaimed: why}
			pl.startTransfer(t)
		}
		for range units {
			pl.useTransfer(t, d, g)
		}
		d.acted += units
		free = t.free
	}
	return t != nil
}

// removeNode plans node ni's removal from its pool by action a (a
// scale-down, attrition or migration): the pool and the cluster and
// per-model GPU counts have one node fewer from here on. The one owner of
// that bookkeeping, which every way of taking a node away shares.
func (pl *planner) removeNode(ni int32, a Action) {
	w := &pl.nodes[ni]
	wp := &pl.pools[w.pool]
	pool := &wp.st.Pool
	wp.downs++
	w.removed = true
	pl.clusterGPUs -= pool.GPUsPerNode
	pl.modelGPUs[pool.GPUModel] -= pool.GPUsPerNode
	pl.removals = append(pl.removals, a)
}
