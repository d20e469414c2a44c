package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"
)

// TestOpenAPIResponsesMatch calls every route on a seeded store and
// validates each answer (status, headers, body) against the document's
// response schema with kin-openapi's openapi3filter, errors included.
func TestOpenAPIResponsesMatch(t *testing.T) {
	doc := loadOpenAPI(t)
	e := newEnv(t)
	e.seed()
	calls := []struct {
		method, path, role, body string
		headers                  []string
	}{
		{"GET", "/healthz", "", "", nil},
		{"GET", "/readyz", "", "", nil},
		{"GET", "/api/v1/openapi.json", "", "", nil},
		{"GET", "/api/v1/whoami", "viewer", "", nil},
		{"GET", "/api/v1/tenants", "viewer", "", nil},
		{"GET", "/api/v1/tenants?limit=0", "viewer", "", nil},
		{"POST", "/api/v1/tenants", "admin", `{"name":"new","max_gpus":4,"weight":1,"yarn_queues":["root.new"]}`, nil},
		{"POST", "/api/v1/tenants", "admin", `{"name":"new","max_gpus":4,"weight":1}`, nil}, // 409
		{"POST", "/api/v1/tenants", "admin", `{"name":"Bad","max_gpus":4,"weight":1}`, nil},
		{"GET", "/api/v1/tenants/ml", "viewer", "", nil},
		{"GET", "/api/v1/tenants/nobody", "viewer", "", nil},
		{"PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":8,"weight":2}`, []string{`If-Match: "1"`}},
		{"PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":8,"weight":2}`, []string{`If-Match: "1"`}}, // 412
		{"PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":8,"weight":2}`, nil},                       // 428
		{"DELETE", "/api/v1/tenants/new", "admin", "", nil},
		{"GET", "/api/v1/pools", "viewer", "", nil},
		{"GET", "/api/v1/pools/gpu-training-group", "viewer", "", nil},
		{"PATCH", "/api/v1/pools/gpu-training-group", "admin", `{"max_nodes":6}`, []string{`If-Match: "1"`}},
		{"GET", "/api/v1/policy", "viewer", "", nil},
		{"PATCH", "/api/v1/policy", "admin", `{"expander":"most-pods"}`, []string{`If-Match: "0"`}},
		{"GET", "/api/v1/demand", "viewer", "", nil},
		{"GET", "/api/v1/demand?state=closed", "viewer", "", nil},
		{"GET", "/api/v1/demand/k8s%2Fp1/why", "viewer", "", nil},
		{"GET", "/api/v1/demand/k8s%2Fnobody/why", "viewer", "", nil}, // 404
		{"GET", "/api/v1/demand/mesos%2Fx/why", "viewer", "", nil},    // 400
		{"GET", "/api/v1/nodes", "viewer", "", nil},
		{"GET", "/api/v1/nodes?owner=mesos", "viewer", "", nil},
		{"GET", "/api/v1/nodes?limit=1&healthy=true", "viewer", "", nil}, // a page with next
		{"GET", "/api/v1/nodes?limit=0", "viewer", "", nil},
		{"GET", "/api/v1/nodes?after=bm9kZS0x", "viewer", "", nil},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/report", "agent", `{"at":"2026-11-30T12:00:00Z","gpus":[{"index":0,"utilisation":0.5}]}`, nil},
		{"GET", "/api/v1/nodes/ip-10-0-0-1", "viewer", "", nil},
		{"GET", "/api/v1/nodes/ip-10-0-0-2", "viewer", "", nil},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/cordon", "admin", "", nil},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/drain", "admin", "", nil},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/transfer", "admin", `{"to":"yarn"}`, nil},
		{"PUT", "/api/v1/nodes/ip-10-0-0-1/protection", "admin", `{"protected":true}`, nil},
		{"GET", "/api/v1/decisions", "viewer", "", nil},
		{"GET", "/api/v1/ops", "viewer", "", nil},
		{"POST", "/api/v1/plan", "viewer", "", nil},
		{"GET", "/api/v1/capacity", "viewer", "", nil},
		{"GET", "/api/v1/capacity/series", "viewer", "", nil},
		{"GET", "/api/v1/audit", "admin", "", nil},
		{"GET", "/api/v1/audit?target=tenant/vision&limit=1", "ml-admin", "", nil},
		{"GET", "/api/v1/audit?since=2026-11-30T12:00:00Z&until=2026-11-30T11:00:00Z", "admin", "", nil}, // 400
		{"GET", "/api/v1/tenants", "", "", nil},                                                          // 401
		{"POST", "/api/v1/tenants", "viewer", `{}`, nil},                                                 // 403
	}
	mux := e.handler.(*chi.Mux)
	covered := map[string]bool{}
	for _, c := range calls {
		r := e.call(c.method, c.path, c.role, nullIfEmpty(c.body), c.headers...)
		path, _, _ := strings.Cut(c.path, "?")
		pattern := mux.Find(chi.NewRouteContext(), c.method, path)
		item := doc.Paths.Find(pattern)
		if item == nil || item.GetOperation(c.method) == nil {
			t.Errorf("%s %s: route %q is not in the document", c.method, c.path, pattern)
			continue
		}
		covered[c.method+" "+pattern] = true
		req, _ := http.NewRequest(c.method, "http://broker"+c.path, nil)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req,
				Route:   &routers.Route{Spec: doc, Path: pattern, PathItem: item, Method: c.method, Operation: item.GetOperation(c.method)},
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
			Status: r.code, Header: r.header, Body: io.NopCloser(bytes.NewReader([]byte(r.raw))),
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			t.Errorf("%s %s answered %d, which the document does not allow: %v\n%.600s", c.method, c.path, r.code, err, r.raw)
		}
	}
	// The validator does look at bodies: a tenant with an unknown field
	// and no max_gpus is refused.
	req, _ := http.NewRequest("GET", "http://broker/api/v1/tenants/ml", nil)
	item := doc.Paths.Find("/api/v1/tenants/{name}")
	bad := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req,
			Route: &routers.Route{Spec: doc, Path: "/api/v1/tenants/{name}", PathItem: item, Method: "GET", Operation: item.Get}},
		Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"name":"ml","weight":1,"bogus":true}`)),
	}
	if err := openapi3filter.ValidateResponse(context.Background(), bad); err == nil {
		t.Error("a tenant answer with an unknown field and no max_gpus passed validation")
	}
	_ = chi.Walk(mux, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if pattern != "/*" && pattern != "/metrics" && !covered[method+" "+pattern] {
			t.Errorf("%s %s: no answer of it is validated", method, pattern)
		}
		return nil
	})
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
