package replay

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// This file is the executor's step model (World describes the times):
// nodes are launched or placed, tasks started and evicted, and nodes
// released for a scale-down or a hand-over, each step as an event.

// detach takes a task off its node, freeing its GPUs.
func (s *sim) detach(t *task) {
	n := t.node
	if n == nil {
		return
	}
	n.used -= t.GPUs
	if i := slices.Index(n.tasks, t); i >= 0 {
		n.tasks = slices.Delete(n.tasks, i, i+1)
	}
}

// launch orders one node of pool pi; it joins side (or, when empty, the
// side chosen at registration).
func (s *sim) launch(pi int, side, ordered broker.Source) *node {
	s.nodeSeq++
	n := &node{id: s.nodeSeq, name: fmt.Sprintf("%s-%05d", s.pools[pi].Name, s.nodeSeq), pool: pi,
		side: side, owner: broker.OwnerNone, phase: broker.PhaseBooting, since: s.now, launched: s.now, ordered: ordered}
	s.nodes = append(s.nodes, n)
	s.m.launches++
	s.push(event{at: s.now + s.w.LaunchToReady, kind: evRegistered, n: n})
	return n
}

// place adds an already running node (the static split's).
func (s *sim) place(pi int, side broker.Source) *node {
	s.nodeSeq++
	n := &node{id: s.nodeSeq, name: fmt.Sprintf("%s-%05d", s.pools[pi].Name, s.nodeSeq), pool: pi,
		side: side, owner: ownerOf(side), phase: broker.PhaseActive, since: s.now, launched: s.now,
		gpus: s.pools[pi].GPUsPerNode}
	s.nodes = append(s.nodes, n)
	return n
}

func (s *sim) start(t *task, n *node) {
	t.state, t.node, t.startedAt, t.nominated = taskRunning, n, s.now, nil
	if t.firstStart < 0 {
		t.firstStart = s.now
	}
	t.waited += s.now - t.since
	t.gen++
	n.used += t.GPUs
	n.tasks = append(n.tasks, t)
	s.running++
	s.push(event{at: s.now + t.left, kind: evComplete, t: t, gen: t.gen})
}

// checkpointAge is the work a running task would lose now: the time since
// its newest checkpoint, or since it started when it does not checkpoint.
func (s *sim) checkpointAge(t *task) time.Duration {
	ran := s.now - t.startedAt
	if c := s.w.CheckpointInterval; c > 0 {
		return ran % c
	}
	return ran
}

// evict stops a running task: it keeps its GPUs for the grace period, then
// is pending again with the work since its last checkpoint to redo.
func (s *sim) evict(t *task, why string) {
	if t.state != taskRunning {
		return
	}
	lost := s.checkpointAge(t)
	done := s.now - t.startedAt - lost
	t.left -= done
	t.state = taskEvicting
	t.gen++
	t.restarts++
	s.running--
	t.node.evicting++
	gh := float64(t.GPUs) * lost.Hours()
	s.m.workLost += gh
	if why == "preempt" {
		s.m.preemptions++
	} else {
		s.m.drainEvictions++
	}
	if why == "migrate" && lost == 0 {
		s.m.migrations++
	}
	if lost > 0 {
		// A kill: the task must redo work. Only a preemption for
		// higher-priority demand may do that; a kill for any other reason
		// (a drain, a decommission's timeout) is counted apart.
		s.m.kills++
		if why != "preempt" {
			s.m.drainKills++
			s.m.drainKillLost += gh
		}
		if why == "migrate" {
			s.m.migrationKills++
		}
	}
	if !t.preemptible && (why != "migrate" || lost > 0) {
		// A zero-loss migration of LS work is a restart, not a kill.
		s.m.lsKills++
	}
	s.push(event{at: s.now + s.w.PreemptionGrace, kind: evVictimGone, t: t, gen: t.gen})
}

func (s *sim) newOp(kind broker.ActionKind, n *node, serves []string) *op {
	s.opSeq++
	o := &op{id: s.opSeq, kind: kind, node: n, serves: serves, pool: -1}
	if n != nil {
		o.pool = n.pool
		n.op = o
	}
	s.ops = append(s.ops, o)
	return o
}

func (s *sim) closeOp(o *op) {
	if i := slices.Index(s.ops, o); i >= 0 {
		s.ops = slices.Delete(s.ops, i, i+1)
	}
	if o.node != nil && o.node.op == o {
		o.node.op = nil
	}
}

// release starts taking node n from its side, for a scale-down (to is
// OwnerNone) or a hand-over to the other side. Kubernetes evicts every
// pod; YARN decommissions gracefully until the drain timeout.
func (s *sim) release(n *node, kind broker.ActionKind, to broker.Owner, serves []string) *op {
	o := s.newOp(kind, n, serves)
	o.to, o.step = to, broker.StepRelease
	if n.side == broker.SourceK8s {
		for _, t := range slices.Clone(n.tasks) {
			s.evict(t, "drain")
		}
	} else {
		o.deadline = s.now + s.w.DrainTimeout
		s.push(event{at: o.deadline, kind: evDrainDeadline, n: n, o: o})
	}
	s.checkReleased(n)
	return o
}

// attrit starts an attrition scale-down of node n: it takes no new work,
// nothing is evicted, there is no deadline, and it is terminated once its
// work has ended (or given back by a recommission).
func (s *sim) attrit(n *node) *op {
	o := s.newOp(broker.ActScaleDown, n, nil)
	o.to, o.step, o.attrition = broker.OwnerNone, broker.StepRelease, true
	s.m.attritions++
	s.checkReleased(n)
	return o
}

// recommission cancels the attrition on node n: its side schedules on it
// again at once.
func (s *sim) recommission(n *node) bool {
	o := n.op
	if o == nil || !o.attrition || o.step != broker.StepRelease {
		return false
	}
	s.closeOp(o)
	s.m.recommissions++
	return true
}

// cancelMigration gives node n back to its side, as the executor's
// give-back of a migration that pending demand cancelled while it still
// waited for checkpoints: the node schedules again at once, the tasks not
// stopped yet keep running there, and those already stopped restart
// wherever the scheduler puts them, having lost nothing. The replay's
// scale-downs release at once (Kubernetes evicts, YARN drains under a
// deadline), so only migrations are offered to the planner to cancel.
func (s *sim) cancelMigration(n *node) bool {
	o := n.op
	if o == nil || o.kind != broker.ActMigrate || o.step != broker.StepEvict {
		return false
	}
	o.moving = nil
	s.closeOp(o)
	s.m.migrationsCancelled++
	return true
}

// victimsGone moves a preemption on once its victims have left: a
// preemption on the node's own side is done; one across sides releases the
// node from its side (what else runs there is drained as for a hand-over)
// and hands it over; a migration releases the emptied node and
// terminates it, as a scale-down.
func (s *sim) victimsGone(o *op) {
	if !o.crossSide() && o.kind != broker.ActMigrate {
		s.closeOp(o)
		return
	}
	n := o.node
	o.step = broker.StepRelease
	if n.side == broker.SourceK8s {
		for _, t := range slices.Clone(n.tasks) {
			s.evict(t, "drain")
		}
	} else {
		o.deadline = s.now + s.w.DrainTimeout
		s.push(event{at: o.deadline, kind: evDrainDeadline, n: n, o: o})
	}
	s.checkReleased(n)
}

// stepConfirm is the replay's own step between a release that found the
// node empty and the side confirming it (ReleaseLag later); the other
// steps are broker.OpSteps' names.
const stepConfirm = "confirm"

// checkReleased confirms a release once the node has no work left.
func (s *sim) checkReleased(n *node) {
	o := n.op
	if o == nil || o.step != broker.StepRelease || len(n.tasks) > 0 {
		return
	}
	o.step = stepConfirm
	s.push(event{at: s.now + s.w.ReleaseLag, kind: evReleased, n: n, o: o})
}
