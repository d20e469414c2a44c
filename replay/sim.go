package replay

import (
	"container/heap"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// never is a time after every event.
const never = time.Duration(math.MaxInt64)

type taskState int

const (
	taskFuture taskState = iota
	taskPending
	taskRunning
	taskEvicting // evicted, holding its GPUs for the grace period
	taskDone
)

// task is one trace task during a replay.
type task struct {
	*Task
	idx         int
	side        broker.Source
	prio        int64
	preemptible bool
	arrival     time.Duration // after --load
	left        time.Duration // work still to do
	state       taskState
	since       time.Duration // pending since
	firstStart  time.Duration // -1 until placed once
	// waited is the time spent pending before each placement: the first
	// wait and every wait after an eviction re-queued it.
	waited    time.Duration
	startedAt time.Duration
	node      *node
	gen       int   // bumps on every start and eviction, invalidating old events
	nominated *node // kube-scheduler preempted for it on this node
	// victimOf is the broker op (preempt, migrate) that counts the task
	// among the victims it waits for; nil for any other eviction.
	victimOf *op
	restarts int
	models   string // Models joined, for blockKey
}

func (t *task) key() string { return t.Name }

// node is one machine during a replay.
type node struct {
	id    int
	name  string
	pool  int
	side  broker.Source // the side it serves or will serve; "" until it registers
	owner broker.Owner  // who may schedule on it now
	phase broker.Phase
	since time.Duration
	gpus  int
	used  int // GPUs held by running and evicting tasks
	// evicting counts tasks in their grace period on the node.
	evicting int
	tasks    []*task

	under      bool
	underSince time.Duration
	launched   time.Duration
	ordered    broker.Source // the side whose demand ordered it, if known
	op         *op
}

func (n *node) free() int { return n.gpus - n.used }

// schedulable reports whether its side's scheduler may place work on it.
func (n *node) schedulable() bool {
	return n.phase == broker.PhaseActive && n.owner != broker.OwnerNone &&
		(n.op == nil || n.op.kind == broker.ActPreempt && !n.op.crossSide())
}

func (n *node) fits(t *task, models []string) bool {
	return len(t.Models) == 0 || slices.Contains(t.Models, models[n.pool])
}

// op is a journaled operation in the executor's step model.
type op struct {
	id       int64
	kind     broker.ActionKind
	node     *node
	pool     int
	target   int
	to       broker.Owner
	serves   []string
	step     string
	deadline time.Duration
	victims  int // preemption, migration: victims not yet gone
	// moving are a migration's tasks not yet stopped: each stops at its
	// next checkpoint (evMigrateTask).
	moving []*task
	// attrition marks a scale-down that evicts nothing (YARN decommission
	// with an infinite timeout, Kubernetes cordon-and-wait): the node takes
	// no new work and leaves once its work has ended.
	attrition bool
}

// crossSide reports whether o is a preemption that hands its node to the
// other side once the victims are gone.
func (o *op) crossSide() bool {
	return o.kind == broker.ActPreempt && (o.to == broker.OwnerYARN || o.to == broker.OwnerK8s)
}

type evKind int

const (
	evComplete evKind = iota
	evRegistered
	evGPUReady
	evVictimGone
	evDrainDeadline
	evReleased
	evAdmitted
	evGone
	evMigrateTask
)

type event struct {
	at   time.Duration
	seq  int64
	kind evKind
	n    *node
	t    *task
	gen  int
	o    *op
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim is the world of one policy's replay: tasks, nodes, the step model of
// the executor, the sides' schedulers, and the metrics.
type sim struct {
	w       World
	p       broker.Policy
	pools   []broker.Pool
	models  []string        // GPU model of each pool
	poolFor []broker.Source // per-side pools: the side a pool's nodes join; "" for shared
	now     time.Duration
	horizon time.Duration

	tasks   []*task
	next    int // next arrival
	pending [2][]*task
	running int
	nodes   []*node // live, by id
	nodeSeq int
	events  eventHeap
	seq     int64
	ops     []*op
	opSeq   int64
	changed bool // something happened since the last controller look

	m metrics
}

func sideIdx(s broker.Source) int {
	if s == broker.SourceYARN {
		return 0
	}
	return 1
}

func ownerOf(s broker.Source) broker.Owner {
	if s == broker.SourceYARN {
		return broker.OwnerYARN
	}
	return broker.OwnerK8s
}

func newSim(w World, p broker.Policy, pools []broker.Pool, poolFor []broker.Source, tasks []Task, sides []broker.Source, load float64) *sim {
	s := &sim{w: w, p: p, pools: pools, poolFor: poolFor}
	for _, pl := range pools {
		s.models = append(s.models, pl.GPUModel)
	}
	s.tasks = make([]*task, len(tasks))
	var end time.Duration
	for i := range tasks {
		t := &tasks[i]
		prio, pre := t.QoS.Priority()
		s.tasks[i] = &task{Task: t, idx: i, side: sides[i], prio: prio, preemptible: pre,
			arrival: time.Duration(float64(t.Arrival) / load).Round(time.Second), left: t.Run, firstStart: -1,
			models: strings.Join(t.Models, "|")}
		end = max(end, s.tasks[i].arrival+t.Run)
	}
	// IMPORTANT: the replay stops at the horizon even if work is left
	// (it counts as unserved): a week past the time the trace would have
	// ended had every task started at once.
	s.horizon = end + 7*24*time.Hour
	s.m.init(len(pools))
	return s
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

// controller decides capacity: gpubroker's planner or a baseline.
type controller interface {
	// tick looks at the world at s.now and acts through the step model.
	tick(s *sim)
	// wake is the next time the controller wants to look even if nothing
	// happens; never when it does not.
	wake(s *sim) time.Duration
}

// run replays the whole trace under c.
func (s *sim) run(c controller) {
	for {
		next := never
		if s.next < len(s.tasks) {
			next = s.tasks[s.next].arrival
		}
		if len(s.events) > 0 {
			next = min(next, s.events[0].at)
		}
		next = min(next, c.wake(s))
		if next == never || next > s.horizon {
			break
		}
		if next < s.now {
			next = s.now
		}
		s.advance(next)
		for s.next < len(s.tasks) && s.tasks[s.next].arrival <= s.now {
			t := s.tasks[s.next]
			s.next++
			t.state, t.since = taskPending, s.now
			s.pending[sideIdx(t.side)] = append(s.pending[sideIdx(t.side)], t)
			s.changed = true
		}
		for len(s.events) > 0 && s.events[0].at <= s.now {
			s.handle(heap.Pop(&s.events).(event))
		}
		s.schedule()
		s.m.ticks++
		c.tick(s)
		s.updateUnderused()
		s.m.sample(s)
	}
	s.advance(max(s.now, s.m.lastAt))
}

// advance moves the clock, integrating the capacity and allocation.
func (s *sim) advance(to time.Duration) {
	s.m.integrate(s, to)
	s.now = to
}

func (s *sim) handle(e event) {
	s.changed = true
	switch e.kind {
	case evComplete:
		t := e.t
		if t.gen != e.gen || t.state != taskRunning {
			return
		}
		t.state = taskDone
		s.running--
		s.detach(t)
		if n := t.node; n != nil && n.op != nil {
			if o := n.op; o.kind == broker.ActMigrate && slices.Contains(o.moving, t) {
				// A task a migration waited on ended on its own.
				o.moving = slices.DeleteFunc(o.moving, func(x *task) bool { return x == t })
				if o.victims--; o.victims <= 0 {
					s.victimsGone(o)
				}
			} else {
				s.checkReleased(n)
			}
		}
		t.node = nil
	case evRegistered:
		n := e.n
		n.phase, n.since = broker.PhaseRegistered, s.now
		if n.side == "" {
			n.side = s.joinSide(n)
		}
		n.owner = ownerOf(n.side)
		s.push(event{at: s.now + s.w.DevicePluginLag, kind: evGPUReady, n: n})
	case evGPUReady:
		n := e.n
		n.phase, n.since = broker.PhaseActive, s.now
		n.gpus = s.pools[n.pool].GPUsPerNode
	case evVictimGone:
		t := e.t
		if t.gen != e.gen || t.state != taskEvicting {
			return
		}
		n := t.node
		s.detach(t)
		t.node = nil
		t.state, t.since = taskPending, s.now
		s.pending[sideIdx(t.side)] = append(s.pending[sideIdx(t.side)], t)
		// IMPORTANT: only the op's own victims count down its wait: a pod
		// kube-scheduler evicted on the node before the op began (or
		// beside a preemption) leaving must not end a migration's wait
		// while its tasks still run, which would drain (kill) them.
		if o := n.op; o != nil {
			if t.victimOf == o {
				o.victims--
				if o.victims <= 0 {
					s.victimsGone(o)
				}
			} else {
				s.checkReleased(n)
			}
		}
		t.victimOf = nil
		n.evicting--
	case evDrainDeadline:
		n := e.n
		if n.op == nil || n.op != e.o || n.op.step != broker.StepRelease {
			return
		}
		// IMPORTANT: a YARN graceful decommission ends at its timeout:
		// the RM kills what still runs.
		for _, t := range slices.Clone(n.tasks) {
			if t.state == taskRunning {
				s.evict(t, "drain")
			}
		}
	case evReleased:
		n := e.n
		o := n.op
		if o == nil || o != e.o {
			return
		}
		if o.kind == broker.ActTransfer || o.crossSide() {
			o.step = broker.StepAdmit
			n.phase, n.since, n.owner = broker.PhaseDrained, s.now, broker.OwnerNone
			s.push(event{at: s.now + s.w.HandOverTime, kind: evAdmitted, n: n, o: o})
			return
		}
		// scale-down: terminate with a desired-capacity decrement.
		n.phase, n.since, n.owner = broker.PhaseTerminating, s.now, broker.OwnerNone
		s.m.terminations++
		s.closeOp(o)
		s.push(event{at: s.now + s.w.TerminateTime, kind: evGone, n: n})
	case evAdmitted:
		n := e.n
		o := e.o
		n.side, _ = o.to.Side()
		n.owner = o.to
		n.phase, n.since = broker.PhaseActive, s.now
		s.m.handovers++
		s.closeOp(o)
	case evMigrateTask:
		t, o := e.t, e.o
		if o.node == nil || o.node.op != o || t.gen != e.gen || t.state != taskRunning || !slices.Contains(o.moving, t) {
			return
		}
		o.moving = slices.DeleteFunc(o.moving, func(x *task) bool { return x == t })
		s.evict(t, "migrate")
	case evGone:
		n := e.n
		i := slices.Index(s.nodes, n)
		if i >= 0 {
			s.nodes = slices.Delete(s.nodes, i, i+1)
		}
		n.phase = broker.PhaseGone
	}
}

// joinSide picks the side a new node of a shared pool registers with: the
// side whose demand it was bought for (a purchase stays linked to the
// demand it serves), else the side with more pending GPU demand not yet
// placed.
func (s *sim) joinSide(n *node) broker.Source {
	if f := s.poolFor[n.pool]; f != "" {
		return f
	}
	if n.ordered != "" {
		return n.ordered
	}
	var g [2]int
	for i := range s.pending {
		for _, t := range s.pending[i] {
			if t.state == taskPending && t.nominated == nil {
				g[i] += t.GPUs
			}
		}
	}
	if g[0] > g[1] {
		return broker.SourceYARN
	}
	return broker.SourceK8s
}

// pendingCount is the number of tasks waiting for GPUs.
func (s *sim) pendingCount() int {
	c := 0
	for i := range s.pending {
		for _, t := range s.pending[i] {
			if t.state == taskPending {
				c++
			}
		}
	}
	return c
}

// live reports whether anything can still change: arrivals to come,
// work running, events queued.
func (s *sim) live() bool {
	return s.next < len(s.tasks) || s.running > 0 || len(s.events) > 0
}
