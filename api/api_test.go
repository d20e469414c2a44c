package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/api/v1/tenants", "", nil)
	want(t, r, 401, "no token")
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || r.errCode() != "unauthorized" {
		t.Fatalf("401 without WWW-Authenticate: Bearer: %v %s", r.header, r.raw)
	}
	want(t, e.call("GET", "/api/v1/tenants", "gpb_not-a-real-token", nil), 401, "unknown token")
	want(t, e.call("GET", "/api/v1/tenants", "", nil, "Authorization: Basic YWRtaW46YWRtaW4="), 401, "basic auth")
	want(t, e.call("GET", "/api/v1/tenants", "viewer", nil), 200, "viewer token")

	// A revoked token stops working (this server caches no tokens).
	ctx := context.Background()
	secret, tok, err := e.st.CreateToken(ctx, "temp", "viewer", "")
	if err != nil {
		t.Fatal(err)
	}
	want(t, e.call("GET", "/api/v1/tenants", secret, nil), 200, "new token")
	if err := e.st.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	want(t, e.call("GET", "/api/v1/tenants", secret, nil), 401, "revoked token")

	// Unauthenticated endpoints.
	want(t, e.call("GET", "/healthz", "", nil), 200, "healthz")
	want(t, e.call("GET", "/api/v1/openapi.json", "", nil), 200, "openapi")
	if !strings.Contains(e.logs.String(), `"token_name":"viewer"`) {
		t.Fatalf("requests are not logged with the token name: %s", e.logs.String())
	}
}

// route is one API call with a body that passes validation for roles
// allowed to make it.
type route struct {
	method, path string
	body         any
	headers      []string
	allowed      []string
}

func TestRolesPerRoute(t *testing.T) {
	e := newEnv(t)
	e.seed()
	readers := []string{"admin", "ml-admin", "viewer"}
	routes := []route{
		{"GET", "/api/v1/tenants", nil, nil, readers},
		{"GET", "/api/v1/tenants/ml", nil, nil, readers},
		{"POST", "/api/v1/tenants", map[string]any{"name": "new-%s", "max_gpus": 1, "weight": 1}, nil, []string{"admin"}},
		{"PUT", "/api/v1/tenants/vision", map[string]any{"max_gpus": 8, "guaranteed_gpus": 1, "weight": 2}, []string{"If-Match: \"1\""}, []string{"admin"}},
		{"DELETE", "/api/v1/tenants/new-admin", nil, nil, []string{"admin"}}, // created by the POST above
		{"GET", "/api/v1/pools", nil, nil, readers},
		{"GET", "/api/v1/pools/gpu-training-group", nil, nil, readers},
		{"PATCH", "/api/v1/pools/gpu-training-group", map[string]any{"max_nodes": 6}, []string{"If-Match: \"1\""}, []string{"admin"}},
		{"GET", "/api/v1/policy", nil, nil, readers},
		{"PATCH", "/api/v1/policy", map[string]any{"expander": "most-pods"}, []string{"If-Match: \"0\""}, []string{"admin"}},
		{"GET", "/api/v1/demand", nil, nil, readers},
		{"GET", "/api/v1/nodes", nil, nil, readers},
		{"GET", "/api/v1/nodes/ip-10-0-0-1", nil, nil, readers},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/cordon", nil, nil, []string{"admin"}},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/drain", nil, nil, []string{"admin"}},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/transfer", map[string]any{"to": "yarn"}, nil, []string{"admin"}},
		{"PUT", "/api/v1/nodes/ip-10-0-0-1/protection", map[string]any{"protected": true}, nil, []string{"admin"}},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/report", map[string]any{"node": "ip-10-0-0-1", "at": "2026-11-30T12:00:00Z"}, nil, []string{"admin", "agent"}},
		{"GET", "/api/v1/decisions", nil, nil, readers},
		{"GET", "/api/v1/demand/k8s%2Fp1/why", nil, nil, readers},
		{"GET", "/api/v1/ops", nil, nil, readers},
		{"POST", "/api/v1/plan", nil, nil, []string{"admin"}},
		{"GET", "/api/v1/capacity", nil, nil, readers},
		{"GET", "/api/v1/capacity/series", nil, nil, readers},
		{"GET", "/api/v1/whoami", nil, nil, readers},
		{"GET", "/api/v1/audit", nil, nil, []string{"admin", "ml-admin"}},
	}
	for _, rt := range routes {
		for _, role := range []string{"agent", "viewer", "ml-admin", "admin"} { // admin last: it may change state
			body := rt.body
			if m, ok := body.(map[string]any); ok && rt.method == "POST" && rt.path == "/api/v1/tenants" {
				m2 := map[string]any{}
				for k, v := range m {
					m2[k] = v
				}
				m2["name"] = fmt.Sprintf("new-%s", role)
				body = m2
			}
			r := e.call(rt.method, rt.path, role, body, rt.headers...)
			allowed := false
			for _, a := range rt.allowed {
				allowed = allowed || a == role
			}
			switch {
			case !allowed && r.code != http.StatusForbidden:
				t.Errorf("%s %s as %s: got %d %s, want 403", rt.method, rt.path, role, r.code, r.raw)
			case !allowed && r.errCode() != "forbidden":
				t.Errorf("%s %s as %s: 403 without a forbidden error body: %s", rt.method, rt.path, role, r.raw)
			case allowed && (r.code < 200 || r.code > 299):
				t.Errorf("%s %s as %s: got %d %s, want success", rt.method, rt.path, role, r.code, r.raw)
			}
		}
		// And nothing at all without a token.
		if r := e.call(rt.method, rt.path, "", rt.body, rt.headers...); r.code != 401 {
			t.Errorf("%s %s without a token: got %d, want 401", rt.method, rt.path, r.code)
		}
	}
	checkRoutesCovered(t, e.handler, routes)
}

// checkRoutesCovered makes sure the role table above names every API route.
func checkRoutesCovered(t *testing.T, h http.Handler, routes []route) {
	t.Helper()
	covered := map[string]bool{}
	for _, rt := range routes {
		covered[rt.method+" "+rt.path] = true
	}
	err := chi.Walk(h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(pattern, "/api/v1/") || pattern == "/api/v1/openapi.json" {
			return nil
		}
		for k := range covered {
			m, p, _ := strings.Cut(k, " ")
			if m == method && matches(pattern, p) {
				return nil
			}
		}
		t.Errorf("route %s %s is not in the role table", method, pattern)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func matches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if !strings.HasPrefix(ps[i], "{") && ps[i] != xs[i] {
			return false
		}
	}
	return true
}

func TestTenants(t *testing.T) {
	e := newEnv(t)
	body := map[string]any{"name": "speech", "base_priority": 100, "guaranteed_gpus": 2, "max_gpus": 8, "weight": 1.5,
		"yarn_queues": []string{"root.speech"}, "namespaces": []string{"speech"}}
	r := e.call("POST", "/api/v1/tenants", "admin", body)
	want(t, r, 201, "create")
	if r.header.Get("ETag") != `"1"` || r.header.Get("Location") != "/api/v1/tenants/speech" || r.body["max_gpus"] != 8.0 {
		t.Fatalf("create: %v %s", r.header, r.raw)
	}
	want(t, e.call("POST", "/api/v1/tenants", "admin", body), 409, "duplicate name")
	r = e.call("GET", "/api/v1/tenants/speech", "viewer", nil)
	want(t, r, 200, "get")
	if r.header.Get("ETag") != `"1"` {
		t.Fatalf("get without ETag: %v", r.header)
	}
	if n := len(e.call("GET", "/api/v1/tenants", "viewer", nil).items()); n != 3 {
		t.Fatalf("list: %d tenants, want 3", n)
	}
	want(t, e.call("GET", "/api/v1/tenants/nope", "viewer", nil), 404, "missing tenant")

	// Validation: each bad value names its field.
	bad := func(patch map[string]any) map[string]any {
		b := map[string]any{}
		for k, v := range body {
			b[k] = v
		}
		b["name"] = "other"
		b["yarn_queues"], b["namespaces"] = []string{}, []string{}
		for k, v := range patch {
			b[k] = v
		}
		return b
	}
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"max_gpus": 1})), "max_gpus", "max below guaranteed")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"weight": 0})), "weight", "zero weight")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"name": "Not_A_Label"})), "name", "bad name")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"namespaces": []string{"BAD NS"}})), "namespaces[0]", "bad namespace")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"max_gpus": "lots"})), "max_gpus", "string for int")
	r = e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"maxGpus": 3}))
	wantInvalid(t, r, "maxGpus", "unknown field")
	if !strings.Contains(r.raw, "max_gpus") {
		t.Fatalf("unknown field error does not list the allowed fields: %s", r.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", `{"name": "x",`), "body", "truncated JSON")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", `{"name":"x","max_gpus":1,"weight":1} {}`), "body", "two objects")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", `[]`), "body", "array body")
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"version": 7})), "version", "version on create")
	want(t, e.call("POST", "/api/v1/tenants", "admin", `{}`, "Content-Type: text/plain"), 415, "not JSON")
	r = e.call("POST", "/api/v1/tenants", "admin", `{"name":"`+strings.Repeat("a", 70<<10)+`"}`)
	want(t, r, 413, "body over the cap")
	// A namespace owned by another tenant is a conflict, not a validation error.
	want(t, e.call("POST", "/api/v1/tenants", "admin", bad(map[string]any{"namespaces": []string{"ml"}})), 409, "namespace taken")

	// Updates need If-Match; a stale one is refused.
	upd := map[string]any{"base_priority": 200, "guaranteed_gpus": 2, "max_gpus": 12, "weight": 1,
		"yarn_queues": []string{"root.speech", "root.asr"}, "namespaces": []string{"speech"}}
	r = e.call("PUT", "/api/v1/tenants/speech", "admin", upd)
	want(t, r, 428, "update without If-Match")
	if r.errField() != "If-Match" {
		t.Fatalf("428 should name If-Match: %s", r.raw)
	}
	wantInvalid(t, e.call("PUT", "/api/v1/tenants/speech", "admin", upd, "If-Match: yesterday"), "If-Match", "bad If-Match")
	r = e.call("PUT", "/api/v1/tenants/speech", "admin", upd, `If-Match: "1"`)
	want(t, r, 200, "update")
	if r.header.Get("ETag") != `"2"` || r.body["max_gpus"] != 12.0 || len(r.body["yarn_queues"].([]any)) != 2 {
		t.Fatalf("update: %v %s", r.header, r.raw)
	}
	r = e.call("PUT", "/api/v1/tenants/speech", "admin", upd, `If-Match: "1"`)
	want(t, r, 412, "stale update")
	if r.errCode() != "precondition_failed" || !strings.Contains(r.raw, "version 2") {
		t.Fatalf("stale update: %s", r.raw)
	}
	upd["name"] = "renamed"
	wantInvalid(t, e.call("PUT", "/api/v1/tenants/speech", "admin", upd, `If-Match: "2"`), "name", "rename")
	delete(upd, "name")
	want(t, e.call("PUT", "/api/v1/tenants/nope", "admin", upd, `If-Match: "1"`), 404, "update missing")

	// Two concurrent edits of the same version: exactly one wins, the other
	// is told, and nothing is silently lost.
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := map[string]any{"guaranteed_gpus": 2, "max_gpus": 20 + i, "weight": 1, "yarn_queues": []string{"root.speech"}, "namespaces": []string{"speech"}}
			codes[i] = e.call("PUT", "/api/v1/tenants/speech", "admin", b, `If-Match: "2"`).code
		}()
	}
	wg.Wait()
	wins := 0
	for _, c := range codes {
		switch c {
		case 200:
			wins++
		case 412:
		default:
			t.Fatalf("concurrent edit: unexpected status %d in %v", c, codes)
		}
	}
	if wins != 1 {
		t.Fatalf("concurrent edits of version 2: %d succeeded (%v), want exactly 1", wins, codes)
	}
	r = e.call("GET", "/api/v1/tenants/speech", "viewer", nil)
	if r.header.Get("ETag") != `"3"` {
		t.Fatalf("after concurrent edits: %v %s", r.header, r.raw)
	}

	// Delete: a stale If-Match is refused; then the tenant is gone.
	want(t, e.call("DELETE", "/api/v1/tenants/speech", "admin", nil, `If-Match: "2"`), 412, "stale delete")
	want(t, e.call("DELETE", "/api/v1/tenants/speech", "admin", nil, `If-Match: "3"`), 204, "delete")
	want(t, e.call("DELETE", "/api/v1/tenants/speech", "admin", nil), 404, "delete twice")
}

func TestPoolsAndPolicy(t *testing.T) {
	e := newEnv(t)
	e.seed()
	pools := e.call("GET", "/api/v1/pools", "viewer", nil).items()
	if len(pools) != 2 || pools[1].(map[string]any)["name"] != "gpu-training-group" {
		t.Fatalf("pools: %v", pools)
	}
	p := "/api/v1/pools/gpu-training-group"
	want(t, e.call("PATCH", p, "admin", map[string]any{"max_nodes": 8}), 428, "pool without If-Match")
	r := e.call("PATCH", p, "admin", map[string]any{"gpus_per_node": 8}, `If-Match: "1"`)
	wantInvalid(t, r, "gpus_per_node", "pool field not editable")
	if !strings.Contains(r.raw, "min_nodes, max_nodes") {
		t.Fatalf("should list the editable fields: %s", r.raw)
	}
	wantInvalid(t, e.call("PATCH", p, "admin", map[string]any{"min_nodes": 3, "max_nodes": 2}, `If-Match: "1"`), "max_nodes", "max below min")
	wantInvalid(t, e.call("PATCH", p, "admin", map[string]any{"min_nodes": -1}, `If-Match: "1"`), "min_nodes", "negative min")
	wantInvalid(t, e.call("PATCH", p, "admin", map[string]any{}, `If-Match: "1"`), "body", "empty patch")
	r = e.call("PATCH", p, "admin", map[string]any{"min_nodes": 1, "max_nodes": 8}, `If-Match: "1"`)
	want(t, r, 200, "pool patch")
	if r.body["min_nodes"] != 1.0 || r.body["max_nodes"] != 8.0 || r.body["gpus_per_node"] != 4.0 || r.header.Get("ETag") != `"2"` {
		t.Fatalf("pool patch: %v %s", r.header, r.raw)
	}
	want(t, e.call("PATCH", p, "admin", map[string]any{"max_nodes": 9}, `If-Match: "1"`), 412, "stale pool patch")
	want(t, e.call("PATCH", "/api/v1/pools/nope", "admin", map[string]any{"max_nodes": 9}, `If-Match: "1"`), 404, "missing pool")

	r = e.call("GET", "/api/v1/policy", "viewer", nil)
	if r.code != 200 || r.header.Get("ETag") != `"0"` || r.body["expander"] != "least-waste" || r.body["scale_down_unneeded"] != "5m0s" {
		t.Fatalf("default policy: %v %s", r.header, r.raw)
	}
	wantInvalid(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"expander": "random"}, `If-Match: "0"`), "expander", "bad expander")
	wantInvalid(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"scale_down_utilisation": 1.5}, `If-Match: "0"`), "scale_down_utilisation", "bad threshold")
	wantInvalid(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"cluster_min_gpus": 60, "cluster_max_gpus": 50}, `If-Match: "0"`), "cluster_max_gpus", "max below min")
	wantInvalid(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"preempt": false}, `If-Match: "0"`), "preempt", "unknown policy field")
	wantInvalid(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"preemption": "no"}, `If-Match: "0"`), "preemption", "string for bool")
	r = e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"expander": "most-pods", "drain_timeout": "soon"}, `If-Match: "0"`)
	wantInvalid(t, r, "drain_timeout", "bad duration")
	if !strings.Contains(r.raw, "soon") {
		t.Fatalf("bad duration does not show the value: %s", r.raw)
	}
	r = e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"scale_down_unneeded": "10m", "scale_down_utilisation": 0.3,
		"expander": "most-pods", "cluster_min_gpus": 0, "cluster_max_gpus": 50, "preemption": false, "ownership_transfer": false}, `If-Match: "0"`)
	want(t, r, 200, "policy patch")
	if r.body["scale_down_unneeded"] != "10m0s" || r.body["expander"] != "most-pods" || r.body["preemption"] != false ||
		r.body["max_provision_time"] != "15m0s" || r.header.Get("ETag") != `"1"` {
		t.Fatalf("policy patch: %v %s", r.header, r.raw)
	}
	want(t, e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"preemption": true}, `If-Match: "0"`), 412, "stale policy")
	r = e.call("PATCH", "/api/v1/policy", "admin", map[string]any{"preemption": true}, `If-Match: "1"`)
	if r.code != 200 || r.body["preemption"] != true || r.body["expander"] != "most-pods" {
		t.Fatalf("second policy patch keeps other fields: %d %s", r.code, r.raw)
	}
}

func TestDemand(t *testing.T) {
	e := newEnv(t)
	e.seed()
	want(t, e.call("DELETE", "/api/v1/tenants/vision", "admin", nil), 409, "delete a tenant that demand names")
	r := e.call("GET", "/api/v1/demand", "viewer", nil)
	want(t, r, 200, "demand")
	it := r.items()
	if len(it) != 3 {
		t.Fatalf("demand: %s", r.raw)
	}
	first := it[0].(map[string]any)
	if first["key"] != "p1" || first["wait_reason"] != "in-flight" || first["wait_detail"] == "" || first["wait_seconds"].(float64) < 590 {
		t.Fatalf("oldest demand with why it waits: %v", first)
	}
	count := func(q string) int {
		t.Helper()
		r := e.call("GET", "/api/v1/demand"+q, "viewer", nil)
		want(t, r, 200, q)
		return len(r.items())
	}
	for q, n := range map[string]int{"?source=yarn": 1, "?tenant=vision": 1, "?min_wait=5m": 2, "?reason=over-quota": 1,
		"?min_priority=1000": 1, "?source=k8s&tenant=ml": 1, "?state=pending&tenant=nobody": 0} {
		if got := count(q); got != n {
			t.Errorf("demand%s: %d rows, want %d", q, got, n)
		}
	}
	// Keyset paging walks every row once.
	var keys []string
	next := ""
	for page := 0; page < 5; page++ {
		q := "?limit=1"
		if next != "" {
			q += "&after=" + next
		}
		r := e.call("GET", "/api/v1/demand"+q, "viewer", nil)
		want(t, r, 200, "page")
		for _, x := range r.items() {
			keys = append(keys, x.(map[string]any)["key"].(string))
		}
		next, _ = r.body["next"].(string)
		if next == "" {
			break
		}
	}
	if strings.Join(keys, ",") != "p1,p2,application_1_0001/1" {
		t.Fatalf("paged keys: %v", keys)
	}
	for q, field := range map[string]string{"?limit=0": "limit", "?limit=1001": "limit", "?limit=x": "limit",
		"?source=mesos": "source", "?state=maybe": "state", "?min_wait=later": "min_wait", "?min_wait=-1m": "min_wait",
		"?min_priority=high": "min_priority", "?after=garbage": "after", "?colour=red": "colour",
		"?tenant=a&tenant=b": "tenant", "?state=closed&reason=bored": "reason", "?state=closed&after=-3": "after"} {
		wantInvalid(t, e.call("GET", "/api/v1/demand"+q, "viewer", nil), field, "demand"+q)
	}
	// Closing demand moves it to the history with its wait time.
	ctx := context.Background()
	if _, err := e.st.ApplyObservation(ctx, obs(broker.SourceK8s, e.now)); err != nil {
		t.Fatal(err)
	}
	r = e.call("GET", "/api/v1/demand?state=closed&min_wait=5m", "viewer", nil)
	want(t, r, 200, "closed")
	if len(r.items()) != 2 || r.items()[0].(map[string]any)["waited_seconds"].(float64) < 599 {
		t.Fatalf("closed demand: %s", r.raw)
	}
	r = e.call("GET", "/api/v1/demand?state=closed&limit=1", "viewer", nil)
	next, _ = r.body["next"].(string)
	r2 := e.call("GET", "/api/v1/demand?state=closed&limit=1&after="+next, "viewer", nil)
	if len(r.items()) != 1 || len(r2.items()) != 1 || r.items()[0].(map[string]any)["key"] == r2.items()[0].(map[string]any)["key"] {
		t.Fatalf("closed paging: %s / %s", r.raw, r2.raw)
	}
}

func TestNodes(t *testing.T) {
	e := newEnv(t)
	e.seed()
	r := e.call("GET", "/api/v1/nodes", "viewer", nil)
	if len(r.items()) != 3 {
		t.Fatalf("nodes: %s", r.raw)
	}
	n1 := r.items()[0].(map[string]any)
	if n1["owner"] != "k8s" || n1["phase"] != "active" || n1["gpus_total"] != 4.0 || n1["free_gpus"] != 1.0 || n1["utilisation"] != 0.7 {
		t.Fatalf("node view: %v", n1)
	}
	if n := len(e.call("GET", "/api/v1/nodes?owner=yarn", "viewer", nil).items()); n != 1 {
		t.Fatalf("owner filter: %d", n)
	}
	if r := e.call("GET", "/api/v1/nodes?phase=booting", "viewer", nil); len(r.items()) != 1 || r.items()[0].(map[string]any)["in_flight"] != true {
		t.Fatalf("phase filter: %s", r.raw)
	}
	wantInvalid(t, e.call("GET", "/api/v1/nodes?owner=mesos", "viewer", nil), "owner", "bad owner")
	wantInvalid(t, e.call("GET", "/api/v1/nodes?phase=asleep", "viewer", nil), "phase", "bad phase")
	want(t, e.call("GET", "/api/v1/nodes/nope", "viewer", nil), 404, "missing node")
	if r := e.call("GET", "/api/v1/nodes/ip-10-0-0-1", "viewer", nil); r.code != 200 || r.body["report"] != nil {
		t.Fatalf("node without report: %s", r.raw)
	}

	// Agent reports.
	rep := map[string]any{"node": "ip-10-0-0-1", "at": "2026-11-30T12:00:00Z", "agent_version": "1.0", "driver_version": "550.54",
		"gpus": []map[string]any{{"index": 0, "uuid": "GPU-a", "product": "H100", "utilisation": 0.9}}}
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/report", "agent", rep), 202, "report")
	r = e.call("GET", "/api/v1/nodes/ip-10-0-0-1", "viewer", nil)
	if got := r.body["report"].(map[string]any)["gpus"].([]any)[0].(map[string]any)["utilisation"]; got != 0.9 {
		t.Fatalf("node with report: %s", r.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/report", "agent", rep), "node", "report for another node")
	rep["gpus"] = []map[string]any{{"index": 0, "utilisation": 1.5}}
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/report", "agent", rep), "gpus[0].utilisation", "bad utilisation")
	delete(rep, "at")
	rep["gpus"] = []map[string]any{}
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/report", "agent", rep), "at", "report without time")
	want(t, e.call("GET", "/api/v1/nodes", "agent", nil), 403, "agent reads nodes")

	// Manual operations go to the runtime.
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/cordon", "admin", nil), 202, "cordon")
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/drain", "admin", `{}`), 202, "drain")
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/drain", "admin", `{"force":true}`), "force", "drain with unknown field")
	r = e.call("POST", "/api/v1/nodes/ip-10-0-0-2/transfer", "admin", map[string]any{"to": "k8s"})
	want(t, r, 202, "transfer")
	if r.body["to"] != "k8s" || r.body["status"] != "accepted" {
		t.Fatalf("transfer: %s", r.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/transfer", "admin", map[string]any{"to": "mesos"}), "to", "bad side")
	wantInvalid(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-2/transfer", "admin", map[string]any{}), "to", "no side")
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/transfer", "admin", map[string]any{"to": "k8s"}), 409, "same side")
	want(t, e.call("POST", "/api/v1/nodes/nope/cordon", "admin", nil), 404, "cordon missing node")
	e.rt.mu.Lock()
	calls := strings.Join(e.rt.calls, "; ")
	e.rt.mu.Unlock()
	if calls != "cordon ip-10-0-0-1; drain ip-10-0-0-2; transfer ip-10-0-0-2 k8s" {
		t.Fatalf("runtime calls: %s", calls)
	}
	e.rt.set(func(f *fakeRuntime) {
		f.err = fmt.Errorf("node ip-10-0-0-1 already has an open op: %w", broker.ErrConflict)
	})
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/drain", "admin", nil), 409, "drain while another op runs")
	e.rt.set(func(f *fakeRuntime) { f.err = fmt.Errorf("k8s observation is 2m old: %w", broker.ErrStale) })
	want(t, e.call("POST", "/api/v1/nodes/ip-10-0-0-1/drain", "admin", nil), 503, "drain on a stale side")

	// Protection.
	wantInvalid(t, e.call("PUT", "/api/v1/nodes/ip-10-0-0-1/protection", "admin", map[string]any{}), "protected", "protection without value")
	r = e.call("PUT", "/api/v1/nodes/ip-10-0-0-1/protection", "admin", map[string]any{"protected": true})
	if r.code != 200 || r.body["protected"] != true {
		t.Fatalf("protect: %s", r.raw)
	}
	want(t, e.call("PUT", "/api/v1/nodes/nope/protection", "admin", map[string]any{"protected": true}), 404, "protect missing")
}

func TestDecisionsAndPlan(t *testing.T) {
	e := newEnv(t)
	e.seed()
	r := e.call("GET", "/api/v1/decisions", "viewer", nil)
	if len(r.items()) != 2 || r.items()[0].(map[string]any)["kind"] != "wait" {
		t.Fatalf("decisions newest first: %s", r.raw)
	}
	if r := e.call("GET", "/api/v1/decisions?kind=scale-up&pool=gpu-training-group", "viewer", nil); len(r.items()) != 1 {
		t.Fatalf("kind filter: %s", r.raw)
	}
	if r := e.call("GET", "/api/v1/decisions?tenant=vision", "viewer", nil); len(r.items()) != 1 {
		t.Fatalf("tenant filter: %s", r.raw)
	}
	r = e.call("GET", "/api/v1/decisions?limit=1", "viewer", nil)
	next, _ := r.body["next"].(string)
	r2 := e.call("GET", "/api/v1/decisions?limit=1&before="+next, "viewer", nil)
	if len(r2.items()) != 1 || r2.items()[0].(map[string]any)["kind"] != "scale-up" {
		t.Fatalf("decision paging: %s", r2.raw)
	}
	wantInvalid(t, e.call("GET", "/api/v1/decisions?kind=explode", "viewer", nil), "kind", "bad kind")
	// Every kind the broker records can be asked for: the runbooks and
	// the alerts send operators to kind=kept and kind=conflict.
	if err := e.st.RecordDecisions(context.Background(), []broker.Decision{{At: e.now, Tick: 9, Kind: broker.DecisionKept,
		Node: "ip-10-0-0-2", Reason: "not repaired: repairs of pool gpu-training-group are paused"}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range broker.DecisionKinds() {
		r := e.call("GET", "/api/v1/decisions?kind="+k, "viewer", nil)
		want(t, r, 200, "decisions of kind "+k)
		if k == broker.DecisionKept && len(r.items()) != 1 {
			t.Fatalf("kind=kept: %s", r.raw)
		}
	}
	wantInvalid(t, e.call("GET", "/api/v1/decisions?since=yesterday", "viewer", nil), "since", "bad since")
	wantInvalid(t, e.call("GET", "/api/v1/decisions?before=0", "viewer", nil), "before", "bad cursor")

	e.rt.set(func(f *fakeRuntime) {
		f.plan = broker.Plan{Actions: []broker.Action{{Kind: broker.ActScaleUp, Pool: "gpu-training-group", Target: 2,
			Serves: []string{"k8s/p1"}, Reason: "k8s/p1 needs 2 H100 GPUs"}}}
	})
	r = e.call("POST", "/api/v1/plan", "admin", nil)
	want(t, r, 200, "dry run")
	if a := r.body["actions"].([]any); len(a) != 1 || a[0].(map[string]any)["target"] != 2.0 {
		t.Fatalf("plan: %s", r.raw)
	}
	if w, ok := r.body["waits"].([]any); !ok || len(w) != 0 {
		t.Fatalf("plan waits should be an empty list: %s", r.raw)
	}
	wantInvalid(t, e.call("POST", "/api/v1/plan", "admin", `{"apply":true}`), "apply", "plan with a body")
	e.rt.set(func(f *fakeRuntime) { f.err = fmt.Errorf("yarn: %w", broker.ErrStale) })
	e.advance(time.Minute) // past the tick period: the next call observes again
	want(t, e.call("POST", "/api/v1/plan", "admin", nil), 503, "plan on stale sources")
}

func TestCapacity(t *testing.T) {
	e := newEnv(t)
	e.seed()
	r := e.call("GET", "/api/v1/capacity", "viewer", nil)
	want(t, r, 200, "capacity")
	sides := map[string]map[string]any{}
	for _, s := range r.body["sides"].([]any) {
		m := s.(map[string]any)
		sides[m["side"].(string)] = m
	}
	if sides["k8s"]["gpus_busy"] != 3.0 || sides["k8s"]["gpus_idle"] != 1.0 || sides["yarn"]["gpus_busy"] != 1.0 ||
		sides["none"]["gpus_in_flight"] != 4.0 || sides["none"]["nodes_in_flight"] != 1.0 {
		t.Fatalf("sides: %v", sides)
	}
	pools := r.body["pools"].([]any)
	gpu := pools[1].(map[string]any)
	if gpu["name"] != "gpu-training-group" || gpu["nodes"] != 3.0 || gpu["gpus_total"] != 12.0 || gpu["nodes_in_flight"] != 1.0 || gpu["gpus_busy"] != 4.0 {
		t.Fatalf("pool capacity: %v", gpu)
	}
	if r.body["pending_gpus"] != 7.0 || len(r.body["demand"].([]any)) != 3 {
		t.Fatalf("demand groups: %s", r.raw)
	}
	d0 := r.body["demand"].([]any)[0].(map[string]any)
	if d0["tenant"] != "ml" || d0["priority"] != 1000000.0 || d0["wait_reason"] != "in-flight" || d0["oldest_wait_seconds"].(float64) < 590 {
		t.Fatalf("first demand group: %v", d0)
	}
	if rt := r.body["runtime"].(map[string]any); rt["leader"] != true {
		t.Fatalf("runtime status: %v", rt)
	}
	wantInvalid(t, e.call("GET", "/api/v1/capacity?x=1", "viewer", nil), "x", "unknown param")

	r = e.call("GET", "/api/v1/capacity/series", "viewer", nil)
	want(t, r, 200, "series")
	pts := r.body["points"].([]any)
	if len(pts) != 10 {
		t.Fatalf("series points: %d: %s", len(pts), r.raw)
	}
	k8s := pts[0].(map[string]any)["sides"].(map[string]any)["k8s"].(map[string]any)
	if k8s["gpus_in_flight"] != 4.0 || k8s["gpus_pending"] != 6.0 {
		t.Fatalf("series point: %v", k8s)
	}
	// Demand by tenant and priority over time, rebuilt from the ledger: p1
	// and p2 are pending from 10 minutes ago, the YARN app from 1 minute ago.
	r = e.call("GET", "/api/v1/capacity/series?window=15m&step=1m", "viewer", nil)
	want(t, r, 200, "series with demand")
	byTenant := map[string]int{}
	var last string
	for _, x := range r.body["demand"].([]any) {
		d := x.(map[string]any)
		last = d["at"].(string)
		byTenant[d["tenant"].(string)] += int(d["gpus"].(float64))
	}
	if r.body["step_seconds"] != 60.0 || byTenant["ml"] < 2*9 || byTenant["vision"] < 4*9 || byTenant["ml"] > 2*11+1*2 || last == "" {
		t.Fatalf("demand series (GPU-steps by tenant %v): %s", byTenant, r.raw)
	}
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?window=1h&step=1s", "viewer", nil), "step", "too many steps")
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?step=soon", "viewer", nil), "step", "bad step")
	if r := e.call("GET", "/api/v1/capacity/series?window=5m30s", "viewer", nil); len(r.body["points"].([]any)) != 5 {
		t.Fatalf("series window: %s", r.raw)
	}
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?window=720h", "viewer", nil), "window", "window too long")
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?from=2026-11-30T12:00:00Z&to=2026-11-30T11:00:00Z", "viewer", nil), "from", "from after to")
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?from=noon", "viewer", nil), "from", "bad from")
	wantInvalid(t, e.call("GET", "/api/v1/capacity/series?from=2026-11-30T12:00:00Z&window=1h", "viewer", nil), "window", "from and window")
}

func TestHealthReadyMetrics(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/readyz", "", nil)
	if r.code != 200 || r.body["role"] != "leader" || r.body["store"] != "ok" {
		t.Fatalf("ready leader: %d %s", r.code, r.raw)
	}
	e.rt.set(func(f *fakeRuntime) {
		f.status = engine.RuntimeStatus{Stale: map[broker.Source]string{broker.SourceYARN: "RM unreachable for 45s"}}
	})
	r = e.call("GET", "/readyz", "", nil)
	if r.code != 503 || r.body["role"] != "follower" || !strings.Contains(r.raw, "RM unreachable") {
		t.Fatalf("ready with a stale source: %d %s", r.code, r.raw)
	}
	want(t, e.call("GET", "/api/v1/tenants", "viewer", nil), 200, "a request to count")
	r = e.call("GET", "/metrics", "", nil)
	if r.code != 200 || !strings.Contains(r.raw, `gpubroker_api_requests_total{code="200",method="GET",route="/api/v1/tenants"} 1`) {
		t.Fatalf("metrics: %d %s", r.code, r.raw)
	}
	want(t, e.call("GET", "/api/v1/nothing-here", "viewer", nil), 404, "unknown API path")
	want(t, e.call("DELETE", "/api/v1/policy", "admin", nil), 405, "wrong method")
}

func TestDashboardAssets(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/", "", nil)
	if r.code != 200 || !strings.Contains(r.raw, "<title>gpubroker") || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("dashboard: %d %v %.200s", r.code, r.header, r.raw)
	}
	for _, asset := range []string{"/app.js", "/style.css"} {
		if r := e.call("GET", asset, "", nil); r.code != 200 || len(r.raw) < 100 {
			t.Fatalf("%s: %d", asset, r.code)
		}
	}
	// The page fetches nothing from outside the broker.
	for _, asset := range []string{"/", "/app.js", "/style.css"} {
		// The SVG namespace is a name, not a fetch.
		body := strings.ReplaceAll(e.call("GET", asset, "", nil).raw, `"http://www.w3.org/2000/svg"`, "")
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Fatalf("%s refers to an outside URL", asset)
		}
	}
}
