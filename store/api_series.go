package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// DemandPoint is the demand of one tenant at one priority that was pending
// at one time.
type DemandPoint struct {
	At       time.Time `json:"at"`
	Tenant   string    `json:"tenant"`
	Priority int64     `json:"priority"`
	GPUs     int       `json:"gpus"`
	Count    int       `json:"count"`
}

// maxDemandSteps bounds the time points of one DemandSeries.
const maxDemandSteps = 1000

// DemandSeries reconstructs pending demand by tenant and priority at every
// step from from to to (inclusive), from the live ledger and the closed
// history: demand was pending at t if it was first seen by t and had not
// closed by t. No sampling is needed, so the series covers any window the
// history still holds.
func (s *Store) DemandSeries(ctx context.Context, from, to time.Time, step time.Duration) ([]DemandPoint, error) {
	switch {
	case step <= 0:
		return nil, broker.Invalid("step", "must be positive, got %s", step)
	case to.Before(from):
		return nil, broker.Invalid("from", "must not be after to")
	case to.Sub(from)/step > maxDemandSteps:
		return nil, broker.Invalid("step", "gives more than %d points over %s; use a larger step", maxDemandSteps, to.Sub(from))
	}
	rows, err := s.pool.Query(ctx, `
		WITH t AS (
			SELECT generate_series($1::timestamptz, $2::timestamptz, $3 * interval '1 millisecond') AS at
		), d AS (
			SELECT tenant, priority, gpus_per_unit * units AS gpus, first_seen, NULL::timestamptz AS closed_at
			FROM demand WHERE first_seen <= $2
			UNION ALL
			SELECT tenant, priority, gpus_per_unit * units, first_seen, closed_at
			FROM demand_history WHERE closed_at > $1 AND first_seen <= $2
		)
		SELECT t.at, d.tenant, d.priority, sum(d.gpus)::int, count(*)::int
		FROM t JOIN d ON d.first_seen <= t.at AND (d.closed_at IS NULL OR d.closed_at > t.at)
		GROUP BY t.at, d.tenant, d.priority
		ORDER BY t.at, d.tenant, d.priority DESC`, from, to, step.Milliseconds())
	if err != nil {
		return nil, mapError("demand series", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DemandPoint])
	return ps, mapError("demand series", err)
}
