package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/store"
)

// auditCall is a write that succeeds on a seeded store, and what its
// audit entry must hold.
type auditCall struct {
	path    string
	body    any
	headers []string
	target  string
	tenant  string
	// before and after are "field=value" checks on the entry's values
	// ("" when that value must be absent).
	before, after string
}

// TestEveryWriteRouteIsAudited walks the router: every route whose method
// is not GET either is listed as unaudited, with a reason, or leaves an
// audit entry naming the admin, the route, the target and the values
// before and after. A new write route without a call here fails.
func TestEveryWriteRouteIsAudited(t *testing.T) {
	e := newEnv(t)
	e.seed()
	calls := map[string]auditCall{
		"POST /api/v1/tenants": {path: "/api/v1/tenants", body: map[string]any{"name": "speech", "max_gpus": 4, "weight": 1},
			target: "tenant/speech", tenant: "speech", after: "max_gpus=4"},
		"PUT /api/v1/tenants/{name}": {path: "/api/v1/tenants/vision", body: map[string]any{"max_gpus": 8, "weight": 2},
			headers: []string{`If-Match: "1"`}, target: "tenant/vision", tenant: "vision", before: "max_gpus=16", after: "max_gpus=8"},
		"DELETE /api/v1/tenants/{name}": {path: "/api/v1/tenants/speech", target: "tenant/speech", tenant: "speech", before: "name=speech"},
		"PATCH /api/v1/pools/{name}": {path: "/api/v1/pools/gpu-training-group", body: map[string]any{"max_nodes": 6},
			headers: []string{`If-Match: "1"`}, target: "pool/gpu-training-group", before: "max_nodes=5", after: "max_nodes=6"},
		"PATCH /api/v1/policy": {path: "/api/v1/policy", body: map[string]any{"expander": "price"},
			headers: []string{`If-Match: "0"`}, target: "policy", before: "expander=least-waste", after: "expander=price"},
		"POST /api/v1/nodes/{name}/cordon": {path: "/api/v1/nodes/ip-10-0-0-1/cordon", target: "node/ip-10-0-0-1",
			before: "name=ip-10-0-0-1", after: "action=cordon"},
		"POST /api/v1/nodes/{name}/drain": {path: "/api/v1/nodes/ip-10-0-0-1/drain", target: "node/ip-10-0-0-1",
			before: "name=ip-10-0-0-1", after: "action=drain"},
		"POST /api/v1/nodes/{name}/transfer": {path: "/api/v1/nodes/ip-10-0-0-1/transfer", body: map[string]any{"to": "yarn"},
			target: "node/ip-10-0-0-1", before: "owner=k8s", after: "to=yarn"},
		"PUT /api/v1/nodes/{name}/protection": {path: "/api/v1/nodes/ip-10-0-0-2/protection", body: map[string]any{"protected": true},
			target: "node/ip-10-0-0-2", before: "protected=false", after: "protected=true"},
	}
	// Creates come before the rest (the DELETE removes what the POST made).
	order := []string{"POST /api/v1/tenants"}
	unaudited := map[string]bool{}
	err := chi.Walk(e.handler.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		k := method + " " + pattern
		switch {
		case method == http.MethodGet || !strings.HasPrefix(pattern, "/api/v1/"):
		case api.UnauditedForTest[k] != "":
			unaudited[k] = true
		case k != order[0]:
			order = append(order, k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range api.UnauditedForTest {
		if !unaudited[k] {
			t.Errorf("unaudited lists %s, which the router does not serve", k)
		}
	}
	// DELETE last: the tenant it deletes must exist until then.
	for i, k := range order {
		if strings.HasPrefix(k, "DELETE ") {
			order = append(append(order[:i:i], order[i+1:]...), k)
			break
		}
	}
	for _, k := range order {
		c, ok := calls[k]
		if !ok {
			t.Errorf("write route %s has no call in this test: add one (and audit values in its handler), or list it in api.unaudited with the reason", k)
			continue
		}
		method, pattern, _ := strings.Cut(k, " ")
		r := e.call(method, c.path, "admin", c.body, c.headers...)
		if r.code < 200 || r.code > 299 {
			t.Fatalf("%s: got %d %s", k, r.code, r.raw)
		}
		es, err := e.st.ListAudit(context.Background(), store.AuditFilter{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			t.Errorf("%s left no audit entry", k)
			continue
		}
		a := es[0]
		if a.Method != method || a.Route != pattern || a.Actor != "admin" || a.ActorKind != store.ActorToken ||
			a.Role != store.RoleAdmin || a.TokenID == 0 || a.Status != r.code || a.Target != c.target || a.Tenant != c.tenant {
			t.Errorf("%s: audit entry %+v, want method, route, the admin token, status %d, target %q, tenant %q",
				k, a, r.code, c.target, c.tenant)
		}
		checkValue(t, k+" before", a.Before, c.before)
		checkValue(t, k+" after", a.After, c.after)
	}
	// The unaudited routes leave nothing.
	n := countAudit(t, e)
	want(t, e.call("POST", "/api/v1/plan", "admin", nil), 200, "plan")
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/report", "agent", map[string]any{"at": "2026-11-30T12:00:00Z"}), 202, "report")
	if got := countAudit(t, e); got != n {
		t.Fatalf("plan and report left %d audit entries", got-n)
	}
}

func countAudit(t *testing.T, e *env) int {
	t.Helper()
	es, err := e.st.ListAudit(context.Background(), store.AuditFilter{Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// checkValue checks one "field=value" of a JSON object, or that raw is
// absent when want is "".
func checkValue(t *testing.T, what string, raw json.RawMessage, want string) {
	t.Helper()
	if want == "" {
		if len(raw) != 0 {
			t.Errorf("%s: got %s, want none", what, raw)
		}
		return
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Errorf("%s: %q is not a JSON object: %v", what, raw, err)
		return
	}
	field, value, _ := strings.Cut(want, "=")
	got, _ := json.Marshal(m[field])
	if strings.Trim(string(got), `"`) != value {
		t.Errorf("%s: %s is %s, want %s (%s)", what, field, got, value, raw)
	}
}

// TestAuditListing: admins see every entry, a tenant-admin its tenant's
// only (refused attempts on other tenants included for admins), viewers
// none; since, until and target filter; pages follow next.
func TestAuditListing(t *testing.T) {
	e := newEnv(t)
	e.seed()
	want(t, e.call("PUT", "/api/v1/tenants/ml", "ml-admin", map[string]any{"max_gpus": 16, "guaranteed_gpus": 2, "weight": 1,
		"yarn_queues": []string{"root.ml"}, "namespaces": []string{"ml"}}, `If-Match: "1"`), 200, "ml-admin sends ml back unchanged")
	want(t, e.call("PUT", "/api/v1/tenants/vision", "ml-admin", map[string]any{"max_gpus": 1, "weight": 1}, `If-Match: "1"`), 403, "ml-admin edits vision")
	mid := time.Now()
	want(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"expander": "price"}, `If-Match: "0"`), 200, "policy")
	want(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"expander": "nope"}, `If-Match: "1"`), 400, "bad policy")

	items := func(r resp) []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, it := range r.items() {
			out = append(out, it.(map[string]any))
		}
		return out
	}
	all := items(e.call("GET", "/api/v1/audit", "admin", nil))
	if len(all) != 4 || all[0]["status"] != 400.0 || all[0]["after"] != nil || all[1]["target"] != "policy" ||
		all[2]["status"] != 403.0 || all[2]["target"] != "tenant/vision" || all[2]["actor"] != "ml-admin" {
		t.Fatalf("admin sees %v", all)
	}
	mine := items(e.call("GET", "/api/v1/audit", "ml-admin", nil))
	if len(mine) != 1 || mine[0]["target"] != "tenant/ml" || mine[0]["role"] != "tenant-admin" {
		t.Fatalf("ml-admin sees %v, want only its tenant's entry", mine)
	}
	if got := items(e.call("GET", "/api/v1/audit?target=policy", "ml-admin", nil)); len(got) != 0 {
		t.Fatalf("ml-admin sees the policy's entries: %v", got)
	}
	want(t, e.call("GET", "/api/v1/audit", "viewer", nil), 403, "viewer")
	if got := items(e.call("GET", "/api/v1/audit?target=policy", "admin", nil)); len(got) != 2 {
		t.Fatalf("target=policy: %v", got)
	}
	since := mid.UTC().Format(time.RFC3339Nano)
	if got := items(e.call("GET", "/api/v1/audit?since="+since, "admin", nil)); len(got) != 2 {
		t.Fatalf("since: %v", got)
	}
	if got := items(e.call("GET", "/api/v1/audit?until="+since, "admin", nil)); len(got) != 2 {
		t.Fatalf("until: %v", got)
	}
	wantInvalid(t, e.call("GET", "/api/v1/audit?since="+since+"&until="+since, "admin", nil), "until", "until not after since")
	wantInvalid(t, e.call("GET", "/api/v1/audit?until=yesterday", "admin", nil), "until", "bad until")
	wantInvalid(t, e.call("GET", "/api/v1/audit?actor=admin", "admin", nil), "actor", "unknown parameter")

	p1 := e.call("GET", "/api/v1/audit?limit=3", "admin", nil)
	next, _ := p1.body["next"].(string)
	if len(items(p1)) != 3 || next == "" {
		t.Fatalf("page 1: %s", p1.raw)
	}
	p2 := e.call("GET", "/api/v1/audit?limit=3&before="+next, "admin", nil)
	if got := items(p2); len(got) != 1 || got[0]["target"] != "tenant/ml" || p2.body["next"] != nil {
		t.Fatalf("page 2: %s", p2.raw)
	}
}
