package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

type tokenKey struct{}

// principal returns the authenticated token of a request.
func principal(r *http.Request) (store.Token, bool) {
	t, ok := r.Context().Value(tokenKey{}).(store.Token)
	return t, ok
}

// authCache remembers authenticated tokens for a short time, so that reads
// at dashboard and load-test rates do not write last_used_at on every
// request. Keys are SHA-256 hashes; the secret itself is never kept.
type authCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]cachedToken
}

type cachedToken struct {
	tok     store.Token
	expires time.Time
}

// maxCachedTokens bounds the cache; it is emptied when full.
const maxCachedTokens = 10000

func newAuthCache(ttl time.Duration, now func() time.Time) *authCache {
	return &authCache{ttl: ttl, now: now, m: map[[32]byte]cachedToken{}}
}

func (c *authCache) get(h [32]byte) (store.Token, bool) {
	if c.ttl <= 0 {
		return store.Token{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	if !ok || !c.now().Before(e.expires) {
		return store.Token{}, false
	}
	return e.tok, true
}

func (c *authCache) put(h [32]byte, t store.Token) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedTokens {
		clear(c.m)
	}
	c.m[h] = cachedToken{tok: t, expires: c.now().Add(c.ttl)}
}

// authenticate requires a valid bearer token and puts it in the context.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		secret = strings.TrimSpace(secret)
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			s.metrics.authFailures.WithLabelValues("missing").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpubroker"`)
			writeErr(w, http.StatusUnauthorized, "unauthorized", "Authorization",
				"send a bearer token: Authorization: Bearer <token> (create one with 'gpubroker token create')")
			return
		}
		h := sha256.Sum256([]byte(secret))
		tok, ok := s.auth.get(h)
		if !ok {
			var err error
			tok, err = s.st.Authenticate(r.Context(), secret)
			switch {
			case errors.Is(err, broker.ErrNotFound):
				s.metrics.authFailures.WithLabelValues("invalid").Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="gpubroker", error="invalid_token"`)
				writeErr(w, http.StatusUnauthorized, "unauthorized", "Authorization", "the token is unknown or revoked")
				return
			case err != nil:
				s.fail(w, r, err)
				return
			}
			s.auth.put(h, tok)
		}
		if lr, ok := w.(*loggingWriter); ok {
			lr.token = tok
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
	})
}

// allow lets only the given roles through; others get 403.
func allow(roles ...store.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, _ := principal(r)
			if !slices.Contains(roles, tok.Role) {
				names := make([]string, len(roles))
				for i, ro := range roles {
					names[i] = string(ro)
				}
				writeErr(w, http.StatusForbidden, "forbidden", "",
					"role "+string(tok.Role)+" may not "+r.Method+" "+r.URL.Path+"; allowed roles: "+strings.Join(names, ", "))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// mayEditTenant confines tenant-admins to their own tenant.
func mayEditTenant(w http.ResponseWriter, r *http.Request, tenant string) bool {
	tok, _ := principal(r)
	if tok.Role == store.RoleAdmin || (tok.Role == store.RoleTenantAdmin && tok.Tenant == tenant) {
		return true
	}
	writeErr(w, http.StatusForbidden, "forbidden", "",
		"a tenant-admin token of tenant "+tok.Tenant+" may not change tenant "+tenant)
	return false
}

func (s *server) whoami(w http.ResponseWriter, r *http.Request) {
	tok, _ := principal(r)
	writeJSON(w, http.StatusOK, tok)
}
