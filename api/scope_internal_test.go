package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestScopeGuardRefusesUndecidedReads: a read route without a decision in
// readScopes is refused to a tenant-admin (403) and served to others; a
// decided route and writes (checked by their handlers) pass.
func TestScopeGuardRefusesUndecidedReads(t *testing.T) {
	s := &server{}
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	mux := chi.NewRouter()
	mux.Group(func(r chi.Router) {
		r.Use(s.scopeGuard)
		r.Get("/api/v1/tenants", ok)
		r.Get("/api/v1/new-thing", ok)
		r.Put("/api/v1/new-thing", ok)
	})
	for _, c := range []struct {
		role         store.Role
		method, path string
		code         int
	}{
		{store.RoleTenantAdmin, "GET", "/api/v1/new-thing", http.StatusForbidden},
		{store.RoleTenantAdmin, "GET", "/api/v1/tenants", http.StatusOK},
		{store.RoleTenantAdmin, "PUT", "/api/v1/new-thing", http.StatusOK},
		{store.RoleViewer, "GET", "/api/v1/new-thing", http.StatusOK},
		{store.RoleAdmin, "GET", "/api/v1/new-thing", http.StatusOK},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		req = req.WithContext(context.WithValue(req.Context(), tokenKey{}, store.Token{Role: c.role, Tenant: "ml"}))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("%s %s as %s: %d %s, want %d", c.method, c.path, c.role, rec.Code, rec.Body.String(), c.code)
		}
	}
}

// TestScopeRedact: other tenants' names, namespaces (with the pod after
// them) and queues are replaced as whole names only; the tenant's own
// names and longer names that contain another's stay.
func TestScopeRedact(t *testing.T) {
	sc := newScope("ml-team", []broker.Tenant{
		{Name: "ml-team", Namespaces: []string{"ml-team"}, YARNQueues: []string{"root.ml-team"}},
		{Name: "ml", Namespaces: []string{"ml-ns"}, YARNQueues: []string{"root.ml"}},
	}, nil)
	for in, want := range map[string]string{
		"ml-team waits; ml holds 4 GPUs":          "ml-team waits; another tenant holds 4 GPUs",
		"evict ml-ns/trainer-0.x: 429":            "evict another tenant: 429",
		"queue root.ml is full, root.ml-team not": "queue another tenant is full, root.ml-team not",
		"html and xml and (ml)":                   "html and xml and (another tenant)",
		"":                                        "",
	} {
		if got := sc.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (&scope{}).redact("ml holds 4"); got != "ml holds 4" {
		t.Errorf("a full scope redacts: %q", got)
	}
}
