package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// Role is what a token may do.
type Role string

// The API roles.
const (
	RoleAdmin       Role = "admin"
	RoleTenantAdmin Role = "tenant-admin"
	RoleViewer      Role = "viewer"
	RoleAgent       Role = "agent"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case RoleAdmin, RoleTenantAdmin, RoleViewer, RoleAgent:
		return true
	}
	return false
}

// Token is a stored API token; the secret itself is never stored.
type Token struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Role      Role      `json:"role"`
	Tenant    string    `json:"tenant,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the token stops working; zero: never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Nodes are the only nodes an agent token may report for. A stolen
	// agent token must not be able to declare other nodes unhealthy.
	Nodes []string `json:"nodes,omitempty"`
	// Pool, for an agent token, lets it report for the nodes the broker
	// knows in that pool (a token shared by one node group). An agent
	// token with neither Nodes nor Pool reports for no node.
	Pool string `json:"pool,omitempty"`
}

// MayReportFor reports whether an agent token t may report for node, whose
// pool as the broker knows it is pool ("" when the node is unknown).
func (t Token) MayReportFor(node, pool string) bool {
	if len(t.Nodes) > 0 {
		return slices.Contains(t.Nodes, node)
	}
	return t.Pool != "" && t.Pool == pool
}

// ExpiredError is the answer of Authenticate for a token past its expiry.
type ExpiredError struct{ At time.Time }

func (e *ExpiredError) Error() string {
	return "token expired at " + e.At.UTC().Format(time.RFC3339)
}

// Is makes an expired token match broker.ErrNotFound: it authenticates
// nobody.
func (e *ExpiredError) Is(target error) bool { return target == broker.ErrNotFound }

// tokenPrefix marks gpubroker tokens so secret scanners can find leaked ones.
const tokenPrefix = "gpb_"

// CreateToken makes a new random bearer token and stores its SHA-256 hash.
// The returned secret is shown once and cannot be recovered.
func (s *Store) CreateToken(ctx context.Context, name string, role Role, tenant string) (secret string, tok Token, err error) {
	return s.CreateExpiringToken(ctx, name, role, tenant, time.Time{})
}

// CreateExpiringToken is CreateToken for a token that stops working at
// expires (zero: never).
func (s *Store) CreateExpiringToken(ctx context.Context, name string, role Role, tenant string, expires time.Time) (secret string, tok Token, err error) {
	return s.createToken(ctx, Token{Name: name, Role: role, Tenant: tenant, ExpiresAt: expires})
}

// CreateAgentToken makes an agent token bound to nodes, or to the nodes
// of pool: it may report for those and no others. Exactly one of nodes and
// pool is required.
func (s *Store) CreateAgentToken(ctx context.Context, name string, nodes []string, pool string, expires time.Time) (secret string, tok Token, err error) {
	switch {
	case len(nodes) == 0 && pool == "":
		return "", Token{}, broker.Invalid("node", "an agent token must be bound to its node (--node NAME, repeatable) or to a pool (--pool NAME)")
	case len(nodes) > 0 && pool != "":
		return "", Token{}, broker.Invalid("pool", "bind an agent token to nodes or to a pool, not both")
	}
	for _, n := range nodes {
		if n == "" || strings.ContainsRune(n, 0) || strings.Contains(n, "*") {
			return "", Token{}, broker.Invalid("node", "must be a node name (its Kubernetes node name or NodeManager host), without wildcards, got %q", n)
		}
	}
	if strings.ContainsRune(pool, 0) {
		return "", Token{}, broker.Invalid("pool", "must be a pool name")
	}
	return s.createToken(ctx, Token{Name: name, Role: RoleAgent, ExpiresAt: expires, Nodes: slices.Compact(slices.Sorted(slices.Values(nodes))), Pool: pool})
}

func (s *Store) createToken(ctx context.Context, spec Token) (secret string, tok Token, err error) {
	name, role, tenant, expires := spec.Name, spec.Role, spec.Tenant, spec.ExpiresAt
	if !role.Valid() {
		return "", Token{}, broker.Invalid("role", "must be admin, tenant-admin, viewer or agent, got %q", role)
	}
	if (role == RoleTenantAdmin) != (tenant != "") {
		return "", Token{}, broker.Invalid("tenant", "is required for role tenant-admin and not allowed for other roles")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Token{}, fmt.Errorf("token randomness: %w", err)
	}
	secret = tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	hash := sha256.Sum256([]byte(secret))
	var t, exp, nodes, pool any
	if tenant != "" {
		t = tenant
	}
	if !expires.IsZero() {
		exp = expires
	}
	if len(spec.Nodes) > 0 {
		nodes = spec.Nodes
	}
	if spec.Pool != "" {
		pool = spec.Pool
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO api_tokens (name, hash, role, tenant, expires_at, nodes, pool) VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING id, created_at`, name, hash[:], string(role), t, exp, nodes, pool).Scan(&tok.ID, &tok.CreatedAt)
	if err != nil {
		return "", Token{}, mapError("create token", err)
	}
	tok.Name, tok.Role, tok.Tenant, tok.Nodes, tok.Pool = name, role, tenant, spec.Nodes, spec.Pool
	if !expires.IsZero() {
		tok.ExpiresAt = expires.UTC().Truncate(time.Microsecond)
	}
	return secret, tok, nil
}

// Authenticate returns the token for a presented secret, ErrNotFound for an
// unknown or revoked one, or an *ExpiredError (which also matches
// ErrNotFound) for one past its expiry. Only the hash is compared, in the
// database, and expiry by the database's clock.
func (s *Store) Authenticate(ctx context.Context, secret string) (Token, error) {
	if !strings.HasPrefix(secret, tokenPrefix) {
		return Token{}, fmt.Errorf("token: %w", broker.ErrNotFound)
	}
	hash := sha256.Sum256([]byte(secret))
	var tok Token
	var role string
	var tenant *string
	var expires *time.Time
	var expired bool
	err := s.pool.QueryRow(ctx, `
		UPDATE api_tokens SET last_used_at = CASE WHEN expires_at <= now() THEN last_used_at ELSE now() END
		WHERE hash = $1 AND revoked_at IS NULL
		RETURNING id, name, role, tenant, created_at, expires_at, coalesce(expires_at <= now(), false),
			coalesce(nodes, '{}'), coalesce(pool, '')`,
		hash[:]).Scan(&tok.ID, &tok.Name, &role, &tenant, &tok.CreatedAt, &expires, &expired, &tok.Nodes, &tok.Pool)
	if err != nil {
		return Token{}, mapError("token", err)
	}
	if expires != nil {
		tok.ExpiresAt = *expires
	}
	if len(tok.Nodes) == 0 {
		tok.Nodes = nil
	}
	if expired {
		return Token{}, fmt.Errorf("token %d: %w", tok.ID, &ExpiredError{At: tok.ExpiresAt})
	}
	tok.Role = Role(role)
	if tenant != nil {
		tok.Tenant = *tenant
	}
	return tok, nil
}

// TokenInfo is a stored token as "gpubroker token list" shows it.
type TokenInfo struct {
	Token
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
}

// ListTokens returns every token, oldest first; secrets are never stored.
func (s *Store) ListTokens(ctx context.Context) ([]TokenInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, name, role, coalesce(tenant, ''), created_at, expires_at, last_used_at, revoked_at,
			coalesce(nodes, '{}'), coalesce(pool, '')
		FROM api_tokens ORDER BY id`)
	if err != nil {
		return nil, mapError("list tokens", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) {
		var t TokenInfo
		var role string
		var exp, used, revoked *time.Time
		err := r.Scan(&t.ID, &t.Name, &role, &t.Tenant, &t.CreatedAt, &exp, &used, &revoked, &t.Nodes, &t.Pool)
		if len(t.Nodes) == 0 {
			t.Nodes = nil
		}
		t.Role = Role(role)
		for _, p := range []struct {
			src *time.Time
			dst *time.Time
		}{{exp, &t.ExpiresAt}, {used, &t.LastUsedAt}, {revoked, &t.RevokedAt}} {
			if p.src != nil {
				*p.dst = *p.src
			}
		}
		return t, err
	})
	return ts, mapError("list tokens", err)
}

// RevokeToken disables a token by id.
func (s *Store) RevokeToken(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return mapError("revoke token", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token %d: %w", id, broker.ErrNotFound)
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }
