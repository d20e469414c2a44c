package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// unaudited are the write routes that leave no audit entry, and why. Every
// other route whose method is not GET is audited by the audit middleware,
// so a new write route is audited unless it is listed here (a test walks
// the router to hold both to this).
var unaudited = map[string]string{
	"POST /api/v1/nodes/{name}/report": "agent telemetry, every few seconds per node; the latest report is kept on the node",
	"POST /api/v1/plan":                "a dry run; it changes nothing",
}

// auditRecord is what a handler adds to its request's audit entry: the
// target (when the route's path does not name it, as for a create) and
// the values before and after the write.
type auditRecord struct {
	target, tenant string
	before, after  any
}

type auditKey struct{}

// audited returns the request's audit record, or nil on routes that are
// not audited (handlers may call its setters either way).
func audited(r *http.Request) *auditRecord {
	a, _ := r.Context().Value(auditKey{}).(*auditRecord)
	return a
}

// set names the target and its tenant.
func (a *auditRecord) set(target, tenant string) {
	if a != nil {
		a.target, a.tenant = target, tenant
	}
}

// values records the value before and after the write (nil: none).
func (a *auditRecord) values(before, after any) {
	if a != nil {
		a.before, a.after = before, after
	}
}

// bufferedWriter holds a write route's answer until its audit entry is
// stored, so a client that saw a success can find the entry.
type bufferedWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (w *bufferedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *bufferedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.buf.Write(b)
}

// audit records every authenticated write (each method but GET and HEAD)
// with who, when, what and the values before and after, whatever its
// answer: refused attempts are in the trail too, without values.
func (s *server) audit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := routePattern(r)
		if r.Method == http.MethodGet || r.Method == http.MethodHead || unaudited[r.Method+" "+route] != "" {
			next.ServeHTTP(w, r)
			return
		}
		rec := &auditRecord{}
		rec.target, rec.tenant = defaultTarget(r, route)
		bw := &bufferedWriter{ResponseWriter: w}
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), auditKey{}, rec)))
		if bw.status == 0 {
			bw.status = http.StatusOK
		}
		e := store.AuditEntry{Method: r.Method, Route: route, Target: rec.target, Tenant: rec.tenant, Status: bw.status}
		p := who(r)
		e.Actor, e.ActorKind, e.Role, e.TokenID = p.actor, p.kind, p.tok.Role, p.tok.ID
		if bw.status < 300 {
			e.Before, e.After = marshalValue(rec.before), marshalValue(rec.after)
		}
		// The write has happened; record it even if the client went away.
		if _, err := s.st.RecordAudit(context.WithoutCancel(r.Context()), e); err != nil {
			s.log.ErrorContext(r.Context(), "audit entry not recorded", "method", r.Method, "route", route,
				"target", e.Target, "actor", e.Actor, "err", err)
		}
		w.WriteHeader(bw.status)
		_, _ = w.Write(bw.buf.Bytes())
	})
}

func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return r.URL.Path
}

// defaultTarget names what a route writes from its path: the collection
// in the singular and the {name} ("tenant/ml", "node/ip-10-0-0-1"), or
// the collection alone ("policy"). Tenant routes belong to their tenant.
func defaultTarget(r *http.Request, route string) (target, tenant string) {
	rest := strings.TrimPrefix(route, "/api/v1/")
	kind, _, _ := strings.Cut(rest, "/")
	if kind != "policy" {
		kind = strings.TrimSuffix(kind, "s")
	}
	name := chi.URLParam(r, "name")
	if name == "" {
		return kind, ""
	}
	if kind == "tenant" {
		tenant = name
	}
	return kind + "/" + name, tenant
}

func marshalValue(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// listAudit serves the audit trail, newest first, paged by id ("before").
// Admins see every entry; a tenant-admin sees its tenant's.
func (s *server) listAudit(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "since", "until", "target", "limit", "before")
	f := store.AuditFilter{Target: p.str("target"), Since: p.time("since"), Until: p.time("until"),
		Limit: p.limit(), BeforeID: p.cursorID("before")}
	if p.err == nil && !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		p.err = broker.Invalid("until", "must be after since (%s), got %s", f.Since.Format("2006-01-02T15:04:05Z07:00"), f.Until.Format("2006-01-02T15:04:05Z07:00"))
	}
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	if tok, _ := principal(r); tok.Role == store.RoleTenantAdmin {
		f.Tenant = tok.Tenant
	}
	es, err := s.st.ListAudit(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := list[store.AuditEntry]{Items: items(es)}
	if len(es) == f.Limit {
		out.Next = strconv.FormatInt(es[len(es)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, out)
}
