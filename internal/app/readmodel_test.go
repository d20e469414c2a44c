package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestLeaderTickRefreshesFollowers: a follower's read model (answers kept
// for an hour) serves /nodes from memory while the store changes, and
// shows the change once the leader's runtime, wired as Run wires it
// (publishReads), ticks and notifies through PostgreSQL.
func TestLeaderTickRefreshesFollowers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pg.NewDatabase(t, store.Migrate)
	open := func() *store.Store {
		st, err := store.Open(ctx, store.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	leaderStore, followerStore := open(), open()
	if _, err := leaderStore.UpsertPool(ctx, broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "A100",
		GPUsPerNode: 8, MaxNodes: 10, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	node := func(name string) broker.Node {
		return broker.Node{Name: name, Pool: "gpu", Owner: broker.OwnerK8s, Phase: broker.PhaseActive, GPUModel: "A100", GPUsTotal: 8, Healthy: true}
	}
	if err := leaderStore.UpsertNodes(ctx, []broker.Node{node("node-a")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	viewer, _, err := leaderStore.CreateToken(ctx, "viewer", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}

	// The follower: its own store, its own read model, listening.
	model := api.NewReadModel(api.ReadModelConfig{MaxAge: time.Hour})
	listening := make(chan struct{})
	go followerStore.ListenChanged(ctx, 100*time.Millisecond, func(payload string) {
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
		t.Fatal("the follower did not start listening within 10s")
	}
	h, err := api.New(api.Config{Store: followerStore, Registry: prometheus.NewRegistry(), ReadModel: model})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(etag string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+viewer)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("ETag"), string(b)
	}
	code, etag, body := get("")
	if code != 200 || !strings.Contains(body, "node-a") {
		t.Fatalf("first read: %d %s", code, body)
	}
	if err := leaderStore.UpsertNodes(ctx, []broker.Node{node("node-a"), node("node-b")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(etag); code != http.StatusNotModified {
		t.Fatalf("before any tick the follower answered %d, want 304 from memory", code)
	}

	// The leader: a runtime as Run makes it, ticking.
	m, err := Open(ctx, Config{Store: leaderStore, Cloud: CloudConfig{NodePool: noPools{}}, Period: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.publishReads(ctx)
	rt, err := m.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	go rt.Run(ctx, nil)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, body := get(etag)
		if code == 200 && strings.Contains(body, "node-b") {
			break
		}
		if code != 200 && code != http.StatusNotModified {
			t.Fatalf("follower answered %d: %s", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower still answers %d without node-b 15s after the leader started ticking", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
