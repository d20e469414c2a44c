package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// paramRoutes are read routes with a path parameter ("{}" stands for it)
// or query parameters the fuzzer fills.
var paramRoutes = []string{
	"/api/v1/tenants/{}", "/api/v1/pools/{}", "/api/v1/nodes/{}", "/api/v1/demand/{}/why",
	"/api/v1/ops", "/api/v1/decisions", "/api/v1/demand", "/api/v1/nodes", "/api/v1/capacity",
	"/api/v1/capacity/series", "/api/v1/audit", "/api/v1/tenants",
}

// FuzzAPIParams drives the real router (on a seeded PostgreSQL) with
// fuzzed path and query parameters on the read routes, as the admin and
// as ml's tenant-admin. Properties: no 5xx (PostgreSQL refuses NUL and
// invalid UTF-8 in text: those must be 400s); every answer but a 304 is
// JSON; a 400 names the parameter at fault.
func FuzzAPIParams(f *testing.F) {
	for i := range paramRoutes {
		f.Add(uint8(i), "ml", "node", "\x00ip-10-0-0-1", false)
		f.Add(uint8(i), "x\xff", "tenant", "ml\xff", true)
		f.Add(uint8(i), "k8s/p1", "limit", "99999999999999999999", false)
	}
	f.Add(uint8(4), "", "node", "\x00\x00", false) // GET /ops?node=%00… answered 500 (schemathesis, seed 20261201)
	f.Add(uint8(6), "", "after", strings.Repeat("z", 2000), true)
	f.Add(uint8(5), "", "since", "2026-13-45T99:00:00Z", false)
	e := newEnv(f)
	e.seed()
	h := e.handler
	f.Fuzz(func(t *testing.T, route uint8, param, name, value string, tenantAdmin bool) {
		p := paramRoutes[int(route)%len(paramRoutes)]
		target := strings.Replace(p, "{}", url.PathEscape(param), 1)
		if name != "" {
			target += "?" + url.QueryEscape(name) + "=" + url.QueryEscape(value)
		}
		req := httptest.NewRequest("GET", "http://broker"+target, nil)
		tok := e.tokens["admin"]
		if tenantAdmin {
			tok = e.tokens["ml-admin"]
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		what := "GET " + target
		if rec.Code >= 500 {
			t.Fatalf("%s: answered %d %s", what, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusNotModified {
			return
		}
		var out struct {
			Error *struct{ Code, Field, Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %d answer is not JSON: %v: %s", what, rec.Code, err, rec.Body)
		}
		if rec.Code == http.StatusBadRequest && (out.Error == nil || out.Error.Field == "") {
			t.Fatalf("%s: 400 names no parameter: %s", what, rec.Body)
		}
	})
}
