package replay

import (
	"slices"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// epoch is the virtual clock's zero: the snapshot's Now is epoch + sim time.
var epoch = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

// tenant is the one tenant every replayed task belongs to: the trace has no
// tenants, and a tenant missing from the snapshot has no quota.
const tenant = "openb"

// brokerCtl is the gpubroker policy: each tick it builds a broker.Snapshot
// of the replayed world and lets broker.MakePlan (the planner serve runs)
// decide; the actions go through the executor's step model.
type brokerCtl struct {
	// every, when set, ticks on a fixed period as serve does, besides the
	// events: the test that event ticking loses nothing uses it.
	every    time.Duration
	acted    bool // the last plan changed something
	snap     broker.Snapshot
	nodeByID map[string]*node
	// migratedAt are the migrations of the last hour, oldest first.
	migratedAt []migrated
}

func (c *brokerCtl) wake(s *sim) time.Duration {
	w := never
	unneeded := s.p.ScaleDownUnneeded.D()
	ck := s.w.CheckpointInterval
	for _, n := range s.nodes {
		if !n.under || n.op != nil {
			continue
		}
		if at := n.underSince + unneeded; at > s.now {
			w = min(w, at)
			continue
		}
		// An underused node kept for the work it would lose may be
		// reclaimed right after its work checkpoints: serve, ticking on
		// its period, would see that moment, so the replay looks then.
		if ck > 0 {
			for _, t := range n.tasks {
				if t.state == taskRunning {
					w = min(w, t.startedAt+((s.now-t.startedAt)/ck+1)*ck)
				}
			}
		}
	}
	if c.acted && s.pendingCount() > 0 {
		w = min(w, s.now+s.w.TickPeriod)
	}
	if c.every > 0 && (s.live() || len(s.nodes) > 0) {
		w = min(w, (s.now/c.every+1)*c.every)
	}
	return w
}

func (c *brokerCtl) tick(s *sim) {
	s.startScaleUps()
	snap := c.snapshot(s)
	plan := broker.MakePlan(snap, s.p)
	s.m.plans++
	c.acted = false
	for _, a := range plan.Actions {
		if c.apply(s, a) {
			c.acted = true
		}
	}
	s.startScaleUps()
}

// snapshot is what the observers would report of the replayed world.
func (c *brokerCtl) snapshot(s *sim) *broker.Snapshot {
	now := epoch.Add(s.now)
	sn := &c.snap
	*sn = broker.Snapshot{Now: now, Demand: sn.Demand[:0], Pools: sn.Pools[:0], Nodes: sn.Nodes[:0], InFlight: sn.InFlight[:0]}
	// The ledger's count of tasks migrate ops started in the last hour.
	for len(c.migratedAt) > 0 && c.migratedAt[0].at <= s.now-time.Hour {
		c.migratedAt = c.migratedAt[1:]
	}
	for _, m := range c.migratedAt {
		sn.MigratedLastHour += m.tasks
	}
	if c.nodeByID == nil {
		c.nodeByID = map[string]*node{}
	}
	clear(c.nodeByID)
	for i := range s.pending {
		for _, t := range s.pending[i] {
			// A pod kube-scheduler nominated is being served by its own
			// preemption; the broker sees it as no longer unschedulable.
			if t.state != taskPending || t.nominated != nil {
				continue
			}
			sn.Demand = append(sn.Demand, broker.Demand{
				Source: t.side, Key: t.key(), Name: t.Name, Tenant: tenant, Queue: tenant,
				Priority: t.prio, GPUsPerUnit: t.GPUs, Units: 1, Preemptible: t.preemptible,
				Constraints: broker.Constraints{GPUModels: t.Models},
				FirstSeen:   epoch.Add(t.since), LastSeen: now,
			})
		}
	}
	pools := make([]broker.PoolState, len(s.pools))
	for i, p := range s.pools {
		pools[i] = broker.PoolState{Pool: p}
	}
	for _, n := range s.nodes {
		ps := &pools[n.pool]
		ps.Instances = append(ps.Instances, broker.Instance{ID: n.name, Hostname: n.name, Phase: n.phase, LaunchedAt: epoch.Add(n.launched)})
		if n.phase != broker.PhaseTerminating && n.phase != broker.PhaseGone {
			ps.Desired++
		}
		c.nodeByID[n.name] = n
		bn := broker.Node{
			Name: n.name, InstanceID: n.name, Pool: s.pools[n.pool].Name, Owner: n.owner,
			Phase: n.phase, PhaseSince: epoch.Add(n.since), GPUModel: s.models[n.pool],
			GPUsTotal: n.gpus, GPUsAllocated: n.used, Labels: s.pools[n.pool].Labels,
			Taints: s.pools[n.pool].Taints, Utilisation: -1, Healthy: true,
		}
		if n.op != nil && n.phase == broker.PhaseActive {
			bn.Phase = broker.PhaseDraining
		}
		if n.under && n.op == nil {
			bn.UnderusedSince = epoch.Add(n.underSince)
		}
		for _, t := range n.tasks {
			age := time.Duration(-1)
			if s.w.CheckpointInterval > 0 {
				age = s.checkpointAge(t)
			}
			bn.Work = append(bn.Work, broker.Workload{
				Source: t.side, Key: t.key(), Name: t.Name, Tenant: tenant, Priority: t.prio,
				GPUs: t.GPUs, Preemptible: t.preemptible && t.state == taskRunning,
				StartedAt: epoch.Add(t.startedAt), CheckpointAge: age, App: t.Name,
				Class: broker.WorkBatch, Constraints: &broker.Constraints{GPUModels: t.Models},
			})
		}
		sn.Nodes = append(sn.Nodes, bn)
	}
	sn.Pools = append(sn.Pools, pools...)
	for _, o := range s.ops {
		bo := broker.Op{ID: o.id, Kind: o.kind, Target: o.target, To: o.to, Serves: o.serves,
			State: broker.OpRunning, Step: o.step, CreatedAt: now, UpdatedAt: now}
		if o.attrition || o.kind == broker.ActMigrate && o.node != nil {
			// The executor's step data the planner reads back: it counts
			// attrition scale-downs in flight and may cancel them
			// (attrition.go), and may cancel a migration still waiting for
			// checkpoints for demand; both need the side they leave.
			from := broker.OwnerNone
			if o.node != nil {
				from = ownerOf(o.node.side)
			}
			bo.Data, _ = broker.EncodeOpData(broker.OpData{Attrition: o.attrition, From: from})
		}
		if o.pool >= 0 {
			bo.Pool = s.pools[o.pool].Name
		}
		if o.node != nil {
			bo.Node = o.node.name
		}
		sn.InFlight = append(sn.InFlight, bo)
	}
	return sn
}

// apply carries out one action through the step model; it reports whether
// anything changed.
func (c *brokerCtl) apply(s *sim, a broker.Action) bool {
	switch a.Kind {
	case broker.ActScaleUp:
		pi := slices.IndexFunc(s.pools, func(p broker.Pool) bool { return p.Name == a.Pool })
		if pi < 0 {
			return false
		}
		o := s.newOp(broker.ActScaleUp, nil, slices.Clone(a.Serves))
		o.pool, o.target, o.step = pi, a.Target, "set-desired"
		return true
	case broker.ActScaleDown, broker.ActReplace:
		n := c.nodeByID[a.Node]
		if n == nil || n.op != nil || n.phase != broker.PhaseActive {
			return false
		}
		if a.Attrition {
			s.attrit(n)
			return true
		}
		s.release(n, a.Kind, broker.OwnerNone, nil)
		return true
	case broker.ActRecommission:
		n := c.nodeByID[a.Node]
		return n != nil && s.recommission(n)
	case broker.ActTransfer:
		n := c.nodeByID[a.Node]
		if n == nil || n.op != nil || n.phase != broker.PhaseActive {
			return false
		}
		s.release(n, broker.ActTransfer, a.To, slices.Clone(a.Serves))
		return true
	case broker.ActMigrate:
		return c.migrate(s, a)
	case broker.ActCancelScaleDown:
		n := c.nodeByID[a.Node]
		return n != nil && s.cancelMigration(n)
	case broker.ActPreempt:
		n := c.nodeByID[a.Node]
		if n == nil || n.op != nil {
			return false
		}
		o := s.newOp(broker.ActPreempt, n, slices.Clone(a.Serves))
		o.step = "evict"
		if (a.To == broker.OwnerYARN || a.To == broker.OwnerK8s) && a.To != n.owner {
			// Across sides: evict, then release the node and hand it over.
			o.to = a.To
		}
		for _, v := range a.Victims {
			for _, t := range n.tasks {
				if t.key() == v.Key && t.state == taskRunning {
					s.evict(t, "preempt")
					o.victims++
					t.victimOf = o
					break
				}
			}
		}
		if o.victims == 0 {
			if o.crossSide() {
				s.victimsGone(o)
				return true
			}
			s.closeOp(o)
			return false
		}
		return true
	}
	return false
}

// migrate carries out a migration as the executor does: the node takes no
// new work from the start (the cordon); each task is stopped right at its
// next checkpoint (at once when it has just checkpointed, within the
// policy's window) and re-queued, redoing nothing; once all are gone the
// emptied node is released and terminated.
func (c *brokerCtl) migrate(s *sim, a broker.Action) bool {
	n := c.nodeByID[a.Node]
	if n == nil || n.op != nil || n.phase != broker.PhaseActive {
		return false
	}
	o := s.newOp(broker.ActMigrate, n, nil)
	o.step, o.to = broker.StepEvict, broker.OwnerNone
	// As the executor does (broker/engine/migrate.go), each task stops
	// at its next checkpoint after the cordon, never at an older one: the
	// replay sees a checkpoint the moment it is written, so it loses
	// nothing (the product loses the time it takes to see it, at most
	// consolidation.migrate_window).
	for _, v := range a.Victims {
		for _, t := range n.tasks {
			if t.key() != v.Key || t.state != taskRunning {
				continue
			}
			o.victims++
			t.victimOf = o
			if age := s.checkpointAge(t); age == 0 || s.w.CheckpointInterval <= 0 {
				s.evict(t, "migrate")
			} else {
				o.moving = append(o.moving, t)
				s.push(event{at: s.now + s.w.CheckpointInterval - age, kind: evMigrateTask, t: t, gen: t.gen, o: o})
			}
			break
		}
	}
	c.migratedAt = append(c.migratedAt, migrated{at: s.now, tasks: o.victims})
	if o.victims == 0 {
		s.victimsGone(o)
	}
	return true
}

// migrated is one migration's start and the tasks it moved.
type migrated struct {
	at    time.Duration
	tasks int
}

// startScaleUps runs the scale-up ops' set-desired step as the executor
// does (engine's setDesired and broker.PendingRemoval): the planned target
// assumed the pool's pending removals had terminated, so the desired
// capacity set is the target plus those removals still to come, and the
// op waits for them only when that would pass the pool's max.
// IMPORTANT: a pending removal is a scale-down that evicts (draining or
// terminating); an attrition scale-down is none: the executor skips it
// (its node keeps counting in the desired capacity until it leaves), and
// counting it would hold the pool's growth back for as long as its work
// runs, days on openb. The instances then exist at once, booting, and the
// op is done.
func (s *sim) startScaleUps() {
	for _, o := range slices.Clone(s.ops) {
		if o.kind != broker.ActScaleUp {
			continue
		}
		pending := 0
		for _, x := range s.ops {
			if x.pool == o.pool && (x.kind == broker.ActScaleDown || x.kind == broker.ActReplace || x.kind == broker.ActMigrate) && !x.attrition {
				pending++
			}
		}
		want := o.target + pending
		if pending > 0 && want > s.pools[o.pool].MaxNodes {
			continue
		}
		desired := 0
		for _, n := range s.nodes {
			if n.pool == o.pool && n.phase != broker.PhaseTerminating && n.phase != broker.PhaseGone {
				desired++
			}
		}
		// Each new node is for the side whose served demand still needs
		// GPUs most; nodes beyond that (a pool's minimum) join at
		// registration the side with more pending demand.
		var need [2]int
		for _, id := range o.serves {
			src, key, _ := strings.Cut(id, "/")
			if t := s.pendingByKey(broker.Source(src), key); t != nil {
				need[sideIdx(t.side)] += t.GPUs
			}
		}
		g := s.pools[o.pool].GPUsPerNode
		for range min(want, s.pools[o.pool].MaxNodes) - desired {
			ordered := broker.Source("")
			switch {
			case need[0] > 0 && need[0] >= need[1]:
				ordered, need[0] = broker.SourceYARN, need[0]-g
			case need[1] > 0:
				ordered, need[1] = broker.SourceK8s, need[1]-g
			}
			s.launch(o.pool, "", ordered)
		}
		s.closeOp(o)
	}
}

// pendingByKey finds a pending task of side src by its demand key.
func (s *sim) pendingByKey(src broker.Source, key string) *task {
	for _, t := range s.pending[sideIdx(src)] {
		if t.state == taskPending && t.key() == key {
			return t
		}
	}
	return nil
}
