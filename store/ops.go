package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// InsertOp journals an accepted action before any of it is carried out.
// A second open op for the same node, or a second open scale-up for the
// same pool, is refused with ErrConflict: the schema's partial unique
// indexes make "one operation at a time per node/pool" hold even across
// replicas.
func (s *Store) InsertOp(ctx context.Context, op broker.Op) (broker.Op, error) {
	if op.Kind == "" {
		return broker.Op{}, broker.Invalid("kind", "must be set")
	}
	if op.Reason == "" {
		return broker.Op{}, broker.Invalid("reason", "every operation needs a reason")
	}
	data := op.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if op.State == "" {
		op.State = broker.OpPending
	}
	// IMPORTANT: the insert holds the epoch row (FOR SHARE) and names the
	// writer's epoch, so it either lands before a new leader raises the
	// epoch (and is adopted by it) or finds the new epoch and inserts
	// nothing. A store that never led (a CLI) inserts for the current
	// leader.
	mine := s.epoch.Load()
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO ops (kind, pool, node, target, to_owner, serves, reason, state, step, data, epoch)
		SELECT $1::text, $2::text, $3::text, $4::integer, $5::text, $6::text[], $7::text, $8::text, $9::text, $10::jsonb, le.epoch
		FROM leader_epoch le WHERE $11::bigint = 0 OR le.epoch = $11 FOR SHARE OF le
		RETURNING id`,
		string(op.Kind), op.Pool, op.Node, op.Target, string(op.To), nonNil(op.Serves), op.Reason,
		string(op.State), op.Step, []byte(data), mine).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return broker.Op{}, s.fenced(fmt.Sprintf("journal %s", op.Kind), mine, s.currentEpoch(ctx))
	}
	if err != nil {
		return broker.Op{}, mapError(fmt.Sprintf("journal %s", op.Kind), err)
	}
	return s.GetOp(ctx, id)
}

// AdvanceOp records the outcome of a step: the new state, step and data,
// and on failure the error and when to retry. It succeeds only if the op is
// still unfinished (a terminal op is never revived) and still belongs to
// this store's leader epoch: after a newer leader took the lock, the
// update fails with ErrFenced and this store's lease ends.
func (s *Store) AdvanceOp(ctx context.Context, op broker.Op) (broker.Op, error) {
	data := op.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	var next any
	if !op.NextAttempt.IsZero() {
		next = op.NextAttempt
	}
	mine := s.epoch.Load()
	tag, err := s.pool.Exec(ctx, `
		UPDATE ops SET state = $2, step = $3, data = $4, attempts = $5, next_attempt = $6,
			last_error = $7, updated_at = now()
		WHERE id = $1 AND state IN ('pending', 'running') AND ($8::bigint = 0 OR epoch = $8)`,
		op.ID, string(op.State), op.Step, []byte(data), op.Attempts, next, op.LastError, mine)
	if err != nil {
		return broker.Op{}, mapError(fmt.Sprintf("advance op %d", op.ID), err)
	}
	if tag.RowsAffected() == 0 {
		var state string
		var epoch int64
		err := s.pool.QueryRow(ctx, `SELECT state, epoch FROM ops WHERE id = $1`, op.ID).Scan(&state, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return broker.Op{}, fmt.Errorf("op %d: %w", op.ID, broker.ErrNotFound)
		}
		if err != nil {
			return broker.Op{}, mapError(fmt.Sprintf("op %d", op.ID), err)
		}
		if mine != 0 && epoch != mine {
			return broker.Op{}, s.fenced(fmt.Sprintf("advance op %d", op.ID), mine, epoch)
		}
		return broker.Op{}, fmt.Errorf("op %d is already %s: %w", op.ID, state, broker.ErrConflict)
	}
	return s.GetOp(ctx, op.ID)
}

// currentEpoch reads the leader epoch for an error message; 0 when it
// cannot be read.
func (s *Store) currentEpoch(ctx context.Context) int64 {
	var e int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM leader_epoch`).Scan(&e); err != nil {
		return 0
	}
	return e
}

const opSelect = `SELECT id, kind, pool, node, target, to_owner, serves, reason, state, step, data,
	attempts, next_attempt, last_error, created_at, updated_at FROM ops`

func scanOp(r pgx.CollectableRow) (broker.Op, error) {
	var op broker.Op
	var kind, to, state string
	var data []byte
	var next *time.Time
	err := r.Scan(&op.ID, &kind, &op.Pool, &op.Node, &op.Target, &to, &op.Serves, &op.Reason, &state,
		&op.Step, &data, &op.Attempts, &next, &op.LastError, &op.CreatedAt, &op.UpdatedAt)
	op.Kind, op.To, op.State, op.Data = broker.ActionKind(kind), broker.Owner(to), broker.OpState(state), data
	if next != nil {
		op.NextAttempt = *next
	}
	return op, err
}

// GetOp reads one op.
func (s *Store) GetOp(ctx context.Context, id int64) (broker.Op, error) {
	rows, err := s.pool.Query(ctx, opSelect+` WHERE id = $1`, id)
	if err != nil {
		return broker.Op{}, mapError(fmt.Sprintf("op %d", id), err)
	}
	op, err := pgx.CollectExactlyOneRow(rows, scanOp)
	return op, mapError(fmt.Sprintf("op %d", id), err)
}

// OpenOps lists unfinished ops, oldest first: what the executor resumes
// after a restart and what the planner counts as in flight.
func (s *Store) OpenOps(ctx context.Context) ([]broker.Op, error) {
	rows, err := s.pool.Query(ctx, opSelect+` WHERE state IN ('pending', 'running') ORDER BY id`)
	if err != nil {
		return nil, mapError("list open ops", err)
	}
	ops, err := pgx.CollectRows(rows, scanOp)
	return ops, mapError("list open ops", err)
}

// MigratedSince sums the tasks restarted by migrate ops journaled at or
// after since, whatever their state (broker.MigratedTasks): the planner's
// hourly migration budget counts them.
func (s *Store) MigratedSince(ctx context.Context, since time.Time) (int, error) {
	rows, err := s.pool.Query(ctx, opSelect+` WHERE kind = $1 AND created_at >= $2 ORDER BY id`, string(broker.ActMigrate), since)
	if err != nil {
		return 0, mapError("list recent migrations", err)
	}
	ops, err := pgx.CollectRows(rows, scanOp)
	if err != nil {
		return 0, mapError("list recent migrations", err)
	}
	n := 0
	for i := range ops {
		n += broker.MigratedTasks(&ops[i])
	}
	return n, nil
}

// OpFilter selects ops for the API, newest first. State is one op state,
// or "open" for pending and running ones; empty fields select everything.
type OpFilter struct {
	State, Kind, Pool, Node string
	Limit                   int
	// BeforeID is the cursor: the ID of the last row of the previous page.
	BeforeID int64
}

// ListOps reads the ops journal, newest first, for operators: what is in
// flight, what failed and why.
func (s *Store) ListOps(ctx context.Context, f OpFilter) ([]broker.Op, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	states := []string{f.State}
	switch f.State {
	case "":
		states = nil
	case "open":
		states = []string{string(broker.OpPending), string(broker.OpRunning)}
	}
	rows, err := s.pool.Query(ctx, opSelect+`
		WHERE (cardinality($1::text[]) = 0 OR state = ANY($1)) AND ($2 = '' OR kind = $2)
		  AND ($3 = '' OR pool = $3) AND ($4 = '' OR node = $4) AND ($5::bigint = 0 OR id < $5)
		ORDER BY id DESC LIMIT $6`,
		nonNil(states), f.Kind, f.Pool, f.Node, f.BeforeID, limit)
	if err != nil {
		return nil, mapError("list ops", err)
	}
	ops, err := pgx.CollectRows(rows, scanOp)
	return ops, mapError("list ops", err)
}

// OpCount is how many ops of one kind are in one state.
type OpCount struct {
	Kind  broker.ActionKind
	State broker.OpState
	Count int
}

// CountOps counts the journal's ops by kind and state, for metrics.
func (s *Store) CountOps(ctx context.Context) ([]OpCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, state, count(*) FROM ops GROUP BY kind, state ORDER BY kind, state`)
	if err != nil {
		return nil, mapError("count ops", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OpCount, error) {
		var c OpCount
		var kind, state string
		err := r.Scan(&kind, &state, &c.Count)
		c.Kind, c.State = broker.ActionKind(kind), broker.OpState(state)
		return c, err
	})
	return cs, mapError("count ops", err)
}

// HandOvers counts, by pool, the nodes handed from one side to the other
// (a transfer, or a preemption that moved its node) that ended done at or
// after since: how often a shared pool, a fleet above all, moves its nodes.
func (s *Store) HandOvers(ctx context.Context, since time.Time) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT pool, count(*) FROM ops
		WHERE state = 'done' AND kind IN ('transfer', 'preempt') AND to_owner IN ('yarn', 'k8s') AND updated_at >= $1
		GROUP BY pool`, since)
	if err != nil {
		return nil, mapError("count hand-overs", err)
	}
	out := map[string]int{}
	var pool string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&pool, &n}, func() error { out[pool] = n; return nil }); err != nil {
		return nil, mapError("count hand-overs", err)
	}
	return out, nil
}
