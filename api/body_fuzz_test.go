package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// bodyRoutes are the API calls that take a JSON body; ifMatch is the GET
// whose ETag the call must send back, "" where none is needed.
var bodyRoutes = []struct {
	method, path, ifMatch string
	seeds                 []string
}{
	{"POST", "/api/v1/tenants", "", []string{`{"name":"new","max_gpus":1,"weight":1}`, `{"name":"x","max_gpus":-1}`, `{"name":"","weight":1e400}`, `{"name":"a","yarn_queues":["root.a"],"namespaces":["a"]}`}},
	{"PUT", "/api/v1/tenants/vision", "/api/v1/tenants/vision", []string{`{"max_gpus":8,"guaranteed_gpus":1,"weight":2}`, `{"max_gpus":1,"guaranteed_gpus":2}`, `{"version":99}`}},
	{"PATCH", "/api/v1/pools/gpu-training-group", "/api/v1/pools/gpu-training-group", []string{`{"max_nodes":6}`, `{"min_nodes":9,"max_nodes":1}`, `{"sides":"both"}`}},
	{"PATCH", "/api/v1/policy", "/api/v1/policy", []string{`{"expander":"most-pods"}`, `{"scale_down_unneeded":"5x"}`, `{"cluster_max_gpus":-1}`, `{"scale_down_utilisation":2}`}},
	{"POST", "/api/v1/nodes/ip-10-0-0-1/report", "", []string{`{"node":"ip-10-0-0-1","at":"2026-11-30T12:00:00Z"}`, `{"node":"other","at":"x"}`, `{"node":"ip-10-0-0-1","at":"2026-11-30T12:00:00Z","gpus":[{"index":0,"utilisation":2}]}`}},
	{"POST", "/api/v1/nodes/ip-10-0-0-1/transfer", "", []string{`{"to":"yarn"}`, `{"to":"mars"}`}},
	{"PUT", "/api/v1/nodes/ip-10-0-0-2/protection", "", []string{`{"protected":true}`, `{"protected":"yes"}`}},
	{"POST", "/api/v1/nodes/ip-10-0-0-3/cordon", "", []string{``, `{}`}},
	{"POST", "/api/v1/nodes/ip-10-0-0-3/drain", "", []string{``, `{"force":true}`}},
}

// FuzzAPIBody drives the real router (on a seeded PostgreSQL) with fuzzed
// bodies for every call that takes one, as the admin token. Properties: no
// 5xx; every answer is JSON; a 4xx carries an error object with a code and
// a message, and a 400, 412, 413, 415 or 428 names the field (or header)
// at fault.
func FuzzAPIBody(f *testing.F) {
	for i, r := range bodyRoutes {
		for _, s := range r.seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Add(uint8(0), []byte(`{"name":"a"} {"name":"b"}`))
	f.Add(uint8(3), []byte(`[1,2]`))
	e := newEnv(f)
	e.seed()
	h := e.handler
	do := func(method, path string, body []byte, hdr http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
		req.Header = hdr
		req.Header.Set("Authorization", "Bearer "+e.tokens["admin"])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		hdr := http.Header{"Content-Type": {"application/json"}}
		if r.ifMatch != "" {
			if g := do("GET", r.ifMatch, nil, http.Header{}); g.Code == http.StatusOK {
				hdr.Set("If-Match", g.Header().Get("ETag"))
			}
		}
		rec := do(r.method, r.path, body, hdr)
		what := r.method + " " + r.path + " " + string(body)
		if rec.Code >= 500 {
			t.Fatalf("%s: answered %d %s", what, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusNoContent {
			return
		}
		var out struct {
			Error *struct {
				Code, Field, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %d answer is not JSON: %v: %s", what, rec.Code, err, rec.Body)
		}
		if rec.Code < 400 {
			return
		}
		if out.Error == nil || out.Error.Code == "" || out.Error.Message == "" {
			t.Fatalf("%s: %d without an error code and message: %s", what, rec.Code, rec.Body)
		}
		switch rec.Code {
		case 400, 412, 413, 415, 428:
			if out.Error.Field == "" {
				t.Fatalf("%s: %d names no field: %s", what, rec.Code, rec.Body)
			}
		}
	})
}
