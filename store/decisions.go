package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// RecordDecisions appends audit records with COPY.
func (s *Store) RecordDecisions(ctx context.Context, ds []broker.Decision) error {
	if len(ds) == 0 {
		return nil
	}
	rows := make([][]any, len(ds))
	for i, d := range ds {
		if d.Reason == "" {
			return broker.Invalid("decisions["+itoa(i)+"].reason", "every decision needs a reason")
		}
		detail := d.Detail
		if len(detail) == 0 {
			detail = json.RawMessage("{}")
		}
		rows[i] = []any{d.At, d.Tick, d.Kind, d.Demand, d.Tenant, d.Pool, d.Node, d.Reason, string(detail)}
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"decisions"},
		[]string{"at", "tick", "kind", "demand", "tenant", "pool", "node", "reason", "detail"},
		pgx.CopyFromRows(rows))
	return mapError("record decisions", err)
}

// DecisionFilter selects decisions, newest first.
type DecisionFilter struct {
	Kind, Demand, Tenant, Pool, Node string
	Since                            time.Time
	Limit                            int
	// BeforeID is the cursor: the ID of the last row of the previous page.
	BeforeID int64
}

// ListDecisions reads the audit, newest first.
func (s *Store) ListDecisions(ctx context.Context, f DecisionFilter) ([]broker.Decision, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	var since any
	if !f.Since.IsZero() {
		since = f.Since
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, tick, kind, demand, tenant, pool, node, reason, detail FROM decisions
		WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR demand = $2) AND ($3 = '' OR tenant = $3)
		  AND ($4 = '' OR pool = $4) AND ($5 = '' OR node = $5)
		  AND ($6::timestamptz IS NULL OR at >= $6) AND ($7::bigint = 0 OR id < $7)
		ORDER BY id DESC LIMIT $8`,
		f.Kind, f.Demand, f.Tenant, f.Pool, f.Node, since, f.BeforeID, limit)
	if err != nil {
		return nil, mapError("list decisions", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (broker.Decision, error) {
		var d broker.Decision
		var detail []byte
		err := r.Scan(&d.ID, &d.At, &d.Tick, &d.Kind, &d.Demand, &d.Tenant, &d.Pool, &d.Node, &d.Reason, &detail)
		d.Detail = detail
		return d, err
	})
	return ds, mapError("list decisions", err)
}

// RecordSamples stores capacity samples in one statement; a sample for the
// same time and side replaces the earlier one (also within ss: the last
// wins).
func (s *Store) RecordSamples(ctx context.Context, ss []broker.CapacitySample) error {
	if len(ss) == 0 {
		return nil
	}
	type slot struct {
		at   time.Time
		side string
	}
	last := make(map[slot]int, len(ss))
	for i, c := range ss {
		last[slot{c.At.UTC(), c.Side}] = i
	}
	var (
		ats                        []time.Time
		sides                      []string
		busy, idle, flight, pendng []int32
	)
	for i, c := range ss {
		if last[slot{c.At.UTC(), c.Side}] != i {
			continue
		}
		ats, sides = append(ats, c.At), append(sides, c.Side)
		busy, idle = append(busy, int32(c.GPUsBusy)), append(idle, int32(c.GPUsIdle))
		flight, pendng = append(flight, int32(c.GPUsInFlight)), append(pendng, int32(c.GPUsPending))
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO capacity_samples (at, side, gpus_busy, gpus_idle, gpus_in_flight, gpus_pending)
		SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::integer[], $4::integer[], $5::integer[], $6::integer[])
		ON CONFLICT (at, side) DO UPDATE SET gpus_busy = excluded.gpus_busy, gpus_idle = excluded.gpus_idle,
			gpus_in_flight = excluded.gpus_in_flight, gpus_pending = excluded.gpus_pending`,
		ats, sides, busy, idle, flight, pendng)
	return mapError("record capacity samples", err)
}

// Samples reads capacity samples in [from, to), oldest first.
func (s *Store) Samples(ctx context.Context, from, to time.Time) ([]broker.CapacitySample, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT at, side, gpus_busy, gpus_idle, gpus_in_flight, gpus_pending FROM capacity_samples
		WHERE at >= $1 AND at < $2 ORDER BY at, side`, from, to)
	if err != nil {
		return nil, mapError("read capacity samples", err)
	}
	ss, err := pgx.CollectRows(rows, pgx.RowToStructByPos[broker.CapacitySample])
	return ss, mapError("read capacity samples", err)
}

// PruneSamples deletes samples and decisions older than before, keeping
// the tables bounded.
func (s *Store) PruneSamples(ctx context.Context, before time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM capacity_samples WHERE at < $1`, before); err != nil {
		return mapError("prune capacity samples", err)
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM decisions WHERE at < $1`, before)
	return mapError("prune decisions", err)
}
