package broker

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Node lifecycle rules of the planner: dead is not in flight, instances that
// never register are removed, demand that its scheduler will not place stops
// holding capacity, and a scale-down that has not reached the cloud yet is
// cancelled when pending demand fits its node.

// replaceUnhealthy replaces nodes an agent reported unhealthy and nodes that
// have been down for longer than the unhealthy node timeout, and removes
// instances that never became gpu-ready within the max provision time. A
// replacement keeps the pool's size (the executor buys the replacement
// first or terminates without a decrement), so a pool at its minimum never
// deadlocks on it.
func (pl *planner) replaceUnhealthy() {
	timeout := pl.p.UnhealthyNodeTimeout.D()
	paused := pl.repairsPaused()
	for i := range pl.nodes {
		w := &pl.nodes[i]
		n := w.n
		if w.pool < 0 || w.busy || w.removed || pl.pools[w.pool].stale != "" ||
			n.Phase == PhaseTerminating || n.Phase == PhaseGone {
			continue
		}
		if healthy(n) {
			continue
		}
		if why, ok := paused[w.pool]; ok {
			// IMPORTANT: a fleet-wide alarm (a driver update, an agent
			// bug, a control-plane outage) must not drain the fleet.
			pl.kept = append(pl.kept, NodeNote{Node: n.Name, Reason: "not repaired: " + why})
			continue
		}
		if pl.pools[w.pool].st.Pool.Fleet() {
			pl.repairFleet(w)
			continue
		}
		var why string
		switch {
		case n.Down != "":
			if (w.owned && pl.stale(w.side)) || (!w.owned && (pl.staleYARN || pl.staleK8s)) {
				continue
			}
			// A node whose side did not say since when it is down is
			// not replaced: the timeout could not be honoured.
			if n.DownSince.IsZero() || pl.now.Sub(n.DownSince) < timeout {
				continue
			}
			why = fmt.Sprintf("replace node %s of pool %s: down for %s (%s), longer than the unhealthy node timeout of %s; terminate it and keep the pool's size so a fresh node takes its place",
				n.Name, n.Pool, pl.now.Sub(n.DownSince).Round(time.Second), n.Down, timeout)
		case !healthy(n):
			if !w.owned || pl.stale(w.side) {
				continue
			}
			if n.Phase != PhaseActive && n.Phase != PhaseGPUReady && n.Phase != PhaseRegistered {
				continue
			}
			if n.NeedsReset && hasWork(n) {
				// A fault a reset clears never cuts work short: the node
				// takes no new work and is replaced once its work ends.
				pl.kept = append(pl.kept, NodeNote{Node: n.Name, Reason: fmt.Sprintf(
					"not repaired yet: %s; it takes no new work and is replaced once its running work ends", n.HealthReason)})
				continue
			}
			why = fmt.Sprintf("replace unhealthy node %s of pool %s (%s): drain its %d allocated GPUs and terminate it",
				n.Name, n.Pool, n.HealthReason, n.GPUsAllocated)
		default:
			continue
		}
		if !pl.canReplace(w.pool) {
			continue
		}
		w.removed = true
		pl.removals = append(pl.removals, Action{Kind: ActReplace, Pool: n.Pool, Node: n.Name, From: n.Owner, Reason: why})
	}

	pendingDownGPUs := 0
	for i := range pl.pools {
		pendingDownGPUs += pl.pools[i].pendingDown * pl.pools[i].st.Pool.GPUsPerNode
	}
	// Attrition scale-downs in flight will remove their nodes too: count
	// them against the pool and cluster minimum, as reclaim does.
	attr := pl.attritionDowns()
	for pi, k := range attr {
		pendingDownGPUs += k * pl.pools[pi].st.Pool.GPUsPerNode
	}
	for _, ni := range pl.overdue {
		w := &pl.nodes[ni]
		n := w.n
		// A machine that registered nowhere may still be listed by a side
		// whose observation is stale: such a side must be fresh first.
		if w.busy || w.removed || w.pool < 0 || n.Down != "" || pl.pools[w.pool].stale != "" || hasWork(n) ||
			(w.owned && pl.stale(w.side)) || (!w.owned && (pl.staleYARN || pl.staleK8s)) {
			continue
		}
		wp := &pl.pools[w.pool]
		pool := &wp.st.Pool
		w.removed = true
		late := fmt.Sprintf("instance %s (node %s) of pool %s has been %s for %s, longer than the max provision time of %s, and never became gpu-ready",
			n.InstanceID, n.Name, pool.Name, n.Phase, pl.now.Sub(n.PhaseSince).Round(time.Second), pl.maxProv)
		size := wp.size - wp.pendingDown - wp.downs - attr[w.pool]
		if size-1 >= pool.MinNodes && pl.clusterGPUs-pendingDownGPUs-pool.GPUsPerNode >= pl.p.ClusterMinGPUs {
			// The cluster autoscaler's rule: a node that does not register
			// in time is removed and the group's target lowered.
			pl.removeNode(ni, Action{Kind: ActScaleDown, Pool: pool.Name, Node: n.Name, From: n.Owner,
				Reason: fmt.Sprintf("terminate %s; pool goes from %d to %d nodes (min %d)", late, size, size-1, pool.MinNodes)})
			continue
		}
		if !pl.canReplace(w.pool) {
			w.removed = false
			continue
		}
		pl.removals = append(pl.removals, Action{Kind: ActReplace, Pool: pool.Name, Node: n.Name, From: n.Owner,
			Reason: fmt.Sprintf("replace %s; the pool keeps its %d nodes (min %d)", late, size, pool.MinNodes)})
	}
	pl.removeStranded(pendingDownGPUs, attr)
}

// repairFleet handles a faulty node of a fleet pool, which no cloud
// replaces: a node its agent reports faulty is cordoned on its side
// (nothing drained: its work ends or its owner moves it) and reported; a
// node that is down is reported. Either takes new work again once the
// host is repaired: a cordoned one is offered to demand when healthy, as
// any node neither side owns.
func (pl *planner) repairFleet(w *wnode) {
	n := w.n
	pool := pl.pools[w.pool].st.Pool.Name
	if n.Down != "" {
		pl.kept = append(pl.kept, NodeNote{Node: n.Name, Reason: fmt.Sprintf(
			"not replaced: node %s of fleet pool %s is down (%s) and a fleet has no cloud to replace it from; repair the host, and it serves again once its side lists it ready",
			n.Name, pool, n.Down)})
		return
	}
	if !w.owned || pl.stale(w.side) || (n.Phase != PhaseActive && n.Phase != PhaseGPUReady && n.Phase != PhaseRegistered) {
		return
	}
	w.removed = true
	pl.removals = append(pl.removals, Action{Kind: ActTransfer, Pool: pool, Node: n.Name, From: n.Owner, To: OwnerNone, CordonOnly: true,
		Reason: fmt.Sprintf("cordon unhealthy node %s of fleet pool %s (%s) on %s: it takes no new work and its %d running workloads are left to end; a fleet has no cloud to replace it from, so repair the host: once healthy it is offered to demand again",
			n.Name, pool, n.HealthReason, w.side, len(n.Work))})
}

// removeStranded scales down a node that neither side owns, that no op
// holds and that runs nothing: the broker cordoned it on both sides (the
// gpubroker.io/owner taint "none", the exclude file) for an op that ended
// without giving it back. Left alone it is paid for and serves nobody; an
// operator's own cordon is not this (it leaves the node's owner as it was).
// It waits for the unneeded time in that phase and keeps the pool's and
// the cluster's minimum; both sides must be fresh, since either may still
// list work there.
func (pl *planner) removeStranded(pendingDownGPUs int, attr map[int]int) {
	unneeded := pl.p.ScaleDownUnneeded.D()
	for i := range pl.nodes {
		w := &pl.nodes[i]
		n := w.n
		// A pool that grows in this plan does not shrink in it, and the
		// node is offered to demand (StrandedSettle) before it may go.
		if !pl.stranded(w) || w.removed || w.touched || pl.pools[w.pool].add > 0 ||
			pl.now.Sub(n.PhaseSince) < max(unneeded, StrandedSettle) {
			continue
		}
		wp := &pl.pools[w.pool]
		pool := &wp.st.Pool
		size := wp.size - wp.pendingDown - wp.downs - attr[w.pool]
		if size-1 < pool.MinNodes || pl.clusterGPUs-pendingDownGPUs-pool.GPUsPerNode < pl.p.ClusterMinGPUs {
			continue
		}
		pl.removeNode(int32(i), Action{Kind: ActScaleDown, Pool: pool.Name, Node: n.Name, From: OwnerNone,
			Reason: fmt.Sprintf("terminate node %s of pool %s: neither side owns it and no op holds it (the broker cordoned it for an op that ended without giving it back), and it has run nothing for %s (unneeded time %s); pool goes from %d to %d nodes (min %d)",
				n.Name, pool.Name, pl.now.Sub(n.PhaseSince).Round(time.Second), unneeded, size, size-1, pool.MinNodes)})
	}
}

// stranded reports whether node w is stranded: neither side owns it (the
// broker's cordon on both), no op holds it, it runs nothing, nothing
// protects it, it is up and in a pool the cloud showed, and both sides are
// fresh (either may still list work there). Such a node is offered to
// pending demand (StrandedSettle after its last phase change) and, while
// none wants it, scaled down once unneeded.
func (pl *planner) stranded(w *wnode) bool {
	n := w.n
	switch n.Phase {
	case PhaseActive, PhaseGPUReady, PhaseDrained:
	default:
		return false
	}
	return n.Owner == OwnerNone && !w.busy && w.pool >= 0 && !n.Protected && n.Down == "" &&
		!hasWork(n) && n.GPUsAllocated == 0 && !pl.staleYARN && !pl.staleK8s && pl.pools[w.pool].stale == ""
}

// StrandedSettle is how long a stranded node (neither side owns it, no op
// holds it) must have kept its phase before it is offered to pending
// demand: an op that just ended may still be followed by its side's
// observation of the node.
const StrandedSettle = time.Minute

// MaxUnhealthyFraction is the share of a pool's nodes that may be
// unhealthy (down on their side, or faulty by their agent) while the
// broker still repairs them, rounded up to a whole node as Karpenter's node
// repair does (so a pool of up to five nodes may repair one). More than
// that looks like a false alarm (a driver update, an agent bug, an API
// outage): replacing them would drain the fleet, so repairs pause.
const MaxUnhealthyFraction = 0.2

// repairsPaused returns, by pool index, why repairs are paused in the
// pools where more than MaxUnhealthyFraction of the nodes are unhealthy.
func (pl *planner) repairsPaused() map[int]string {
	total := make([]int, len(pl.pools))
	bad := make([]int, len(pl.pools))
	for i := range pl.nodes {
		w := &pl.nodes[i]
		n := w.n
		if w.pool < 0 || !countsForRepair(n) {
			continue
		}
		total[w.pool]++
		if !healthy(n) {
			bad[w.pool]++
		}
	}
	var out map[int]string
	for pi := range pl.pools {
		if why, paused := repairPause(pl.pools[pi].st.Pool.Name, total[pi], bad[pi]); paused {
			if out == nil {
				out = map[int]string{}
			}
			out[pi] = why
		}
	}
	return out
}

// countsForRepair reports whether n counts in its pool's share of
// unhealthy nodes: every node but those terminating or gone.
func countsForRepair(n *Node) bool { return n.Phase != PhaseTerminating && n.Phase != PhaseGone }

// repairPause says whether repairs pause in pool, with bad of its total
// nodes unhealthy, and why. The planner and the metrics
// (gpubroker_pool_repairs_paused) both ask it.
func repairPause(pool string, total, bad int) (string, bool) {
	allowed := int(math.Ceil(MaxUnhealthyFraction * float64(total)))
	if bad <= allowed {
		return "", false
	}
	return fmt.Sprintf("repairs of pool %s are paused: %d of its %d nodes are unhealthy, more than %.0f%% (%d); so many at once is more likely a false alarm (a driver or agent fault, an API outage) than failing hardware, and replacing them would drain the pool; check the nodes' health reasons",
		pool, bad, total, MaxUnhealthyFraction*100, allowed), true
}

// PausedRepairs returns, for each pool (by name) whose repairs pause, why,
// counting the stored nodes of each pool as the planner does.
func PausedRepairs(nodes []Node) map[string]string {
	total := map[string]int{}
	bad := map[string]int{}
	for i := range nodes {
		n := &nodes[i]
		if n.Pool == "" || !countsForRepair(n) {
			continue
		}
		total[n.Pool]++
		if !healthy(n) {
			bad[n.Pool]++
		}
	}
	out := map[string]string{}
	for p, t := range total {
		if why, paused := repairPause(p, t, bad[p]); paused {
			out[p] = why
		}
	}
	return out
}

// canReplace reports whether a node of pool pi can be replaced: the
// provider terminates without a decrement, or the pool has room to buy the
// replacement first, or to lose a node within its min. A pool whose min
// and max both equal its size cannot, and planning the replacement would
// only start an op that fails every tick.
func (pl *planner) canReplace(pi int) bool {
	if pl.s.TerminateKeepsDesired {
		return true
	}
	wp := &pl.pools[pi]
	pool := &wp.st.Pool
	return wp.size+1 <= pool.MaxNodes || wp.size-1 >= pool.MinNodes
}

// notScheduling reports whether d has had ready capacity that fits it for
// longer than the placement grace without its scheduler placing it. Such
// demand waits with "capacity present but not scheduling" and reserves
// nothing: more capacity would not help it, and its node may be reclaimed.
func (pl *planner) notScheduling(d *wdemand) bool {
	since, ok := pl.s.CapacityPresentSince[d.id]
	if !ok {
		return false
	}
	grace := pl.p.PlacementGrace.D()
	if grace <= 0 {
		grace = DefaultPolicy().PlacementGrace.D()
	}
	if pl.now.Sub(since) < grace {
		return false
	}
	why := d.d.SchedulerReason
	if why == "" {
		why = "its scheduler gives no reason"
	}
	d.reason = WaitNotScheduling
	d.detail = fmt.Sprintf("capacity present but not scheduling: %s (capacity that fits it has been ready for %s, past the placement grace of %s; no capacity is reserved or bought for it)",
		why, pl.now.Sub(since).Round(time.Second), grace)
	return true
}

// cancelable is a node whose in-flight scale-down is still draining it from
// side, or whose migration still waits for its tasks' checkpoints: it may
// be given back instead of buying a node.
type cancelable struct {
	node int32
	side Source
	op   *Op
	used bool
}

// cancelScaleDown is a node this plan gives back to its side.
type cancelScaleDown struct {
	node   int32
	side   Source
	op     *Op
	free   int
	serves []string
	gpus   int
}

// takeCancel reserves g GPUs of d on a node of d's side whose scale-down
// has not reached the cloud yet, cancelling that scale-down.
func (pl *planner) takeCancel(d *wdemand, g int) bool {
	for _, c := range pl.cancels {
		if c.side == d.d.Source && c.free >= g && d.cls.c.matches(d.d.Source, pl.nodeTarget(c.node)) {
			pl.useCancel(c, d, g)
			return true
		}
	}
	for i := range pl.cancelable {
		c := &pl.cancelable[i]
		if c.used || c.side != d.d.Source {
			continue
		}
		w := &pl.nodes[c.node]
		if w.owned && w.side != c.side || pl.stale(c.side) || w.pool < 0 {
			continue
		}
		if !healthy(w.n) || w.n.FreeGPUs() < g || !d.cls.c.matches(d.d.Source, pl.nodeTarget(c.node)) {
			continue
		}
		if c.op.Kind == ActMigrate && !pl.migrationYields(w.n, d, g) {
			continue
		}
		cs := &cancelScaleDown{node: c.node, side: c.side, op: c.op, free: w.n.FreeGPUs()}
		c.used = true
		pl.cancels = append(pl.cancels, cs)
		// The cancelled removal no longer lowers the pool's desired capacity.
		wp := &pl.pools[w.pool]
		dec := min(wp.pendingDown, 1)
		wp.pendingDown -= dec
		if pl.rec {
			pl.undo = append(pl.undo, func() {
				c.used = false
				pl.cancels = pl.cancels[:len(pl.cancels)-1]
				wp.pendingDown += dec
			})
		}
		pl.useCancel(cs, d, g)
		return true
	}
	return false
}

// migrationYields reports whether a migration still waiting for its
// tasks' checkpoints on node n gives the node up for g GPUs of d: only to
// work that may not be preempted (LS, Guaranteed; batch work waits for
// capacity rather than undo a consolidation), and only when that work
// fills the node past consolidation's underused threshold
// (scale_down_utilisation), so the reason for the migration is gone. A
// node given back still underused keeps its long-running work half-empty
// for as long as it runs, often where it then fits on no other node:
// replayed on openb (5 seeds at 10x, 100x and 1000x), yielding to any LS
// demand cut the LS p95 wait by 8-64% but provisioned 1-6% more GPU-hours
// per GPU-hour of work; with this threshold the wait falls by 6-13% and
// GPU-hours by up to 1.5% (0.9% more at 1000x; docs/replay-migrate.md).
func (pl *planner) migrationYields(n *Node, d *wdemand, g int) bool {
	if d.d.Preemptible || n.GPUsTotal <= 0 {
		return false
	}
	return float64(n.GPUsAllocated+g)/float64(n.GPUsTotal) > pl.p.ScaleDownUtilisation
}

func (pl *planner) useCancel(c *cancelScaleDown, d *wdemand, g int) {
	k := len(c.serves)
	if k == 0 || c.serves[k-1] != d.id {
		c.serves = append(c.serves, d.id)
	}
	c.free -= g
	c.gpus += g
	if pl.rec {
		pl.undo = append(pl.undo, func() {
			c.serves = c.serves[:k]
			c.free += g
			c.gpus -= g
		})
	}
}

// cancelledKind names what a cancellation ends, for its reason.
func cancelledKind(k ActionKind) string {
	if k == ActMigrate {
		return "migration"
	}
	return "scale-down"
}

func (c *cancelScaleDown) action(pl *planner) Action {
	n := pl.nodes[c.node].n
	return Action{
		Kind:   ActCancelScaleDown,
		Pool:   n.Pool,
		Node:   n.Name,
		To:     ownerOf(c.side),
		Serves: slices.Clone(c.serves),
		Reason: fmt.Sprintf("cancel the %s of node %s (op %d, not terminated yet) and give it back to %s for %d pending demand needing %d GPUs",
			cancelledKind(c.op.Kind), n.Name, c.op.ID, c.side, len(c.serves), c.gpus),
	}
}
