package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// ReportRetention is how long the report of a node the broker no longer
// knows (gone, or never registered) is kept after it was last received.
const ReportRetention = 24 * time.Hour

// SaveReport stores an agent's report as the node's latest and keeps the
// one before it, so that an unhealthy verdict can require two consecutive
// reports. A report not newer (by the agent's "at") than the stored one is
// ignored: agents retry, and a retry arriving late or twice must neither
// replace a newer sample nor count as a second report. The database's
// clock stamps received_at, which alone decides freshness; the agent's "at"
// only orders its reports. It reports whether r became the latest.
func (s *Store) SaveReport(ctx context.Context, r broker.NodeReport) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	r.ReceivedAt, r.Previous = time.Time{}, nil // the server's, never the agent's
	body, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("encode report of node %q: %w", r.Node, err)
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO node_reports (node, at, body) VALUES ($1, $2, $3)
		ON CONFLICT (node) DO UPDATE SET at = excluded.at, body = excluded.body, received_at = now(),
			prev_body = node_reports.body, prev_received_at = node_reports.received_at
		WHERE node_reports.at < excluded.at`, r.Node, r.At, body)
	if err != nil {
		return false, mapError(fmt.Sprintf("save report of node %q", r.Node), err)
	}
	return tag.RowsAffected() == 1, nil
}

// decodeReport reads a stored report body and stamps it with the time
// the server received it.
func decodeReport(node string, body []byte, received time.Time) (broker.NodeReport, error) {
	var r broker.NodeReport
	if err := json.Unmarshal(body, &r); err != nil {
		return broker.NodeReport{}, fmt.Errorf("decode report of node %q: %w", node, err)
	}
	r.ReceivedAt = received
	return r, nil
}

// LatestReport reads a node's latest agent report, or ErrNotFound when its
// agent never reported.
func (s *Store) LatestReport(ctx context.Context, node string) (broker.NodeReport, error) {
	var body []byte
	var received time.Time
	err := s.pool.QueryRow(ctx, `SELECT body, received_at FROM node_reports WHERE node = $1`, node).Scan(&body, &received)
	if err != nil {
		return broker.NodeReport{}, mapError(fmt.Sprintf("report of node %q", node), err)
	}
	return decodeReport(node, body, received)
}

// LatestReports reads the latest report of every node, by node name, with
// the report before it as Previous, for the tick loop to merge GPU
// utilisation and health into its snapshot.
func (s *Store) LatestReports(ctx context.Context) (map[string]broker.NodeReport, error) {
	rows, err := s.pool.Query(ctx, `SELECT node, body, received_at, prev_body, prev_received_at FROM node_reports`)
	if err != nil {
		return nil, mapError("list node reports", err)
	}
	out := map[string]broker.NodeReport{}
	var node string
	var body, prev []byte
	var received time.Time
	var prevReceived *time.Time
	_, err = pgx.ForEachRow(rows, []any{&node, &body, &received, &prev, &prevReceived}, func() error {
		r, err := decodeReport(node, body, received)
		if err != nil {
			return err
		}
		if prev != nil && prevReceived != nil {
			p, err := decodeReport(node, prev, *prevReceived)
			if err != nil {
				return err
			}
			r.Previous = &p
		}
		out[node] = r
		return nil
	})
	if err != nil {
		return nil, mapError("list node reports", err)
	}
	return out, nil
}

// PruneReports deletes the reports received before before whose node the
// broker no longer knows (no node row, or one that is gone), and says how
// many. Without it, the report of every node that ever existed would be
// kept forever and read on every tick.
func (s *Store) PruneReports(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM node_reports r WHERE r.received_at < $1
		AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = r.node AND n.phase <> 'gone')`, before)
	if err != nil {
		return 0, mapError("prune node reports", err)
	}
	return tag.RowsAffected(), nil
}
