package yarn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// nmRoute sends requests for NodeManager addresses (host:8042) to the
// simulator's NodeManager handler, keeping the Host the node is named by,
// and counts them.
type nmRoute struct {
	nm    *url.URL
	calls atomic.Int64
	down  string // a host whose NodeManager does not answer
}

func (rt *nmRoute) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Host, ":8042") {
		rt.calls.Add(1)
		if rt.down != "" && strings.HasPrefix(r.URL.Host, rt.down+":") {
			return nil, errors.New("connection refused")
		}
		r = r.Clone(r.Context())
		r.Host = r.URL.Host
		r.URL.Host = rt.nm.Host
	}
	return http.DefaultTransport.RoundTrip(r)
}

func nmSim(t *testing.T, q yarnsim.Quirks) (*yarnsim.Sim, *yarn.Client, *nmRoute) {
	t.Helper()
	q.NoAttemptContainers = true
	sim, err := yarnsim.New(yarnsim.Config{Quirks: q})
	if err != nil {
		t.Fatal(err)
	}
	rm := httptest.NewServer(sim.Handler())
	t.Cleanup(rm.Close)
	nm := httptest.NewServer(sim.NodeManagerHandler())
	t.Cleanup(nm.Close)
	u, _ := url.Parse(nm.URL)
	rt := &nmRoute{nm: u}
	return sim, newClient(t, yarn.Config{RMs: []string{rm.URL}, Transport: rt}), rt
}

// TestNodeManagerFallback: an RM without the app-attempt containers
// endpoint leaves the containers to the NodeManagers: each container's
// GPUs come from the GPU resource plugin's device assignment, the AM from
// the RM's attempts; the answers are reused while the nodes' use stays the
// same; a NodeManager that does not answer makes the observation stale.
func TestNodeManagerFallback(t *testing.T) {
	ctx := context.Background()
	sim, c, rt := nmSim(t, yarnsim.Quirks{})
	for _, h := range []string{"n1", "n2"} {
		must(t, sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}))
	}
	id, err := sim.Submit(yarnsim.AppSpec{Queue: "a", ManagedAM: true, Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}})
	must(t, err)
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := obs.App(id)
	byHost := map[string]int{}
	for _, ct := range a.Containers {
		byHost[ct.Host] += ct.GPUs
		if ct.AM != (ct.ID == a.AMContainer) || !ct.Started.IsZero() {
			t.Errorf("container %+v (AM %s): want the AM marked and no start time", ct, a.AMContainer)
		}
	}
	if len(a.Containers) != 4 || a.AMContainer == "" || byHost["n1"] != 4 || byHost["n2"] != 2 {
		t.Errorf("app containers %+v (AM %q), GPUs by host %v; want 4 with the AM, n1 4 GPUs, n2 2", a.Containers, a.AMContainer, byHost)
	}
	if n := rt.calls.Swap(0); n != 4 {
		t.Errorf("%d NodeManager calls, want 4 (containers and GPUs of 2 nodes)", n)
	}
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(nil)) {
		for _, w := range n.Work {
			if w.Name == yarn.KindUnknownWork {
				t.Errorf("node %s has unknown work %+v", n.Name, w)
			}
		}
	}
	if _, err := c.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rt.calls.Swap(0); n != 0 {
		t.Errorf("steady cluster: %d NodeManager calls, want 0", n)
	}

	// n2 runs a second app: n2's answers are read again, and a
	// NodeManager that does not answer fails the observation.
	_, err = sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 1}}})
	must(t, err)
	rt.down = "n2"
	if _, err := c.Observe(ctx); !errors.Is(err, broker.ErrStale) || !strings.Contains(err.Error(), "nodemanager n2") {
		t.Errorf("observe with n2's NodeManager down = %v, want a stale error naming it", err)
	}
}

// TestNodeManagerFallbackWithoutGPUPlugin: without the GPU resource
// plugin, a node's only GPU container holds what the node uses; GPUs shared
// by several containers stay unknown work, never free.
func TestNodeManagerFallbackWithoutGPUPlugin(t *testing.T) {
	sim, c, _ := nmSim(t, yarnsim.Quirks{NoGPUPlugin: true})
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
	_, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 3}}}) // n1
	must(t, err)
	_, err = sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 2}}}) // n2, twice
	must(t, err)
	obs, err := c.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(nil)) {
		var known, unknown int
		for _, w := range n.Work {
			if w.Name == yarn.KindUnknownWork {
				unknown += w.GPUs
			} else {
				known += w.GPUs
			}
		}
		want := map[string][2]int{"n1": {3, 0}, "n2": {0, 4}}[n.Name]
		if known != want[0] || unknown != want[1] || n.GPUsAllocated != known+unknown {
			t.Errorf("node %s: %d GPUs of known work, %d unknown, %d allocated; want %v", n.Name, known, unknown, n.GPUsAllocated, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
