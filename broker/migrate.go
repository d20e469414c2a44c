package broker

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Checkpoint-aligned migration: consolidation that empties an underused
// node whose work it may not simply drain (YARN work, or Kubernetes work
// that would lose more than consolidation.max_work_lost), by moving each
// task in the window right after its checkpoint, onto fuller nodes of its
// side that its constraints match, of any pool (landWork), so the node can
// leave. The op (ActMigrate) cordons
// the node first (YARN: the cordon label; Kubernetes: cordon), so nothing
// new lands there and a restarted task cannot land on it again; then stops
// each task at its next checkpoint: once an observation shows one written
// after the cordon and at most the window old (YARN: GRACEFUL_SHUTDOWN,
// FORCEFUL_SHUTDOWN after the grace; Kubernetes: eviction), never at a
// checkpoint older than the cordon, whose work since would be lost; then
// releases and terminates the emptied node. A task that does not
// checkpoint within the max wait makes the op give the node back,
// uncordoned, with the tasks already moved having lost at most the window
// each (in practice the time the broker took to see their checkpoints).
// While the op still waits for checkpoints, pending LS or Guaranteed work
// that would fill the node past the underused threshold cancels it (the
// placement ladder's cancel rung, migrationYields): the node is given back
// rather than that work waiting for a boot.

// MigrateMode says whether consolidation may migrate work.
type MigrateMode string

// The migrate modes.
const (
	// MigrateOff never migrates (the default).
	MigrateOff MigrateMode = "off"
	// MigrateCheckpointed migrates work only right after a known
	// checkpoint (Policy.MigrateWindow).
	MigrateCheckpointed MigrateMode = "checkpointed"
)

// Valid reports whether m is a known mode ("" is off).
func (m MigrateMode) Valid() bool {
	return m == "" || m == MigrateOff || m == MigrateCheckpointed
}

// The migration defaults.
const (
	// DefaultMigrateWindow: a task moves only at a checkpoint written
	// after the cordon and seen at most this long after, so it redoes at
	// most this much.
	DefaultMigrateWindow = 5 * time.Minute
	// DefaultMaxMigrationsPerHour bounds the tasks restarted by
	// migrations in any hour.
	DefaultMaxMigrationsPerHour = 20
	// DefaultMigrateMaxWait: a migration holds its cordoned node at most
	// this long for its tasks' next checkpoints.
	DefaultMigrateMaxWait = time.Hour
)

// MigratedTasks is how many tasks an open or ended migrate op restarts:
// its victims still to stop and those it stopped.
func MigratedTasks(o *Op) int {
	d := OpDataOf(o)
	return len(d.Victims) + len(d.Stopped)
}

// migratable returns the work a migration would move off node w, or why
// none may: every task must have a known checkpoint no older than the max
// wait (it checkpoints at least that often, so the op can stop it right
// after the next one), be neither an ApplicationMaster nor part of a gang that runs on other
// nodes too, belong to no tenant that opted out, and nothing on the node
// may forbid eviction (a bare pod, do-not-disrupt, local storage, a Job
// at its backoff limit, a disruption budget).
//
// IMPORTANT: work without a known checkpoint is never migrated; nor is
// work whose newest checkpoint is older than the max wait (nothing shows
// it will checkpoint again while the node is held).
func (pl *planner) migratable(w *wnode, nc nodeCost) ([]Workload, string) {
	n := w.n
	if n.GPUsAllocated > nc.knownGPUs {
		return nil, "work the side does not list holds GPUs on it"
	}
	if b := budgetBlock(n); b != "" {
		return nil, b
	}
	wait := pl.p.MigrateMaxWait.D()
	var out []Workload
	for i := range n.Work {
		wl := &n.Work[i]
		if wl.System {
			continue
		}
		if c := wl.Cost(pl.now); c.Never != "" {
			return nil, c.Never
		}
		switch {
		case wl.AM:
			return nil, fmt.Sprintf("%s is an ApplicationMaster: stopping it ends its whole application", wl.label())
		case slices.Contains(pl.p.NoMigrateTenants, wl.Tenant):
			return nil, fmt.Sprintf("%s belongs to tenant %s, which opted out of migration", wl.label(), wl.Tenant)
		case wl.Class == WorkService:
			// A replica loses nothing: it moves as a drain would move it.
		case wl.CheckpointAge < 0:
			return nil, fmt.Sprintf("%s has no known checkpoint", wl.label())
		case wl.CheckpointAge > wait:
			return nil, fmt.Sprintf("the newest checkpoint of %s is older than the %s a migration waits for the next (consolidation.migrate_max_wait)", wl.label(), wait)
		case pl.gangElsewhere(wl, n.Name):
			return nil, fmt.Sprintf("%s is part of %s, which also runs on other nodes: a gang is never moved partly", wl.label(), wl.App)
		}
		out = append(out, *wl)
	}
	if len(out) == 0 {
		return nil, "it runs nothing to migrate"
	}
	return out, ""
}

// gangElsewhere reports whether wl's application has non-AM work on a
// node other than node: such work is taken as a gang (a distributed
// trainer's workers), which a migration never moves partly.
func (pl *planner) gangElsewhere(wl *Workload, node string) bool {
	if wl.App == "" {
		return false
	}
	if pl.appNodes == nil {
		pl.appNodes = make(map[string][]string)
		for i := range pl.nodes {
			nn := pl.nodes[i].n
			for j := range nn.Work {
				x := &nn.Work[j]
				if x.System || x.AM || x.App == "" {
					continue
				}
				if ns := pl.appNodes[x.App]; !slices.Contains(ns, nn.Name) {
					pl.appNodes[x.App] = append(ns, nn.Name)
				}
			}
		}
	}
	for _, other := range pl.appNodes[wl.App] {
		if other != node {
			return true
		}
	}
	return false
}

// migrationsLeft is how many tasks migrations may still restart this
// hour: the policy's budget less those restarted in the hour before the
// snapshot and those this plan already moves.
func (pl *planner) migrationsLeft() int {
	return pl.p.MaxMigrationsPerHour - pl.s.MigratedLastHour - pl.migrated
}

// migrate tries to empty underused node ni (which consolidation keeps for
// keep) by migrating its work. It returns whether it planned an
// ActMigrate; when it did not, why is what stood in the way ("" when the
// policy does not migrate at all).
func (pl *planner) migrate(ni int32, nc nodeCost, peers []int32, atMin bool, why string) (bool, string) {
	w := &pl.nodes[ni]
	n := w.n
	wp := &pl.pools[w.pool]
	pool := &wp.st.Pool
	if pl.p.Migrate != MigrateCheckpointed {
		return false, ""
	}
	if pool.Fleet() {
		return false, "a fleet pool's node cannot leave, so migrating its work would empty it for nothing"
	}
	if atMin {
		return false, "the pool or the cluster is at its minimum"
	}
	work, block := pl.migratable(w, nc)
	if block != "" {
		return false, block
	}
	if left := pl.migrationsLeft(); len(work) > left {
		return false, fmt.Sprintf("moving its %d tasks exceeds the migration budget (%d left of consolidation.max_migrations_per_hour %d)",
			len(work), max(left, 0), pl.p.MaxMigrationsPerHour)
	}
	mark := len(pl.undo)
	landing, ok := pl.landWork(ni, peers)
	if !ok {
		pl.rollback(mark)
		return false, fmt.Sprintf("its work does not fit on other %s nodes it may run on (any pool its constraints match; its own pool %s where they are unknown)", w.side, pool.Name)
	}
	// Each task stops within the window after a checkpoint: it loses at
	// most the window, usually far less.
	var lost float64
	var names []string
	for _, wl := range work {
		names = append(names, wl.label())
		if wl.Class != WorkService {
			lost += gpuHoursOf(pl.p.MigrateWindow.D(), wl.GPUs)
		}
	}
	size := wp.size - wp.pendingDown - wp.downs - pl.attritionDowns()[w.pool]
	pl.migrated += len(work)
	pl.removeNode(ni, Action{
		Kind:         ActMigrate,
		Pool:         pool.Name,
		Node:         n.Name,
		From:         n.Owner,
		Victims:      work,
		Landing:      landing,
		GPUHoursLost: lost,
		Reason: fmt.Sprintf("migrate %d tasks off node %s of pool %s (%s): cordon the node, stop each task within %s after its next checkpoint (waiting at most %s), losing at most %.2f GPU-hours, so it restarts on %s; then terminate the emptied node: %s; pool goes from %d to %d nodes (min %d)",
			len(work), n.Name, pool.Name, strings.Join(names, ", "), pl.p.MigrateWindow, pl.p.MigrateMaxWait, lost,
			strings.Join(landing, ", "), why, size, size-1, pool.MinNodes),
	})
	return true, ""
}

// landWork reserves room for each GPU workload of node ni, largest first,
// on the fullest node of its side it may restart on that has room (so the
// emptied capacity is packed, not spread), and returns the distinct nodes
// it expects the work to land on. Work whose constraints the side observed
// may land on a node of any pool they match (the scheduler places the
// restarted task by them, not by pool); work without them only on its own
// pool's nodes (peers: the same labels, taints and model). CPU-only work
// lands anywhere and is not placed.
func (pl *planner) landWork(ni int32, peers []int32) ([]string, bool) {
	src := &pl.nodes[ni]
	var landing []string
	for _, wl := range src.gpuWork() {
		cands := peers
		if wl.Constraints != nil {
			cands = pl.mayRunOn(src.side, wl.Constraints)
		}
		// The fullest that fits: the least free GPUs of at least the
		// task's, the first of equals.
		best := int32(-1)
		for _, pi := range cands {
			if pl.mayTake(ni, pi, wl.GPUs) && (best < 0 || pl.nodes[pi].free < pl.nodes[best].free) {
				best = pi
			}
		}
		if best < 0 {
			return nil, false
		}
		pl.reserve(best, wl.GPUs)
		if name := pl.nodes[best].n.Name; !slices.Contains(landing, name) {
			landing = append(landing, name)
		}
	}
	return landing, true
}

// mayRunOn lists the nodes of side whose scheduler may place work with
// constraints c (schedulable, matching), in node order; the list is kept
// for the plan per class of constraints, as matching does not change
// within it (room and removal are checked when work lands: mayTake).
func (pl *planner) mayRunOn(side Source, c *Constraints) []int32 {
	key := classKey(side, c)
	if out, ok := pl.landOn[key]; ok {
		return out
	}
	var out []int32
	for i := range pl.nodes {
		w := &pl.nodes[i]
		if w.sched && w.side == side && c.matches(side, pl.nodeTarget(int32(i))) {
			out = append(out, int32(i))
		}
	}
	if pl.landOn == nil {
		pl.landOn = make(map[string][]int32)
	}
	pl.landOn[key] = out
	return out
}
