package store

import (
	"context"
	"encoding/json"
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
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO ops (kind, pool, node, target, to_owner, serves, reason, state, step, data)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
		string(op.Kind), op.Pool, op.Node, op.Target, string(op.To), nonNil(op.Serves), op.Reason,
		string(op.State), op.Step, []byte(data)).Scan(&id)
	if err != nil {
		return broker.Op{}, mapError(fmt.Sprintf("journal %s", op.Kind), err)
	}
	return s.GetOp(ctx, id)
}

// AdvanceOp records the outcome of a step: the new state, step and data,
// and on failure the error and when to retry. It succeeds only if the op is
// still unfinished (a terminal op is never revived).
func (s *Store) AdvanceOp(ctx context.Context, op broker.Op) (broker.Op, error) {
	data := op.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	var next any
	if !op.NextAttempt.IsZero() {
		next = op.NextAttempt
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE ops SET state = $2, step = $3, data = $4, attempts = $5, next_attempt = $6,
			last_error = $7, updated_at = now()
		WHERE id = $1 AND state IN ('pending', 'running')`,
		op.ID, string(op.State), op.Step, []byte(data), op.Attempts, next, op.LastError)
	if err != nil {
		return broker.Op{}, mapError(fmt.Sprintf("advance op %d", op.ID), err)
	}
	if tag.RowsAffected() == 0 {
		cur, err := s.GetOp(ctx, op.ID)
		if err != nil {
			return broker.Op{}, err
		}
		return broker.Op{}, fmt.Errorf("op %d is already %s: %w", op.ID, cur.State, broker.ErrConflict)
	}
	return s.GetOp(ctx, op.ID)
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
