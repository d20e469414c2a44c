package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// list is the shape of every list answer; Next, when set, is the cursor of
// the following page.
type list[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

func items[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func (s *server) listTenants(w http.ResponseWriter, r *http.Request) {
	if p := queryParams(r); p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	ts, err := s.st.ListTenants(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, list[broker.Tenant]{Items: items(filterTenants(sc, ts))})
}

func (s *server) getTenant(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	if err := sc.mayRead(chi.URLParam(r, "name")); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.st.GetTenant(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(t.Version))
	writeJSON(w, http.StatusOK, t)
}

// createTenant adds a tenant; the server sets its version (1). Weight
// defaults to 1, as in the configuration file. With dry_run=true it checks
// the tenant and answers what it would capture, storing nothing.
func (s *server) createTenant(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "dry_run")
	dry := p.bool("dry_run")
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	t := broker.Tenant{Weight: defaultWeight}
	if err := s.decode(w, r, &t, false); err != nil {
		s.fail(w, r, err)
		return
	}
	t.EvictGrace = storedGrace(t.EvictGrace)
	if t.Version != 0 {
		s.fail(w, r, broker.Invalid("version", "is set by the server; leave it out"))
		return
	}
	if err := tenantBounds(t); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := newClaims(broker.Tenant{}, t); err != nil {
		s.fail(w, r, err)
		return
	}
	claims, err := s.claimReport(r, t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if dry {
		if err := t.Validate(); err != nil {
			s.fail(w, r, err)
			return
		}
		t.Version = 1
		writeJSON(w, http.StatusOK, dryRunAnswer(t, claims))
		return
	}
	audited(r).set("tenant/"+t.Name, t.Name)
	created, err := s.st.CreateTenant(r.Context(), t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(nil, created)
	w.Header().Set("ETag", etag(created.Version))
	w.Header().Set("Location", "/api/v1/tenants/"+url.PathEscape(created.Name))
	writeJSON(w, http.StatusCreated, tenantAnswer{Tenant: created, claimReport: claims})
}

// updateTenant replaces a tenant. An admin may change every field but the
// name; a tenant-admin only its own tenant's fields that tenantFieldRules
// gives it (403 naming the field and the rule otherwise). Weight defaults
// to 1. With dry_run=true it checks the change and answers what it would
// capture, storing nothing.
func (s *server) updateTenant(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if !mayEditTenant(w, r, name) {
		return
	}
	p := queryParams(r, "dry_run")
	dry := p.bool("dry_run")
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	want, err := ifMatch(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t := broker.Tenant{Weight: defaultWeight}
	if err := s.decode(w, r, &t, false); err != nil {
		s.fail(w, r, err)
		return
	}
	t.EvictGrace = storedGrace(t.EvictGrace)
	if t.Name != "" && t.Name != name {
		s.fail(w, r, broker.Invalid("name", "cannot be changed (the path names tenant %q, the body %q)", name, t.Name))
		return
	}
	if t.Version != 0 && t.Version != want {
		s.fail(w, r, broker.Invalid("version", "must be left out or equal the If-Match version %d, got %d", want, t.Version))
		return
	}
	if err := tenantBounds(t); err != nil {
		s.fail(w, r, err)
		return
	}
	t.Name, t.Version = name, want
	cur, err := s.st.GetTenant(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if cur.Version != want {
		s.fail(w, r, stale("tenant "+name, cur.Version, want))
		return
	}
	if tok, _ := principal(r); tok.Role == store.RoleTenantAdmin {
		if field, rule := tenantFieldChange(cur, t); field != "" {
			writeErr(w, http.StatusForbidden, "forbidden", field, field+" may only be changed by an admin: "+rule+
				". A tenant-admin may change only what orders demand inside its own tenant; send the current "+field+" back unchanged")
			return
		}
	}
	if err := newClaims(cur, t); err != nil {
		s.fail(w, r, err)
		return
	}
	claims, err := s.claimReport(r, t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if dry {
		if err := t.Validate(); err != nil {
			s.fail(w, r, err)
			return
		}
		t.Version = cur.Version + 1
		writeJSON(w, http.StatusOK, dryRunAnswer(t, claims))
		return
	}
	updated, err := s.st.UpdateTenant(r.Context(), t)
	if errors.Is(err, broker.ErrConflict) {
		// Someone else's edit landed between the read and the write, or a
		// queue or namespace is taken: tell the two apart.
		if now, gerr := s.st.GetTenant(r.Context(), name); gerr == nil && now.Version != want {
			err = stale("tenant "+name, now.Version, want)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(cur, updated)
	w.Header().Set("ETag", etag(updated.Version))
	writeJSON(w, http.StatusOK, tenantAnswer{Tenant: updated, claimReport: claims})
}

func (s *server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var want int64 = -1
	if r.Header.Get("If-Match") != "" {
		var err error
		if want, err = ifMatch(r); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// Read it first: a missing tenant is a 404 either way, and the audit
	// trail keeps what was deleted.
	cur, err := s.st.GetTenant(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if want >= 0 && cur.Version != want {
		s.fail(w, r, stale("tenant "+name, cur.Version, want))
		return
	}
	if err := s.st.DeleteTenant(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(cur, nil)
	w.WriteHeader(http.StatusNoContent)
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// storedGrace is a tenant's evict grace as the store keeps it, in whole
// milliseconds, so a dry run and a stored tenant answer the same value
// (evict_grace 2734.3962473847264 seconds answered "45m34.396247384s",
// which the document's pattern refuses; schemathesis, ST108).
func storedGrace(d broker.Duration) broker.Duration {
	return broker.Duration(d.D().Truncate(time.Millisecond))
}

// tenantBounds checks the upper limits the OpenAPI document states, which
// the database's columns also need.
func tenantBounds(t broker.Tenant) error {
	if err := atMost("guaranteed_gpus", int64(t.GuaranteedGPUs), maxGPUs); err != nil {
		return err
	}
	if err := atMost("max_gpus", int64(t.MaxGPUs), maxGPUs); err != nil {
		return err
	}
	for _, l := range []struct {
		field string
		items []string
	}{{"yarn_queues", t.YARNQueues}, {"namespaces", t.Namespaces}, {"admins", t.Admins}} {
		if len(l.items) > maxListItems {
			return broker.Invalid(l.field, "must list at most %d items, got %d", maxListItems, len(l.items))
		}
		for i, v := range l.items {
			if len(v) > maxItemLength {
				return broker.Invalid(fmt.Sprintf("%s[%d]", l.field, i), "must be at most %d bytes long, got %d", maxItemLength, len(v))
			}
		}
	}
	return nil
}
