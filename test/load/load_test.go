package load_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
)

var (
	duration = flag.Duration("load.duration", 2*time.Second, "how long the clients send requests")
	clients  = flag.Int("load.clients", 200, "concurrent clients")
	demandN  = flag.Int("load.demand", 2000, "pending demand rows to seed")
	nodesN   = flag.Int("load.nodes", 200, "nodes to seed")
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// seed writes tenants, nodes, pending demand with wait reasons, and an hour
// of capacity samples.
func seed(t *testing.T, st *store.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	const tenants = 10
	for i := range tenants {
		if _, err := st.CreateTenant(ctx, broker.Tenant{Name: fmt.Sprintf("tenant-%d", i), MaxGPUs: 64, Weight: 1,
			Namespaces: []string{fmt.Sprintf("ns-%d", i)}, YARNQueues: []string{fmt.Sprintf("root.q%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpsertPool(ctx, broker.Pool{Name: "gpu-training-group", GPUModel: "H100", GPUsPerNode: 8, MaxNodes: 1000, Sides: broker.PoolShared}); err != nil {
		t.Fatal(err)
	}
	nodes := make([]broker.Node, *nodesN)
	for i := range nodes {
		owner := []broker.Owner{broker.OwnerYARN, broker.OwnerK8s}[i%2]
		nodes[i] = broker.Node{Name: fmt.Sprintf("ip-10-1-%d-%d", i/250, i%250), Pool: "gpu-training-group", Owner: owner,
			Phase: broker.PhaseActive, GPUModel: "H100", GPUsTotal: 8, GPUsAllocated: i % 9, Utilisation: float64(i%9) / 8, Healthy: true}
	}
	if err := st.UpsertNodes(ctx, nodes, now); err != nil {
		t.Fatal(err)
	}
	var waits []broker.Wait
	for _, src := range broker.Sources {
		var ds []broker.Demand
		for i := range *demandN / 2 {
			d := broker.Demand{Source: src, Key: fmt.Sprintf("%s-%d", src, i), Name: fmt.Sprintf("job-%d", i),
				Tenant: fmt.Sprintf("tenant-%d", i%tenants), Priority: int64(i % 5 * 1000), GPUsPerUnit: 1 + i%4, Units: 1 + i%2}
			ds = append(ds, d)
			waits = append(waits, broker.Wait{Demand: d.ID(), Reason: []broker.WaitReason{broker.WaitInFlight, broker.WaitQuota, broker.WaitPoolMax}[i%3], Detail: "seeded"})
		}
		if _, err := st.ApplyObservation(ctx, store.Observation{Source: src, At: now.Add(-10 * time.Minute), Demand: ds}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetWaitReasons(ctx, waits); err != nil {
		t.Fatal(err)
	}
	var samples []broker.CapacitySample
	for i := range 360 {
		at := now.Add(-time.Duration(i) * 10 * time.Second).Truncate(time.Second)
		samples = append(samples, broker.CapacitySample{At: at, Side: "yarn", GPUsBusy: 400, GPUsIdle: 400, GPUsPending: i},
			broker.CapacitySample{At: at, Side: "k8s", GPUsBusy: 300, GPUsIdle: 500, GPUsInFlight: 16, GPUsPending: i})
	}
	if err := st.RecordSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
}

type result struct {
	route string
	d     time.Duration
	err   string // empty on success
}

// TestReadLoad runs the clients and reports latency percentiles. It fails
// on any error answer, not on latency.
func TestReadLoad(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate), MaxConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	now := time.Now()
	seed(t, st, now)
	viewer, _, err := st.CreateToken(ctx, "load", store.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Store: st, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConns: *clients, MaxIdleConnsPerHost: *clients, MaxConnsPerHost: *clients}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	routes := []string{"/api/v1/capacity", "/api/v1/demand?limit=100", "/api/v1/demand?tenant=tenant-3&min_wait=1m&limit=50"}
	results := make([][]result, *clients)
	stop := time.Now().Add(*duration)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; time.Now().Before(stop); i++ {
				route := routes[i%len(routes)]
				req, _ := http.NewRequest("GET", srv.URL+route, nil)
				req.Header.Set("Authorization", "Bearer "+viewer)
				t0 := time.Now()
				res, err := client.Do(req)
				r := result{route: route}
				if err != nil {
					r.err = err.Error()
				} else {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						r.err = res.Status
					}
				}
				r.d = time.Since(t0)
				results[c] = append(results[c], r)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	byRoute := map[string][]time.Duration{}
	errs := map[string]int{}
	total := 0
	for _, rs := range results {
		for _, r := range rs {
			total++
			if r.err != "" {
				errs[r.route+": "+r.err]++
				continue
			}
			byRoute[r.route] = append(byRoute[r.route], r.d)
		}
	}
	t.Logf("%d clients for %s: %d requests, %.0f req/s, %d errors", *clients, elapsed.Round(time.Millisecond), total,
		float64(total)/elapsed.Seconds(), total-count(byRoute))
	for _, route := range routes {
		ds := byRoute[route]
		slices.Sort(ds)
		if len(ds) == 0 {
			t.Errorf("%s: no successful requests", route)
			continue
		}
		t.Logf("%-55s n=%-6d p50=%-8s p90=%-8s p99=%-8s max=%s", route, len(ds), pct(ds, 50), pct(ds, 90), pct(ds, 99), ds[len(ds)-1].Round(time.Millisecond))
	}
	for e, n := range errs {
		t.Errorf("%d× %s", n, e)
	}
	if total == 0 {
		t.Fatal("no requests were made")
	}
}

func count(m map[string][]time.Duration) int {
	n := 0
	for _, ds := range m {
		n += len(ds)
	}
	return n
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(100 * time.Microsecond)
}
