package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
)

// replica is a second API server on e's database, serving from a read
// model that listens for the database's change notifications, as serve
// wires it. MaxAge is an hour: within the test, only a notification or a
// write makes it compute an answer again.
func replica(t *testing.T, e *env) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	model := api.NewReadModel(api.ReadModelConfig{MaxAge: time.Hour})
	listening := make(chan struct{})
	go e.st.ListenChanged(ctx, 100*time.Millisecond, func(payload string) {
		model.Notified(payload)
		if payload == "" {
			select {
			case <-listening:
			default:
				close(listening)
			}
		}
	})
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the replica did not start listening within 10s")
	}
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), AuthCacheTTL: -1, ReadModel: model})
	if err != nil {
		t.Fatal(err)
	}
	r := &env{t: t, st: e.st, rt: e.rt, logs: &syncBuffer{}, tokens: e.tokens, handler: h}
	r.srv = httptest.NewServer(h)
	t.Cleanup(r.srv.Close)
	return r
}

func gpuNode(name string) broker.Node {
	return broker.Node{Name: name, Pool: "gpu-training-group", Owner: broker.OwnerK8s, Phase: broker.PhaseActive,
		GPUModel: "A100", GPUsTotal: 8, Healthy: true}
}

// TestReadModelFollowsTheLeader: a follower serves /nodes from memory
// (a store write alone does not show), answers 304 to its own ETag, and
// shows the new state once the leader's post-tick notification arrives
// through PostgreSQL; the old ETag then gets the new answer.
func TestReadModelFollowsTheLeader(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	follower := replica(t, e)
	leader := api.NewReadModel(api.ReadModelConfig{})
	if err := e.st.UpsertNodes(ctx, []broker.Node{gpuNode("node-a")}, time.Now()); err != nil {
		t.Fatal(err)
	}

	first := follower.call("GET", "/api/v1/nodes", "viewer", nil)
	want(t, first, 200, "first read")
	etag := first.header.Get("ETag")
	if etag == "" || !strings.Contains(first.raw, "node-a") {
		t.Fatalf("first read: ETag %q, body %s", etag, first.raw)
	}
	if cc := first.header.Get("Cache-Control"); cc != "private, no-cache" {
		t.Fatalf("Cache-Control %q, want private, no-cache (stored, revalidated with the ETag)", cc)
	}
	same := follower.call("GET", "/api/v1/nodes", "viewer", nil, "If-None-Match: "+etag)
	want(t, same, 304, "unchanged answer with its ETag")
	if same.raw != "" || same.header.Get("ETag") != etag {
		t.Fatalf("304: body %q, ETag %q; want no body and %q", same.raw, same.header.Get("ETag"), etag)
	}
	want(t, follower.call("GET", "/api/v1/nodes", "viewer", nil, `If-None-Match: "other"`), 200, "another ETag")

	// The leader's tick writes the store; until it notifies, the follower
	// keeps serving the answer it has.
	if err := e.st.UpsertNodes(ctx, []broker.Node{gpuNode("node-a"), gpuNode("node-b")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	stale := follower.call("GET", "/api/v1/nodes", "viewer", nil, "If-None-Match: "+etag)
	want(t, stale, 304, "before the notification")
	if err := e.st.NotifyChanged(ctx, leader.Changed()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := follower.call("GET", "/api/v1/nodes", "viewer", nil, "If-None-Match: "+etag)
		if r.code == 200 {
			if !strings.Contains(r.raw, "node-b") || r.header.Get("ETag") == etag || r.header.Get("ETag") == "" {
				t.Fatalf("after the notification: ETag %q (was %q), body %s", r.header.Get("ETag"), etag, r.raw)
			}
			break
		}
		want(t, r, 304, "waiting for the notification")
		if time.Now().After(deadline) {
			t.Fatal("the follower still serves the old answer 10s after the leader's notification")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadModelWriteShowsAtOnce: a write through the API starts a new
// generation on the replica that took it, so its next read shows it; and
// error answers are passed on, not kept.
func TestReadModelWriteShowsAtOnce(t *testing.T) {
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	r := replica(t, e)
	if err := e.st.UpsertNodes(ctx, []broker.Node{gpuNode("node-a")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := r.call("GET", "/api/v1/nodes", "viewer", nil)
	want(t, before, 200, "read")
	if strings.Contains(before.raw, `"protected":true`) {
		t.Fatalf("node protected before the write: %s", before.raw)
	}
	want(t, r.call("PUT", "/api/v1/nodes/node-a/protection", "admin", map[string]any{"protected": true}), 200, "protect")
	after := r.call("GET", "/api/v1/nodes", "viewer", nil, "If-None-Match: "+before.header.Get("ETag"))
	want(t, after, 200, "read after the write")
	if !strings.Contains(after.raw, `"protected":true`) {
		t.Fatalf("the write does not show on the replica that took it: %s", after.raw)
	}
	// An agent's report (every node sends one at an interval) does not
	// start a generation: the tick merges reports into the nodes.
	want(t, r.call("POST", "/api/v1/nodes/node-a/report", "agent", map[string]any{"node": "node-a",
		"at": time.Now().UTC().Format(time.RFC3339), "agent_version": "1", "driver_version": "550", "gpus": []any{}}), 202, "report")
	want(t, r.call("GET", "/api/v1/nodes", "viewer", nil, "If-None-Match: "+after.header.Get("ETag")), 304, "read after a report")
	bad := r.call("GET", "/api/v1/nodes?owner=nobody", "viewer", nil)
	want(t, bad, 400, "bad owner")
	if bad.header.Get("ETag") != "" {
		t.Fatalf("an error answer carries an ETag: %v", bad.header)
	}
}

// TestReadModelGzip: a client that accepts gzip gets the same answer
// compressed, under an ETag of its own, and 304 for that ETag.
func TestReadModelGzip(t *testing.T) {
	e := newEnv(t)
	e.seed()
	var nodes []broker.Node
	for i := range 20 {
		nodes = append(nodes, gpuNode(fmt.Sprintf("node-%02d", i)))
	}
	if err := e.st.UpsertNodes(context.Background(), nodes, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := replica(t, e)
	get := func(enc, inm string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", r.srv.URL+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens["viewer"])
		req.Header.Set("Accept-Encoding", enc) // set: the transport leaves the body as sent
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, b
	}
	plain, body := get("identity", "")
	zres, zbody := get("br;q=1, gzip;q=0.5", "")
	if plain.Header.Get("Content-Encoding") != "" || zres.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding: plain %q, gzip %q (%d bytes)", plain.Header.Get("Content-Encoding"), zres.Header.Get("Content-Encoding"), len(body))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zbody))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unzipped, body) || len(body) < 1024 {
		t.Fatalf("gzipped answer differs from the plain one (%d bytes, %d unzipped)", len(body), len(unzipped))
	}
	if zres.Header.Get("ETag") == plain.Header.Get("ETag") {
		t.Fatalf("both representations carry ETag %s", plain.Header.Get("ETag"))
	}
	if res, _ := get("gzip", zres.Header.Get("ETag")); res.StatusCode != 304 {
		t.Fatalf("gzip ETag revalidated: %s, want 304", res.Status)
	}
	if res, _ := get("gzip;q=0", zres.Header.Get("ETag")); res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip;q=0 with the gzip ETag: %s, Content-Encoding %q; want 200 plain", res.Status, res.Header.Get("Content-Encoding"))
	}
}

// TestReadModelKeysAnswersByScope: a tenant-admin's answers are scoped
// (scope.go), so the read model must not hand it the answer it computed
// for an admin of the same query, nor the other way round.
func TestReadModelKeysAnswersByScope(t *testing.T) {
	e := newEnv(t)
	e.seedTwoTenants()
	r := replica(t, e)
	if a := r.call("GET", "/api/v1/capacity", "admin", nil); a.code != 200 || a.body["pending_gpus"] != float64(8) {
		t.Fatalf("admin capacity: %d %s, want pending_gpus 8", a.code, a.raw)
	}
	if c := r.call("GET", "/api/v1/capacity", "ml-admin", nil); c.code != 200 || c.body["pending_gpus"] != float64(4) {
		t.Errorf("ml-admin capacity after an admin's: %d %s, want its own pending_gpus 4", c.code, c.raw)
	}
	if c := r.call("GET", "/api/v1/demand", "ml-admin", nil); c.code != 200 || strings.Contains(c.raw, "okapi") {
		t.Fatalf("ml-admin demand: %d %s, want its own tenant's only", c.code, c.raw)
	}
	if a := r.call("GET", "/api/v1/demand", "admin", nil); a.code != 200 || !strings.Contains(a.raw, "okapi") {
		t.Errorf("admin demand after a tenant-admin's: %d %s, want every tenant's", a.code, a.raw)
	}
}
