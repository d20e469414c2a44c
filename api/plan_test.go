package api_test

import (
	"testing"
	"time"
)

// TestPlanOncePerTickPeriod: an admin's POST /plan observes live at most
// once per tick period (default 5s); a later call within it gets the last
// plan, saying when it was observed and that it was reused.
func TestPlanOncePerTickPeriod(t *testing.T) {
	e := newEnv(t)
	first := e.call("POST", "/api/v1/plan", "admin", nil)
	want(t, first, 200, "first dry run")
	if first.body["reused"] != false || first.body["observed_at"] == nil {
		t.Fatalf("first dry run: %s", first.raw)
	}
	for i := 0; i < 5; i++ {
		r := e.call("POST", "/api/v1/plan", "admin", nil)
		want(t, r, 200, "dry run within the period")
		if r.body["reused"] != true || r.body["observed_at"] != first.body["observed_at"] {
			t.Fatalf("dry run within the period: %s, want the first one's observation (%v) reused", r.raw, first.body["observed_at"])
		}
	}
	if n := e.rt.dryRuns(); n != 1 {
		t.Fatalf("6 calls within one tick period observed %d times, want 1", n)
	}
	e.advance(6 * time.Second)
	r := e.call("POST", "/api/v1/plan", "admin", nil)
	if r.code != 200 || r.body["reused"] != false || r.body["observed_at"] == first.body["observed_at"] {
		t.Fatalf("dry run after the period: %s, want a new observation", r.raw)
	}
	if n := e.rt.dryRuns(); n != 2 {
		t.Fatalf("after the period: %d observations, want 2", n)
	}
}
