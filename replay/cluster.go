package replay

import (
	"cmp"
	"container/heap"
	"fmt"
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
	startedAt   time.Duration
	node        *node
	gen         int   // bumps on every start and eviction, invalidating old events
	nominated   *node // kube-scheduler preempted for it on this node
	restarts    int
	models      string // Models joined, for blockKey
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
		(n.op == nil || n.op.kind == broker.ActPreempt)
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
	victims  int // preemption: victims not yet gone
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
		if t.node != nil && t.node.op != nil {
			s.checkReleased(t.node)
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
		if n.op != nil {
			if n.op.kind == broker.ActPreempt {
				n.op.victims--
				if n.op.victims <= 0 {
					s.closeOp(n.op)
				}
			} else {
				s.checkReleased(n)
			}
		}
		n.evicting--
	case evDrainDeadline:
		n := e.n
		if n.op == nil || n.op != e.o || n.op.step != "release" {
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
		if o.kind == broker.ActTransfer {
			o.step = "admit"
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
	s.m.workLost += float64(t.GPUs) * lost.Hours()
	if why == "preempt" {
		s.m.preemptions++
	} else {
		s.m.drainEvictions++
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
	o.to, o.step = to, "release"
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

// checkReleased confirms a release once the node has no work left.
func (s *sim) checkReleased(n *node) {
	o := n.op
	if o == nil || o.step != "release" || len(n.tasks) > 0 {
		return
	}
	o.step = "confirm"
	s.push(event{at: s.now + s.w.ReleaseLag, kind: evReleased, n: n, o: o})
}

// schedule is both sides' schedulers: pending work, highest priority then
// oldest first, on the fullest schedulable node of its side that fits;
// kube-scheduler preempts for Kubernetes pods that fit nowhere.
func (s *sim) schedule() {
	for i := range s.pending {
		s.scheduleSide(i)
	}
}

func (s *sim) scheduleSide(i int) {
	q := s.pending[i]
	if len(q) == 0 {
		return
	}
	// Drop what is no longer pending.
	k := 0
	for _, t := range q {
		if t.state == taskPending {
			q[k] = t
			k++
		}
	}
	q = q[:k]
	s.pending[i] = q
	side := broker.Sources[i]
	var cands []*node
	for _, n := range s.nodes {
		if n.side == side && n.schedulable() {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return
	}
	for _, t := range q {
		// A nomination lasts until the victims are gone.
		if n := t.nominated; n != nil && (n.evicting == 0 || n.phase != broker.PhaseActive) {
			t.nominated = nil
		}
	}
	maxFree := 0
	minVictim := int64(math.MaxInt64)
	for _, n := range cands {
		maxFree = max(maxFree, n.free())
		if side == broker.SourceK8s {
			for _, v := range n.tasks {
				if v.state == taskRunning && v.preemptible {
					minVictim = min(minVictim, v.prio)
				}
			}
		}
	}
	if maxFree == 0 {
		top := int64(math.MinInt64)
		for _, t := range q {
			top = max(top, t.prio)
		}
		if side != broker.SourceK8s || top <= minVictim {
			return // nothing fits and nothing can be preempted
		}
	}
	slices.SortFunc(q, comparePending)
	blocked := map[blockKey]bool{}
	noVictims := map[blockKey]bool{}
	placed := false
	for _, t := range q {
		// The queue is by priority: once nothing is free and this task
		// outranks no preemptible work, neither does any after it.
		if maxFree == 0 && (side != broker.SourceK8s || t.prio <= minVictim) {
			break
		}
		if t.state != taskPending {
			continue
		}
		bk := keyOf(t, 0)
		if maxFree > 0 && !blocked[bk] {
			var best *node
			for _, n := range cands {
				if n.free() >= t.GPUs && n.fits(t, s.models) && (best == nil || n.free() < best.free()) {
					best = n
				}
			}
			if best != nil {
				wasMax := best.free() == maxFree
				s.start(t, best)
				placed = true
				if wasMax {
					maxFree = 0
					for _, n := range cands {
						maxFree = max(maxFree, n.free())
					}
				}
				continue
			}
			blocked[bk] = true
		}
		if side == broker.SourceK8s && t.nominated == nil && t.prio > minVictim {
			pk := keyOf(t, t.prio)
			if !noVictims[pk] && !s.kubePreempt(t, cands) {
				noVictims[pk] = true
			}
		}
	}
	if placed {
		k = 0
		for _, t := range q {
			if t.state == taskPending {
				q[k] = t
				k++
			}
		}
		s.pending[i] = q[:k]
	}
}

func comparePending(a, b *task) int {
	return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.since, b.since), cmp.Compare(a.idx, b.idx))
}

// blockKey groups pending tasks that fit the same nodes: when one fails
// to fit (or to find victims, with its priority), the rest fail alike.
type blockKey struct {
	gpus   int
	models string
	prio   int64
}

func keyOf(t *task, prio int64) blockKey {
	return blockKey{gpus: t.GPUs, models: t.models, prio: prio}
}

// kubePreempt is kube-scheduler's preemption: on the node where evicting
// strictly lower-priority preemptible pods makes room with the lowest
// highest victim priority, then fewest victims, evict the lowest-priority,
// youngest pods first; the pod is nominated there.
func (s *sim) kubePreempt(t *task, cands []*node) bool {
	var best *node
	var bestVictims []*task
	var bestMax int64
	for _, n := range cands {
		if !n.fits(t, s.models) || n.gpus < t.GPUs {
			continue
		}
		free := n.free()
		var vs []*task
		for _, v := range n.tasks {
			if v.state == taskRunning && v.preemptible && v.prio < t.prio {
				vs = append(vs, v)
			}
		}
		sum := free
		for _, v := range vs {
			sum += v.GPUs
		}
		if sum < t.GPUs {
			continue
		}
		slices.SortFunc(vs, func(a, b *task) int {
			return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(b.startedAt, a.startedAt), cmp.Compare(a.idx, b.idx))
		})
		var take []*task
		var mx int64 = math.MinInt64
		for _, v := range vs {
			if free >= t.GPUs {
				break
			}
			take = append(take, v)
			free += v.GPUs
			mx = max(mx, v.prio)
		}
		if best == nil || mx < bestMax || (mx == bestMax && len(take) < len(bestVictims)) {
			best, bestVictims, bestMax = n, take, mx
		}
	}
	if best == nil {
		return false
	}
	for _, v := range bestVictims {
		s.evict(v, "preempt")
	}
	t.nominated = best
	return true
}

// updateUnderused keeps each active node's underused-since time: GPU
// allocation at or under the scale-down threshold (the merge's rule).
func (s *sim) updateUnderused() {
	for _, n := range s.nodes {
		if n.phase == broker.PhaseActive && n.op == nil && n.gpus > 0 &&
			float64(n.used)/float64(n.gpus) <= s.p.ScaleDownUtilisation {
			if !n.under {
				n.under, n.underSince = true, s.now
			}
		} else {
			n.under = false
		}
	}
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
