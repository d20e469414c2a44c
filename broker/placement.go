package broker

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// stage limits which capacity a placement pass may use.
type stage int

const (
	stageFree    stage = iota // free GPUs of the demand's side only
	stageOrdered              // in-flight scale-ups that serve this demand
	stageAll                  // everything, in the order of the arbitration rules
)

// dclass is every pending demand of one source with equal constraints: they
// match the same nodes and pools, so matching is done once per class.
type dclass struct {
	src Source
	c   *Constraints

	// maxUnit is the most GPUs per unit any matching pool (that may grow)
	// or node of the right side offers; demand asking more is unsatisfiable.
	maxUnit int
	// matched is true when any pool or node serving src matches at all.
	matched bool
	// startFree is the most free GPUs on one matching node of side src
	// before this plan placed anything.
	startFree int

	pools  []int   // matching pools that may serve src, in name order
	own    []int32 // matching schedulable nodes of side src
	ownSet []bool  // by node index
	xall   []int32 // matching nodes of the other side in pools that may serve src
	xSet   []bool  // by node index

	// Consumable lists: nodes leave them when used up and come back when
	// a rollback or a preemption gives capacity back (reopen).
	free     []int32 // own nodes that may still have free GPUs
	inFree   []bool  // by node index
	freeFail int     // smallest GPUs per unit no free node fits; 0 when none failed
	xfer     []int32 // transfer candidates not used yet
	inXfer   []bool
	xferFail int
	pfail    []pfail // preemption that found no victims
	// pheaps hold candidate nodes for preemption, per query (preempt.go).
	pheaps map[pkey]*pheap
}

// pfail records that no preemption could free gpus GPUs for demand at prio;
// demand asking at least as much at no higher priority cannot succeed either.
type pfail struct {
	gpus int
	prio int64
}

// newClass matches one class against every pool and node.
func (pl *planner) newClass(src Source, c *Constraints) *dclass {
	cl := &dclass{src: src, c: c, ownSet: make([]bool, len(pl.nodes)), xSet: make([]bool, len(pl.nodes))}
	for i := range pl.pools {
		pool := &pl.pools[i].st.Pool
		if !pool.Sides.Serves(src) || !c.matches(src, poolTarget(pool)) {
			continue
		}
		cl.matched = true
		cl.pools = append(cl.pools, i)
		if pool.MaxNodes > 0 && pool.Units() > cl.maxUnit {
			cl.maxUnit = pool.Units()
		}
	}
	for i := range pl.nodes {
		w := &pl.nodes[i]
		n := w.n
		if n.Phase == PhaseTerminating || n.Phase == PhaseGone {
			continue
		}
		poolServes := w.pool >= 0 && pl.pools[w.pool].st.Pool.Sides.Serves(src)
		ownSide := w.owned && w.side == src
		if !ownSide && !poolServes {
			continue
		}
		if !c.matches(src, pl.nodeTarget(int32(i))) {
			continue
		}
		cl.matched = true
		if n.GPUsTotal > cl.maxUnit {
			cl.maxUnit = n.GPUsTotal
		}
		switch {
		case ownSide && w.sched:
			cl.own = append(cl.own, int32(i))
			cl.ownSet[i] = true
			cl.startFree = max(cl.startFree, w.free)
		case (w.owned && !ownSide || w.stranded) && poolServes:
			cl.xall = append(cl.xall, int32(i))
			cl.xSet[i] = true
		}
	}
	cl.free, cl.inFree = slices.Clone(cl.own), slices.Clone(cl.ownSet)
	cl.xfer, cl.inXfer = slices.Clone(cl.xall), slices.Clone(cl.xSet)
	return cl
}

// reopen makes node ni visible again to every class after it got capacity
// back: free GPUs (a rollback, or a preemption that freed more than the
// preemptor needs), its idleness (a rolled-back transfer) or victims (a
// rolled-back preemption). Failure caches of those classes are dropped and
// the node gets fresh entries in their preemption heaps.
func (pl *planner) reopen(ni int32) {
	pl.nver[ni]++
	var buf []int
	for _, c := range pl.classes {
		if c.ownSet[ni] {
			if !c.inFree[ni] {
				c.inFree[ni] = true
				c.free = append(c.free, ni)
			}
			c.freeFail = 0
			c.pfail = nil
			for k, h := range c.pheaps {
				idx, cost, ok := pl.candidate(ni, k, buf)
				buf = idx
				if ok {
					h.push(pitem{cost: cost, ni: ni, ver: pl.nver[ni]})
				}
			}
		}
		if c.xSet[ni] {
			if !c.inXfer[ni] {
				c.inXfer[ni] = true
				c.xfer = append(c.xfer, ni)
			}
			c.xferFail = 0
			c.pfail = nil // preemption across sides may use it again
		}
	}
}

// unsatisfiable explains why no pool or node could ever serve gpus per unit.
func (c *dclass) unsatisfiable(gpus int) string {
	if !c.matched {
		return fmt.Sprintf("no pool or node that may serve %s matches its constraints (%s)", c.src, describeConstraints(c.c))
	}
	if c.maxUnit == 0 {
		return fmt.Sprintf("the pools that match its constraints (%s) may not grow (max 0 nodes) and no matching node exists", describeConstraints(c.c))
	}
	if c.c.MIGProfile != "" {
		return fmt.Sprintf("it needs %d MIG %s devices per unit; the largest matching pool or node offers %d", gpus, c.c.MIGProfile, c.maxUnit)
	}
	return fmt.Sprintf("it needs %d GPUs per unit; the largest matching pool or node offers %d", gpus, c.maxUnit)
}

func describeConstraints(c *Constraints) string {
	var parts []string
	if len(c.GPUModels) > 0 {
		parts = append(parts, "models "+strings.Join(c.GPUModels, "|"))
	}
	for k, v := range c.NodeSelector {
		parts = append(parts, k+"="+v)
	}
	if len(c.Affinity) > 0 {
		parts = append(parts, fmt.Sprintf("%d affinity terms", len(c.Affinity)))
	}
	if c.NodeLabel != "" {
		parts = append(parts, "YARN node label "+c.NodeLabel)
	}
	if c.MIGProfile != "" {
		parts = append(parts, "MIG devices of profile "+c.MIGProfile+" (a pool with mig.profile "+c.MIGProfile+")")
	}
	if c.MinGPUMemoryMiB > 0 {
		parts = append(parts, fmt.Sprintf("GPUs of at least %d MiB (a pool whose gpu_memory says so)", c.MinGPUMemoryMiB))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rung is one way to give a unit of demand its GPUs. placeDemand tries the
// rungs of ladder in order for each unit; the order is the arbitration
// rules' (docs/design.md), and the README's list is generated from it
// (PlacementLadder).
type rung struct {
	name, doc string
	// from is the first placement stage the rung is tried in.
	from stage
	// only, when set, limits the rung to the demand it holds for.
	only func(d *wdemand) bool
	take func(pl *planner, d *wdemand, g int) bool
	// count tallies the unit where it was placed.
	count func(d *wdemand)
}

func countFree(d *wdemand)     { d.free++ }
func countInFlight(d *wdemand) { d.inflight++ }
func countActed(d *wdemand)    { d.acted++ }

var ladder = [...]rung{
	{name: "free", doc: "free GPUs of a schedulable node of its own side", from: stageFree, take: (*planner).takeFree, count: countFree},
	{name: "ordered", doc: "capacity an open scale-up ordered for it", from: stageOrdered, take: (*planner).takeOrdered, count: countInFlight},
	{name: "cancel", doc: "a node its side is draining for a scale-down, or emptying for a migration that still waits for checkpoints, the op cancelled", from: stageAll, take: (*planner).takeCancel, count: countActed},
	{name: "transfer", doc: "an idle node of the other side (or one neither side owns), handed over", from: stageAll, take: (*planner).takeTransfer, count: countActed},
	{name: "preempt-tight", doc: "for work that may not itself be preempted (LS, Guaranteed): lower-priority preemptible work stopped that frees just its GPUs and loses at most max_work_lost, before waiting for a node to boot (a grace is seconds, a boot minutes)",
		from: stageAll, only: func(d *wdemand) bool { return !d.d.Preemptible }, take: (*planner).preemptTight, count: countActed},
	{name: "slot", doc: "capacity already on its way to a matching pool", from: stageAll, take: (*planner).takeSlot, count: countInFlight},
	{name: "new", doc: "a node this plan already adds to a matching pool", from: stageAll, take: (*planner).takeNew, count: countActed},
}

// PlacementLadder lists, in order, where the planner looks for a unit of
// admitted demand: the ladder's rungs, then the two ways that may take
// several units at once.
func PlacementLadder() string {
	var b strings.Builder
	for i, r := range ladder {
		fmt.Fprintf(&b, "%d. %s: %s\n", i+1, r.name, r.doc)
	}
	fmt.Fprintf(&b, "%d. buy: new nodes in the pool the expander chooses, within the pool's, the model's and the cluster's max\n", len(ladder)+1)
	fmt.Fprintf(&b, "%d. preempt: strictly lower-priority preemptible work, cheapest victims first, on either side\n", len(ladder)+2)
	return b.String()
}

// placeDemand places the admitted units of d that are not placed yet, using
// the capacity stage allows. A gang that does not get all its units is
// rolled back.
func (pl *planner) placeDemand(d *wdemand, st stage) {
	if d.done || d.admitted == 0 {
		return
	}
	need := d.admitted - d.placed()
	if need == 0 {
		return
	}
	g := d.d.GPUsPerUnit
	// Only a gang is ever rolled back, so only a gang records how to.
	pl.undo, pl.rec = pl.undo[:0], d.d.Gang
	mark := 0
	saved := *d
	// Each rung that found nothing for one unit is not tried again for
	// the next: nothing it looks at got better meanwhile.
	var failed [len(ladder)]bool
	for need > 0 {
		ok := false
		for i := range ladder {
			r := &ladder[i]
			if failed[i] || st < r.from || r.only != nil && !r.only(d) {
				continue
			}
			if ok = r.take(pl, d, g); ok {
				r.count(d)
				break
			}
			failed[i] = true
		}
		if !ok {
			break
		}
		need--
	}
	if st == stageAll && need > 0 {
		need -= pl.buy(d, g, need)
		for need > 0 {
			// GPUs a preemption freed beyond one unit serve the next.
			if pl.takeFree(d, g) {
				d.free++
			} else if pl.preempt(d, g) {
				d.acted++
			} else {
				break
			}
			need--
		}
	}
	if need == 0 {
		return
	}
	if st != stageAll {
		if d.d.Gang { // all units or none
			pl.rollback(mark)
			*d = saved
		}
		return
	}
	reason, detail := pl.diagnose(d, g)
	why, held := pl.heldByOrder(d, g)
	if held {
		reason, detail = WaitInFlight, why
	}
	if d.d.NoPreempt && pl.p.Preemption {
		detail += "; it never preempts other work (preemptionPolicy: Never)"
	}
	if !d.d.Gang {
		d.reason, d.detail = reason, detail
		return
	}
	placed := d.placed()
	pl.rollback(mark)
	*d = saved
	d.reason = WaitGang
	if held {
		// It waits for the op that serves it, whole or not.
		d.reason = WaitInFlight
	}
	d.detail = fmt.Sprintf("only %d of the gang's %d units fit; %s: %s", placed, d.d.Units, reason, detail)
}

// rollback undoes every reservation made since mark.
func (pl *planner) rollback(mark int) {
	if len(pl.undo) == mark {
		return
	}
	for i := len(pl.undo) - 1; i >= mark; i-- {
		pl.undo[i]()
	}
	pl.undo = pl.undo[:mark]
}

// takeFree reserves g free GPUs on a matching node of the demand's side.
func (pl *planner) takeFree(d *wdemand, g int) bool {
	c := d.cls
	if c.freeFail > 0 && g >= c.freeFail {
		return false
	}
	list := c.free
	w := 0
	for r := 0; r < len(list); r++ {
		ni := list[r]
		n := &pl.nodes[ni]
		if n.free <= 0 || n.removed {
			c.inFree[ni] = false
			continue
		}
		list[w] = ni
		w++
		if n.free < g {
			continue
		}
		w += copy(list[w:], list[r+1:])
		c.free = list[:w]
		n.free -= g
		pl.nver[ni]++
		wasTouched := n.touched
		n.touched = true
		if pl.rec {
			pl.undo = append(pl.undo, func() { n.free += g; n.touched = wasTouched; pl.reopen(ni) })
		}
		if d.firstFree == "" {
			d.firstFree = n.n.Name
		}
		return true
	}
	c.free = list[:w]
	if c.freeFail == 0 || g < c.freeFail {
		c.freeFail = g
	}
	return false
}

// takeOrdered reserves g GPUs on a node that an in-flight scale-up ordered
// for this demand.
func (pl *planner) takeOrdered(d *wdemand, g int) bool {
	for _, op := range d.ops {
		if op.Kind != ActScaleUp {
			continue
		}
		pi, ok := pl.poolIdx[op.Pool]
		if !ok {
			continue
		}
		// IMPORTANT: a machine of a shared pool boots into one side and is
		// handed to the other once ready (a transfer of the idle node), so
		// the node ordered for this demand still serves it after it
		// registered with the other side; counting it for that side only
		// would buy a second node for the demand (found by test/chaos,
		// seed 8: the second node idled and was scaled down).
		other := pl.p.OwnershipTransfer && pl.pools[pi].st.Pool.Sides.Serves(d.d.Source)
		if pl.takeSlotIn(pi, g, d.d.Source, other) {
			if d.firstInflight == "" {
				d.firstInflight = fmt.Sprintf("op %d scaling pool %s to %d", op.ID, op.Pool, op.Target)
			}
			return true
		}
	}
	return false
}

// takeSlot reserves g GPUs on an in-flight node of a matching pool: the
// best fit of all (pickSlot), so that where a unit waits does not depend on
// the order of the pools, nor change when another node is ordered.
func (pl *planner) takeSlot(d *wdemand, g int) bool {
	bp, bs, br := -1, -1, 0
	for _, pi := range d.cls.pools {
		si, r := pl.pickSlot(pi, g, d.d.Source, false)
		if si < 0 {
			continue
		}
		if bp < 0 || r < br || r == br && pl.pools[pi].slots[si].free < pl.pools[bp].slots[bs].free {
			bp, bs, br = pi, si, r
		}
	}
	if bp < 0 {
		return false
	}
	pl.claimSlot(bp, bs, g, d.d.Source)
	if d.firstInflight == "" {
		d.firstInflight = fmt.Sprintf("a node ordered in pool %s", pl.pools[bp].st.Pool.Name)
	}
	return true
}

// takeSlotIn reserves g GPUs of src's demand on an in-flight node of pool
// pi (pickSlot).
func (pl *planner) takeSlotIn(pi, g int, src Source, across bool) bool {
	si, _ := pl.pickSlot(pi, g, src, across)
	if si < 0 {
		return false
	}
	pl.claimSlot(pi, si, g, src)
	return true
}

// pickSlot chooses the in-flight node of pool pi on which src's demand
// counts g GPUs, and its rank: first (0) a node this plan already counts
// for src, then (1) one no demand counted on yet that registered with src
// or with no side, then, when across is set, (2) one that registered with
// the other side (handed to src once ready); within a rank the one with
// the fewest free GPUs that fit. It returns -1 when none fits.
//
// IMPORTANT: a node serves one side, so once demand of one side counts on a
// node on its way, the GPUs it leaves there are no capacity for the other
// side (claimSlot). Counting them for both let demand of both sides wait
// on one node: when it came up, one side's demand had no capacity and
// bought again while the scale-up that ordered the node still served it
// (found by test/chaos, seed 8: the extra node idled and was scaled down).
func (pl *planner) pickSlot(pi, g int, src Source, across bool) (int, int) {
	wp := &pl.pools[pi]
	best, rank := -1, 3
	for i := range wp.slots {
		sl := &wp.slots[i]
		if sl.free < g {
			continue
		}
		var r int
		switch {
		case sl.serve == src:
			r = 0
		case sl.serve != "":
			continue
		case sl.side == "" || sl.side == src:
			r = 1
		case across:
			r = 2
		default:
			continue
		}
		if r < rank || r == rank && sl.free < wp.slots[best].free {
			best, rank = i, r
		}
	}
	return best, rank
}

// claimSlot counts g GPUs of src's demand on in-flight node si of pool pi,
// which then serves src alone.
func (pl *planner) claimSlot(pi, si, g int, src Source) {
	sl := &pl.pools[pi].slots[si]
	was := sl.serve
	sl.free -= g
	sl.serve = src
	if pl.rec {
		pl.undo = append(pl.undo, func() { sl.free += g; sl.serve = was })
	}
}

// takeTransfer reserves g GPUs on an idle node of the other side that this
// plan hands over: first one already being handed to this side, then a new one.
func (pl *planner) takeTransfer(d *wdemand, g int) bool {
	to := ownerOf(d.d.Source)
	for _, t := range pl.transfers {
		// A node taken by preemption serves only demand that outranks its
		// victims (preemptAcross).
		if t.victims == nil && t.to == to && t.free >= g && d.cls.c.matches(d.d.Source, pl.nodeTarget(t.node)) {
			pl.useTransfer(t, d, g)
			return true
		}
	}
	c := d.cls
	if !pl.p.OwnershipTransfer || pl.stale(SourceYARN) || pl.stale(SourceK8s) {
		return false
	}
	if c.xferFail > 0 && g >= c.xferFail {
		return false
	}
	list := c.xfer
	w := 0
	for r := 0; r < len(list); r++ {
		ni := list[r]
		n := &pl.nodes[ni]
		if !n.sched && !n.stranded || !n.idle || n.touched || n.removed || n.n.Protected {
			c.inXfer[ni] = false
			continue
		}
		list[w] = ni
		w++
		if n.n.GPUsTotal < g {
			continue
		}
		w += copy(list[w:], list[r+1:])
		c.xfer = list[:w]
		t := &transfer{node: ni, from: n.n.Owner, to: to, free: n.n.GPUsTotal}
		pl.startTransfer(t)
		pl.useTransfer(t, d, g)
		return true
	}
	c.xfer = list[:w]
	if c.xferFail == 0 || g < c.xferFail {
		c.xferFail = g
	}
	return false
}

func ownerOf(s Source) Owner {
	if s == SourceYARN {
		return OwnerYARN
	}
	return OwnerK8s
}

func (pl *planner) nodeTarget(ni int32) target {
	w := &pl.nodes[ni]
	var pool *Pool
	if w.pool >= 0 {
		pool = &pl.pools[w.pool].st.Pool
	}
	return nodeTargetOf(w.n, w.model, pool)
}

// takeNew reserves g GPUs on a node this plan already adds to a matching pool.
func (pl *planner) takeNew(d *wdemand, g int) bool {
	for _, pi := range d.cls.pools {
		if !pl.mayBuyIn(d, pi) {
			continue
		}
		wp := &pl.pools[pi]
		for i, f := range wp.newFree {
			if f >= g {
				wp.newFree[i] -= g
				if pl.rec {
					pl.undo = append(pl.undo, func() { wp.newFree[i] += g })
				}
				pl.servePool(pi, d, g)
				return true
			}
		}
	}
	return false
}

// mayBuyIn reports whether d may buy nodes in pool pi.
//
// IMPORTANT: demand that an open scale-up serves buys in no other pool
// while that op is open: the planner never buys twice for one demand. The
// op's pool is allowed (the executor supersedes the open op with the new
// one, which keeps serving the demand, so one op serves it). When the node
// ordered for it is gone to other work (new machines join Kubernetes
// schedulable, and its pods may take a node ordered for YARN demand
// before it is handed over), the demand waits for the op to end (its
// pool's machines gpu-ready, or its deadline) and is planned again; free
// GPUs, idle nodes of the other side, other capacity on its way and
// preemption still serve it meanwhile.
func (pl *planner) mayBuyIn(d *wdemand, pi int) bool {
	return len(d.upPools) == 0 || slices.Contains(d.upPools, pi)
}

// heldByOrder says, for demand an open scale-up serves and that found no
// capacity, which op keeps it from buying in a pool that has room for g
// GPUs per unit (mayBuyIn); false when no such pool would have served it.
func (pl *planner) heldByOrder(d *wdemand, g int) (string, bool) {
	if len(d.upPools) == 0 {
		return "", false
	}
	for _, pi := range d.cls.pools {
		wp := &pl.pools[pi]
		if pl.mayBuyIn(d, pi) || wp.st.Pool.Units() < g || wp.backoff != "" || pl.headroom(pi) == 0 {
			continue
		}
		for _, op := range d.ops {
			if op.Kind == ActScaleUp {
				return fmt.Sprintf("scale-up op %d of pool %s was ordered for it and is still open (step %q), but its capacity no longer fits it (the node ordered for it went to other work, or it asks for more now); it buys in another pool only once that op has ended, so it is never bought for twice",
					op.ID, op.Pool, op.Step), true
			}
		}
	}
	return "", false
}

// servePool records that nodes added to pool pi serve d.
func (pl *planner) servePool(pi int, d *wdemand, g int) {
	wp := &pl.pools[pi]
	n := len(wp.serves)
	if n == 0 || wp.serves[n-1] != d.id {
		wp.serves = append(wp.serves, d.id)
	}
	wp.gpusFor += g
	if pl.rec {
		pl.undo = append(pl.undo, func() { wp.serves = wp.serves[:n]; wp.gpusFor -= g })
	}
}

// headroom returns how many nodes pool pi may still add within its max,
// the cluster GPU max and its model's GPU max.
func (pl *planner) headroom(pi int) int {
	wp := &pl.pools[pi]
	pool := &wp.st.Pool
	h := pool.MaxNodes - wp.size - wp.add
	if pool.GPUsPerNode > 0 {
		h = min(h, (pl.p.ClusterMaxGPUs-pl.clusterGPUs)/pool.GPUsPerNode)
		if mm, ok := pl.p.ModelMaxGPUs[pool.GPUModel]; ok {
			h = min(h, (mm-pl.modelGPUs[pool.GPUModel])/pool.GPUsPerNode)
		}
	}
	return max(h, 0)
}

// option is one pool the expander may grow for a demand.
type option struct {
	pool  int
	nodes int
	units int
	waste int // GPUs left idle on the added nodes
}

// buy adds nodes for up to need units of d, choosing pools with the
// policy's expander, and returns the units placed.
func (pl *planner) buy(d *wdemand, g, need int) int {
	placed := 0
	for need > 0 {
		best, ok := pl.expand(d, g, need)
		if !ok {
			break
		}
		wp := &pl.pools[best.pool]
		gpn, phys := wp.st.Pool.Units(), wp.st.Pool.GPUsPerNode
		per := gpn / g
		left := best.units
		for k := 0; k < best.nodes; k++ {
			u := min(per, left)
			left -= u
			wp.newFree = append(wp.newFree, gpn-u*g)
		}
		wp.add += best.nodes
		pl.capVer++
		pl.clusterGPUs += best.nodes * phys
		pl.modelGPUs[wp.st.Pool.GPUModel] += best.nodes * phys
		nodes := best.nodes
		if pl.rec {
			pl.undo = append(pl.undo, func() {
				wp.newFree = wp.newFree[:len(wp.newFree)-nodes]
				wp.add -= nodes
				pl.capVer++
				pl.clusterGPUs -= nodes * phys
				pl.modelGPUs[wp.st.Pool.GPUModel] -= nodes * phys
			})
		}
		pl.servePool(best.pool, d, best.units*g)
		d.acted += best.units
		placed += best.units
		need -= best.units
	}
	return placed
}

// expand picks the pool to grow for need units of g GPUs. Every expander
// prefers pools that place all the units (one scale-up, and a gang stays
// whole), then applies its own rule, then the least waste, then pool order.
func (pl *planner) expand(d *wdemand, g, need int) (option, bool) {
	var best option
	found := false
	for _, pi := range d.cls.pools {
		wp := &pl.pools[pi]
		gpn := wp.st.Pool.Units()
		if gpn < g || wp.backoff != "" || !pl.mayBuyIn(d, pi) {
			continue
		}
		h := pl.headroom(pi)
		if h == 0 {
			continue
		}
		per := gpn / g
		nodes := min((need+per-1)/per, h)
		units := min(need, nodes*per)
		o := option{pool: pi, nodes: nodes, units: units, waste: nodes*gpn - units*g}
		if !found || pl.better(o, best, need) {
			best, found = o, true
		}
	}
	return best, found
}

// better reports whether option a beats b under the policy's expander.
func (pl *planner) better(a, b option, need int) bool {
	if ac, bc := a.units == need, b.units == need; ac != bc {
		return ac
	}
	pa, pb := &pl.pools[a.pool].st.Pool, &pl.pools[b.pool].st.Pool
	switch pl.p.Expander {
	case ExpanderMostPods:
		if a.units != b.units {
			return a.units > b.units
		}
	case ExpanderPriority:
		if pa.ExpanderPriority != pb.ExpanderPriority {
			return pa.ExpanderPriority > pb.ExpanderPriority
		}
	case ExpanderPrice:
		ca, cb := pa.PricePerHour/float64(pa.Units()), pb.PricePerHour/float64(pb.Units())
		if ca != cb {
			return ca < cb
		}
	default: // least-waste: the smallest fraction of added GPUs left idle
		fa := float64(a.waste) / float64(a.nodes*pa.Units())
		fb := float64(b.waste) / float64(b.nodes*pb.Units())
		if fa != fb {
			return fa < fb
		}
	}
	if a.waste != b.waste {
		return a.waste < b.waste
	}
	if a.units != b.units {
		return a.units > b.units
	}
	return a.pool < b.pool
}

// diagKey and diagVal cache diagnoses: the answer depends only on the
// class, the GPUs per unit and the pools' growth so far (capVer).
type diagKey struct {
	cls  *dclass
	gpus int
}

type diagVal struct {
	ver    int
	reason WaitReason
	detail string
}

// diagnose says why units of d that need g GPUs each got no capacity.
func (pl *planner) diagnose(d *wdemand, g int) (WaitReason, string) {
	k := diagKey{d.cls, g}
	if v, ok := pl.diag[k]; ok && v.ver == pl.capVer {
		return v.reason, v.detail
	}
	reason, detail := pl.diagnoseNow(d, g)
	pl.diag[k] = diagVal{pl.capVer, reason, detail}
	return reason, detail
}

func (pl *planner) diagnoseNow(d *wdemand, g int) (WaitReason, string) {
	var backoff, atMax, clusterMax, room []string
	for _, pi := range d.cls.pools {
		wp := &pl.pools[pi]
		pool := &wp.st.Pool
		if pool.Units() < g || pool.MaxNodes == 0 {
			continue
		}
		switch {
		case wp.backoff != "":
			backoff = append(backoff, fmt.Sprintf("%s (%s)", pool.Name, wp.backoff))
		case pool.Fleet():
			atMax = append(atMax, fmt.Sprintf("fleet pool %s has its %d hosts in use and buys none: waiting for a node of the fleet to be handed over (none is idle on the other side)", pool.Name, wp.size))
		case wp.size+wp.add >= pool.MaxNodes:
			atMax = append(atMax, fmt.Sprintf("%s at %d of %d nodes", pool.Name, wp.size+wp.add, pool.MaxNodes))
			if wp.size < pool.MaxNodes {
				room = append(room, pool.Name)
			}
		default:
			reason := fmt.Sprintf("%s: cluster at %d of %d GPUs", pool.Name, pl.clusterGPUs, pl.p.ClusterMaxGPUs)
			if mm, ok := pl.p.ModelMaxGPUs[pool.GPUModel]; ok && pl.modelGPUs[pool.GPUModel]+pool.GPUsPerNode > mm {
				reason = fmt.Sprintf("%s: %s at %d of %d GPUs", pool.Name, pool.GPUModel, pl.modelGPUs[pool.GPUModel], mm)
			}
			clusterMax = append(clusterMax, reason)
			mm, capped := pl.p.ModelMaxGPUs[pool.GPUModel]
			if pl.clusterStartGPUs+pool.GPUsPerNode <= pl.p.ClusterMaxGPUs &&
				(!capped || pl.modelStartGPUs[pool.GPUModel]+pool.GPUsPerNode <= mm) {
				room = append(room, pool.Name)
			}
		}
	}
	var reason WaitReason
	var detail string
	switch {
	case len(room) > 0:
		reason = WaitPriority
		detail = "higher-priority demand in this plan took the room in pools " + strings.Join(room, ", ")
	case d.cls.startFree >= g:
		reason = WaitPriority
		detail = fmt.Sprintf("higher-priority demand in this plan took the free GPUs on matching %s nodes", d.d.Source)
	case len(backoff) > 0:
		reason, detail = WaitBackoff, "fitting pools back off: "+strings.Join(backoff, "; ")
	case len(clusterMax) > 0:
		reason, detail = WaitClusterMax, "GPU max reached: "+strings.Join(clusterMax, "; ")
	case len(atMax) > 0:
		reason, detail = WaitPoolMax, "fitting pools are at max: "+strings.Join(atMax, "; ")
	default:
		reason = WaitPoolMax
		detail = fmt.Sprintf("no pool with %d or more GPUs per node may add nodes for it, and matching %s nodes are full", g, d.d.Source)
	}
	if pl.p.Preemption && (reason == WaitPoolMax || reason == WaitClusterMax) {
		detail += fmt.Sprintf("; no lower-priority preemptible work on matching %s nodes frees %d GPUs", d.d.Source, g)
		reason = WaitNoPreemptible
	}
	if pl.xferOff != "" {
		detail += "; " + pl.xferOff
	}
	return reason, detail
}

// preemptTight is the preemption that work which may not itself be
// preempted (LS, Guaranteed) tries before it waits for a node to boot: on
// its own side, and only where the victims free no more GPUs than it takes,
// so no GPUs stand idle on the node until other work lands, and lose no
// more work than consolidation may (MaxWorkLost, cost.go). Any other
// preemption waits until capacity cannot be bought (preempt, after buy).
func (pl *planner) preemptTight(d *wdemand, g int) bool {
	if !pl.p.Preemption || pl.stale(d.d.Source) || d.d.NoPreempt {
		return false
	}
	rec, mark := pl.rec, len(pl.undo)
	pl.rec = true
	ok := pl.preemptOwn(d, g)
	if ok {
		last := pl.preempts[len(pl.preempts)-1]
		var lost time.Duration
		for i := range last.Victims {
			lost = addLost(lost, last.Victims[i].lost(pl.now))
		}
		if ni, found := pl.nodeIdx[last.Node]; !found || pl.nodes[ni].free > 0 || lost > pl.p.MaxWorkLost.D() {
			pl.rollback(mark)
			ok = false
		}
	}
	if !rec {
		pl.undo = pl.undo[:mark]
	}
	pl.rec = rec
	return ok
}
