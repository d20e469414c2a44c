package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// maxDemandQueues bounds one DemandQueues answer: queues are few (tens to
// hundreds), so a ledger with more is cut rather than read whole.
const maxDemandQueues = 10000

// DemandQueues lists the distinct YARN queues that pending demand in the
// ledger was seen in, sorted. The API uses them to show an admin which
// tenants' queues a new queue claim (a parent path such as root.x) would
// take over.
func (s *Store) DemandQueues(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT queue FROM demand WHERE source = 'yarn' AND queue <> '' ORDER BY queue LIMIT $1`, maxDemandQueues)
	if err != nil {
		return nil, mapError("list demand queues", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapError("list demand queues", err)
	}
	return qs, nil
}
