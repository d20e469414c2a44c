package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// MakePlan is the planner: a pure, deterministic function of a snapshot and
// a policy. It returns the actions to take, each with a reason and the demand
// it serves, and one Wait for every pending demand that no action serves.
// It never modifies the snapshot, and the order of the snapshot's slices
// does not change the plan. (The function cannot be called Plan: that is the
// name of its result type; Snapshot.Plan is the method form.)
//
// The steps, following docs/design.md's arbitration rules:
//  1. demand on a stale side waits; demand no pool or node could ever serve
//     is unsatisfiable and never buys;
//  2. quota admits demand in order (quota.go);
//  3. placement, in admission order: free GPUs of its side, capacity already
//     ordered for it, idle nodes of the other side, other in-flight capacity,
//     new nodes, preemption (placement.go, preempt.go); gangs get all their
//     units or none; a node on its way serves one side, and demand an open
//     scale-up serves buys in no other pool while it is open;
//  4. unhealthy nodes are replaced and underused nodes reclaimed, offered to
//     the other side first (scaledown.go).
//
// Placement runs in three passes over the admitted demand so that no
// demand takes another side's idle node or buys one while its own side's
// free GPUs, or capacity ordered for it, could serve later demand.
//
// Conventions the planner relies on: a tenant missing from Snapshot.Tenants
// has no quota; a node is unhealthy only when Healthy is false and
// HealthReason says why; ClusterMinGPUs is a floor for scale-down (as the
// cluster autoscaler's minimum), not a target to grow to; a pool below its
// MinNodes is grown back to it; duplicate demand IDs, node names or pool
// names keep one entry each.
func MakePlan(s *Snapshot, p Policy) Plan {
	pl := newPlanner(s, p.WithDefaults())
	pl.resumeAttrition()
	pl.place()
	pl.reclaim()
	out := pl.result()
	out.Kept = pl.kept
	return out
}

// Plan is MakePlan as a method: s.Plan(policy).
func (s *Snapshot) Plan(p Policy) Plan { return MakePlan(s, p) }

// planner is the working copy of one plan. It points into the snapshot but
// never writes through those pointers.
type planner struct {
	s       *Snapshot
	p       Policy
	now     time.Time
	maxProv time.Duration

	nodes   []wnode // sorted by name
	nodeIdx map[string]int
	pools   []wpool // sorted by name
	poolIdx map[string]int
	demand  []*wdemand // sorted by priority, age, ID
	byID    []*wdemand // the same, sorted by ID
	order   []*wdemand // admitted demand in admission order
	classes map[string]*dclass

	clusterGPUs      int // GPUs of all pools at their size, plus planned additions
	clusterStartGPUs int
	modelGPUs        map[string]int
	modelStartGPUs   map[string]int

	// capVer counts changes to pool growth; diag caches diagnoses by it.
	capVer int
	diag   map[diagKey]diagVal

	// nver counts changes to each node's capacity (preempt.go's heaps).
	nver []uint32

	transfers []*transfer
	preempts  []Action
	removals  []Action       // scale-down and replace, in decision order
	kept      []NodeNote     // underused nodes reclaim keeps, and why (scaledown.go)
	apps      map[string]int // work per Workload.App on all nodes, built lazily (preempt.go)
	// appNodes lists the nodes each Workload.App has non-AM work on,
	// built lazily (migrate.go); migrated counts the tasks this plan
	// migrates.
	appNodes map[string][]string
	migrated int
	// landOn caches mayRunOn per class of constraints (migrate.go).
	landOn map[string][]int32
	xvict  []xvictim // per node: what taking it across sides evicts (preempt.go)
	// undo holds how to roll back the reservations made for the demand
	// being placed, while rec is set.
	undo []func()
	rec  bool
	// staleYARN and staleK8s repeat the snapshot's Stale map.
	staleYARN, staleK8s bool

	// overdue are in-flight nodes past the max provision time (lifecycle.go).
	overdue []int32
	// cancelable are nodes whose scale-down has not reached the cloud yet,
	// with the side they are being drained from (lifecycle.go).
	cancelable []cancelable
	cancels    []*cancelScaleDown
	// xferOff says why ownership transfer is off beyond the policy (a side
	// without actions), for wait details; empty otherwise.
	xferOff string
}

// wnode is a node in the working copy.
type wnode struct {
	n     *Node
	pool  int // -1 when the node is in no known pool
	side  Source
	owned bool   // side is set (Owner is yarn or k8s)
	model string // the node's GPU model, or its pool's
	free  int    // working free GPUs
	sched bool   // its scheduler may place work on it now
	// stranded: neither side owns it nor does an op hold it, it runs
	// nothing and has settled (StrandedSettle): it may be handed to
	// either side its pool serves, as an idle node of the other side is.
	stranded bool
	idle     bool // no non-system work and nothing allocated
	busy     bool // an in-flight op acts on it
	touched  bool // this plan reserved, preempted or moved something on it
	removed  bool // this plan scales it down, replaces or transfers it

	xfer    *transfer // set when this plan hands it to the other side
	victims []victim  // preemptible work, cheapest first; built lazily
	vbuilt  bool
}

// wpool is a pool in the working copy.
type wpool struct {
	st *PoolState
	// size is the larger of the desired capacity and the targets of
	// in-flight scale-ups: the nodes the pool has or is getting.
	size int
	// pendingDown counts in-flight scale-downs and replacements whose node
	// is not terminating yet: the desired capacity will drop by that much.
	pendingDown int
	add         int    // nodes this plan adds
	minAdd      int    // of which, nodes that restore the pool's minimum
	slots       []slot // in-flight nodes
	// sides of in-flight nodes that already registered with a side.
	inflightSides []Source
	newFree       []int // free GPUs of each node this plan adds
	backoff       string
	// stale repeats PoolState.Stale: nothing destructive, no growth.
	stale string
	// inflightNodes counts the pool's machines on their way (not overdue).
	inflightNodes int
	// unlaunched counts desired nodes of a pool in backoff that have no
	// machine: not on their way, yet still ordered until handed back.
	unlaunched int
	serves     []string
	gpusFor    int // GPUs of demand the added nodes serve
	downs      int // scale-downs this plan takes
}

// slot is an in-flight node's capacity: free GPUs, the side it already
// registered with (empty when it may still serve either), and the side this
// plan counts it for once any demand counted on it. A node serves one side
// (each side schedules on its own nodes), so the GPUs one side's demand
// leaves on it are no capacity for the other side's.
type slot struct {
	free  int
	side  Source
	serve Source
}

// wdemand is a pending demand in the working copy, with its outcome.
type wdemand struct {
	d   *Demand
	id  string
	cls *dclass

	prio int64 // Priority and FirstSeen, for fast ordering
	sec  int64
	nsec int

	tq         *tenantQuota
	ops        []*Op // in-flight ops that serve it
	admitted   int
	guaranteed bool
	quotaUsage int // the tenant's usage when this demand was not (fully) admitted

	free, inflight, acted int // units placed on each kind of capacity
	firstFree             string
	firstInflight         string
	reason                WaitReason
	detail                string
	done                  bool // a wait was decided before placement

	// upPools are the pools of the in-flight scale-ups that serve it: while
	// one is open, the demand buys in no other pool (mayBuyIn).
	upPools []int
}

func (d *wdemand) placed() int { return d.free + d.inflight + d.acted }

// newPlanner builds the working copy: nodes and pools sorted by name,
// in-flight ops applied, demand classified and sorted.
func newPlanner(s *Snapshot, p Policy) *planner {
	pl := &planner{
		s:         s,
		p:         p,
		now:       s.Now,
		maxProv:   p.MaxProvisionTime.D(),
		nodeIdx:   make(map[string]int, len(s.Nodes)),
		poolIdx:   make(map[string]int, len(s.Pools)),
		classes:   make(map[string]*dclass),
		modelGPUs: make(map[string]int),
		staleYARN: s.IsStale(SourceYARN),
		staleK8s:  s.IsStale(SourceK8s),
		diag:      make(map[diagKey]diagVal),
	}
	if len(s.NoActions) > 0 && pl.p.OwnershipTransfer {
		// IMPORTANT: a node cordoned for a side that cannot admit it (or
		// taken from one that cannot release it) would be stranded.
		pl.p.OwnershipTransfer = false
		var why []string
		for _, src := range Sources {
			if r, ok := s.NoActions[src]; ok {
				why = append(why, fmt.Sprintf("%s: %s", src, r))
			}
		}
		pl.xferOff = "ownership transfer is off because a side has no actions configured (" + strings.Join(why, "; ") + ")"
	}

	pl.addPools(s)
	ops, busy, opsOn := pl.inFlight(s)
	ready := pl.addNodes(s, busy)
	pl.pendingRemovals(ops, opsOn)
	pl.poolTotals(ready)
	pl.addDemand(s, ops)
	return pl
}

// addPools adds the snapshot's pools, sorted and de-duplicated by name.
func (pl *planner) addPools(s *Snapshot) {
	pidx := make([]int, len(s.Pools))
	for i := range pidx {
		pidx[i] = i
	}
	slices.SortStableFunc(pidx, func(a, b int) int {
		return comparePoolStates(&s.Pools[a], &s.Pools[b])
	})
	for _, i := range pidx {
		st := &s.Pools[i]
		if _, dup := pl.poolIdx[st.Pool.Name]; dup {
			continue
		}
		pl.poolIdx[st.Pool.Name] = len(pl.pools)
		pl.pools = append(pl.pools, wpool{st: st, size: st.Desired, stale: st.Stale})
	}
}

// inFlight returns the open ops in ID order, the nodes they act on (and
// how many act on each), and raises each pool's size to the target of a
// scale-up still setting it.
func (pl *planner) inFlight(s *Snapshot) (ops []*Op, busy map[string]bool, opsOn map[string]int) {
	ops = make([]*Op, 0, len(s.InFlight))
	for i := range s.InFlight {
		if !s.InFlight[i].State.Terminal() {
			ops = append(ops, &s.InFlight[i])
		}
	}
	slices.SortStableFunc(ops, compareOps)
	busy = make(map[string]bool)
	opsOn = make(map[string]int)
	for _, op := range ops {
		if op.Node != "" {
			busy[op.Node] = true
			opsOn[op.Node]++
		}
		// A scale-up that awaits gpu-ready nodes has seen its target
		// reached: the desired capacity says the rest (a node removed since
		// is not on its way).
		if op.Kind == ActScaleUp && op.Step != StepAwaitReady {
			if pi, ok := pl.poolIdx[op.Pool]; ok && op.Target > pl.pools[pi].size {
				pl.pools[pi].size = op.Target
			}
		}
	}
	return ops, busy, opsOn
}

// addNodes adds the snapshot's nodes, sorted and de-duplicated by name,
// with what the plan needs of each; it returns, per pool, its nodes that
// count as there (ready, down, or overdue: no capacity on its way).
func (pl *planner) addNodes(s *Snapshot, busy map[string]bool) []int {
	nidx := make([]int, len(s.Nodes))
	for i := range nidx {
		nidx[i] = i
	}
	slices.SortStableFunc(nidx, func(a, b int) int { return compareNodes(&s.Nodes[a], &s.Nodes[b]) })
	pl.nodes = make([]wnode, 0, len(s.Nodes))
	ready := make([]int, len(pl.pools))
	for _, i := range nidx {
		n := &s.Nodes[i]
		if _, dup := pl.nodeIdx[n.Name]; dup {
			continue
		}
		w := wnode{n: n, pool: -1, model: n.GPUModel, busy: busy[n.Name]}
		if pi, ok := pl.poolIdx[n.Pool]; ok && n.Pool != "" {
			w.pool = pi
			if w.model == "" {
				w.model = pl.pools[pi].st.Pool.GPUModel
			}
		}
		w.side, w.owned = n.Owner.Side()
		w.free = n.FreeGPUs()
		w.idle = n.GPUsAllocated == 0 && !hasWork(n)
		w.sched = w.owned && !w.busy && healthy(n) &&
			(n.Phase == PhaseActive || n.Phase == PhaseGPUReady) && n.GPUsTotal > 0
		w.stranded = !w.owned && pl.stranded(&w) && healthy(n) && n.GPUsTotal > 0 &&
			pl.now.Sub(n.PhaseSince) >= StrandedSettle
		if w.pool >= 0 {
			wp := &pl.pools[w.pool]
			if wp.stale != "" {
				// IMPORTANT: nothing destructive on a pool the cloud did not
				// show this time: marking its nodes as used keeps scale-down
				// and hand-overs off them (the replace loop checks too).
				w.touched = true
			}
			switch {
			case n.Down != "" && n.Phase != PhaseTerminating && n.Phase != PhaseGone:
				// Dead is not in flight: a node that was ready and went
				// down holds its place in the pool but is no capacity, nor
				// capacity on its way, and never pushes the pool into backoff.
				ready[w.pool]++
			case n.Phase.InFlight():
				if !n.PhaseSince.IsZero() && pl.now.Sub(n.PhaseSince) > pl.maxProv {
					if wp.backoff == "" {
						wp.backoff = fmt.Sprintf("node %s has been %s for %s, longer than the max provision time of %s",
							n.Name, n.Phase, pl.now.Sub(n.PhaseSince).Round(time.Second), pl.maxProv)
					}
					pl.overdue = append(pl.overdue, int32(len(pl.nodes)))
					ready[w.pool]++ // an overdue node is not capacity on its way
				} else {
					wp.inflightNodes++
					if w.owned {
						wp.inflightSides = append(wp.inflightSides, w.side)
					}
				}
			case n.Phase == PhaseTerminating || n.Phase == PhaseGone:
			default:
				ready[w.pool]++
			}
		}
		pl.nodeIdx[n.Name] = len(pl.nodes)
		pl.nodes = append(pl.nodes, w)
	}
	pl.nver = make([]uint32, len(pl.nodes))
	return ready
}

// pendingRemovals counts each pool's removals in flight that will still
// lower its desired capacity (PendingRemoval), and notes the scale-downs
// that could still be cancelled for pending demand.
func (pl *planner) pendingRemovals(ops []*Op, opsOn map[string]int) {
	for _, op := range ops {
		if op.Kind != ActScaleDown && op.Kind != ActReplace && op.Kind != ActMigrate || AttritionOp(op) {
			continue // an attrition op is no pending removal for the executor (attrition.go)
		}
		ni, ok := pl.nodeIdx[op.Node]
		if !ok {
			continue
		}
		n := pl.nodes[ni]
		if n.pool < 0 || n.n.Phase == PhaseTerminating || n.n.Phase == PhaseGone {
			continue
		}
		data := OpDataOf(op)
		// One rule with the executor's scale-up (PendingRemoval): a
		// replacement keeps the desired capacity unless it raised it by
		// one first (SurgeTo), which its terminate then takes back.
		if PendingRemoval(op) {
			pl.pools[n.pool].pendingDown++
		}
		// A scale-down still draining, or a migration still waiting for
		// its tasks' checkpoints, may be cancelled for pending demand
		// (the kinds' ActCancelScaleDown interrupts, OpSteps).
		_, mayCancel := InterruptTo(op.Kind, ActCancelScaleDown, op.Step)
		if mayCancel && data.From != OwnerNone && !data.Cancel && opsOn[op.Node] == 1 {
			if side, ok := data.From.Side(); ok {
				pl.cancelable = append(pl.cancelable, cancelable{node: int32(ni), side: side, op: op})
			}
		}
	}
}

// poolTotals works out each pool's capacity on its way (slots), its
// backoff, and the cluster's and each model's GPUs.
func (pl *planner) poolTotals(ready []int) {
	for i := range pl.pools {
		wp := &pl.pools[i]
		pool := &wp.st.Pool
		// Removals beyond the pool's size (an inconsistent observation)
		// cannot take it below zero.
		wp.pendingDown = min(wp.pendingDown, wp.size)
		if until := wp.st.BackoffUntil; until.After(pl.now) {
			r := wp.st.BackoffReason
			if r == "" {
				r = "the provider asked to back off"
			}
			wp.backoff = fmt.Sprintf("%s, until %s", r, until.UTC().Format(time.RFC3339))
		}
		if wp.stale != "" {
			wp.backoff = "its cloud observation is stale (" + wp.stale + "); it is not resized until it is seen again"
		}
		if pool.GPUsPerNode > 0 {
			// Nodes on their way that registered with a side serve that
			// side only; the others (not even an instance yet) either side.
			// A pool in backoff launches nothing: of its desired capacity,
			// only the machines that exist are on their way.
			upto := wp.size
			if wp.backoff != "" {
				upto = min(upto, ready[i]+wp.inflightNodes)
				wp.unlaunched = wp.size - upto
			}
			for k := ready[i]; k < upto; k++ {
				sl := slot{free: pool.Units()}
				if j := k - ready[i]; j < len(wp.inflightSides) {
					sl.side = wp.inflightSides[j]
				}
				wp.slots = append(wp.slots, sl)
			}
		}
		pl.clusterGPUs += wp.size * pool.GPUsPerNode
		pl.modelGPUs[pool.GPUModel] += wp.size * pool.GPUsPerNode
	}
	pl.clusterStartGPUs = pl.clusterGPUs
	pl.modelStartGPUs = maps.Clone(pl.modelGPUs)
}

// addDemand adds the snapshot's demand, de-duplicated by ID, linked to the
// ops that serve it, classified and sorted.
func (pl *planner) addDemand(s *Snapshot, ops []*Op) {
	// Sorted by ID first: duplicates meet, and waits come out in ID order.
	ws := make([]wdemand, len(s.Demand))
	all := make([]*wdemand, len(s.Demand))
	for i := range s.Demand {
		ws[i] = wdemand{d: &s.Demand[i], id: s.Demand[i].ID()}
		all[i] = &ws[i]
	}
	slices.SortFunc(all, func(a, b *wdemand) int {
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return compareDuplicates(a.d, b.d)
	})
	pl.byID = all[:0]
	for i, d := range all {
		if i == 0 || d.id != all[i-1].id {
			pl.byID = append(pl.byID, d)
		}
	}
	pl.demand = slices.Clone(pl.byID)
	for _, op := range ops {
		for _, id := range op.Serves {
			i, found := slices.BinarySearchFunc(pl.byID, id, func(d *wdemand, id string) int { return cmp.Compare(d.id, id) })
			if found && !slices.Contains(pl.byID[i].ops, op) {
				d := pl.byID[i]
				d.ops = append(d.ops, op)
				if pi, ok := pl.poolIdx[op.Pool]; ok && op.Kind == ActScaleUp && !slices.Contains(d.upPools, pi) {
					d.upPools = append(d.upPools, pi)
				}
			}
		}
	}
	var key []byte
	for _, d := range pl.demand {
		d.prio, d.sec, d.nsec = d.d.Priority, d.d.FirstSeen.Unix(), d.d.FirstSeen.Nanosecond()
		if err := d.d.Validate(); err != nil {
			d.done, d.reason, d.detail = true, WaitUnsatisfiable, "invalid demand: "+err.Error()
			continue
		}
		if d.d.Unsatisfiable != "" {
			d.done, d.reason, d.detail = true, WaitUnsatisfiable, d.d.Unsatisfiable
			continue
		}
		key = appendClassKey(key[:0], d.d.Source, &d.d.Constraints)
		c, ok := pl.classes[string(key)]
		if !ok {
			c = pl.newClass(d.d.Source, &d.d.Constraints)
			pl.classes[string(key)] = c
		}
		d.cls = c
	}
	sortDemand(pl.demand)
}

// stale reports whether side src must not be acted on destructively.
func (pl *planner) stale(src Source) bool {
	switch src {
	case SourceYARN:
		return pl.staleYARN
	case SourceK8s:
		return pl.staleK8s
	}
	return pl.s.IsStale(src)
}

// hasWork reports whether non-system work runs on the node.
func hasWork(n *Node) bool {
	for _, w := range n.Work {
		if !w.System {
			return true
		}
	}
	return false
}

// healthy reports whether the node may take work. A node counts as
// unhealthy when an agent reported why (Healthy false with a HealthReason;
// a node nobody reported on is not replaced) or when its side reports it
// down (Down set: kubelet NotReady, NodeManager LOST).
func healthy(n *Node) bool { return n.Down == "" && (n.Healthy || n.HealthReason == "") }

// place runs admission and placement for all pending demand.
func (pl *planner) place() {
	var live, inflight []*wdemand
	for _, d := range pl.demand {
		switch {
		case d.done:
		case pl.stale(d.d.Source):
			d.done, d.reason = true, WaitStale
			d.detail = fmt.Sprintf("the %s observation is stale (%s); nothing is planned for its demand until it is fresh",
				d.d.Source, pl.s.Stale[d.d.Source])
		case d.d.GPUsPerUnit > d.cls.maxUnit:
			d.done, d.reason, d.detail = true, WaitUnsatisfiable, d.cls.unsatisfiable(d.d.GPUsPerUnit)
		case pl.notScheduling(d):
			d.done = true
		case len(d.ops) > 0 && pl.servedByOp(d):
			d.done = true
			inflight = append(inflight, d)
		default:
			live = append(live, d)
		}
	}
	newQuotas(pl.s, pl.nodes, live, inflight)
	order := admit(live)
	pl.order = order
	pl.restoreMin()
	// Pass 1: free GPUs of the demand's own side; its scheduler will place it.
	for _, d := range order {
		pl.placeDemand(d, stageFree)
	}
	// Pass 2: capacity already ordered for this demand.
	for _, d := range order {
		pl.placeDemand(d, stageOrdered)
	}
	// Pass 3: everything else.
	for _, d := range order {
		pl.placeDemand(d, stageAll)
	}
	for _, d := range live {
		if d.admitted == 0 {
			d.done, d.reason, d.detail = true, WaitQuota, d.quotaDetail()
		}
	}
}

// servedByOp reports whether an in-flight transfer or preemption serves the
// demand, which then waits for it instead of asking for more. Scale-ups
// that serve it are counted as in-flight capacity during placement.
func (pl *planner) servedByOp(d *wdemand) bool {
	for _, op := range d.ops {
		if op.Kind == ActTransfer || op.Kind == ActPreempt {
			d.reason = WaitInFlight
			d.detail = fmt.Sprintf("in-flight %s op %d on node %s serves it (step %q)", op.Kind, op.ID, op.Node, op.Step)
			return true
		}
		// IMPORTANT: a scale-up whose pool backs off with desired nodes
		// that never launched still holds that order at the provider,
		// which retries it. Until the op has handed it back and ended (the
		// executor does so on its next step), buying elsewhere for its
		// demand would buy twice (found by test/chaos, seed 3).
		if op.Kind == ActScaleUp {
			if pi, ok := pl.poolIdx[op.Pool]; ok && pl.pools[pi].unlaunched > 0 {
				d.reason = WaitInFlight
				d.detail = fmt.Sprintf("scale-up op %d of pool %s is handing back the %d nodes that did not launch (%s); the demand is planned again once it has",
					op.ID, op.Pool, pl.pools[pi].unlaunched, pl.pools[pi].backoff)
				return true
			}
		}
	}
	return false
}

// result assembles the plan: actions in the order to start them (scale-ups,
// transfers, preemptions, replacements and scale-downs) and waits by demand ID.
func (pl *planner) result() Plan {
	var out Plan
	served := make(map[string]bool)
	for i := range pl.pools {
		wp := &pl.pools[i]
		if wp.add == 0 {
			continue
		}
		pool := &wp.st.Pool
		// IMPORTANT: the target is the pool's size once its pending
		// removals have terminated (each decrements the desired capacity);
		// the executor sets it only after they have, so the two never
		// undo or double each other.
		from := wp.size - wp.pendingDown
		target := from + wp.add
		var why []string
		if len(wp.serves) > 0 {
			why = append(why, fmt.Sprintf("for %d pending demand needing %d GPUs", len(wp.serves), wp.gpusFor))
		}
		if wp.minAdd > 0 {
			why = append(why, fmt.Sprintf("to reach its minimum of %d nodes", pool.MinNodes))
		}
		out.Actions = append(out.Actions, Action{
			Kind:   ActScaleUp,
			Pool:   pool.Name,
			Target: target,
			Serves: slices.Clone(wp.serves),
			Reason: fmt.Sprintf("scale pool %s from %d to %d nodes (+%d GPUs of %s%s, max %d nodes) %s",
				pool.Name, from, target, wp.add*pool.GPUsPerNode, orAny(pool.GPUModel), migOf(pool), pool.MaxNodes, strings.Join(why, " and ")),
		})
		for _, id := range wp.serves {
			served[id] = true
		}
	}
	for _, t := range pl.transfers {
		out.Actions = append(out.Actions, t.action(pl))
		for _, id := range t.serves {
			served[id] = true
		}
	}
	for _, a := range pl.preempts {
		out.Actions = append(out.Actions, a)
		for _, id := range a.Serves {
			served[id] = true
		}
	}
	for _, c := range pl.cancels {
		out.Actions = append(out.Actions, c.action(pl))
		for _, id := range c.serves {
			served[id] = true
		}
	}
	out.Actions = append(out.Actions, pl.removals...)
	// IMPORTANT: every action on a node carries the node's cloud instance
	// from the provider's instance map, so a terminate never guesses it.
	for i := range out.Actions {
		a := &out.Actions[i]
		if ni, ok := pl.nodeIdx[a.Node]; ok && a.Node != "" && a.InstanceID == "" {
			a.InstanceID = pl.nodes[ni].n.InstanceID
		}
	}

	for _, d := range pl.byID {
		if served[d.id] {
			continue
		}
		w := Wait{Demand: d.id, Reason: d.reason, Detail: d.detail}
		if !d.done && d.placed() == d.d.Units {
			if d.inflight > 0 {
				w.Reason = WaitInFlight
				w.Detail = fmt.Sprintf("%d of %d units wait for in-flight capacity (%s)", d.inflight, d.d.Units, d.firstInflight)
				if d.free > 0 {
					w.Detail += fmt.Sprintf("; %d fit free GPUs on %s", d.free, d.firstFree)
				}
			} else {
				w.Reason = WaitScheduler
				w.Detail = fmt.Sprintf("free GPUs on %s nodes fit all its units (%d x %d GPUs, first on %s); its scheduler should place it",
					d.d.Source, d.d.Units, d.d.GPUsPerUnit, d.firstFree)
			}
		} else if !d.done && d.admitted < d.d.Units && d.reason == "" {
			w.Reason, w.Detail = WaitQuota, d.quotaDetail()
		}
		if w.Reason == "" { // defensive: every wait names a reason
			w.Reason, w.Detail = WaitPriority, "no capacity was left for it in this plan"
		}
		out.Waits = append(out.Waits, w)
	}
	return out
}

func orAny(model string) string {
	if model == "" {
		return "any model"
	}
	return model
}

// comparePoolStates orders pools by name, then by the rest of their
// content, so duplicate names resolve the same way whatever the input order.
func comparePoolStates(a, b *PoolState) int {
	return cmp.Or(
		cmp.Compare(a.Pool.Name, b.Pool.Name),
		cmp.Compare(a.Pool.Version, b.Pool.Version),
		cmp.Compare(a.Desired, b.Desired),
	)
}

func compareNodes(a, b *Node) int {
	return cmp.Or(
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Pool, b.Pool),
		cmp.Compare(a.InstanceID, b.InstanceID),
		cmp.Compare(a.Owner, b.Owner),
		cmp.Compare(a.Phase, b.Phase),
	)
}

func compareOps(a, b *Op) int {
	return cmp.Or(
		cmp.Compare(a.ID, b.ID),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Pool, b.Pool),
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.Target, b.Target),
	)
}

// compareDuplicates picks, among demand with one ID, the latest observation.
func compareDuplicates(a, b *Demand) int {
	return cmp.Or(
		b.LastSeen.Compare(a.LastSeen),
		a.FirstSeen.Compare(b.FirstSeen),
		cmp.Compare(b.Priority, a.Priority),
		cmp.Compare(a.GPUsPerUnit, b.GPUsPerUnit),
		cmp.Compare(a.Units, b.Units),
		cmp.Compare(a.Tenant, b.Tenant),
	)
}
