package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// TestListOpsShowsFailedOpsWithReason: GET /api/v1/ops lists the journal
// newest first with state, step, attempts, the last error and times,
// filtered by state, kind, pool and node and paged by id; /metrics counts
// ops by kind and state.
func TestListOpsShowsFailedOpsWithReason(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	up, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleUp, Pool: "gpu", Target: 3, Reason: "2 pods wait"})
	if err != nil {
		t.Fatal(err)
	}
	down, err := e.st.InsertOp(ctx, broker.Op{Kind: broker.ActScaleDown, Pool: "gpu", Node: "n1", Reason: "idle for 5m"})
	if err != nil {
		t.Fatal(err)
	}
	down.State, down.Step, down.Attempts, down.LastError = broker.OpFailed, "terminate", 6, "instance i-1 cannot be resolved"
	if _, err := e.st.AdvanceOp(ctx, down); err != nil {
		t.Fatal(err)
	}

	r := e.call("GET", "/api/v1/ops?state=failed", "viewer", nil)
	want(t, r, 200, "failed ops")
	if len(r.items()) != 1 {
		t.Fatalf("failed ops: %v", r.items())
	}
	o := r.items()[0].(map[string]any)
	if o["state"] != "failed" || o["step"] != "terminate" || o["attempts"] != float64(6) ||
		o["last_error"] != "instance i-1 cannot be resolved" || o["reason"] != "idle for 5m" || o["created_at"] == nil || o["updated_at"] == nil {
		t.Fatalf("failed op: %v", o)
	}
	r = e.call("GET", "/api/v1/ops?state=open&kind=scale-up&pool=gpu", "viewer", nil)
	want(t, r, 200, "open scale-ups")
	if len(r.items()) != 1 || r.items()[0].(map[string]any)["id"] != float64(up.ID) {
		t.Fatalf("open scale-ups: %v", r.items())
	}
	r = e.call("GET", "/api/v1/ops?node=n1", "viewer", nil)
	if len(r.items()) != 1 {
		t.Fatalf("ops on n1: %v", r.items())
	}
	r = e.call("GET", "/api/v1/ops?limit=1", "viewer", nil)
	want(t, r, 200, "first page")
	next, _ := r.body["next"].(string)
	if len(r.items()) != 1 || next == "" {
		t.Fatalf("first page: %v next %q", r.items(), next)
	}
	r = e.call("GET", "/api/v1/ops?limit=1&before="+next, "viewer", nil)
	if len(r.items()) != 1 || r.items()[0].(map[string]any)["id"] != float64(up.ID) {
		t.Fatalf("second page: %v", r.items())
	}
	r = e.call("GET", "/api/v1/ops?state=stuck", "viewer", nil)
	want(t, r, 400, "bad state")
	if r.errField() != "state" {
		t.Fatalf("bad state: field %q", r.errField())
	}
	want(t, e.call("GET", "/api/v1/ops", "", nil), 401, "no token")

	r = e.call("GET", "/metrics", "", nil)
	want(t, r, 200, "metrics")
	for _, line := range []string{`gpubroker_ops{kind="scale-down",state="failed"} 1`, `gpubroker_ops{kind="scale-up",state="pending"} 1`,
		`gpubroker_ops{kind="transfer",state="running"} 0`} {
		if !strings.Contains(r.raw, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
