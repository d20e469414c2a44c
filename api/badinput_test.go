package api_test

import (
	"strings"
	"testing"
)

// TestBadInputNamesField checks the rules the conformance run found
// missing: each bad input is a 400 naming the field, never a 500 or an
// accepted zero value.
func TestBadInputNamesField(t *testing.T) {
	e := newEnv(t)
	e.seed()
	// An empty query value is not "absent": it is rejected by name.
	wantInvalid(t, e.call("GET", "/api/v1/decisions?since=", "viewer", nil), "since", "empty since")
	wantInvalid(t, e.call("GET", "/api/v1/nodes?phase=", "viewer", nil), "phase", "empty phase")
	wantInvalid(t, e.call("GET", "/api/v1/nodes?pool="+strings.Repeat("p", 254), "viewer", nil), "pool", "long pool")
	// Cursors beyond int4 reach the bigint id columns (was a 500).
	want(t, e.call("GET", "/api/v1/ops?before=9223372036854775806", "viewer", nil), 200, "ops cursor near max int64")
	want(t, e.call("GET", "/api/v1/decisions?before=9223372036854775806", "viewer", nil), 200, "decisions cursor near max int64")
	want(t, e.call("GET", "/api/v1/demand?state=closed&after=9223372036854775806", "viewer", nil), 200, "closed demand cursor")
	// null in a list or for a boolean would decode as "" or false.
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin",
		`{"name":"n1","max_gpus":1,"weight":1,"admins":[null]}`), "admins[0]", "null in a list")
	wantInvalid(t, e.call("POST", "/api/v1/nodes/n1/report", "agent",
		`{"at":"2026-11-30T12:00:00Z","gpus":[{"index":0,"mig_enabled":null}]}`), "gpus[0].mig_enabled", "null boolean")
	// PostgreSQL cannot store NUL (was a 500).
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin",
		`{"name":"n1","max_gpus":1,"weight":1,"yarn_queues":["root.\u0000x"]}`), "yarn_queues[0]", "NUL in a string")
	// Bounds the document states.
	wantInvalid(t, e.call("POST", "/api/v1/tenants", "admin",
		`{"name":"n1","max_gpus":3000000000,"weight":1}`), "max_gpus", "max_gpus beyond the bound")
	// A report may leave node out: the path names it.
	want(t, e.call("POST", "/api/v1/nodes/n1/report", "agent", `{"at":"2026-11-30T12:00:00Z"}`), 202, "report without node")
	r := e.call("GET", "/api/v1/pools/gpu-training-group", "viewer", nil)
	want(t, r, 200, "get pool")
	wantInvalid(t, e.call("PATCH", "/api/v1/pools/gpu-training-group", "admin", `{"max_nodes":-1}`,
		"If-Match: "+r.header.Get("ETag")), "max_nodes", "negative max_nodes")
}
