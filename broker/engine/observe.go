package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Observation in two kinds of phase: gather and assemble look and change
// nothing; keepSides and keepSnapshot (the tick's, never a dry run's or a
// validation's) write the ledger and what the runtime remembers.

// observation is what one look at every source gathered, before anything
// of it is kept.
type observation struct {
	// started is read before any source is asked: what an observation
	// shows happened no later than this (the executor's fence check).
	started, now time.Time
	policy       broker.Policy
	idx          broker.TenantIndex
	// sides holds each side's observation: this one's where it succeeded
	// (fresh), the last good one where it failed (stale says why).
	sides map[broker.Source]broker.SideObservation
	fresh map[broker.Source]bool
	stale map[broker.Source]string
	// pools is the cloud's answer; nil when it failed (poolErr).
	pools   []broker.PoolState
	poolErr error
}

// assembled is what assemble derived that keepSnapshot keeps.
type assembled struct {
	nodes     []broker.Node
	conflicts []broker.ClaimConflict
	pools     []broker.PoolState
}

// observe takes a snapshot without keeping anything: a dry run's, and
// validation's fresh look.
func (r *Runtime) observe(ctx context.Context) (*broker.Snapshot, broker.Policy, error) {
	var ph TickPhases
	o, err := r.gather(ctx, &ph)
	if err != nil {
		return nil, broker.Policy{}, err
	}
	snap, _, err := r.assemble(ctx, o, &ph)
	if err != nil {
		return nil, broker.Policy{}, err
	}
	return snap, o.policy, nil
}

// gather reads the policy and tenants and observes every source in
// parallel, each with its own timeout, timing them into ph.
func (r *Runtime) gather(ctx context.Context, ph *TickPhases) (*observation, error) {
	l := r.cfg.Ledger
	t0 := time.Now()
	o := &observation{started: r.cfg.Now()}
	policy, err := l.Policy(ctx)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	o.policy = r.cordonPolicy(ctx, policy.WithDefaults())
	if o.idx, err = l.TenantIndex(ctx); err != nil {
		return nil, fmt.Errorf("read tenants: %w", err)
	}

	type result struct {
		obs broker.SideObservation
		err error
		d   time.Duration
	}
	results := make([]result, len(r.cfg.Observers))
	var wg sync.WaitGroup
	for i, ob := range r.cfg.Observers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := context.WithTimeout(ctx, r.cfg.ObserveTimeout)
			defer cancel()
			t := time.Now()
			obs, err := ob.Observe(octx, o.idx)
			if err == nil && obs.Source != ob.Source() {
				err = fmt.Errorf("observer for %s returned an observation of %q", ob.Source(), obs.Source)
			}
			results[i] = result{obs, err, time.Since(t)}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		octx, cancel := context.WithTimeout(ctx, r.cfg.ObserveTimeout)
		defer cancel()
		t := time.Now()
		o.pools, o.poolErr = r.cfg.Pools.Pools(octx)
		ph.Cloud = time.Since(t)
	}()
	wg.Wait()
	ph.ObserveAll, ph.Observe = time.Since(t0), map[broker.Source]time.Duration{}
	for i, ob := range r.cfg.Observers {
		ph.Observe[ob.Source()] = results[i].d
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	o.now = r.cfg.Now()
	if o.poolErr != nil {
		// IMPORTANT: one failing describe does not stop the tick: every
		// pool is stale (nothing destructive, no growth) with its last
		// known state, and the sides are still observed and served.
		r.log.Warn("observe pools", "err", o.poolErr)
		o.pools = nil
	}
	o.sides = map[broker.Source]broker.SideObservation{}
	o.fresh = map[broker.Source]bool{}
	o.stale = map[broker.Source]string{}
	for _, src := range broker.Sources {
		o.stale[src] = "no observer configured"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ob := range r.cfg.Observers {
		src := ob.Source()
		if res := results[i]; res.err != nil {
			o.stale[src] = res.err.Error()
			r.log.Warn("source stale", "source", src, "err", res.err)
			if prev, ok := r.seen.lastGood[src]; ok {
				o.sides[src] = prev
			}
			continue
		}
		delete(o.stale, src)
		if results[i].obs.At.IsZero() {
			results[i].obs.At = o.now
		}
		o.sides[src], o.fresh[src] = results[i].obs, true
	}
	return o, nil
}

// keepSides remembers what the fresh sides showed (their work, the time
// the look started) and which are stale, and writes their demand to the
// ledger.
func (r *Runtime) keepSides(ctx context.Context, o *observation, ph *TickPhases) error {
	r.mu.Lock()
	for src := range o.fresh {
		obs := o.sides[src]
		r.seen.lastGood[src] = obs
		r.seen.observedFrom[src] = o.started
		r.rememberWork(obs)
	}
	r.seen.stale = o.stale
	r.mu.Unlock()
	t := time.Now()
	for _, src := range broker.Sources {
		if !o.fresh[src] {
			continue
		}
		if err := r.cfg.Ledger.ApplyDemand(ctx, o.sides[src]); err != nil {
			return fmt.Errorf("persist %s demand: %w", src, err)
		}
	}
	ph.Persist += time.Since(t)
	return nil
}

// assemble merges an observation with what the ledger holds (pool
// settings, stored nodes, agent reports, open ops, first-seen times) into
// the snapshot the planner reads.
func (r *Runtime) assemble(ctx context.Context, o *observation, ph *TickPhases) (*broker.Snapshot, assembled, error) {
	l := r.cfg.Ledger
	var a assembled
	// IMPORTANT: first-seen times are the ledger's (kept from the first
	// observation that held the demand, dropped when it left), read after
	// this tick's observations were applied; demand a dry run sees before
	// the ledger does was first seen now.
	firstSeen, err := l.DemandFirstSeen(ctx)
	if err != nil {
		return nil, a, fmt.Errorf("read first-seen times: %w", err)
	}
	t := time.Now()
	settings, err := l.PoolSettings(ctx)
	if err != nil {
		return nil, a, fmt.Errorf("read pools: %w", err)
	}
	r.mu.Lock()
	a.pools = mergePools(settings, o.pools, o.now, r.seen.lastPools, o.poolErr)
	r.mu.Unlock()
	storedNodes, err := l.StoredNodes(ctx)
	if err != nil {
		return nil, a, fmt.Errorf("read nodes: %w", err)
	}
	stored := make(map[string]broker.Node, len(storedNodes))
	for _, n := range storedNodes {
		stored[n.Name] = n
	}
	reports, err := l.LatestReports(ctx)
	if err != nil {
		return nil, a, fmt.Errorf("read agent reports: %w", err)
	}
	ops, err := l.OpenOps(ctx)
	if err != nil {
		return nil, a, fmt.Errorf("read journal: %w", err)
	}
	migrated := 0
	if o.policy.Migrate == broker.MigrateCheckpointed {
		if migrated, err = l.MigratedSince(ctx, o.now.Add(-time.Hour)); err != nil {
			return nil, a, fmt.Errorf("read recent migrations: %w", err)
		}
	}
	a.nodes, a.conflicts = broker.MergeNodesClaims(broker.MergeInput{Now: o.now, Policy: o.policy, Sides: o.sides, Pools: a.pools,
		Stored: stored, Reports: reports, Ops: ops, ReportMaxAge: r.cfg.ReportMaxAge, XIDs: r.cfg.XIDs})
	if r.cfg.Checkpoints != nil {
		// A slow or unreachable store must not hold the tick: lookups past
		// the budget leave the age unknown (the worst case).
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for i := range a.nodes {
			for j := range a.nodes[i].Work {
				w := &a.nodes[i].Work[j]
				if w.CheckpointDir == "" {
					continue
				}
				if age, ok := r.cfg.Checkpoints.WorkAtRisk(cctx, w.CheckpointDir); ok {
					w.CheckpointAge = age
				}
			}
		}
	}
	ph.Merge = time.Since(t)

	snap := &broker.Snapshot{Now: o.now, Tenants: o.idx.Tenants, Pools: a.pools, Nodes: a.nodes, InFlight: ops,
		MigratedLastHour: migrated, NoActions: r.noActions()}
	_, snap.TerminateKeepsDesired = r.cfg.Pools.(KeepDesiredTerminator)
	if len(o.stale) > 0 {
		snap.Stale = o.stale
	}
	r.mu.Lock()
	for id, t := range r.capSince {
		if snap.CapacityPresentSince == nil {
			snap.CapacityPresentSince = map[string]time.Time{}
		}
		snap.CapacityPresentSince[id] = t
	}
	r.mu.Unlock()
	// Sized once: 50,000 demands grown by append cost twice their size.
	demands := 0
	for _, obs := range o.sides {
		demands += len(obs.Demand)
	}
	if demands > 0 {
		snap.Demand = make([]broker.Demand, 0, demands)
	}
	for _, src := range broker.Sources {
		obs, ok := o.sides[src]
		if !ok {
			continue
		}
		for _, d := range obs.Demand {
			fs, ok := firstSeen[d.ID()]
			if !ok {
				fs = o.now
			}
			d.FirstSeen, d.LastSeen = fs, obs.At
			snap.Demand = append(snap.Demand, d)
		}
	}
	return snap, a, nil
}

// keepSnapshot writes the merged nodes and remembers the pools, nodes and
// claims the tick saw, and forgets the demand that left.
func (r *Runtime) keepSnapshot(ctx context.Context, o *observation, a assembled, ph *TickPhases) error {
	t := time.Now()
	if err := r.cfg.Ledger.SaveNodes(ctx, a.nodes, o.now); err != nil {
		return fmt.Errorf("persist nodes: %w", err)
	}
	ph.Persist += time.Since(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen.stalePools, r.seen.missingHosts = map[string]string{}, map[string][]string{}
	for _, p := range a.pools {
		if len(p.Missing) > 0 {
			r.seen.missingHosts[p.Pool.Name] = slices.Clone(p.Missing)
		}
		if p.Stale != "" {
			r.seen.stalePools[p.Pool.Name] = p.Stale
		} else {
			r.seen.lastPools[p.Pool.Name] = p
		}
	}
	r.seen.lastNodes, r.seen.conflicts = a.nodes, a.conflicts
	r.pruneDemandMemory(o.sides, o.stale)
	return nil
}
