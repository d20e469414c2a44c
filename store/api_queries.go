package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// GetNode reads one node that is not gone.
func (s *Store) GetNode(ctx context.Context, name string) (broker.Node, error) {
	// The node table holds a few thousand rows at most; reusing ListNodes
	// keeps one decoder for the JSON columns.
	ns, err := s.ListNodes(ctx)
	if err != nil {
		return broker.Node{}, err
	}
	for _, n := range ns {
		if n.Name == name {
			return n, nil
		}
	}
	return broker.Node{}, fmt.Errorf("node %q: %w", name, broker.ErrNotFound)
}

// DemandGroup aggregates live demand of one tenant at one priority that
// waits for one reason.
type DemandGroup struct {
	Tenant     string    `json:"tenant"`
	Priority   int64     `json:"priority"`
	WaitReason string    `json:"wait_reason"`
	Count      int       `json:"count"`
	GPUs       int       `json:"gpus"`
	OldestSeen time.Time `json:"oldest_first_seen"`
}

// DemandSummary groups the live ledger by tenant, priority and wait reason,
// tenants by name and higher priorities first. A group's GPUs implement
// broker.PendingGPUs in SQL (sum of gpus_per_unit × units over live rows;
// closed demand is in demand_history, not here), so the API's pending_gpus
// and the executor's pending samples agree; TestDemandSummaryIsPendingGPUs
// binds the two.
func (s *Store) DemandSummary(ctx context.Context) ([]DemandGroup, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT tenant, priority, wait_reason, count(*)::int, sum(gpus_per_unit * units)::int, min(first_seen)
		FROM demand GROUP BY tenant, priority, wait_reason
		ORDER BY tenant, priority DESC, wait_reason`)
	if err != nil {
		return nil, mapError("summarise demand", err)
	}
	gs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DemandGroup])
	return gs, mapError("summarise demand", err)
}

// ClosedFilter selects closed demand, newest first, like HistoryFilter,
// and can also keep only demand that waited at least MinWait.
type ClosedFilter struct {
	HistoryFilter
	MinWait time.Duration
}

// ListClosed reads closed demand with its wait times, newest first,
// paginated by id (BeforeID).
func (s *Store) ListClosed(ctx context.Context, f ClosedFilter) ([]ClosedDemand, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	if f.Reason != "" && !f.Reason.Valid() {
		return nil, broker.Invalid("reason", "must be scheduled, finished, deleted, preempted or vanished, got %q", f.Reason)
	}
	if f.MinWait < 0 {
		return nil, broker.Invalid("min_wait", "must not be negative, got %s", f.MinWait)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, source, key, name, tenant, queue, priority, gpus_per_unit, units, gang,
			first_seen, closed_at, reason, waited_ms
		FROM demand_history
		WHERE ($1 = '' OR source = $1) AND ($2 = '' OR tenant = $2) AND ($3 = '' OR reason = $3)
		  AND ($4::bigint = 0 OR id < $4) AND waited_ms >= $5
		ORDER BY id DESC LIMIT $6`,
		string(f.Source), f.Tenant, string(f.Reason), f.BeforeID, f.MinWait.Milliseconds(), limit)
	if err != nil {
		return nil, mapError("list closed demand", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClosedDemand, error) {
		var c ClosedDemand
		var src, reason string
		var ms int64
		err := r.Scan(&c.ID, &src, &c.Key, &c.Name, &c.Tenant, &c.Queue, &c.Priority, &c.GPUsPerUnit,
			&c.Units, &c.Gang, &c.FirstSeen, &c.ClosedAt, &reason, &ms)
		c.Source, c.Reason, c.Waited = broker.Source(src), CloseReason(reason), time.Duration(ms)*time.Millisecond
		return c, err
	})
	return cs, mapError("list closed demand", err)
}
