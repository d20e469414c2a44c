package api_test

import "testing"

// TestMethodNotAllowedAllow checks that a 405 carries Allow with exactly the
// methods the path serves (RFC 9110 15.5.6) and the JSON error body.
func TestMethodNotAllowedAllow(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/api/v1/policy", "GET, PATCH"},
		{"TRACE", "/api/v1/tenants/ml", "GET, PUT, DELETE"},
		{"PUT", "/api/v1/tenants", "GET, POST"},
		{"GET", "/api/v1/nodes/n1/report", "POST"},
		{"POST", "/healthz", "GET"},
		{"DELETE", "/api/v1/capacity/series", "GET"},
	} {
		r := e.call(c.method, c.path, "admin", nil)
		if r.code != 405 || r.header.Get("Allow") != c.allow || r.errCode() != "method_not_allowed" {
			t.Errorf("%s %s: got %d Allow %q %s, want 405 Allow %q and a method_not_allowed error",
				c.method, c.path, r.code, r.header.Get("Allow"), r.raw, c.allow)
		}
	}
}
