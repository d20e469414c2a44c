package api_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/certtest"
)

// clock is a settable time for the auth cache.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// cachingEnv is newEnv with the default token cache on a settable clock.
func cachingEnv(t *testing.T, ttl time.Duration) (*env, *clock) {
	t.Helper()
	e := newEnv(t)
	c := &clock{t: time.Now()}
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(), AuthCacheTTL: ttl, Now: c.now,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.handler = h
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e, c
}

// TestRevocationTakesEffectWithinTheCacheTTL: the API trusts an
// authenticated token for AuthCacheTTL (10s by default, as the README
// says); a revoked token keeps working at most that long, then gets 401.
func TestRevocationTakesEffectWithinTheCacheTTL(t *testing.T) {
	e, c := cachingEnv(t, 0) // the default TTL
	ctx := context.Background()
	secret, tok, err := e.st.CreateToken(ctx, "temp", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	want(t, e.call("GET", "/api/v1/whoami", secret, nil), 200, "new token")
	if err := e.st.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	c.add(9 * time.Second)
	want(t, e.call("GET", "/api/v1/whoami", secret, nil), 200, "revoked, within the cache TTL")
	c.add(time.Second)
	r := e.call("GET", "/api/v1/whoami", secret, nil)
	want(t, r, 401, "revoked, after the 10s cache TTL")
	if !strings.Contains(r.raw, "unknown or revoked") {
		t.Fatalf("revoked: %s", r.raw)
	}
}

// TestExpiredTokenIsRefusedSayingSo: a token past its expiry gets 401
// with a message that it expired and when; a cached token stops at its
// expiry even when the cache TTL runs longer.
func TestExpiredTokenIsRefusedSayingSo(t *testing.T) {
	e, c := cachingEnv(t, time.Hour)
	ctx := context.Background()
	old, _, err := e.st.CreateExpiringToken(ctx, "old", store.RoleViewer, "", time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := e.call("GET", "/api/v1/whoami", old, nil)
	want(t, r, 401, "expired token")
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "the token expired at ") ||
		!strings.Contains(msg, "gpubroker token create") || !strings.Contains(r.header.Get("WWW-Authenticate"), "expired") {
		t.Fatalf("expired: %v %s", r.header, r.raw)
	}
	// Valid for 30 more minutes; trusted from the cache for an hour.
	soon, _, err := e.st.CreateExpiringToken(ctx, "soon", store.RoleViewer, "", c.now().Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r = e.call("GET", "/api/v1/whoami", soon, nil)
	want(t, r, 200, "token before its expiry")
	if r.body["expires_at"] == nil {
		t.Fatalf("whoami without expires_at: %s", r.raw)
	}
	c.add(20 * time.Minute)
	want(t, e.call("GET", "/api/v1/whoami", soon, nil), 200, "token 10 minutes before its expiry")
	c.add(10 * time.Minute)
	r = e.call("GET", "/api/v1/whoami", soon, nil)
	want(t, r, 401, "token at its expiry, though the cache TTL runs longer")
	if !strings.Contains(r.raw, "the token expired at ") {
		t.Fatalf("at expiry: %s", r.raw)
	}
}

// tlsEnv serves the API over TLS asking for client certificates of ca.
func tlsEnv(t *testing.T, ca *certtest.CA) *env {
	t.Helper()
	e := newEnv(t)
	e.seed()
	srv := httptest.NewUnstartedServer(e.handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "broker", "127.0.0.1").TLS},
		ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.srv = srv
	return e
}

func tlsClient(ca *certtest.CA, certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
}

// TestClientCertificateAuthenticatesAnAgentForItsNode: a certificate
// signed by the client CA acts as role agent for the node its common name
// or DNS names name, and for no other node and nothing else; tokens still
// work over the same listener; a certificate of another CA fails the
// handshake.
func TestClientCertificateAuthenticatesAnAgentForItsNode(t *testing.T) {
	ca := certtest.NewCA(t, "agents CA")
	e := tlsEnv(t, ca)
	do := func(c *http.Client, method, path, body, token string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, e.srv.URL+path, rd)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	report := `{"at":"2026-11-30T12:00:00Z"}`
	node1 := tlsClient(ca, ca.Issue(t, "ip-10-0-0-1").TLS)
	if code, body := do(node1, "POST", "/api/v1/nodes/ip-10-0-0-1/report", report, ""); code != 202 {
		t.Fatalf("own node's report: %d %s", code, body)
	}
	if code, body := do(node1, "POST", "/api/v1/nodes/ip-10-0-0-2/report", report, ""); code != 403 || !strings.Contains(body, "names another node") {
		t.Fatalf("another node's report: %d %s", code, body)
	}
	if code, body := do(node1, "GET", "/api/v1/tenants", "", ""); code != 403 || !strings.Contains(body, "role agent") {
		t.Fatalf("a certificate reading tenants: %d %s", code, body)
	}
	if code, body := do(node1, "PATCH", "/api/v1/policy", `{"expander":"price"}`, ""); code != 403 {
		t.Fatalf("a certificate changing the policy: %d %s", code, body)
	}
	es, err := e.st.ListAudit(context.Background(), store.AuditFilter{Limit: 1})
	if err != nil || len(es) != 1 || es[0].ActorKind != store.ActorCertificate || es[0].Actor != "CN=ip-10-0-0-1" || es[0].Status != 403 {
		t.Fatalf("the refused write's audit entry: %+v %v", es, err)
	}
	// A wildcard DNS name names no node unless api.tls.agent_any_node
	// says so (TestWildcardCertificateNeedsAgentAnyNode).
	wild := tlsClient(ca, ca.Issue(t, "agents", "*.ec2.internal").TLS)
	if code, body := do(wild, "POST", "/api/v1/nodes/ip-10-0-0-9.ec2.internal/report", report, ""); code != 403 ||
		!strings.Contains(body, "agent_any_node") {
		t.Fatalf("wildcard certificate: %d %s", code, body)
	}
	// A token wins over a certificate, and works without one.
	if code, body := do(node1, "GET", "/api/v1/tenants", "", e.tokens["viewer"]); code != 200 {
		t.Fatalf("token with a certificate: %d %s", code, body)
	}
	plain := tlsClient(ca)
	if code, body := do(plain, "GET", "/api/v1/tenants", "", e.tokens["viewer"]); code != 200 {
		t.Fatalf("token over TLS: %d %s", code, body)
	}
	if code, _ := do(plain, "POST", "/api/v1/nodes/ip-10-0-0-1/report", report, ""); code != 401 {
		t.Fatalf("neither token nor certificate: %d", code)
	}
	// Go's client sends only certificates of the CAs the server names;
	// this one insists.
	other := certtest.NewCA(t, "other CA")
	foreign := other.Issue(t, "ip-10-0-0-1").TLS
	insisting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }}}}
	if code, body := do(insisting, "POST", "/api/v1/nodes/ip-10-0-0-1/report", report, ""); code != 0 ||
		!strings.Contains(body, "certificate") {
		t.Fatalf("a certificate of another CA: %d %s, want a failed handshake", code, body)
	}
}
