package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// DemandLookup names demand for the "why" history: by source and exact
// key, by source and key prefix (a YARN application id finds every request
// priority of the app), or by source and name ("namespace/pod").
type DemandLookup struct {
	Source    broker.Source
	Key       string
	KeyPrefix string
	Name      string
}

// FoundDemand is one demand the lookup found, live or closed.
type FoundDemand struct {
	broker.Demand
	// State is "pending" for a live ledger row, "closed" for history.
	State      string `json:"state"`
	WaitReason string `json:"wait_reason,omitempty"`
	WaitDetail string `json:"wait_detail,omitempty"`
	// ClosedAt, CloseReason and Waited are set for closed demand.
	ClosedAt    time.Time     `json:"closed_at,omitzero"`
	CloseReason CloseReason   `json:"close_reason,omitempty"`
	Waited      time.Duration `json:"-"`
}

// maxFound bounds how many demands one lookup returns.
const maxFound = 50

// FindDemand returns the live and closed demand the lookup names, live
// first, then the most recently closed; at most 50.
func (s *Store) FindDemand(ctx context.Context, l DemandLookup) ([]FoundDemand, error) {
	if !l.Source.Valid() {
		return nil, broker.Invalid("source", "must be yarn or k8s, got %q", l.Source)
	}
	set := 0
	for _, v := range []string{l.Key, l.KeyPrefix, l.Name} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return nil, broker.Invalid("demand", "name exactly one of key, key prefix or name")
	}
	const cols = `source, key, name, tenant, queue, priority, gpus_per_unit, units, gang, first_seen`
	const where = `source = $1 AND (($2 <> '' AND key = $2) OR ($3 <> '' AND starts_with(key, $3)) OR ($4 <> '' AND name = $4))`
	rows, err := s.pool.Query(ctx, `
		SELECT * FROM (
			SELECT `+cols+`, (SELECT o.observed_at FROM observations o WHERE o.source = demand.source) AS last_seen,
				'pending' AS state, wait_reason, wait_detail, NULL::timestamptz AS closed_at, '' AS reason, 0::bigint AS waited_ms
			FROM demand WHERE `+where+`
			UNION ALL
			(SELECT `+cols+`, closed_at, 'closed', '', '', closed_at, reason, waited_ms
			FROM demand_history WHERE `+where+` ORDER BY closed_at DESC, id DESC LIMIT $5)
		) f ORDER BY state DESC, closed_at DESC NULLS FIRST, key LIMIT $5`,
		string(l.Source), l.Key, l.KeyPrefix, l.Name, maxFound)
	if err != nil {
		return nil, mapError("find demand", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FoundDemand, error) {
		var f FoundDemand
		var src, reason string
		var closed, last *time.Time
		var waited int64
		err := r.Scan(&src, &f.Key, &f.Name, &f.Tenant, &f.Queue, &f.Priority, &f.GPUsPerUnit, &f.Units, &f.Gang,
			&f.FirstSeen, &last, &f.State, &f.WaitReason, &f.WaitDetail, &closed, &reason, &waited)
		if last != nil {
			f.LastSeen = *last // when its side last showed it (closed: when it left)
		}
		f.Source, f.CloseReason, f.Waited = broker.Source(src), CloseReason(reason), time.Duration(waited)*time.Millisecond
		if closed != nil {
			f.ClosedAt = *closed
		}
		return f, err
	})
	return out, mapError("find demand", err)
}

// maxWhyDecisions bounds the history of one demand.
const maxWhyDecisions = 200

// DemandDecisions returns the decisions about one demand (by ID), oldest
// first, at most the newest 200: those naming it as their demand, and the
// actions (scale-up, preemption, transfer) that list it among those they
// serve, which name only their first demand; and for a YARN application
// the migrations that moved one of its containers (its tasks restart as
// its demand). Only actions since since are searched for the second and
// third kinds.
func (s *Store) DemandDecisions(ctx context.Context, id string, since time.Time) ([]broker.Decision, error) {
	serves, err := json.Marshal([]string{id})
	if err != nil {
		return nil, fmt.Errorf("encode demand id: %w", err)
	}
	// A migrated container's application is the demand its restart is.
	app := "-"
	if key, ok := strings.CutPrefix(id, string(broker.SourceYARN)+"/"); ok {
		app, _, _ = strings.Cut(key, "/") // application_…/<priority>[#<allocation request>]
	}
	moved, err := json.Marshal([]map[string]string{{"source": string(broker.SourceYARN), "app": app}})
	if err != nil {
		return nil, fmt.Errorf("encode demand app: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, tick, kind, demand, tenant, pool, node, reason, detail FROM (
			(SELECT * FROM decisions WHERE demand = $1 ORDER BY at DESC, id DESC LIMIT $4)
			UNION
			(SELECT * FROM decisions WHERE at >= $2 AND demand <> $1
				AND kind IN ('scale-up', 'preempt', 'transfer') AND detail->'serves' @> $3::jsonb
				ORDER BY at DESC, id DESC LIMIT $4)
			UNION
			(SELECT * FROM decisions WHERE at >= $2 AND kind = 'migrate' AND detail->'victims' @> $5::jsonb
				ORDER BY at DESC, id DESC LIMIT $4)
		) d ORDER BY at DESC, id DESC LIMIT $4`, id, since, string(serves), maxWhyDecisions, string(moved))
	if err != nil {
		return nil, mapError("list decisions of demand", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (broker.Decision, error) {
		var d broker.Decision
		var detail []byte
		err := r.Scan(&d.ID, &d.At, &d.Tick, &d.Kind, &d.Demand, &d.Tenant, &d.Pool, &d.Node, &d.Reason, &detail)
		d.Detail = detail
		return d, err
	})
	if err != nil {
		return nil, mapError("list decisions of demand", err)
	}
	for i, j := 0, len(ds)-1; i < j; i, j = i+1, j-1 {
		ds[i], ds[j] = ds[j], ds[i]
	}
	return ds, nil
}
