package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
)

// TestStaleWriteSaysWhoChangedIt: a 412 on a tenant, a pool or the policy
// carries error.changed_by from Config.LastChange, asked for the object's
// audit target; without an answer it has none.
func TestStaleWriteSaysWhoChangedIt(t *testing.T) {
	e := newEnv(t)
	e.seed()
	var mu sync.Mutex
	var asked []string
	at := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		AuthCacheTTL: -1, LastChange: func(_ context.Context, target string) (api.ChangeInfo, bool) {
			mu.Lock()
			asked = append(asked, target)
			mu.Unlock()
			if target == "pool/gpu-training-group" {
				return api.ChangeInfo{}, false // nobody knows
			}
			return api.ChangeInfo{Actor: "alice", At: at}, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	put := func(method, path, body, ifMatch string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.tokens["admin"])
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("If-Match", ifMatch)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	changedBy := func(body map[string]any) any {
		e, _ := body["error"].(map[string]any)
		return e["changed_by"]
	}
	// vision is at version 1: version 7 is stale.
	code, body := put("PUT", "/api/v1/tenants/vision", `{"max_gpus":8,"weight":1}`, `"7"`)
	cb, _ := changedBy(body).(map[string]any)
	if code != 412 || cb["actor"] != "alice" || cb["at"] != "2026-12-01T11:00:00Z" {
		t.Errorf("stale tenant write: %d %v", code, body)
	}
	code, body = put("PATCH", "/api/v1/policy", `{"expander":"most-pods"}`, `"3"`)
	if code != 412 || changedBy(body) == nil {
		t.Errorf("stale policy write: %d %v", code, body)
	}
	code, body = put("PATCH", "/api/v1/pools/gpu-training-group", `{"max_nodes":6}`, `"9"`)
	if code != 412 || changedBy(body) != nil {
		t.Errorf("stale pool write nobody knows about: %d %v, want no changed_by", code, body)
	}
	// A current write asks nobody.
	if code, body := put("PUT", "/api/v1/tenants/ml", `{"max_gpus":8,"weight":1,"namespaces":["ml"],"yarn_queues":["root.ml"]}`, `"1"`); code != 200 {
		t.Fatalf("current write: %d %v", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, " ") != "tenant/vision policy pool/gpu-training-group" {
		t.Errorf("LastChange asked for %q", asked)
	}
	// The default LastChange reads the audit trail: vision was seeded
	// without the API, so nobody is named yet.
	r := e.call("PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":8,"weight":1}`, `If-Match: "7"`)
	if r.code != 412 || strings.Contains(r.raw, "changed_by") {
		t.Errorf("412 before any audited write: %d %s", r.code, r.raw)
	}
}

func TestStaleWriteNamesTheLastAuditedWriter(t *testing.T) {
	e := newEnv(t)
	e.seed()
	r := e.call("PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":8,"weight":1}`, `If-Match: "1"`)
	if r.code != 200 {
		t.Fatalf("current write: %d %s", r.code, r.raw)
	}
	// A refused write is in the trail too, but it changed nothing.
	if r := e.call("PUT", "/api/v1/tenants/vision", "ml-admin", `{"max_gpus":8,"weight":1}`, `If-Match: "2"`); r.code < 400 {
		t.Fatalf("tenant-admin of another tenant wrote vision: %d %s", r.code, r.raw)
	}
	r = e.call("PUT", "/api/v1/tenants/vision", "admin", `{"max_gpus":9,"weight":1}`, `If-Match: "1"`)
	var body struct {
		Error struct {
			ChangedBy *api.ChangeInfo `json:"changed_by"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.raw), &body); err != nil {
		t.Fatalf("412 body: %v: %s", err, r.raw)
	}
	if r.code != 412 || body.Error.ChangedBy == nil || body.Error.ChangedBy.Actor != "admin" || body.Error.ChangedBy.At.IsZero() {
		t.Errorf("stale write after an audited one: %d %s, want changed_by naming %q", r.code, r.raw, "admin")
	}
}
