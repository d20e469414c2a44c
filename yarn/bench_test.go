package yarn_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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
// broker demand and nodes with their running work, with time, allocated
// bytes and the per-app REST calls (app attempts and containers of the
// apps holding GPUs) per observation.
//
// "live" has the simulator render every answer, so its figures include the
// server's work (same process); "client" serves the simulator's answers
// rendered once, so its figures are the broker's cost alone. "cold" is a
// broker's first poll (every GPU app's containers listed), "warm" a later
// poll of an unchanged cluster (container lists reused).
func BenchmarkObserve(b *testing.B) {
	sim := bigSim(b, 5000, 20000)
	_, _, pending := sim.Counts()
	tenants := map[string]broker.Tenant{}
	for i := range 8 {
		n := fmt.Sprintf("t%d", i)
		tenants[n] = broker.Tenant{Name: n, BasePriority: int64(i * 100), YARNQueues: []string{fmt.Sprintf("root.q%d", i)}}
	}
	qm := yarn.NewQueueMap(tenants)

	var perApp atomic.Int64
	count := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/appattempts") {
				perApp.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}
	live := httptest.NewServer(count(sim.Handler()))
	defer live.Close()
	// Pre-render the three answers once; per-app answers are rendered by
	// the simulator once, on first request (through a server that does not
	// count the calls).
	render := httptest.NewServer(sim.Handler())
	defer render.Close()
	fetch := func(p string) []byte {
		resp, err := http.Get(render.URL + p)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		return body
	}
	bodies := map[string][]byte{}
	var total int
	for _, p := range []string{yarn.PathApps, yarn.PathNodes, yarn.PathScheduler} {
		body := fetch(p)
		u, _ := http.NewRequest(http.MethodGet, p, nil)
		bodies[u.URL.Path] = body
		total += len(body)
	}
	var mu sync.Mutex
	static := httptest.NewServer(count(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, ok := bodies[r.URL.Path]
		if !ok {
			body = fetch(r.URL.Path)
			bodies[r.URL.Path] = body
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})))
	defer static.Close()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64

	for _, tc := range []struct{ name, url string }{{"live", live.URL}, {"client", static.URL}} {
		for _, mode := range []string{"cold", "warm"} {
			b.Run(tc.name+"/"+mode, func(b *testing.B) {
				newClient := func() *yarn.Client {
					c, err := yarn.NewClient(yarn.Config{RMs: []string{tc.url}, Transport: transport})
					if err != nil {
						b.Fatal(err)
					}
					return c
				}
				c := newClient()
				if mode == "warm" {
					if _, err := c.Observe(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				var demands, works, gpuApps int
				perApp.Store(0)
				polls := 0
				for b.Loop() {
					if mode == "cold" {
						c = newClient()
					}
					obs, err := c.Observe(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					polls++
					if len(obs.Apps) != 20000 || len(obs.Nodes) != 5000 || obs.PendingGPUs() != pending {
						b.Fatalf("observed %d apps, %d nodes, %d pending GPUs; want 20000, 5000, %d", len(obs.Apps), len(obs.Nodes), obs.PendingGPUs(), pending)
					}
					ds, un := yarn.MapDemand(obs, qm, yarn.MapOptions{})
					if len(un) != 0 {
						b.Fatalf("%d unmapped", len(un))
					}
					demands = len(ds)
					works, gpuApps = 0, 0
					for _, n := range yarn.BrokerNodes(obs, qm) {
						works += len(n.Work)
						for _, w := range n.Work {
							if w.Name == yarn.KindUnknownWork {
								b.Fatalf("node %s has unknown work", n.Name)
							}
						}
					}
					for _, a := range obs.Apps {
						if a.HoldsGPUs() {
							gpuApps++
						}
					}
				}
				b.ReportMetric(float64(demands), "demands")
				b.ReportMetric(float64(pending), "pending_gpus")
				b.ReportMetric(float64(works), "containers")
				b.ReportMetric(float64(gpuApps), "gpu_apps")
				b.ReportMetric(float64(perApp.Load())/float64(polls), "extra_calls/op")
				b.ReportMetric(float64(total)/(1<<20), "answer_MiB")
			})
		}
	}
}
