package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// SaveReport stores an agent's report as the node's latest. A report older
// than the stored one is ignored (agents retry, and retries may arrive out
// of order), so the newest sample always wins. It reports whether r became
// the latest.
func (s *Store) SaveReport(ctx context.Context, r broker.NodeReport) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("encode report of node %q: %w", r.Node, err)
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO node_reports (node, at, body) VALUES ($1, $2, $3)
		ON CONFLICT (node) DO UPDATE SET at = excluded.at, body = excluded.body, received_at = now()
		WHERE node_reports.at <= excluded.at`, r.Node, r.At, body)
	if err != nil {
		return false, mapError(fmt.Sprintf("save report of node %q", r.Node), err)
	}
	return tag.RowsAffected() == 1, nil
}

// LatestReport reads a node's latest agent report, or ErrNotFound when its
// agent never reported.
func (s *Store) LatestReport(ctx context.Context, node string) (broker.NodeReport, error) {
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT body FROM node_reports WHERE node = $1`, node).Scan(&body)
	if err != nil {
		return broker.NodeReport{}, mapError(fmt.Sprintf("report of node %q", node), err)
	}
	var r broker.NodeReport
	if err := json.Unmarshal(body, &r); err != nil {
		return broker.NodeReport{}, fmt.Errorf("decode report of node %q: %w", node, err)
	}
	return r, nil
}

// LatestReports reads the latest report of every node, by node name, for
// the tick loop to merge GPU utilisation and health into its snapshot.
func (s *Store) LatestReports(ctx context.Context) (map[string]broker.NodeReport, error) {
	rows, err := s.pool.Query(ctx, `SELECT node, body FROM node_reports`)
	if err != nil {
		return nil, mapError("list node reports", err)
	}
	out := map[string]broker.NodeReport{}
	var node string
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&node, &body}, func() error {
		var r broker.NodeReport
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("decode report of node %q: %w", node, err)
		}
		out[node] = r
		return nil
	})
	if err != nil {
		return nil, mapError("list node reports", err)
	}
	return out, nil
}
