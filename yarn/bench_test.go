package yarn_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
// broker demand, with time and allocated bytes per observation.
//
// "live" has the simulator render every answer, so its figures include the
// server's work (same process); "client" serves the simulator's answers
// rendered once, so its figures are the broker's cost alone.
func BenchmarkObserve(b *testing.B) {
	sim := bigSim(b, 5000, 20000)
	_, _, pending := sim.Counts()
	tenants := map[string]broker.Tenant{}
	for i := range 8 {
		n := fmt.Sprintf("t%d", i)
		tenants[n] = broker.Tenant{Name: n, BasePriority: int64(i * 100), YARNQueues: []string{fmt.Sprintf("root.q%d", i)}}
	}
	qm := yarn.NewQueueMap(tenants)

	live := httptest.NewServer(sim.Handler())
	defer live.Close()
	// Pre-render the three answers once.
	bodies := map[string][]byte{}
	var total int
	for _, p := range []string{yarn.PathApps, yarn.PathNodes, yarn.PathScheduler} {
		resp, err := http.Get(live.URL + p)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		u, _ := http.NewRequest(http.MethodGet, p, nil)
		bodies[u.URL.Path] = body
		total += len(body)
	}
	static := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(bodies[r.URL.Path])
	}))
	defer static.Close()

	for _, tc := range []struct{ name, url string }{{"live", live.URL}, {"client", static.URL}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := yarn.NewClient(yarn.Config{RMs: []string{tc.url}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
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
			b.ReportMetric(float64(total)/(1<<20), "answer_MiB")
		})
	}
}
