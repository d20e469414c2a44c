package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// RuntimeConfig wires the tick loop to the world.
type RuntimeConfig struct {
	// Observers, one per side; a side without one is reported stale.
	Observers []SideObserver
	// Actions, one per side, for drains, hand-overs and preemption.
	Actions []SideActions
	// Pools is the cloud provider.
	Pools NodePool
	// Ledger is the durable state.
	Ledger Ledger
	// Now is the clock (default time.Now); tests drive a fake one.
	Now func() time.Time
	// Logger receives one line per decision and action (default: discard).
	Logger *slog.Logger
	// ObserveTimeout bounds each source's observation (default 10s).
	ObserveTimeout time.Duration
	// Period is the tick interval when nothing triggers one (default 5s,
	// the YARN poll interval).
	Period time.Duration
	// BatchWindow delays a triggered tick so a burst of new pods is planned
	// together (default 1s).
	BatchWindow time.Duration
	// ReportMaxAge is how long ago an agent report may have been received
	// to count (default 2m).
	ReportMaxAge time.Duration
	// XIDs classifies the XID codes agents report (nil: the defaults).
	XIDs broker.XIDClasses
	// StepsPerOp caps executor steps per op and tick (default 8).
	StepsPerOp int
	// Checkpoints, when set, fills in the checkpoint age of running work
	// that names a checkpoint directory, for victim choice.
	Checkpoints Checkpoints
	// AfterTick, when set, is called by Run after each tick, failed or
	// not (the API's read model starts a new generation).
	AfterTick func(ctx context.Context, rep *TickReport, err error)
}

func (c *RuntimeConfig) setDefaults() error {
	if c.Ledger == nil {
		return errors.New("runtime: a Ledger is required")
	}
	if c.Pools == nil {
		return errors.New("runtime: a NodePool is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ObserveTimeout <= 0 {
		c.ObserveTimeout = 10 * time.Second
	}
	if c.Period <= 0 {
		c.Period = 5 * time.Second
	}
	if c.BatchWindow <= 0 {
		c.BatchWindow = time.Second
	}
	if c.ReportMaxAge <= 0 {
		c.ReportMaxAge = 2 * time.Minute
	}
	if c.StepsPerOp <= 0 {
		c.StepsPerOp = 8
	}
	return nil
}

// seen is what the runtime last observed of the world (Runtime.mu guards
// it): each side's last good observation and when it started, which sides
// are stale, the merged nodes and their claims, each pool's last fresh
// state, and each node's last-seen work.
type seen struct {
	lastGood map[broker.Source]broker.SideObservation
	// observedFrom is, per side, when the observation in lastGood started:
	// the executor trusts it about a node only if it began after the node
	// was fenced (fence.go).
	observedFrom map[broker.Source]time.Time
	stale        map[broker.Source]string
	// lastNodes are the latest merged nodes, for the executor.
	lastNodes []broker.Node
	// lastPools is the latest fresh provider state per pool: a pool the
	// cloud cannot show this time keeps counting with it, marked stale.
	lastPools map[string]broker.PoolState
	// conflicts are the nodes both sides claimed in the last observation.
	conflicts []broker.ClaimConflict
	// stalePools are the pools stale in the last tick, with why.
	stalePools map[string]string
	// missingHosts are, by fleet pool, its hosts neither side listed in
	// the last tick.
	missingHosts map[string][]string
	// lastWork is, per node, the work of the last observation that
	// showed any: what a node that lost its work had run (recordLoss).
	lastWork map[string][]broker.Workload
}

// Runtime is the tick loop and the executor: observe, persist, plan,
// validate, journal, act, record.
type Runtime struct {
	cfg     RuntimeConfig
	log     *slog.Logger
	actions map[broker.Source]SideActions

	mu       sync.Mutex // guards the fields below, read by Status
	tick     int64
	lastTick time.Time
	// seen is what the runtime last observed of the world, for the
	// executor and the status.
	seen     seen
	waitSeen map[string]broker.WaitReason
	keptSeen map[string]string // node → why reclaim keeps it, recorded when it changes
	// learnedMemory is, per pool, the GPU memory last given to the
	// ledger's PoolMemoryLearner (record's goroutine only).
	learnedMemory map[string]int
	// waitsWritten are the waits the ledger holds from this runtime.
	waitsWritten map[string]broker.Wait
	// capSince remembers, per demand ID, since when plans have said that
	// ready capacity fits it (Snapshot.CapacityPresentSince).
	capSince map[string]time.Time
	// Counters for the status (and /metrics).
	claimConflicts, opsFailed, opsCancelled int64
	// attritionOffWarned is set once the runtime logged that a missing
	// YARN cordon turns drain by attrition off.
	attritionOffWarned bool
}

// NewRuntime checks the configuration and returns a runtime.
func NewRuntime(cfg RuntimeConfig) (*Runtime, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, log: cfg.Logger, actions: map[broker.Source]SideActions{},
		seen: seen{lastGood: map[broker.Source]broker.SideObservation{}, observedFrom: map[broker.Source]time.Time{},
			stale: map[broker.Source]string{}, lastPools: map[string]broker.PoolState{}},
		waitSeen: map[string]broker.WaitReason{}, capSince: map[string]time.Time{},
	}
	for _, a := range cfg.Actions {
		r.actions[a.Source()] = a
	}
	for _, o := range cfg.Observers {
		if r.actions[o.Source()] == nil {
			r.log.Warn("side has no actions configured: nodes are never released from or admitted to it, and ownership transfer is off",
				"source", o.Source())
		}
	}
	return r, nil
}

// noActions lists the sides without SideActions, for the snapshot.
func (r *Runtime) noActions() map[broker.Source]string {
	var out map[broker.Source]string
	for _, src := range broker.Sources {
		if r.actions[src] == nil {
			if out == nil {
				out = map[broker.Source]string{}
			}
			out[src] = "no actions configured for " + string(src)
		}
	}
	return out
}

// RuntimeStatus is what /readyz, /capacity and the dashboard show of the
// loop; the API serves it as is.
type RuntimeStatus struct {
	// Leader is true on the replica that plans and acts. The runtime
	// reports false; the assembly that holds the leader lease sets it
	// (internal/app).
	Leader bool `json:"leader"`
	// Tick counts this runtime's ticks; LastTick is when the last one
	// finished (zero before the first).
	Tick     int64     `json:"tick"`
	LastTick time.Time `json:"last_tick,omitzero"`
	// Stale maps each source whose observation failed or is too old to why.
	Stale map[broker.Source]string `json:"stale,omitempty"`
	// StalePools names pools the cloud could not show in the last tick.
	StalePools map[string]string `json:"stale_pools,omitempty"`
	// MissingHosts names, by fleet pool, the hosts it names that neither
	// side listed in the last tick (off, or not installed yet).
	MissingHosts map[string][]string `json:"missing_hosts,omitempty"`
	// ClaimConflicts counts ticks' detections of a node both sides claim.
	ClaimConflicts int64 `json:"claim_conflicts"`
	// ClaimConflictNodes names the nodes both sides claimed in the last
	// observation (gpubroker_node_claim_conflict); empty when none did.
	ClaimConflictNodes []string `json:"claim_conflict_nodes,omitempty"`
	// OpsFailed and OpsCancelled count ops this runtime ended so.
	OpsFailed    int64 `json:"ops_failed"`
	OpsCancelled int64 `json:"ops_cancelled"`
}

// Status returns the loop's latest state.
func (r *Runtime) Status() RuntimeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RuntimeStatus{Tick: r.tick, LastTick: r.lastTick, Stale: map[broker.Source]string{},
		ClaimConflicts: r.claimConflicts, OpsFailed: r.opsFailed, OpsCancelled: r.opsCancelled}
	for k, v := range r.seen.stale {
		st.Stale[k] = v
	}
	for _, c := range r.seen.conflicts {
		st.ClaimConflictNodes = append(st.ClaimConflictNodes, c.Node)
	}
	for name, hs := range r.seen.missingHosts {
		if st.MissingHosts == nil {
			st.MissingHosts = map[string][]string{}
		}
		st.MissingHosts[name] = slices.Clone(hs)
	}
	for name, p := range r.seen.stalePools {
		if st.StalePools == nil {
			st.StalePools = map[string]string{}
		}
		st.StalePools[name] = p
	}
	return st
}

// TickReport says what one tick did.
type TickReport struct {
	Tick     int64
	Snapshot *broker.Snapshot
	Plan     broker.Plan
	// Journaled are the ops written this tick.
	Journaled []broker.Op
	// Rejected are planned destructive actions that fresh state did not confirm.
	Rejected []broker.Action
	// Conflicts are nodes both sides claimed in this tick's observation.
	Conflicts []broker.ClaimConflict
	// Advanced counts executor steps taken.
	Advanced int
	// Phases is how long each phase took.
	Phases TickPhases
}

// Run ticks every Period, and BatchWindow after a signal on trigger (the
// Kubernetes watch's "new unschedulable GPU pod"), until ctx ends. A tick
// that fails is logged and the loop goes on.
func (r *Runtime) Run(ctx context.Context, trigger <-chan struct{}) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var batch <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
			if batch == nil {
				batch = time.After(r.cfg.BatchWindow)
			}
			continue
		case <-batch:
			batch = nil
		case <-timer.C:
		}
		start := time.Now()
		rep, err := r.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("tick failed", "err", err)
		}
		if r.cfg.AfterTick != nil {
			r.cfg.AfterTick(ctx, rep, err)
		}
		r.log.Debug("tick done", "duration_ms", time.Since(start).Milliseconds())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(r.cfg.Period)
	}
}

// Tick runs one observe → persist → plan → validate → journal → act →
// record cycle.
func (r *Runtime) Tick(ctx context.Context) (*TickReport, error) {
	r.mu.Lock()
	r.tick++
	rep := &TickReport{Tick: r.tick}
	r.mu.Unlock()
	start := time.Now()

	// Observe, then keep: what the sides showed and the merged nodes are
	// written (and remembered) before anything is planned.
	o, err := r.gather(ctx, &rep.Phases)
	if err != nil {
		return rep, err
	}
	if err := r.keepSides(ctx, o, &rep.Phases); err != nil {
		return rep, err
	}
	snap, a, err := r.assemble(ctx, o, &rep.Phases)
	if err != nil {
		return rep, err
	}
	if err := r.keepSnapshot(ctx, o, a, &rep.Phases); err != nil {
		return rep, err
	}
	policy := o.policy
	rep.Snapshot = snap
	// IMPORTANT: a cordon an op holds that the observation shows missing
	// is put back before this tick plans or acts on the node.
	r.ensureCordons(ctx)
	extra := r.resolveClaims(ctx, snap, rep)
	t := time.Now()
	plan := broker.MakePlan(snap, policy)
	rep.Plan = plan
	r.rememberCapacity(snap, plan)
	rep.Phases.Plan, t = time.Since(t), time.Now()

	accepted, rejected, err := r.validate(ctx, plan)
	if err != nil {
		return rep, err
	}
	rep.Rejected = rejected
	rep.Journaled = append(rep.Journaled, r.journal(ctx, snap.Now, policy, accepted)...)
	rep.Phases.Validate, t = time.Since(t), time.Now()
	if err := r.record(ctx, snap, plan, rejected, extra); err != nil {
		r.log.Warn("record decisions", "err", err)
	}
	rep.Phases.Record, t = time.Since(t), time.Now()
	n, err := r.advance(ctx, policy)
	rep.Advanced = n
	rep.Phases.Act, rep.Phases.Total = time.Since(t), time.Since(start)
	r.log.Debug("tick phases", rep.Phases.LogAttrs()...)
	if err != nil {
		return rep, err
	}
	r.mu.Lock()
	r.lastTick = snap.Now
	r.mu.Unlock()
	return rep, nil
}

// rememberWork keeps, per node, the work of the latest observation that
// showed any. Callers hold r.mu.
func (r *Runtime) rememberWork(obs broker.SideObservation) {
	if r.seen.lastWork == nil {
		r.seen.lastWork = map[string][]broker.Workload{}
	}
	for _, n := range obs.Nodes {
		if len(n.Work) > 0 {
			r.seen.lastWork[n.Name] = n.Work
		} else if n.Phase == broker.PhaseGone {
			delete(r.seen.lastWork, n.Name)
		}
	}
}

// DryRun observes once and plans without persisting or acting.
func (r *Runtime) DryRun(ctx context.Context) (broker.Plan, error) {
	snap, policy, err := r.observe(ctx)
	if err != nil {
		return broker.Plan{}, err
	}
	return broker.MakePlan(snap, policy), nil
}

// pruneDemandMemory forgets what the runtime remembers of demand (the
// wait reason it last recorded, since when capacity was present) once the
// demand left a fresh observation. Callers hold r.mu.
func (r *Runtime) pruneDemandMemory(sides map[broker.Source]broker.SideObservation, stale map[broker.Source]string) {
	live := map[string]bool{}
	for _, obs := range sides {
		for _, d := range obs.Demand {
			live[d.ID()] = true
		}
	}
	gone := func(id string) bool {
		src, _, _ := cutID(id)
		return stale[src] == "" && !live[id]
	}
	for id := range r.waitSeen {
		if gone(id) {
			delete(r.waitSeen, id)
		}
	}
	for id := range r.capSince {
		if gone(id) {
			delete(r.capSince, id)
		}
	}
}

func cutID(id string) (broker.Source, string, bool) {
	for i := 0; i < len(id); i++ {
		if id[i] == '/' {
			return broker.Source(id[:i]), id[i+1:], true
		}
	}
	return "", id, false
}

// mergePools overlays the provider's view on the configured pools: the
// configuration owns min/max and placement attributes, the provider owns
// desired and instances; a recorded backoff that has not expired stays. A
// pool the provider marks stale, does not return, or could not be asked
// about at all (describeErr) keeps its last-known desired capacity and
// instances from last, so its GPUs still count against the cluster and
// per-model max, and is marked stale.
func mergePools(settings, observed []broker.PoolState, now time.Time, last map[string]broker.PoolState, describeErr error) []broker.PoolState {
	obs := map[string]broker.PoolState{}
	for _, p := range observed {
		obs[p.Pool.Name] = p
	}
	out := make([]broker.PoolState, 0, len(settings))
	for _, s := range settings {
		ps := s
		o, ok := obs[s.Pool.Name]
		stale := ""
		switch {
		case describeErr != nil:
			stale = "describe pools: " + describeErr.Error()
		case !ok:
			stale = "group not found at the cloud provider"
		case o.Stale != "":
			stale = o.Stale
		}
		if stale != "" {
			ps.Stale = stale
			if prev, known := last[s.Pool.Name]; known {
				ps.Desired, ps.Instances = prev.Desired, prev.Instances
			}
			if !ps.BackoffUntil.After(now) {
				ps.BackoffUntil, ps.BackoffReason = time.Time{}, ""
			}
			out = append(out, ps)
			continue
		}
		if ok {
			ps.Desired, ps.Instances = o.Desired, o.Instances
			// A stale pool comes with its last-known state; say so.
			ps.Stale = o.Stale
			if o.BackoffUntil.After(ps.BackoffUntil) {
				ps.BackoffUntil, ps.BackoffReason = o.BackoffUntil, o.BackoffReason
			}
			if ps.Pool.GPUsPerNode == 0 {
				ps.Pool.GPUsPerNode = o.Pool.GPUsPerNode
			}
			if ps.Pool.GPUModel == "" {
				ps.Pool.GPUModel = o.Pool.GPUModel
			}
		}
		if !ps.BackoffUntil.After(now) {
			ps.BackoffUntil, ps.BackoffReason = time.Time{}, ""
		}
		out = append(out, ps)
	}
	return out
}

// lastPoolStates returns the last-known state of every pool, marked stale
// with why, for the executor when the cloud cannot be read.
func (r *Runtime) lastPoolStates(why string) []broker.PoolState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]broker.PoolState, 0, len(r.seen.lastPools))
	for _, p := range r.seen.lastPools {
		p.Stale = why
		out = append(out, p)
	}
	return out
}

// rememberCapacity updates, from this tick's plan, since when each demand
// has had ready capacity that fits it without being placed: set when its
// wait first says its scheduler should place it, kept while it says so or
// "not scheduling", dropped otherwise.
func (r *Runtime) rememberCapacity(snap *broker.Snapshot, plan broker.Plan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	waiting := map[string]bool{}
	for _, w := range plan.Waits {
		if w.Reason != broker.WaitScheduler && w.Reason != broker.WaitNotScheduling {
			continue
		}
		waiting[w.Demand] = true
		if _, ok := r.capSince[w.Demand]; !ok {
			r.capSince[w.Demand] = snap.Now
		}
	}
	for id := range r.capSince {
		if !waiting[id] {
			delete(r.capSince, id)
		}
	}
}

// resolveClaims raises every node both sides claim (a log line, a
// decision, the status counter) and journals a cordon of the side that
// does not keep it. The cordon op is added to the snapshot's in-flight
// ops, so this tick's plan leaves the node alone.
func (r *Runtime) resolveClaims(ctx context.Context, snap *broker.Snapshot, rep *TickReport) []broker.Decision {
	var ds []broker.Decision
	r.mu.Lock()
	conflicts := r.seen.conflicts
	r.mu.Unlock()
	for _, c := range conflicts {
		r.log.Warn("both sides claim node", "node", c.Node, "keep", c.Keep, "cordon", c.Release, "reason", c.Reason)
		r.mu.Lock()
		r.claimConflicts++
		tick := r.tick
		r.mu.Unlock()
		rep.Conflicts = append(rep.Conflicts, c)
		ds = append(ds, broker.Decision{At: snap.Now, Tick: tick, Kind: broker.DecisionConflict, Node: c.Node, Reason: c.Reason})
		if src, _ := c.Release.Side(); r.actions[src] == nil {
			r.log.Warn("cannot cordon a claimed node: no actions configured", "node", c.Node, "side", c.Release)
			continue
		}
		raw, err := broker.EncodeOpData(broker.OpData{From: c.Release, CordonOnly: true})
		if err != nil {
			r.log.Error("journal cordon of a claimed node", "node", c.Node, "err", err)
			continue
		}
		op, err := r.cfg.Ledger.InsertOp(ctx, broker.Op{Kind: broker.ActTransfer, Node: c.Node, To: c.Keep, Reason: c.Reason,
			State: broker.OpPending, Step: broker.StepRelease, Data: raw})
		if errors.Is(err, broker.ErrConflict) {
			continue // an open op on the node (a removal releases every side)
		}
		if err != nil {
			r.log.Error("journal cordon of a claimed node", "node", c.Node, "err", err)
			continue
		}
		snap.InFlight = append(snap.InFlight, op)
		rep.Journaled = append(rep.Journaled, op)
	}
	return ds
}
