package api_test

import (
	"context"
	"log/slog"
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
	bad := r.call("GET", "/api/v1/nodes?owner=nobody", "viewer", nil)
	want(t, bad, 400, "bad owner")
	if bad.header.Get("ETag") != "" {
		t.Fatalf("an error answer carries an ETag: %v", bad.header)
	}
}
