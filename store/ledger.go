package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Ledger adapts the store to engine.Ledger, the durable state of the tick
// loop.
type Ledger struct{ s *Store }

var _ engine.Ledger = Ledger{}

// Ledger returns the store as the tick loop's ledger.
func (s *Store) Ledger() Ledger { return Ledger{s: s} }

// TenantIndex returns tenants with their queue and namespace mappings,
// built once per tick by broker.NewTenantIndex.
func (l Ledger) TenantIndex(ctx context.Context) (broker.TenantIndex, error) {
	ts, err := l.s.ListTenants(ctx)
	if err != nil {
		return broker.TenantIndex{}, err
	}
	return broker.NewTenantIndex(ts), nil
}

// Policy returns the stored policy or the default.
func (l Ledger) Policy(ctx context.Context) (broker.Policy, error) { return l.s.GetPolicy(ctx) }

// PoolSettings returns the configured pools with their recorded backoff.
func (l Ledger) PoolSettings(ctx context.Context) ([]broker.PoolState, error) {
	recs, err := l.s.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]broker.PoolState, len(recs))
	for i, r := range recs {
		out[i] = broker.PoolState{Pool: r.Pool, BackoffUntil: r.BackoffUntil, BackoffReason: r.BackoffReason}
		if out[i].Pool.GPUMemoryMiB == 0 {
			// Not stated: what its nodes showed, if any did.
			out[i].Pool.GPUMemoryMiB = r.LearnedGPUMemoryMiB
		}
	}
	return out, nil
}

// LearnPoolGPUMemory remembers what a pool's live nodes say each GPU's
// memory is (engine.PoolMemoryLearner).
func (l Ledger) LearnPoolGPUMemory(ctx context.Context, pool string, mib int) error {
	return l.s.SetPoolLearnedGPUMemory(ctx, pool, mib)
}

// SetPoolBackoff records a pool's backoff.
func (l Ledger) SetPoolBackoff(ctx context.Context, pool string, until time.Time, reason string) error {
	return l.s.SetPoolBackoff(ctx, pool, until, reason)
}

// DemandFirstSeen returns the first-seen time of every live demand by ID.
func (l Ledger) DemandFirstSeen(ctx context.Context) (map[string]time.Time, error) {
	rows, err := l.s.pool.Query(ctx, `SELECT source || '/' || key, first_seen FROM demand`)
	if err != nil {
		return nil, mapError("read first-seen times", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var t time.Time
		if err := rows.Scan(&id, &t); err != nil {
			return nil, mapError("read first-seen times", err)
		}
		out[id] = t
	}
	return out, mapError("read first-seen times", rows.Err())
}

// ApplyDemand persists one side's observation: the ledger closes the
// side's demand the observation no longer holds, with the reason the
// observation gives (Closed, then Departed; vanished otherwise).
func (l Ledger) ApplyDemand(ctx context.Context, obs broker.SideObservation) error {
	closed := make(map[string]CloseReason, len(obs.Closed))
	for k, r := range obs.Closed {
		cr := CloseReason(r)
		if !cr.Valid() {
			return fmt.Errorf("observation of %s closes %q with unknown reason %q", obs.Source, k, r)
		}
		closed[k] = cr
	}
	o := Observation{Source: obs.Source, At: obs.At, Demand: obs.Demand, Closed: closed}
	if obs.Departed != nil {
		o.Departed = func(key string) CloseReason { return CloseReason(obs.Departed(key)) }
	}
	_, err := l.s.ApplyObservation(ctx, o)
	return err
}

// StoredNodes returns the remembered nodes.
func (l Ledger) StoredNodes(ctx context.Context) ([]broker.Node, error) { return l.s.ListNodes(ctx) }

// SaveNodes writes the merged nodes.
func (l Ledger) SaveNodes(ctx context.Context, nodes []broker.Node, now time.Time) error {
	return l.s.UpsertNodes(ctx, nodes, now)
}

// OpenOps lists unfinished journal entries.
func (l Ledger) OpenOps(ctx context.Context) ([]broker.Op, error) { return l.s.OpenOps(ctx) }

// MigratedSince sums the tasks migrate ops journaled since then restart.
func (l Ledger) MigratedSince(ctx context.Context, since time.Time) (int, error) {
	return l.s.MigratedSince(ctx, since)
}

// InsertOp journals an op.
func (l Ledger) InsertOp(ctx context.Context, op broker.Op) (broker.Op, error) {
	return l.s.InsertOp(ctx, op)
}

// AdvanceOp records a step's outcome.
func (l Ledger) AdvanceOp(ctx context.Context, op broker.Op) (broker.Op, error) {
	return l.s.AdvanceOp(ctx, op)
}

// RecordDecisions appends audit records.
func (l Ledger) RecordDecisions(ctx context.Context, ds []broker.Decision) error {
	return l.s.RecordDecisions(ctx, ds)
}

// SetWaitReasons records why demand waits.
func (l Ledger) SetWaitReasons(ctx context.Context, ws []broker.Wait) error {
	return l.s.SetWaitReasons(ctx, ws)
}

// RecordSamples stores capacity samples.
func (l Ledger) RecordSamples(ctx context.Context, ss []broker.CapacitySample) error {
	return l.s.RecordSamples(ctx, ss)
}

// LatestReports returns the newest agent report per node.
func (l Ledger) LatestReports(ctx context.Context) (map[string]broker.NodeReport, error) {
	return l.s.LatestReports(ctx)
}
