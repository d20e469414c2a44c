package yarnsim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func start(t *testing.T, cfg yarnsim.Config) (*yarnsim.Sim, *httptest.Server, *yarn.Client) {
	t.Helper()
	sim, err := yarnsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	c, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return sim, srv, c
}

func observe(t *testing.T, c *yarn.Client) *yarn.Observation {
	t.Helper()
	obs, err := c.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAllocationFollowsCapacity(t *testing.T) {
	sim, _, c := start(t, yarnsim.Config{})
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
	big, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}})
	must(t, err)
	obs := observe(t, c)
	a, _ := obs.App(big)
	if a.PendingContainers() != 1 || a.RunningContainers != 2 {
		t.Fatalf("app = %+v, want 2 running and 1 pending on a 4-GPU node", a)
	}

	// A new node takes the pending container.
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
	obs = observe(t, c)
	if a, _ = obs.App(big); a.PendingContainers() != 0 {
		t.Fatalf("after adding n2: %+v", a)
	}
	if n, _ := obs.Node("n2"); n.GPUsUsed != 2 || n.GPUsAvailable != 2 {
		t.Errorf("n2 = %+v", n)
	}

	// Removing n1 loses its two containers: they are pending again, and one
	// fits on n2's free GPUs.
	must(t, sim.RemoveNode("n1"))
	obs = observe(t, c)
	if a, _ = obs.App(big); a.PendingContainers() != 1 || a.RunningContainers != 2 {
		t.Errorf("after removing n1: %+v", a)
	}
	if _, ok := obs.Node("n1"); ok {
		t.Errorf("n1 still listed")
	}

	// A decommissioned node holds nothing and offers nothing.
	must(t, sim.SetNodeState("n2", "DECOMMISSIONED"))
	obs = observe(t, c)
	if n, _ := obs.Node("n2"); n.State != "DECOMMISSIONED" || n.GPUsTotal != 0 || n.GPUsUsed != 0 {
		t.Errorf("decommissioned n2 = %+v", n)
	}
	if a, _ = obs.App(big); a.PendingContainers() != 3 {
		t.Errorf("after decommission: %+v", a)
	}

	// Finishing an app frees its GPUs for the next.
	must(t, sim.SetNodeState("n2", "RUNNING"))
	other, err := sim.Submit(yarnsim.AppSpec{Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	must(t, err)
	obs = observe(t, c)
	if o, _ := obs.App(other); o.PendingContainers() != 1 {
		t.Fatalf("other = %+v, want pending while big holds n2", o)
	}
	must(t, sim.Finish(big))
	obs = observe(t, c)
	if _, ok := obs.App(big); ok {
		t.Errorf("finished app still listed")
	}
	if o, _ := obs.App(other); o.PendingContainers() != 0 || o.RunningContainers != 1 {
		t.Errorf("other = %+v, want running after big finished", o)
	}
}

func TestLabelsAndPriority(t *testing.T) {
	sim, _, c := start(t, yarnsim.Config{})
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "plain", GPUs: 8}))
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "fancy", GPUs: 2, Labels: []string{"a100"}}))
	id, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 2, NodeLabel: "a100"}}})
	must(t, err)
	obs := observe(t, c)
	a, _ := obs.App(id)
	if a.PendingContainers() != 1 || a.Requests[0].NodeLabel != "a100" {
		t.Errorf("labelled app = %+v, want one container on the only a100 node, one pending", a)
	}
	if n, _ := obs.Node("plain"); n.GPUsUsed != 0 {
		t.Errorf("a labelled ask landed on an unlabelled node: %+v", n)
	}
	if n, _ := obs.Node("fancy"); len(n.Labels) != 1 || n.Labels[0] != "a100" {
		t.Errorf("fancy labels = %v", n.Labels)
	}
}

// TestQuirksRender checks the optional renderings and that the client still
// reads them.
func TestQuirksRender(t *testing.T) {
	sim, srv, c := start(t, yarnsim.Config{Flavor: yarnsim.Flavor33, Quirks: yarnsim.Quirks{NullWhenEmpty: true, SingleObject: true}})
	if got := get(t, srv.URL+"/ws/v1/cluster/apps?states=ACCEPTED,RUNNING"); got != `{"apps":null}` {
		t.Errorf("empty apps = %s", got)
	}
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 1}))
	id, err := sim.Submit(yarnsim.AppSpec{Queue: "root.b", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 1}}})
	must(t, err)
	body := get(t, srv.URL+"/ws/v1/cluster/apps?states=ACCEPTED,RUNNING")
	for _, want := range []string{`"app":{`, `"resourceRequests":{`, `"queue":"b"`, `"entry":[{"key":"memory-mb","value":"1024"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("apps answer lacks %s: %s", want, body)
		}
	}
	obs := observe(t, c)
	a, ok := obs.App(id)
	if !ok || a.QueuePath != "root.b" || a.PendingGPUs() != 1 {
		t.Errorf("app = %+v", a)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// keyPaths collects the object key paths of a JSON document, with array
// elements and bare objects of one-element lists treated alike.
func keyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := prefix + "." + k
			out[p] = true
			keyPaths(e, p, out)
		}
	case []any:
		for _, e := range x {
			keyPaths(e, prefix, out)
		}
	}
}

// TestShapesMatchRealHadoop checks every field path the simulator renders
// against answers captured from real Hadoop RMs (yarn/testdata): the
// simulator must not invent fields or nesting.
func TestShapesMatchRealHadoop(t *testing.T) {
	for _, tc := range []struct {
		flavor  yarnsim.Flavor
		version string
	}{{yarnsim.Flavor33, "3.3.6"}, {yarnsim.Flavor35, "3.5.0"}} {
		t.Run(tc.version, func(t *testing.T) {
			sim, srv, _ := start(t, yarnsim.Config{Flavor: tc.flavor})
			must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
			id, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2, Hosts: []string{"n1"}}}})
			must(t, err)
			attempt := "appattempt_" + strings.TrimPrefix(id, "application_") + "_000001"
			for _, name := range []string{"apps", "nodes", "scheduler", "appattempts", "containers"} {
				path := "/ws/v1/cluster/" + name
				switch name {
				case "apps":
					path += "?states=ACCEPTED,RUNNING"
				case "appattempts":
					path = "/ws/v1/cluster/apps/" + id + "/appattempts"
				case "containers":
					path = "/ws/v1/cluster/apps/" + id + "/appattempts/" + attempt + "/containers"
				}
				var simDoc, realDoc any
				must(t, json.Unmarshal([]byte(get(t, srv.URL+path)), &simDoc))
				file := name
				if name == "appattempts" || name == "containers" {
					file += "-0002" // captured from a running app of two GPU containers
				}
				b, err := os.ReadFile(filepath.Join("..", "testdata", "hadoop-"+tc.version, file+".json"))
				must(t, err)
				must(t, json.Unmarshal(b, &realDoc))
				simKeys, realKeys := map[string]bool{}, map[string]bool{}
				keyPaths(simDoc, "", simKeys)
				keyPaths(realDoc, "", realKeys)
				var extra []string
				for k := range simKeys {
					if !realKeys[k] {
						extra = append(extra, k)
					}
				}
				sort.Strings(extra)
				if len(extra) > 0 {
					t.Errorf("%s: fields no real RM %s renders: %v", name, tc.version, extra)
				}
			}
		})
	}
}

func TestStartClose(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	must(t, err)
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 2}))
	url, err := sim.Start("127.0.0.1:0")
	must(t, err)
	c, err := yarn.NewClient(yarn.Config{RMs: []string{url}})
	must(t, err)
	if obs := observe(t, c); len(obs.Nodes) != 1 || obs.RM != url {
		t.Errorf("observation = %+v", obs)
	}
	if _, err := sim.Start("127.0.0.1:0"); err == nil {
		t.Errorf("second Start succeeded")
	}
	must(t, sim.Close(context.Background()))
	if _, err := c.Observe(context.Background()); err == nil {
		t.Errorf("observe after Close succeeded")
	}
}
