package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// CloseReason says why demand left the ledger: broker's, which the
// adapters name.
type CloseReason = broker.CloseReason

// Why demand closed (broker.CloseReason's values).
const (
	CloseScheduled = broker.CloseScheduled
	CloseFinished  = broker.CloseFinished
	CloseDeleted   = broker.CloseDeleted
	ClosePreempted = broker.ClosePreempted
	CloseVanished  = broker.CloseVanished
)

// Observation is one complete view of one source's pending demand. Only a
// successful, complete observation may be applied: rows missing from it are
// closed, so a failed or partial one would look like "demand went away".
type Observation struct {
	Source broker.Source
	At     time.Time
	// Demand is every pending demand of Source; FirstSeen and LastSeen are
	// ignored (the ledger keeps the first time it saw a key).
	Demand []broker.Demand
	// Closed gives the reason for keys the adapter knows left, e.g. a pod
	// that is now scheduled; keys it names that are still pending are
	// ignored. Departed, when set, gives the reason for the other keys that
	// left (it is called only for those). Keys that left and neither names
	// close with CloseVanished.
	Closed   map[string]CloseReason
	Departed func(key string) CloseReason
}

// ApplyResult counts what an observation changed.
type ApplyResult struct {
	Inserted, Updated, Closed int
}

// ApplyObservation merges obs into the ledger in one transaction: new keys
// are inserted with first-seen = obs.At, changed rows are updated (rows that
// did not change are not rewritten), and live rows of the source that obs
// no longer holds move to the history with their reason and wait time.
//
// When the ledger holds exactly the last observation this Store applied
// (the source's generation, read under its row lock, is the one that apply
// left), it diffs in memory and sends only new and changed rows (as arrays)
// and the vanished keys: at 10% churn a 50,000-row observation costs about a
// tenth of the full merge. Otherwise (first apply, restart, another Store
// applied in between, after any error) it runs a binary COPY of the whole
// observation into an unindexed temporary table and one merge statement
// (applyFull). Either way it is a few round trips in one transaction.
func (s *Store) ApplyObservation(ctx context.Context, obs Observation) (ApplyResult, error) {
	var res ApplyResult
	if !obs.Source.Valid() {
		return res, broker.Invalid("source", "must be yarn or k8s, got %q", obs.Source)
	}
	if obs.At.IsZero() {
		return res, broker.Invalid("at", "observation time must be set")
	}
	seen := make(map[string]struct{}, len(obs.Demand))
	for i, d := range obs.Demand {
		if d.Source != obs.Source {
			return res, broker.Invalid("demand["+strconv.Itoa(i)+"].source", "must be %q like the observation, got %q", obs.Source, d.Source)
		}
		if err := d.Validate(); err != nil {
			return res, broker.WithPrefix("demand["+strconv.Itoa(i)+"]", err)
		}
		if _, dup := seen[d.Key]; dup {
			return res, broker.Invalid("demand["+strconv.Itoa(i)+"].key", "key %q appears twice in one observation", d.Key)
		}
		seen[d.Key] = struct{}{}
	}
	closedKeys := make([]string, 0, len(obs.Closed))
	closedReasons := make([]string, 0, len(obs.Closed))
	for k, r := range obs.Closed {
		if !r.Valid() {
			return res, broker.Invalid("closed["+k+"]", "unknown close reason %q", r)
		}
		closedKeys = append(closedKeys, k)
		closedReasons = append(closedReasons, string(r))
	}

	mark := time.Now()
	step := func(name string) {
		if traceApply != nil {
			now := time.Now()
			traceApply(name, now.Sub(mark))
			mark = now
		}
	}
	// The identity of every row, for the diff against the last applied
	// observation (and for the cache after this one). It is computed while
	// the transaction starts and, on the full path, while PostgreSQL merges;
	// encoded is closed when next.rows is ready, and ApplyObservation waits
	// for it before it returns (the caller owns obs.Demand again then).
	next := &sourceRows{}
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		rows := make(map[string]string, len(obs.Demand))
		for i := range obs.Demand {
			rows[obs.Demand[i].Key] = encodeRow(&obs.Demand[i])
		}
		next.rows = rows
	}()
	defer func() { <-encoded }()
	defer s.seen.lock(obs.Source)()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// IMPORTANT: lock the source's observation row first, so two
		// replicas (or a leader and a stale former leader) applying
		// observations of one source are serialised rather than interleaved.
		var prev time.Time
		var gen int64
		err := tx.QueryRow(ctx, `
			INSERT INTO observations (source, observed_at) VALUES ($1, $2)
			ON CONFLICT (source) DO UPDATE SET source = excluded.source
			RETURNING observed_at, generation`, obs.Source, obs.At).Scan(&prev, &gen)
		if err != nil {
			return err
		}
		if obs.At.Before(prev) {
			return fmt.Errorf("observation of %s at %s is older than the applied one at %s: %w",
				obs.Source, obs.At.Format(time.RFC3339Nano), prev.Format(time.RFC3339Nano), broker.ErrConflict)
		}
		step("lock")
		if last := s.seen.get(obs.Source, gen); last != nil {
			// Fast path: the ledger holds exactly the last observation this
			// Store applied (same generation under the lock), so only new
			// and changed rows are written and vanished keys deleted by key.
			<-encoded
			step("encode")
			err = applyDiff(ctx, tx, obs, last, next, closedKeys, closedReasons, &res, step)
		} else {
			err = applyFull(ctx, tx, obs, closedKeys, closedReasons, &res, step)
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			UPDATE observations SET observed_at = $2, generation = generation + 1, rows = $3
			WHERE source = $1 RETURNING generation`, obs.Source, obs.At, len(obs.Demand)).Scan(&next.gen)
		step("record")
		return err
	})
	step("commit")
	<-encoded
	step("encode")
	if err != nil {
		// The transaction may or may not have committed: forget the source
		// so the next observation takes the full path.
		s.seen.drop(obs.Source)
	} else {
		s.seen.put(obs.Source, next)
	}
	if err != nil {
		return ApplyResult{}, mapError("apply "+string(obs.Source)+" observation", err)
	}
	return res, nil
}

// DemandFilter selects ledger rows. Zero fields do not filter.
type DemandFilter struct {
	Source broker.Source
	Tenant string
	// MinWait keeps demand pending at least this long at Now.
	MinWait time.Duration
	// Now is the reference time for MinWait (required when MinWait is set).
	Now time.Time
	// MinPriority keeps demand at or above this priority, when set.
	MinPriority *int64
	// WaitReason keeps demand whose recorded wait reason matches.
	WaitReason string
	// Limit caps the page (default 100, at most 1000).
	Limit int
	// After is the cursor returned by the previous page.
	After string
}

// DemandRow is a ledger row: the demand and why it waits.
type DemandRow struct {
	broker.Demand
	WaitReason string `json:"wait_reason,omitempty"`
	WaitDetail string `json:"wait_detail,omitempty"`
}

// DemandPage is one page of the ledger, oldest first. Next is empty on the
// last page.
type DemandPage struct {
	Rows []DemandRow `json:"rows"`
	Next string      `json:"next,omitempty"`
}

// MaxPageSize bounds every paginated read.
const MaxPageSize = 1000

// ListDemand reads the live ledger, oldest first, with keyset pagination on
// (first_seen, id): pages stay correct while rows come and go.
func (s *Store) ListDemand(ctx context.Context, f DemandFilter) (DemandPage, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return DemandPage{}, err
	}
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if f.Source != "" {
		if !f.Source.Valid() {
			return DemandPage{}, broker.Invalid("source", "must be yarn or k8s, got %q", f.Source)
		}
		where = append(where, "d.source = "+arg(string(f.Source)))
	}
	if f.Tenant != "" {
		where = append(where, "d.tenant = "+arg(f.Tenant))
	}
	if f.MinWait < 0 {
		return DemandPage{}, broker.Invalid("min_wait", "must not be negative, got %s", f.MinWait)
	}
	if f.MinWait > 0 {
		if f.Now.IsZero() {
			return DemandPage{}, broker.Invalid("now", "is required with min_wait")
		}
		where = append(where, "d.first_seen <= "+arg(f.Now.Add(-f.MinWait)))
	}
	if f.MinPriority != nil {
		where = append(where, "d.priority >= "+arg(*f.MinPriority))
	}
	if f.WaitReason != "" {
		where = append(where, "d.wait_reason = "+arg(f.WaitReason))
	}
	if f.After != "" {
		ts, id, err := decodeCursor(f.After)
		if err != nil {
			return DemandPage{}, err
		}
		where = append(where, "(d.first_seen, d.id) > ("+arg(ts)+", "+arg(id)+")")
	}
	q := `SELECT d.id, d.source, d.key, d.name, d.tenant, d.queue, d.priority, d.gpus_per_unit,
			d.units, d.gang, d.constraints, d.preemptible, d.first_seen, o.observed_at,
			d.wait_reason, d.wait_detail
		FROM demand d JOIN observations o ON o.source = d.source`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY d.first_seen, d.id LIMIT " + arg(limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return DemandPage{}, mapError("list demand", err)
	}
	defer rows.Close()
	var page DemandPage
	var lastID int64
	var lastTS time.Time
	for rows.Next() {
		var r DemandRow
		var id int64
		var src string
		var cons []byte
		if err := rows.Scan(&id, &src, &r.Key, &r.Name, &r.Tenant, &r.Queue, &r.Priority,
			&r.GPUsPerUnit, &r.Units, &r.Gang, &cons, &r.Preemptible, &r.FirstSeen, &r.LastSeen,
			&r.WaitReason, &r.WaitDetail); err != nil {
			return DemandPage{}, mapError("list demand", err)
		}
		r.Source = broker.Source(src)
		if err := json.Unmarshal(cons, &r.Constraints); err != nil {
			return DemandPage{}, fmt.Errorf("decode constraints of %s: %w", r.ID(), err)
		}
		if len(page.Rows) == limit {
			page.Next = encodeCursor(lastTS, lastID)
			break
		}
		page.Rows = append(page.Rows, r)
		lastID, lastTS = id, r.FirstSeen
	}
	if err := rows.Err(); err != nil {
		return DemandPage{}, mapError("list demand", err)
	}
	return page, nil
}

// SetWaitReasons records why demand waits, as decided by the last plan.
// Demand not named keeps its previous reason.
func (s *Store) SetWaitReasons(ctx context.Context, waits []broker.Wait) error {
	if len(waits) == 0 {
		return nil
	}
	ids := make([]string, len(waits))
	reasons := make([]string, len(waits))
	details := make([]string, len(waits))
	for i, w := range waits {
		ids[i], reasons[i], details[i] = w.Demand, string(w.Reason), w.Detail
	}
	_, err := s.pool.Exec(ctx, `
		UPDATE demand d SET wait_reason = w.reason, wait_detail = w.detail
		FROM unnest($1::text[], $2::text[], $3::text[]) AS w(id, reason, detail)
		WHERE d.source || '/' || d.key = w.id
		  AND (d.wait_reason, d.wait_detail) IS DISTINCT FROM (w.reason, w.detail)`,
		ids, reasons, details)
	return mapError("set wait reasons", err)
}

// ClosedDemand is one history row.
type ClosedDemand struct {
	ID          int64         `json:"id"`
	Source      broker.Source `json:"source"`
	Key         string        `json:"key"`
	Name        string        `json:"name"`
	Tenant      string        `json:"tenant"`
	Queue       string        `json:"queue"`
	Priority    int64         `json:"priority"`
	GPUsPerUnit int           `json:"gpus_per_unit"`
	Units       int           `json:"units"`
	Gang        bool          `json:"gang"`
	FirstSeen   time.Time     `json:"first_seen"`
	ClosedAt    time.Time     `json:"closed_at"`
	Reason      CloseReason   `json:"reason"`
	Waited      time.Duration `json:"waited_ns"`
}

// HistoryFilter selects closed demand, newest first.
type HistoryFilter struct {
	Source broker.Source
	Tenant string
	Reason CloseReason
	Limit  int
	// BeforeID is the cursor: the ID of the last row of the previous page.
	BeforeID int64
}

// ListHistory reads closed demand, newest first, paginated by id.
func (s *Store) ListHistory(ctx context.Context, f HistoryFilter) ([]ClosedDemand, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	if f.Reason != "" && !f.Reason.Valid() {
		return nil, broker.Invalid("reason", "must be scheduled, finished, deleted, preempted or vanished, got %q", f.Reason)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, source, key, name, tenant, queue, priority, gpus_per_unit, units, gang,
			first_seen, closed_at, reason, waited_ms
		FROM demand_history
		WHERE ($1 = '' OR source = $1) AND ($2 = '' OR tenant = $2) AND ($3 = '' OR reason = $3)
		  AND ($4::bigint = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`,
		string(f.Source), f.Tenant, string(f.Reason), f.BeforeID, limit)
	if err != nil {
		return nil, mapError("list closed demand", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClosedDemand, error) {
		var c ClosedDemand
		var src, reason string
		var ms int64
		err := r.Scan(&c.ID, &src, &c.Key, &c.Name, &c.Tenant, &c.Queue, &c.Priority, &c.GPUsPerUnit,
			&c.Units, &c.Gang, &c.FirstSeen, &c.ClosedAt, &reason, &ms)
		c.Source, c.Reason, c.Waited = broker.Source(src), CloseReason(reason), time.Duration(ms)*time.Millisecond
		return c, err
	})
}

func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return 100, nil
	case n < 0 || n > MaxPageSize:
		return 0, broker.Invalid("limit", "must be between 1 and %d, got %d", MaxPageSize, n)
	}
	return n, nil
}

func encodeCursor(ts time.Time, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(ts.UnixMicro(), 10) + "." + strconv.FormatInt(id, 10)))
}

func decodeCursor(c string) (time.Time, int64, error) {
	bad := broker.Invalid("after", "is not a cursor returned by a previous page; start again without it")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, 0, bad
	}
	ts, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return time.Time{}, 0, bad
	}
	us, err1 := strconv.ParseInt(ts, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, 0, bad
	}
	return time.UnixMicro(us), n, nil
}

// traceApply, when set (by benchmarks), receives the time of each step of
// ApplyObservation.
var traceApply func(step string, took time.Duration)

// closeSQL moves the rows picked by the DELETE's USING/WHERE (%s) to the
// history; $1 source, $2 observation time, $3/$4 the known close reasons.
const closeSQL = `
	WITH gone AS (
		DELETE FROM demand d %s
		RETURNING d.*
	), reasons AS (
		SELECT * FROM unnest($3::text[], $4::text[]) AS r(key, reason)
	)
	INSERT INTO demand_history (source, key, name, tenant, queue, priority, gpus_per_unit,
		units, gang, first_seen, closed_at, reason, waited_ms)
	SELECT g.source, g.key, g.name, g.tenant, g.queue, g.priority, g.gpus_per_unit,
		g.units, g.gang, g.first_seen, $2,
		coalesce(r.reason, 'vanished'),
		greatest(0, (extract(epoch FROM ($2::timestamptz - g.first_seen)) * 1000)::bigint)
	FROM gone g LEFT JOIN reasons r ON r.key = g.key`

// upsertSQL inserts the rows of %s (an expression naming o) with first-seen
// $2 and rewrites only rows whose attributes changed; unchanged rows are
// skipped by the WHERE of DO UPDATE, so a steady ledger creates no dead
// tuples.
const upsertSQL = `
	WITH up AS (
		INSERT INTO demand (source, key, name, tenant, queue, priority, gpus_per_unit, units,
			gang, constraints, preemptible, first_seen)
		SELECT $1, o.key, o.name, o.tenant, o.queue, o.priority, o.gpus_per_unit, o.units,
			o.gang, o.constraints::jsonb, o.preemptible, $2
		FROM %s
		ON CONFLICT (source, key) DO UPDATE SET name = excluded.name, tenant = excluded.tenant,
			queue = excluded.queue, priority = excluded.priority,
			gpus_per_unit = excluded.gpus_per_unit, units = excluded.units, gang = excluded.gang,
			constraints = excluded.constraints, preemptible = excluded.preemptible
		WHERE (demand.name, demand.tenant, demand.queue, demand.priority, demand.gpus_per_unit,
			demand.units, demand.gang, demand.constraints, demand.preemptible)
		  IS DISTINCT FROM
		  (excluded.name, excluded.tenant, excluded.queue, excluded.priority, excluded.gpus_per_unit,
			excluded.units, excluded.gang, excluded.constraints, excluded.preemptible)
		RETURNING xmax = 0 AS inserted
	)
	SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM up`

// withDeparted adds to keys and reasons, for each key in gone that they do
// not name yet, the reason obs.Departed gives (none: it closes vanished).
func withDeparted(obs Observation, gone, keys, reasons []string) ([]string, []string, error) {
	if obs.Departed == nil || len(gone) == 0 {
		return keys, reasons, nil
	}
	named := make(map[string]bool, len(keys))
	for _, k := range keys {
		named[k] = true
	}
	for _, k := range gone {
		if named[k] {
			continue
		}
		r := obs.Departed(k)
		if r == "" {
			continue
		}
		if !r.Valid() {
			return nil, nil, broker.Invalid("departed["+k+"]", "unknown close reason %q", r)
		}
		keys, reasons = append(keys, k), append(reasons, string(r))
	}
	return keys, reasons, nil
}

// mergeSQL merges the staged observation (obs_demand) into the source's
// live rows in one statement: j (%s: the CTE's body, or a table already
// holding it) is the classification of mergeClassifySQL; vanished rows move
// to the history, changed rows are updated by id and new keys inserted. The
// DML parts touch disjoint rows (vanished rows are not in the observation,
// changed and new ones are), so one snapshot serves them all; the source's
// observations row lock keeps any other apply of the source out.
// The update names its rows' ids as an array too: the planner cannot know
// how few rows changed (usually none), and without it hashes the whole
// ledger to update nothing.
// $1 source, $2 observation time, $3/$4 the known close reasons.
const mergeSQL = `
	WITH j AS %s, gone AS (
		DELETE FROM demand d USING j WHERE j.okey IS NULL AND d.id = j.did
		RETURNING d.*
	), reasons AS (
		SELECT * FROM unnest($3::text[], $4::text[]) AS r(key, reason)
	), closed AS (
		INSERT INTO demand_history (source, key, name, tenant, queue, priority, gpus_per_unit,
			units, gang, first_seen, closed_at, reason, waited_ms)
		SELECT g.source, g.key, g.name, g.tenant, g.queue, g.priority, g.gpus_per_unit,
			g.units, g.gang, g.first_seen, $2,
			coalesce(r.reason, 'vanished'),
			greatest(0, (extract(epoch FROM ($2::timestamptz - g.first_seen)) * 1000)::bigint)
		FROM gone g LEFT JOIN reasons r ON r.key = g.key
		RETURNING 1
	), upd AS (
		UPDATE demand d SET name = j.name, tenant = j.tenant, queue = j.queue, priority = j.priority,
			gpus_per_unit = j.gpus_per_unit, units = j.units, gang = j.gang,
			constraints = j.constraints, preemptible = j.preemptible
		FROM j WHERE j.okey IS NOT NULL AND d.id = j.did
		  AND d.id = ANY (ARRAY(SELECT did FROM j WHERE okey IS NOT NULL AND did IS NOT NULL))
		RETURNING 1
	), ins AS (
		INSERT INTO demand (source, key, name, tenant, queue, priority, gpus_per_unit, units,
			gang, constraints, preemptible, first_seen)
		SELECT $1, j.okey, j.name, j.tenant, j.queue, j.priority, j.gpus_per_unit, j.units,
			j.gang, j.constraints, j.preemptible, $2
		FROM j WHERE j.did IS NULL
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM closed), (SELECT count(*) FROM ins), (SELECT count(*) FROM upd)`

// mergeClassifySQL is one full hash join of the staged observation with the
// source's live rows, keeping only what the merge writes: keys that left
// (okey null), new keys (did null) and rows whose attributes changed
// (unchanged rows are not rewritten, so a steady ledger makes no dead
// tuples). $1 is the source.
const mergeClassifySQL = `
	SELECT o.key AS okey, d.id AS did, d.key AS dkey, o.name, o.tenant, o.queue, o.priority,
		o.gpus_per_unit, o.units, o.gang, o.constraints, o.preemptible
	FROM obs_demand o FULL JOIN (SELECT * FROM demand WHERE source = $1) d ON d.key = o.key
	WHERE o.key IS NULL OR d.id IS NULL
	   OR (d.name, d.tenant, d.queue, d.priority, d.gpus_per_unit, d.units, d.gang, d.constraints, d.preemptible)
		IS DISTINCT FROM
		  (o.name, o.tenant, o.queue, o.priority, o.gpus_per_unit, o.units, o.gang, o.constraints, o.preemptible)`

// obsCopyReader is an observation in PostgreSQL's binary COPY format,
// encoded row by row as COPY reads it: key, name, tenant, queue (text),
// priority (int8), gpus_per_unit, units (int4), gang (bool), constraints
// (jsonb: version 1, then the text) and preemptible (bool). Writing the
// format directly costs a fraction of pgx's per-value encoding.
type obsCopyReader struct {
	ds  []broker.Demand
	i   int
	buf []byte
	off int
	end bool
}

func (r *obsCopyReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.end {
			return 0, io.EOF
		}
		r.fill()
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// fill encodes the next rows (about 64 KiB) into buf.
func (r *obsCopyReader) fill() {
	b := r.buf[:0]
	r.off = 0
	if r.i == 0 {
		b = append(b, "PGCOPY\n\377\r\n\000"...)
		b = binary.BigEndian.AppendUint32(b, 0) // flags
		b = binary.BigEndian.AppendUint32(b, 0) // header extension
	}
	text := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	boolean := func(v bool) {
		b = binary.BigEndian.AppendUint32(b, 1)
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	for ; r.i < len(r.ds) && len(b) < 64<<10; r.i++ {
		d := &r.ds[r.i]
		b = binary.BigEndian.AppendUint16(b, 10)
		text(d.Key)
		text(d.Name)
		text(d.Tenant)
		text(d.Queue)
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(d.Priority))
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(d.GPUsPerUnit)))
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(d.Units)))
		boolean(d.Gang)
		lenAt := len(b)
		b = append(b, 0, 0, 0, 0, 1) // length (set below), jsonb version 1
		b = appendConstraintsJSON(b, &d.Constraints)
		binary.BigEndian.PutUint32(b[lenAt:], uint32(len(b)-lenAt-4))
		boolean(d.Preemptible)
	}
	if r.i == len(r.ds) {
		b = binary.BigEndian.AppendUint16(b, 0xffff) // trailer
		r.end = true
	}
	r.buf = b
}

// applyFull merges a whole observation: binary COPY into an unindexed
// temporary table, then one statement (mergeSQL) over one full hash join.
// The staging table is not analyzed: its size comes from its pages, which
// is all the hash joins need, and ANALYZE cost more than the merge itself.
func applyFull(ctx context.Context, tx pgx.Tx, obs Observation, closedKeys, closedReasons []string,
	res *ApplyResult, step func(string)) error {
	// work_mem keeps the hashes of the join in memory.
	if _, err := tx.Exec(ctx, `
		SET LOCAL work_mem = '64MB';
		CREATE TEMP TABLE obs_demand (
			key text, name text, tenant text, queue text, priority bigint,
			gpus_per_unit integer, units integer, gang boolean, constraints jsonb, preemptible boolean
		) ON COMMIT DROP`); err != nil {
		return err
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, &obsCopyReader{ds: obs.Demand},
		`COPY obs_demand (key, name, tenant, queue, priority, gpus_per_unit, units, gang, constraints, preemptible)
		FROM STDIN BINARY`); err != nil {
		return err
	}
	step("copy")
	j := `MATERIALIZED (` + mergeClassifySQL + `)`
	if obs.Departed != nil {
		// The adapter says why keys left, so the classification is kept
		// in a table and the keys that leave are read from it first.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE obs_changes ON COMMIT DROP AS `+mergeClassifySQL, obs.Source); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT dkey FROM obs_changes WHERE okey IS NULL`)
		if err != nil {
			return err
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if closedKeys, closedReasons, err = withDeparted(obs, gone, closedKeys, closedReasons); err != nil {
			return err
		}
		j = `(SELECT * FROM obs_changes)`
		step("departed")
	}
	err := tx.QueryRow(ctx, fmt.Sprintf(mergeSQL, j), obs.Source, obs.At, closedKeys, closedReasons).
		Scan(&res.Closed, &res.Inserted, &res.Updated)
	step("merge")
	return err
}

// applyDiff writes only what changed since last, the observation this
// Store applied before (and which the ledger still holds): new and changed
// rows go in as arrays, vanished keys are deleted by key.
func applyDiff(ctx context.Context, tx pgx.Tx, obs Observation, last, next *sourceRows,
	closedKeys, closedReasons []string, res *ApplyResult, step func(string)) error {
	var gone []string
	for k := range last.rows {
		if _, ok := next.rows[k]; !ok {
			gone = append(gone, k)
		}
	}
	closedKeys, closedReasons, derr := withDeparted(obs, gone, closedKeys, closedReasons)
	if derr != nil {
		return derr
	}
	var (
		keys, names, tenants, queues, constraints []string
		prios                                     []int64
		gpus, units                               []int32
		gangs, preempt                            []bool
	)
	for i := range obs.Demand {
		d := &obs.Demand[i]
		if old, ok := last.rows[d.Key]; ok && old == next.rows[d.Key] {
			continue
		}
		c := constraintsJSON(&d.Constraints)
		keys, names, tenants, queues = append(keys, d.Key), append(names, d.Name), append(tenants, d.Tenant), append(queues, d.Queue)
		prios, gpus, units = append(prios, d.Priority), append(gpus, int32(d.GPUsPerUnit)), append(units, int32(d.Units))
		gangs, constraints, preempt = append(gangs, d.Gang), append(constraints, c), append(preempt, d.Preemptible)
	}
	step("diff")
	if len(gone) > 0 {
		tag, err := tx.Exec(ctx, fmt.Sprintf(closeSQL, `USING unnest($5::text[]) AS g(key) WHERE d.source = $1 AND d.key = g.key`),
			obs.Source, obs.At, closedKeys, closedReasons, gone)
		if err != nil {
			return err
		}
		res.Closed = int(tag.RowsAffected())
		if res.Closed != len(gone) {
			// The ledger is not what the cache says (it cannot happen
			// while the generation matches, but the full path is always
			// right): merge the whole observation in this transaction.
			closed := res.Closed
			if err := applyFull(ctx, tx, obs, closedKeys, closedReasons, res, step); err != nil {
				return err
			}
			res.Closed += closed
			return nil
		}
	}
	step("close")
	if len(keys) == 0 {
		return nil
	}
	err := tx.QueryRow(ctx, fmt.Sprintf(upsertSQL, `unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
			$8::integer[], $9::integer[], $10::boolean[], $11::text[], $12::boolean[])
		AS o(key, name, tenant, queue, priority, gpus_per_unit, units, gang, constraints, preemptible)`),
		obs.Source, obs.At, keys, names, tenants, queues, prios, gpus, units, gangs, constraints, preempt).
		Scan(&res.Inserted, &res.Updated)
	step("upsert")
	return err
}
