package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// escalations are, for every field of a tenant that only an admin may
// change, what a tenant-admin of ml would send to gain from it: the probes
// of issue 25 (guarantee 0→8 outranks every tenant, a claim of root takes
// every unclaimed queue), and the others alike.
var escalations = map[string]any{
	"base_priority":   5000,
	"guaranteed_gpus": 8,
	"max_gpus":        64,
	"weight":          50,
	"yarn_queues":     []string{"root.ml", "root"},
	"namespaces":      []string{"ml", "kube-system"},
	"admins":          []string{"mallory"},
	"name":            "ml-renamed",
	// An hour's grace keeps preempted containers on their GPUs while
	// another tenant's higher-priority demand waits.
	"evict_grace": "1h",
}

// TestTenantAdminConfinement acts as the holder of a real tenant-admin
// token of tenant ml on the real API and PostgreSQL: every change that
// ranks or sizes its tenant against the others or claims work is 403
// naming the field and the rule, and the tenant is left as it was; other
// tenants, creating, deleting, pools, the policy and the dry run are
// refused too. Every admin-only field of the API's role table
// (tenantFieldRules) has a probe here.
func TestTenantAdminConfinement(t *testing.T) {
	e := newEnv(t)
	e.seed()
	// ml as stored: guaranteed 2, max 16, weight 1, root.ml, ml.
	cur := map[string]any{"guaranteed_gpus": 2, "max_gpus": 16, "weight": 1, "yarn_queues": []string{"root.ml"}, "namespaces": []string{"ml"}}
	for field, who := range api.TenantFieldWhoForTest() {
		if who == "admin" || who == "nobody" {
			if _, ok := escalations[field]; !ok {
				t.Errorf("tenant field %s is %s-only in tenantFieldRules but this test has no probe for it", field, who)
			}
		}
	}
	for field, v := range escalations {
		body := map[string]any{}
		for k, x := range cur {
			body[k] = x
		}
		body[field] = v
		r := e.call("PUT", "/api/v1/tenants/ml", "ml-admin", body, `If-Match: "1"`)
		if field == "name" {
			// A rename is refused to everyone (400), before the role rule.
			wantInvalid(t, r, "name", "tenant-admin renames its tenant")
			continue
		}
		if r.code != 403 || r.errField() != field || !strings.Contains(r.raw, "may only be changed by an admin: ") {
			t.Errorf("tenant-admin changes %s to %v: got %d %s, want 403 naming %s and the rule", field, v, r.code, r.raw, field)
		}
	}
	// Leaving weight out is weight 1 (the default), which ml has: allowed;
	// a tenant-admin sending its tenant back unchanged is not refused.
	same := map[string]any{"guaranteed_gpus": 2, "max_gpus": 16, "yarn_queues": []string{"root.ml"}, "namespaces": []string{"ml"}}
	r := e.call("PUT", "/api/v1/tenants/ml", "ml-admin", same, `If-Match: "1"`)
	want(t, r, 200, "tenant-admin sends its tenant back unchanged")
	if _, ok := r.body["captures"]; ok {
		t.Errorf("a tenant-admin's answer shows what claims capture (other tenants' queues): %s", r.raw)
	}
	got := e.call("GET", "/api/v1/tenants/ml", "admin", nil)
	if got.body["guaranteed_gpus"] != 2.0 || got.body["max_gpus"] != 16.0 || got.body["weight"] != 1.0 || got.body["base_priority"] != 0.0 ||
		!reflect.DeepEqual(got.body["yarn_queues"], []any{"root.ml"}) || !reflect.DeepEqual(got.body["namespaces"], []any{"ml"}) {
		t.Fatalf("ml after the refused changes: %s", got.raw)
	}
	// The admin may make every one of those changes.
	up := map[string]any{"guaranteed_gpus": 8, "max_gpus": 16, "weight": 2, "base_priority": 10,
		"yarn_queues": []string{"root.ml", "root.ml-dev"}, "namespaces": []string{"ml", "ml-dev"}, "admins": []string{"alice"}}
	want(t, e.call("PUT", "/api/v1/tenants/ml", "admin", up, `If-Match: "2"`), 200, "admin edits ml")

	r = e.call("PUT", "/api/v1/tenants/vision", "ml-admin", map[string]any{"guaranteed_gpus": 2, "max_gpus": 16}, `If-Match: "1"`)
	want(t, r, 403, "tenant-admin edits another tenant")
	if !strings.Contains(r.raw, "vision") {
		t.Fatalf("403 should say which tenant: %s", r.raw)
	}
	// Confinement is checked before anything else, so the answer does not
	// reveal whether the other tenant exists.
	want(t, e.call("PUT", "/api/v1/tenants/secret", "ml-admin", cur), 403, "tenant-admin, unknown tenant")
	want(t, e.call("POST", "/api/v1/tenants", "ml-admin", map[string]any{"name": "mine", "max_gpus": 1, "weight": 1}), 403, "tenant-admin creates")
	want(t, e.call("DELETE", "/api/v1/tenants/ml", "ml-admin", nil), 403, "tenant-admin deletes its own")
	want(t, e.call("PATCH", "/api/v1/pools/gpu-training-group", "ml-admin", map[string]any{"max_nodes": 50}, `If-Match: "1"`), 403, "tenant-admin pool")
	want(t, e.call("PATCH", "/api/v1/policy", "ml-admin", map[string]any{"preemption": false}, `If-Match: "0"`), 403, "tenant-admin policy")
	for _, role := range []string{"ml-admin", "viewer"} {
		r := e.call("POST", "/api/v1/plan", role, nil)
		if r.code != 403 || !strings.Contains(r.raw, "GET /api/v1/decisions") || !strings.Contains(r.raw, "/demand/{id}/why") {
			t.Errorf("POST /plan as %s: %d %s, want 403 pointing to /decisions and /demand/{id}/why", role, r.code, r.raw)
		}
	}
	if n := e.rt.dryRuns(); n != 0 {
		t.Errorf("refused dry runs observed %d times, want 0", n)
	}
	if r := e.call("GET", "/api/v1/tenants/vision", "viewer", nil); r.body["max_gpus"] != 16.0 {
		t.Fatalf("vision changed: %s", r.raw)
	}
}

// TestTenantFieldRulesCoverTenant: every JSON field of broker.Tenant has a
// rule in the API's role table, so a field added later is not editable by
// a tenant-admin by omission (a missing one would be admin-only anyway,
// but without a rule to name).
func TestTenantFieldRulesCoverTenant(t *testing.T) {
	rules := api.TenantFieldWhoForTest()
	tt := reflect.TypeOf(broker.Tenant{})
	var fields []string
	for i := 0; i < tt.NumField(); i++ {
		name, _, _ := strings.Cut(tt.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
		if rules[name] == "" {
			t.Errorf("broker.Tenant's field %s has no rule in api/scope.go's tenantFieldRules", name)
		}
	}
	for name := range rules {
		if !slices.Contains(fields, name) {
			t.Errorf("tenantFieldRules names %s, which broker.Tenant does not have", name)
		}
	}
}

// TestRouteRoles walks the router and calls every authenticated route with
// a token of each role: the role table (routeRoles) must decide every
// route, and a role is refused (403) exactly where the table leaves it
// out. A tenant-admin calls on its own tenant, so the refusals are the
// roles', not the tenant confinement's.
func TestRouteRoles(t *testing.T) {
	e := newEnv(t)
	e.seed()
	table := api.RouteRolesForTest()
	roles := map[string]store.Role{"admin": store.RoleAdmin, "ml-admin": store.RoleTenantAdmin, "viewer": store.RoleViewer, "agent": store.RoleAgent}
	seen := map[string]bool{}
	err := chi.Walk(e.handler.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(pattern, "/api/v1/") || pattern == "/api/v1/openapi.json" {
			return nil
		}
		k := method + " " + pattern
		seen[k] = true
		allowed, ok := table[k]
		if !ok {
			t.Errorf("route %s has no entry in api/scope.go's routeRoles", k)
			return nil
		}
		path := strings.NewReplacer("{name}", "ml", "{id}", "k8s%2Fp1").Replace(pattern)
		if strings.HasPrefix(pattern, "/api/v1/nodes/") {
			path = strings.Replace(pattern, "{name}", "ip-10-0-0-1", 1)
		}
		if strings.HasPrefix(pattern, "/api/v1/pools/") {
			path = strings.Replace(pattern, "{name}", "gpu-training-group", 1)
		}
		for tok, role := range roles {
			// An empty JSON object: enough to pass the role check, and
			// refused as a body (400) or state (428) after it.
			var body any
			if method != http.MethodGet && method != http.MethodDelete {
				body = "{}"
			}
			r := e.call(method, path, tok, body, `If-Match: "999"`)
			refused := r.code == http.StatusForbidden
			if want := !slices.Contains(allowed, role); refused != want {
				t.Errorf("%s as %s: %d %s; routeRoles allows %v", k, role, r.code, r.raw, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range table {
		if !seen[k] {
			t.Errorf("routeRoles names %s, which the router does not serve", k)
		}
	}
}

// TestTenantWeightDefault: a create (or update) without weight gets weight
// 1, as the configuration file gives it; an explicit bad weight is still a
// 400 naming it.
func TestTenantWeightDefault(t *testing.T) {
	e := newEnv(t)
	r := e.call("POST", "/api/v1/tenants", "admin", map[string]any{"name": "speech", "max_gpus": 4})
	want(t, r, 201, "create without weight")
	if r.body["weight"] != 1.0 {
		t.Fatalf("weight: %s", r.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", map[string]any{"name": "speech2", "max_gpus": 4, "weight": 0}), "weight", "weight 0")
	r = e.call("PUT", "/api/v1/tenants/speech", "admin", map[string]any{"max_gpus": 6}, `If-Match: "1"`)
	if r.code != 200 || r.body["weight"] != 1.0 || r.body["max_gpus"] != 6.0 {
		t.Fatalf("update without weight: %d %s", r.code, r.raw)
	}
}

// TestQueueClaims: through the API a queue claim is an exact path from
// root; a parent claim shows, in a dry run that stores nothing and in the
// write's answer, which other tenants' queues it takes over.
func TestQueueClaims(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// vision also holds the leaf name "etl" (as a configuration file may
	// write it), and its app waits in root.data.etl.
	v, err := e.st.GetTenant(ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	v.YARNQueues = append(v.YARNQueues, "etl")
	if _, err := e.st.UpdateTenant(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ApplyObservation(ctx, store.Observation{Source: broker.SourceYARN, At: time.Now(),
		Demand: []broker.Demand{{Source: broker.SourceYARN, Key: "application_7_0001/1", Name: "etl", Tenant: "vision",
			Queue: "root.data.etl", Priority: 1, GPUsPerUnit: 1, Units: 1}}}); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", map[string]any{"name": "platform", "max_gpus": 4,
		"yarn_queues": []string{"root.platform", "batch"}}), "yarn_queues[1]", "a leaf-name claim")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", map[string]any{"name": "platform", "max_gpus": 4,
		"yarn_queues": []string{"root..x"}}), "yarn_queues[0]", "an empty path element")

	body := map[string]any{"name": "platform", "max_gpus": 4, "yarn_queues": []string{"root.data"}}
	r := e.call("POST", "/api/v1/tenants?dry_run=true", "admin", body)
	want(t, r, 200, "dry run of a parent claim")
	var dry struct {
		Tenant       broker.Tenant `json:"tenant"`
		Captures     []struct{ Queue, From string }
		ParentClaims []string `json:"parent_claims"`
	}
	if err := json.Unmarshal([]byte(r.raw), &dry); err != nil {
		t.Fatal(err)
	}
	if dry.Tenant.Name != "platform" || len(dry.Captures) != 1 || dry.Captures[0].Queue != "root.data.etl" || dry.Captures[0].From != "vision" ||
		!slices.Equal(dry.ParentClaims, []string{"root.data"}) {
		t.Fatalf("dry run: %s, want root.data.etl captured from vision and root.data a parent claim", r.raw)
	}
	want(t, e.call("GET", "/api/v1/tenants/platform", "admin", nil), 404, "a dry run stores nothing")
	r = e.call("POST", "/api/v1/tenants", "admin", body)
	want(t, r, 201, "parent claim")
	if !strings.Contains(r.raw, `"captures":[{"queue":"root.data.etl","from":"vision"}]`) || !strings.Contains(r.raw, `"parent_claims":["root.data"]`) {
		t.Fatalf("the answer of a parent claim does not show what it takes: %s", r.raw)
	}
	// root.ml is ml's exactly: a claim of root takes the rest, not it.
	r = e.call("PUT", "/api/v1/tenants/platform?dry_run=true", "admin", map[string]any{"max_gpus": 4, "yarn_queues": []string{"root"}}, `If-Match: "1"`)
	want(t, r, 200, "dry run of root")
	if !strings.Contains(r.raw, `"parent_claims":["root"]`) || strings.Contains(r.raw, `"root.ml"`) {
		t.Fatalf("dry run of root: %s", r.raw)
	}
	if g := e.call("GET", "/api/v1/tenants/platform", "admin", nil); g.header.Get("ETag") != `"1"` {
		t.Fatalf("an update's dry run changed the tenant: %v %s", g.header, g.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/tenants?dry_run=maybe", "admin", body), "dry_run", "bad dry_run")
}
