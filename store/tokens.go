package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

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
}

// tokenPrefix marks gpubroker tokens so secret scanners can find leaked ones.
const tokenPrefix = "gpb_"

// CreateToken makes a new random bearer token and stores its SHA-256 hash.
// The returned secret is shown once and cannot be recovered.
func (s *Store) CreateToken(ctx context.Context, name string, role Role, tenant string) (secret string, tok Token, err error) {
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
	var t any
	if tenant != "" {
		t = tenant
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO api_tokens (name, hash, role, tenant) VALUES ($1, $2, $3, $4)
		RETURNING id, created_at`, name, hash[:], string(role), t).Scan(&tok.ID, &tok.CreatedAt)
	if err != nil {
		return "", Token{}, mapError("create token", err)
	}
	tok.Name, tok.Role, tok.Tenant = name, role, tenant
	return secret, tok, nil
}

// Authenticate returns the token for a presented secret, or ErrNotFound for
// an unknown or revoked one. Only the hash is compared, in the database.
func (s *Store) Authenticate(ctx context.Context, secret string) (Token, error) {
	if !strings.HasPrefix(secret, tokenPrefix) {
		return Token{}, fmt.Errorf("token: %w", broker.ErrNotFound)
	}
	hash := sha256.Sum256([]byte(secret))
	var tok Token
	var role string
	var tenant *string
	err := s.pool.QueryRow(ctx, `
		UPDATE api_tokens SET last_used_at = now()
		WHERE hash = $1 AND revoked_at IS NULL
		RETURNING id, name, role, tenant, created_at`, hash[:]).Scan(&tok.ID, &tok.Name, &role, &tenant, &tok.CreatedAt)
	if err != nil {
		return Token{}, mapError("token", err)
	}
	tok.Role = Role(role)
	if tenant != nil {
		tok.Tenant = *tenant
	}
	return tok, nil
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
