package browser_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// TestDashboardFollowsNodePages: with more nodes than one page of /nodes
// holds (1,000), the dashboard's node map follows next and shows every
// node once, in name order, served from the read model as serve does.
func TestDashboardFollowsNodePages(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	now := time.Now()
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "gpu-training-group", Provider: "aws", GPUModel: "H100", GPUsPerNode: 8,
		MaxNodes: 2000, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	const n = 1234
	nodes := make([]broker.Node, n)
	for i := range nodes {
		nodes[i] = broker.Node{Name: fmt.Sprintf("ip-10-2-%d-%d", i/250, i%250), Pool: "gpu-training-group",
			Owner: []broker.Owner{broker.OwnerYARN, broker.OwnerK8s}[i%2], Phase: broker.PhaseActive, GPUModel: "H100",
			GPUsTotal: 8, GPUsAllocated: i % 9, Utilisation: 0.5, Healthy: true}
	}
	if err := st.UpsertNodes(ctx, nodes, now); err != nil {
		t.Fatal(err)
	}
	viewer, _, err := st.CreateToken(ctx, "dashboard-nodes-test", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Runtime:   &fakeRuntime{status: engine.RuntimeStatus{Leader: true, LastTick: now}},
		ReadModel: api.NewReadModel(api.ReadModelConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	d := startDriver(t)
	d.open(srv.URL + "/#token=" + viewer)
	p := waitPage(t, d, 60*time.Second, "the node map with every node", func(p page) bool { return p.Loaded >= 1 && len(p.Tiles) >= n })
	seen := map[string]bool{}
	for i, name := range p.Tiles {
		if seen[name] {
			t.Fatalf("node %s shown twice", name)
		}
		seen[name] = true
		if i > 0 && name < p.Tiles[i-1] {
			t.Fatalf("tiles out of name order: %s after %s", name, p.Tiles[i-1])
		}
	}
	for _, nd := range nodes {
		if !seen[nd.Name] {
			t.Fatalf("node %s (of %d) missing from the node map of %d tiles", nd.Name, n, len(p.Tiles))
		}
	}
	var count string
	if err := d.eval(`return document.querySelector("#node-count").textContent;`, &count); err != nil {
		t.Fatal(err)
	}
	if count != fmt.Sprintf("%d nodes", n) {
		t.Errorf("node count %q, want %q", count, fmt.Sprintf("%d nodes", n))
	}
}
