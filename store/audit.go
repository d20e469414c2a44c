package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// Who made an audited change.
const (
	// ActorToken is an API bearer token; Actor is its name.
	ActorToken = "token"
	// ActorCertificate is a client certificate; Actor is its subject.
	ActorCertificate = "certificate"
	// ActorCLI is the gpubroker command line on a host with the database
	// URL; Actor is the operating-system user.
	ActorCLI = "cli"
)

// AuditEntry is one write through the API or the CLI: who, when, what, and
// the values before and after it (JSON; absent where there was none, such
// as before a create, or when the write was refused).
type AuditEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Actor is the token's name, the certificate's subject or the CLI's
	// user; ActorKind says which (ActorToken, ActorCertificate, ActorCLI).
	Actor     string `json:"actor"`
	ActorKind string `json:"actor_kind"`
	Role      Role   `json:"role,omitempty"`
	TokenID   int64  `json:"token_id,omitempty"`
	// Method and Route are the HTTP method and route pattern
	// ("PUT /api/v1/tenants/{name}"; the CLI's: "CLI", "token create").
	Method string `json:"method"`
	Route  string `json:"route"`
	// Target is what was written: "tenant/ml", "pool/gpu", "policy",
	// "node/ip-10-0-0-1", "token/12".
	Target string `json:"target,omitempty"`
	// Tenant is the tenant the target belongs to, if any: its
	// tenant-admins see the entry.
	Tenant string `json:"tenant,omitempty"`
	// Status is the HTTP status of the answer (the CLI records 200).
	Status int             `json:"status"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// RecordAudit appends an entry; At defaults to the database's clock. The
// stored entry, with its ID and time, is returned.
func (s *Store) RecordAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	switch {
	case e.Actor == "":
		return AuditEntry{}, broker.Invalid("actor", "must name who made the change")
	case e.ActorKind != ActorToken && e.ActorKind != ActorCertificate && e.ActorKind != ActorCLI:
		return AuditEntry{}, broker.Invalid("actor_kind", "must be token, certificate or cli, got %q", e.ActorKind)
	case e.Method == "" || e.Route == "":
		return AuditEntry{}, broker.Invalid("route", "must name the method and route of the change")
	}
	var at, tokenID any
	if !e.At.IsZero() {
		at = e.At
	}
	if e.TokenID != 0 {
		tokenID = e.TokenID
	}
	err := s.pool.QueryRow(ctx, `
		INSERT INTO audit_log (at, actor, actor_kind, role, token_id, method, route, target, tenant, status, before, after)
		VALUES (coalesce($1::timestamptz, now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		RETURNING id, at`,
		at, e.Actor, e.ActorKind, string(e.Role), tokenID, e.Method, e.Route, e.Target, e.Tenant, e.Status,
		jsonArg(e.Before), jsonArg(e.After)).Scan(&e.ID, &e.At)
	if err != nil {
		return AuditEntry{}, mapError("record audit entry", err)
	}
	return e, nil
}

// jsonArg is a JSON value for a jsonb column: NULL when empty.
func jsonArg(v json.RawMessage) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}

// AuditFilter selects audit entries, newest first.
type AuditFilter struct {
	// Tenant, when set, keeps only the entries of that tenant (what a
	// tenant-admin may see).
	Tenant string
	// Target keeps only the entries of one target ("tenant/ml").
	Target string
	// Since and Until bound the time: Since <= at < Until (zero: open).
	Since, Until time.Time
	Limit        int
	// BeforeID is the cursor: the ID of the last entry of the previous page.
	BeforeID int64
}

// ListAudit reads the audit trail, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	var since, until any
	if !f.Since.IsZero() {
		since = f.Since
	}
	if !f.Until.IsZero() {
		until = f.Until
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, actor, actor_kind, role, coalesce(token_id, 0), method, route, target, tenant, status, before, after
		FROM audit_log
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR target = $2)
		  AND ($3::timestamptz IS NULL OR at >= $3) AND ($4::timestamptz IS NULL OR at < $4)
		  AND ($5::bigint = 0 OR id < $5)
		ORDER BY id DESC LIMIT $6`,
		f.Tenant, f.Target, since, until, f.BeforeID, limit)
	if err != nil {
		return nil, mapError("list audit entries", err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var role string
		var before, after []byte
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.ActorKind, &role, &e.TokenID, &e.Method, &e.Route,
			&e.Target, &e.Tenant, &e.Status, &before, &after)
		e.Role, e.Before, e.After = Role(role), before, after
		return e, err
	})
	return es, mapError("list audit entries", err)
}

// PruneAudit deletes the entries older than before and says how many.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM audit_log WHERE at < $1`, before)
	if err != nil {
		return 0, mapError("prune audit entries", err)
	}
	return tag.RowsAffected(), nil
}
