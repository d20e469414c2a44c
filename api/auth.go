package api

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

type tokenKey struct{}

type certKey struct{}

// principal returns the authenticated token of a request. A client
// certificate authenticates as a token of role agent named by its subject
// (see clientCert).
func principal(r *http.Request) (store.Token, bool) {
	t, ok := r.Context().Value(tokenKey{}).(store.Token)
	return t, ok
}

// clientCert returns the verified client certificate a request
// authenticated with, or nil when it sent a token.
func clientCert(r *http.Request) *x509.Certificate {
	c, _ := r.Context().Value(certKey{}).(*x509.Certificate)
	return c
}

// actor is who made a request, for the audit trail.
type actor struct {
	actor, kind string
	tok         store.Token
}

func who(r *http.Request) actor {
	tok, _ := principal(r)
	if c := clientCert(r); c != nil {
		return actor{actor: c.Subject.String(), kind: store.ActorCertificate, tok: tok}
	}
	name := tok.Name
	if name == "" { // unnamed tokens are named by their id
		name = "token " + strconv.FormatInt(tok.ID, 10)
	}
	return actor{actor: name, kind: store.ActorToken, tok: tok}
}

// mayReportFor lets an agent report only for the nodes its credential is
// bound to, and answers 403 otherwise: a stolen agent credential must not
// be able to declare other nodes unhealthy (and have them drained).
//
//   - A client certificate names its node: its common name, or one of its
//     DNS names, exactly. A wildcard DNS name (*.ec2.internal) counts only
//     with api.tls.agent_any_node.
//   - An agent token reports for the nodes it was created for (--node), or
//     for the nodes the broker knows in its pool (--pool). An agent token
//     bound to neither (made before tokens were bound) reports for none.
//   - An admin token may report for any node.
func (s *server) mayReportFor(w http.ResponseWriter, r *http.Request, node string) bool {
	if c := clientCert(r); c != nil {
		if certNames(c, node, s.cfg.AgentAnyNode) {
			return true
		}
		msg := "the client certificate " + c.Subject.String() + " names another node; it may report only for the node in its common name or DNS names, not " + node
		if !s.cfg.AgentAnyNode && slices.ContainsFunc(c.DNSNames, func(n string) bool { return strings.HasPrefix(n, "*.") }) {
			msg += " (a wildcard DNS name counts only with api.tls.agent_any_node: true; issue one certificate per node instead)"
		}
		writeErr(w, http.StatusForbidden, "forbidden", "", msg)
		return false
	}
	tok, _ := principal(r)
	if tok.Role != store.RoleAgent {
		return true // admin: the route allows only admin and agent
	}
	var pool string
	if len(tok.Nodes) == 0 && tok.Pool != "" {
		n, err := s.st.GetNode(r.Context(), node)
		switch {
		case err == nil:
			pool = n.Pool
		case !errors.Is(err, broker.ErrNotFound):
			s.fail(w, r, err)
			return false
		}
	}
	if tok.MayReportFor(node, pool) {
		return true
	}
	var msg string
	switch {
	case len(tok.Nodes) > 0:
		msg = "this agent token is bound to node(s) " + strings.Join(tok.Nodes, ", ") + " and may not report for " + node
	case tok.Pool != "":
		msg = "this agent token is bound to pool " + tok.Pool + " and " + node + " is not a node the broker knows in it"
		if pool != "" {
			msg += " (it is in pool " + pool + ")"
		}
	default:
		msg = "this agent token is bound to no node and may report for none; create one per node with 'gpubroker token create --role agent --node " + node + "'"
	}
	writeErr(w, http.StatusForbidden, "forbidden", "", msg)
	return false
}

// certNames reports whether client certificate c names node: its common
// name or a DNS name equals it (case-insensitively, as DNS names compare);
// a wildcard DNS name matches only when anyNode allows it.
func certNames(c *x509.Certificate, node string, anyNode bool) bool {
	if node == "" {
		return false
	}
	if strings.EqualFold(c.Subject.CommonName, node) {
		return true
	}
	for _, n := range c.DNSNames {
		if strings.EqualFold(n, node) {
			return true
		}
	}
	return anyNode && c.VerifyHostname(node) == nil
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
	exp := c.now().Add(c.ttl)
	if !t.ExpiresAt.IsZero() && t.ExpiresAt.Before(exp) {
		// A token about to expire is trusted only until it does.
		exp = t.ExpiresAt
	}
	c.m[h] = cachedToken{tok: t, expires: exp}
}

// authenticate requires a valid bearer token, or a client certificate the
// TLS listener verified against api.tls.client_ca_file, and puts the
// principal in the context. A token, when sent, wins over a certificate.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			c := r.TLS.VerifiedChains[0][0]
			tok := store.Token{Name: c.Subject.String(), Role: store.RoleAgent}
			if lr, ok := w.(*loggingWriter); ok {
				lr.token = tok
			}
			ctx := context.WithValue(context.WithValue(r.Context(), tokenKey{}, tok), certKey{}, c)
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
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
		if !ok && s.cfg.AgentReviewer != nil && !strings.HasPrefix(secret, "gpb_") {
			node, name, err := s.cfg.AgentReviewer.ReviewAgent(r.Context(), secret)
			switch {
			case errors.Is(err, broker.ErrNotFound):
				s.metrics.authFailures.WithLabelValues("invalid").Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="gpubroker", error="invalid_token"`)
				writeErr(w, http.StatusUnauthorized, "unauthorized", "Authorization", "the token is not a gpubroker token, nor an agent service-account token bound to a node")
				return
			case err != nil:
				s.fail(w, r, err)
				return
			}
			// A platform-issued agent credential names its node and only it.
			tok, ok = store.Token{Name: name, Role: store.RoleAgent, Nodes: []string{node}}, true
			s.auth.put(h, tok)
		}
		if !ok {
			var err error
			tok, err = s.st.Authenticate(r.Context(), secret)
			var expired *store.ExpiredError
			switch {
			case errors.As(err, &expired):
				s.refuseExpired(w, expired.At)
				return
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
		if !tok.ExpiresAt.IsZero() && !s.cfg.Now().Before(tok.ExpiresAt) {
			s.refuseExpired(w, tok.ExpiresAt)
			return
		}
		if lr, ok := w.(*loggingWriter); ok {
			lr.token = tok
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
	})
}

// refuseExpired answers a token past its expiry.
func (s *server) refuseExpired(w http.ResponseWriter, at time.Time) {
	s.metrics.authFailures.WithLabelValues("expired").Inc()
	w.Header().Set("WWW-Authenticate", `Bearer realm="gpubroker", error="invalid_token", error_description="the token expired"`)
	writeErr(w, http.StatusUnauthorized, "unauthorized", "Authorization",
		"the token expired at "+at.UTC().Format(time.RFC3339)+"; create a new one with 'gpubroker token create'")
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

// tokenRE matches gpubroker token secrets (see store's token prefix).
var tokenRE = regexp.MustCompile(`gpb_[A-Za-z0-9_-]+`)

// redactTokens hides token secrets pasted into a path before it is
// logged: a secret in a URL is still a secret.
func redactTokens(s string) string {
	if !strings.Contains(s, "gpb_") {
		return s
	}
	return tokenRE.ReplaceAllString(s, "gpb_[redacted]")
}
