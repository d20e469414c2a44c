package yarn_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// bigSim builds a simulator with nodes NodeManagers of 8 GPUs and apps
// applications over 8 queues; the first apps fill the cluster and the rest
// stay pending. Every fifth app prefers a host, so it carries host and rack
// requests too.
func bigSim(tb testing.TB, nodes, apps int) *yarnsim.Sim {
	tb.Helper()
	var queues []yarnsim.QueueSpec
	for i := range 8 {
		queues = append(queues, yarnsim.QueueSpec{Path: fmt.Sprintf("root.q%d", i)})
	}
	sim, err := yarnsim.New(yarnsim.Config{Queues: queues})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range nodes {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("gpu-%05d.example", i), GPUs: 8}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range apps {
		r := yarnsim.RequestSpec{Containers: 1 + i%4, GPUs: 1 << (i % 3)}
		if i%5 == 0 {
			r.Hosts = []string{fmt.Sprintf("gpu-%05d.example", i%nodes)}
		}
		spec := yarnsim.AppSpec{Name: fmt.Sprintf("app-%d", i), Queue: fmt.Sprintf("q%d", i%8), Priority: int64(i % 10), Requests: []yarnsim.RequestSpec{r}}
		if _, err := sim.Submit(spec); err != nil {
			tb.Fatal(err)
		}
	}
	return sim
}

// BenchmarkObserve measures one full observation of 20,000 apps and 5,000
// nodes from yarnsim over loopback HTTP: fetched, decoded and mapped to
// broker demand. It reports time and allocated bytes per observation.
func BenchmarkObserve(b *testing.B) {
	sim := bigSim(b, 5000, 20000)
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	c, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	if err != nil {
		b.Fatal(err)
	}
	tenants := map[string]broker.Tenant{}
	for i := range 8 {
		n := fmt.Sprintf("t%d", i)
		tenants[n] = broker.Tenant{Name: n, BasePriority: int64(i * 100), YARNQueues: []string{fmt.Sprintf("root.q%d", i)}}
	}
	qm := yarn.NewQueueMap(tenants)
	_, _, pending := sim.Counts()
	b.ReportAllocs()
	b.ResetTimer()
	var demands int
	for b.Loop() {
		obs, err := c.Observe(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if len(obs.Apps) != 20000 || len(obs.Nodes) != 5000 || obs.PendingGPUs() != pending {
			b.Fatalf("observed %d apps, %d nodes, %d pending GPUs; want 20000, 5000, %d", len(obs.Apps), len(obs.Nodes), obs.PendingGPUs(), pending)
		}
		ds, un := yarn.MapDemand(obs, qm, yarn.MapOptions{})
		if len(un) != 0 {
			b.Fatalf("%d unmapped", len(un))
		}
		demands = len(ds)
	}
	b.ReportMetric(float64(demands), "demands")
	b.ReportMetric(float64(pending), "pending_gpus")
}
