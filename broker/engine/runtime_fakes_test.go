package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// rtClock is a fake clock the tests move by hand.
type rtClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *rtClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *rtClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// rtLedger is an in-memory Ledger with the store's semantics: it passes
// the same conformance suite as store.Ledger (ledgertest, run by
// TestMemLedgerConformance).
type rtLedger struct {
	mu        sync.Mutex
	idx       broker.TenantIndex
	policy    broker.Policy
	pools     []broker.PoolState
	demand    map[string]broker.Demand
	firstSeen map[string]time.Time
	closed    map[string]string
	nodes     map[string]broker.Node
	ops       []broker.Op
	decisions []broker.Decision
	waits     map[string]broker.Wait
	samples   []broker.CapacitySample
	reports   map[string]broker.NodeReport
	// observed is the time of the last applied observation per source.
	observed map[broker.Source]time.Time
	// now stamps inserted ops' CreatedAt, as the store's clock does.
	now func() time.Time
}

func newRTLedger(policy broker.Policy, pools []broker.PoolState, tenants ...broker.Tenant) *rtLedger {
	l := &rtLedger{policy: policy, pools: pools, demand: map[string]broker.Demand{}, firstSeen: map[string]time.Time{},
		closed: map[string]string{}, nodes: map[string]broker.Node{}, waits: map[string]broker.Wait{}, reports: map[string]broker.NodeReport{}, observed: map[broker.Source]time.Time{},
		idx: broker.NewTenantIndex(tenants)}
	return l
}

func (l *rtLedger) TenantIndex(context.Context) (broker.TenantIndex, error) { return l.idx, nil }
func (l *rtLedger) Policy(context.Context) (broker.Policy, error)           { return l.policy, nil }
func (l *rtLedger) PoolSettings(context.Context) ([]broker.PoolState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pools), nil
}
func (l *rtLedger) SetPoolBackoff(_ context.Context, pool string, until time.Time, reason string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.pools {
		if l.pools[i].Pool.Name == pool {
			l.pools[i].BackoffUntil, l.pools[i].BackoffReason = until, reason
			return nil
		}
	}
	return broker.ErrNotFound
}
func (l *rtLedger) DemandFirstSeen(context.Context) (map[string]time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range l.firstSeen {
		out[k] = v
	}
	return out, nil
}
func (l *rtLedger) ApplyDemand(_ context.Context, obs broker.SideObservation) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// As the store: a known reason for every closed key, and never an
	// observation older than the applied one; nothing changes otherwise.
	for k, r := range obs.Closed {
		if !r.Valid() {
			return broker.Invalid("closed["+k+"]", "unknown close reason %q", r)
		}
	}
	if last, ok := l.observed[obs.Source]; ok && obs.At.Before(last) {
		return fmt.Errorf("observation of %s at %s is older than the applied one at %s: %w", obs.Source, obs.At, last, broker.ErrConflict)
	}
	live := map[string]bool{}
	for _, d := range obs.Demand {
		live[d.ID()] = true
	}
	// The source's demand that left, with why: Closed, then Departed
	// (asked only about keys that left), else vanished.
	gone := map[string]string{}
	for id, d := range l.demand {
		if d.Source != obs.Source || live[id] {
			continue
		}
		reason := obs.Closed[d.Key]
		if reason == "" && obs.Departed != nil {
			reason = obs.Departed(d.Key)
			if reason != "" && !reason.Valid() {
				return broker.Invalid("departed["+d.Key+"]", "unknown close reason %q", reason)
			}
		}
		if reason == "" {
			reason = broker.CloseVanished
		}
		gone[id] = string(reason)
	}
	l.observed[obs.Source] = obs.At
	for _, d := range obs.Demand {
		if _, ok := l.firstSeen[d.ID()]; !ok {
			l.firstSeen[d.ID()] = obs.At
		}
		l.demand[d.ID()] = d
	}
	for id, reason := range gone {
		l.closed[id] = reason
		delete(l.demand, id)
		delete(l.firstSeen, id)
		delete(l.waits, id)
	}
	return nil
}

func (l *rtLedger) StoredNodes(context.Context) ([]broker.Node, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []broker.Node
	for _, n := range l.nodes {
		if n.Phase != broker.PhaseGone {
			out = append(out, n)
		}
	}
	return out, nil
}
func (l *rtLedger) SaveNodes(_ context.Context, nodes []broker.Node, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range nodes {
		// As the store: protection is the API's to change, and the phase's
		// start moves only when the phase changes.
		n.PhaseSince = now
		if old, ok := l.nodes[n.Name]; ok {
			n.Protected = old.Protected
			if old.Phase == n.Phase {
				n.PhaseSince = old.PhaseSince
			}
		}
		l.nodes[n.Name] = n
	}
	return nil
}
func (l *rtLedger) OpenOps(context.Context) ([]broker.Op, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []broker.Op
	for _, op := range l.ops {
		if !op.State.Terminal() {
			out = append(out, op)
		}
	}
	return out, nil
}
func (l *rtLedger) MigratedSince(_ context.Context, since time.Time) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := range l.ops {
		if l.ops[i].Kind == broker.ActMigrate && !l.ops[i].CreatedAt.Before(since) {
			n += broker.MigratedTasks(&l.ops[i])
		}
	}
	return n, nil
}
func (l *rtLedger) InsertOp(_ context.Context, op broker.Op) (broker.Op, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if op.Kind == "" {
		return broker.Op{}, broker.Invalid("kind", "must be set")
	}
	if op.Reason == "" {
		return broker.Op{}, broker.Invalid("reason", "every operation needs a reason")
	}
	if op.State == "" {
		op.State = broker.OpPending
	}
	for _, o := range l.ops {
		if o.State.Terminal() {
			continue
		}
		if (op.Node != "" && o.Node == op.Node) || (op.Kind == broker.ActScaleUp && o.Kind == broker.ActScaleUp && o.Pool == op.Pool) {
			return broker.Op{}, fmt.Errorf("op %d open: %w", o.ID, broker.ErrConflict)
		}
	}
	op.ID = int64(len(l.ops) + 1)
	if l.now != nil {
		op.CreatedAt = l.now()
	}
	l.ops = append(l.ops, op)
	return op, nil
}
func (l *rtLedger) AdvanceOp(_ context.Context, op broker.Op) (broker.Op, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := int(op.ID) - 1
	if i < 0 || i >= len(l.ops) {
		return broker.Op{}, broker.ErrNotFound
	}
	if l.ops[i].State.Terminal() {
		return broker.Op{}, broker.ErrConflict
	}
	// As the store: only the progress fields change; the intent (kind,
	// pool, node, target, serves) stays what was journaled.
	cur := &l.ops[i]
	cur.State, cur.Step, cur.Data, cur.Attempts = op.State, op.Step, op.Data, op.Attempts
	cur.NextAttempt, cur.LastError, cur.UpdatedAt = op.NextAttempt, op.LastError, op.UpdatedAt
	return *cur, nil
}
func (l *rtLedger) RecordDecisions(_ context.Context, ds []broker.Decision) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.decisions = append(l.decisions, ds...)
	return nil
}
func (l *rtLedger) SetWaitReasons(_ context.Context, ws []broker.Wait) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range ws {
		l.waits[w.Demand] = w
	}
	return nil
}
func (l *rtLedger) RecordSamples(_ context.Context, ss []broker.CapacitySample) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, ss...)
	return nil
}
func (l *rtLedger) LatestReports(context.Context) (map[string]broker.NodeReport, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]broker.NodeReport{}
	for k, v := range l.reports {
		out[k] = v
	}
	return out, nil
}
func (l *rtLedger) opsOf(kind broker.ActionKind) []broker.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []broker.Op
	for _, o := range l.ops {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// rtCloud is a node pool whose instances register on a side through join.
type rtCloud struct {
	mu         sync.Mutex
	pools      map[string]*broker.PoolState
	setCalls   []int
	terminated []string
	next       int
	failSet    error
	// failAll fails every Pools call; stale marks single pools stale as
	// the adapter does when one group's describe fails.
	failAll error
	stale   map[string]string
	// staleWithLast reports a stale pool as the cloud adapter does: its
	// last good state (instances, desired capacity, backoff) marked stale.
	staleWithLast bool
	// launchLater makes SetDesired only set the desired capacity, as a
	// real group does; launch then starts the missing instances.
	launchLater bool
	// backoffUntil marks pools whose launches failed, as the adapter does
	// after insufficient capacity: Pools reports it, and SetDesired
	// refuses to raise their desired capacity until then.
	backoffUntil map[string]time.Time
	now          func() time.Time
}

// launch starts the instances a launchLater pool's desired capacity asks for.
func (c *rtCloud) launch(pool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[pool]
	for p.InService() < p.Desired {
		c.next++
		id := fmt.Sprintf("i-%04d", c.next)
		p.Instances = append(p.Instances, broker.Instance{ID: id, Hostname: "node-" + id, Phase: broker.PhaseBooting})
	}
}

func newRTCloud(pools ...broker.PoolState) *rtCloud {
	c := &rtCloud{pools: map[string]*broker.PoolState{}}
	for _, p := range pools {
		c.pools[p.Pool.Name] = &p
	}
	return c
}

func (c *rtCloud) Pools(context.Context) ([]broker.PoolState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failAll != nil {
		return nil, c.failAll
	}
	var out []broker.PoolState
	for _, p := range c.pools {
		why, stale := c.stale[p.Pool.Name]
		if stale && !c.staleWithLast {
			out = append(out, broker.PoolState{Pool: p.Pool, Stale: why})
			continue
		}
		cp := *p
		cp.Instances = slices.Clone(p.Instances)
		if until, ok := c.backoffUntil[p.Pool.Name]; ok {
			cp.BackoffUntil, cp.BackoffReason = until, "InsufficientInstanceCapacity"
		}
		cp.Stale = why
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b broker.PoolState) int { return comparePoolStates(&a, &b) })
	return out, nil
}

func (c *rtCloud) SetDesired(_ context.Context, pool string, target int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failSet != nil {
		return c.failSet
	}
	p, ok := c.pools[pool]
	if !ok {
		return broker.ErrNotFound
	}
	if until, ok := c.backoffUntil[pool]; ok && target > p.Desired && c.now().Before(until) {
		return &broker.BackoffError{Pool: pool, Reason: "InsufficientInstanceCapacity", Until: until}
	}
	c.setCalls = append(c.setCalls, target)
	if c.launchLater {
		// Lowered, a group keeps (then terminates) instances above it;
		// the fake only lets it drop to the instances that exist.
		p.Desired = max(target, p.InService())
		return nil
	}
	for p.Desired < target {
		c.next++
		id := fmt.Sprintf("i-%04d", c.next)
		p.Instances = append(p.Instances, broker.Instance{ID: id, Hostname: "node-" + id, Phase: broker.PhaseBooting})
		p.Desired++
	}
	return nil
}

func (c *rtCloud) Terminate(_ context.Context, pool, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[pool]
	i := slices.IndexFunc(p.Instances, func(in broker.Instance) bool { return in.ID == id })
	if i < 0 {
		return nil // already gone: idempotent
	}
	if p.Desired-1 < p.Pool.MinNodes {
		// As AWS: a decrement below the group's minimum is refused.
		return fmt.Errorf("terminate %s: ValidationError: group %s is at its minimum size %d", id, pool, p.Pool.MinNodes)
	}
	p.Instances = slices.Delete(p.Instances, i, i+1)
	p.Desired--
	c.terminated = append(c.terminated, id)
	return nil
}

// rtKeepCloud is a cloud that can terminate without a decrement: the group
// launches a replacement itself.
type rtKeepCloud struct{ *rtCloud }

func (c rtKeepCloud) TerminateKeepDesired(_ context.Context, pool, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[pool]
	i := slices.IndexFunc(p.Instances, func(in broker.Instance) bool { return in.ID == id })
	if i < 0 {
		return nil
	}
	p.Instances = slices.Delete(p.Instances, i, i+1)
	c.terminated = append(c.terminated, id)
	c.next++
	nid := fmt.Sprintf("i-%04d", c.next)
	p.Instances = append(p.Instances, broker.Instance{ID: nid, Hostname: "node-" + nid, Phase: broker.PhaseBooting})
	return nil
}

// rtSide is one simulated side: nodes, pending demand and running work,
// with a tiny scheduler that places pending units on free GPUs.
type rtSide struct {
	mu       sync.Mutex
	src      broker.Source
	nodes    map[string]*broker.Node
	pending  []broker.Demand
	closed   map[string]broker.CloseReason
	err      error
	released map[string]bool
	admitted []string
	// forgotten lists the nodes Forget was called for (terminated).
	forgotten []string
	evicted   []string
	// evictInProgress makes Evict answer ErrInProgress that many times
	// per workload before the workload is gone (a YARN container
	// shutting down).
	evictInProgress int
	evictCalls      map[string]int
	// drainBlocked keeps work on released nodes (a PDB that never allows).
	drainBlocked bool
	// unknown makes Release report that the side cannot tell (the RM does
	// not list the host).
	unknown string
	// refuse keeps demand (by key) pending with the scheduler's reason,
	// whatever capacity there is (CPU, memory, a volume's zone).
	refuse map[string]string
	// releases counts Release calls per node.
	releases map[string]int
	// afterObserve, when set, runs after each observation (under the
	// side's lock): the world changing between a plan and its validation.
	afterObserve func(*rtSide)
}

func newRTSide(src broker.Source) *rtSide {
	return &rtSide{src: src, nodes: map[string]*broker.Node{}, released: map[string]bool{}, closed: map[string]broker.CloseReason{},
		refuse: map[string]string{}, releases: map[string]int{}}
}

func (s *rtSide) Source() broker.Source { return s.src }

func (s *rtSide) Observe(context.Context, broker.TenantIndex) (broker.SideObservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return broker.SideObservation{}, s.err
	}
	s.schedule()
	obs := broker.SideObservation{Source: s.src, Demand: slices.Clone(s.pending), Closed: s.closed}
	s.closed = map[string]broker.CloseReason{}
	for _, n := range s.nodes {
		cp := *n
		cp.Work = slices.Clone(n.Work)
		if s.released[n.Name] {
			cp.Owner = broker.OwnerNone
		}
		obs.Nodes = append(obs.Nodes, cp)
	}
	slices.SortFunc(obs.Nodes, func(a, b broker.Node) int { return compareNodes(&a, &b) })
	if s.afterObserve != nil {
		s.afterObserve(s)
	}
	return obs, nil
}

func (s *rtSide) join(name, pool string, gpus int, labels map[string]string, taints []broker.Taint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[name] = &broker.Node{Name: name, Owner: broker.Owner(s.src), Phase: broker.PhaseActive, GPUsTotal: gpus, Pool: pool,
		Labels: labels, Taints: taints, GPUModel: "A100"}
}

// schedule places pending demand on free GPUs of schedulable nodes.
func (s *rtSide) schedule() {
	var left []broker.Demand
	for _, d := range s.pending {
		if why, ok := s.refuse[d.Key]; ok {
			d.SchedulerReason = why
			left = append(left, d)
			continue
		}
		placed := false
		for _, name := range sortedNodeNames(s.nodes) {
			n := s.nodes[name]
			if s.released[name] || n.Down != "" || n.FreeGPUs() < d.GPUs() || !d.Constraints.Matches(s.src, n.Labels, n.Taints, n.GPUModel) {
				continue
			}
			n.GPUsAllocated += d.GPUs()
			n.Work = append(n.Work, broker.Workload{Source: s.src, Key: d.Key, Name: d.Name, Tenant: d.Tenant,
				Priority: d.Priority, GPUs: d.GPUs(), Preemptible: d.Preemptible, CheckpointAge: -1})
			s.closed[d.Key] = "scheduled"
			placed = true
			break
		}
		if !placed {
			left = append(left, d)
		}
	}
	s.pending = left
}

func sortedNodeNames(m map[string]*broker.Node) []string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func (s *rtSide) finish(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		for i, w := range n.Work {
			if w.Key == key {
				n.GPUsAllocated -= w.GPUs
				n.Work = slices.Delete(n.Work, i, i+1)
				return
			}
		}
	}
}

func (s *rtSide) submit(d broker.Demand) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, d)
}

func (s *rtSide) Release(_ context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[node]++
	if s.unknown != "" {
		s.released[node] = true
		return broker.ReleaseStatus{Unknown: s.unknown}, nil
	}
	n, ok := s.nodes[node]
	if !ok {
		return broker.ReleaseStatus{Drained: true}, nil
	}
	s.released[node] = true
	var names []string
	for _, w := range n.Work {
		if !w.System {
			names = append(names, w.Key)
		}
	}
	if s.drainBlocked && len(names) > 0 {
		return broker.ReleaseStatus{Remaining: names, BlockedBy: "PodDisruptionBudget default/pdb"}, nil
	}
	// Evicted work goes back to pending, as a controller would recreate it.
	for _, w := range n.Work {
		if !w.System {
			s.pending = append(s.pending, broker.Demand{Source: s.src, Key: w.Key + "-again", Tenant: w.Tenant, GPUsPerUnit: w.GPUs, Units: 1})
		}
	}
	n.Work, n.GPUsAllocated = nil, 0
	return broker.ReleaseStatus{Drained: true}, nil
}

// Capabilities are YARN's for the YARN side (as yarn.Decommissioner's),
// none for the other.
func (s *rtSide) Capabilities() SideCaps {
	y := s.src == broker.SourceYARN
	return SideCaps{CountsAllWork: y, ReleasesByAttrition: y, ShowsFence: !y, CordonsVictims: y, FencesByRelease: y}
}

func (s *rtSide) Cordon(_ context.Context, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released[node] = true
	return nil
}

func (s *rtSide) Admit(_ context.Context, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.released, node)
	s.admitted = append(s.admitted, node)
	return nil
}

// Forget makes rtSide a Forgetter, as YARN's Decommissioner is.
func (s *rtSide) Forget(_ context.Context, node string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgotten = append(s.forgotten, node)
	return nil
}

func (s *rtSide) Evict(_ context.Context, node string, w broker.Workload) error {
	s.mu.Lock()
	if s.evictCalls == nil {
		s.evictCalls = map[string]int{}
	}
	s.evictCalls[w.Key]++
	if s.evictCalls[w.Key] <= s.evictInProgress {
		s.mu.Unlock()
		return fmt.Errorf("workload %s is shutting down: %w", w.Key, broker.ErrInProgress)
	}
	s.evicted = append(s.evicted, w.Key)
	n := s.nodes[node]
	s.mu.Unlock()
	if n == nil {
		return errors.New("no such node")
	}
	s.finish(w.Key)
	return nil
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// comparePoolStates and compareNodes order fakes' listings as the
// planner's snapshot does.
func comparePoolStates(a, b *broker.PoolState) int {
	return cmp.Or(
		cmp.Compare(a.Pool.Name, b.Pool.Name),
		cmp.Compare(a.Pool.Version, b.Pool.Version),
		cmp.Compare(a.Desired, b.Desired),
	)
}

func compareNodes(a, b *broker.Node) int {
	return cmp.Or(
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Pool, b.Pool),
		cmp.Compare(a.InstanceID, b.InstanceID),
		cmp.Compare(a.Owner, b.Owner),
		cmp.Compare(a.Phase, b.Phase),
	)
}
