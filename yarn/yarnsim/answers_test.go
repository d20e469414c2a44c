package yarnsim_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	return string(b)
}

// TestAnswersFollowEveryChange checks that the kept renders of the bulk
// answers (apps, nodes, scheduler) are served only while nothing changed:
// each change through the simulator's API shows in the next poll.
func TestAnswersFollowEveryChange(t *testing.T) {
	sim, srv, c := start(t, yarnsim.Config{})
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
	for _, p := range []string{yarn.PathApps, yarn.PathNodes, yarn.PathScheduler} {
		if a, b := getBody(t, srv.URL+p), getBody(t, srv.URL+p); a != b {
			t.Fatalf("%s: two polls of an unchanged cluster differ:\n%s\n%s", p, a, b)
		}
	}
	obs := observe(t, c)
	if len(obs.Apps) != 0 {
		t.Fatalf("apps %+v, want none", obs.Apps)
	}

	id, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}})
	must(t, err)
	obs = observe(t, c)
	a, ok := obs.App(id)
	if !ok || a.RunningContainers != 2 || a.PendingContainers() != 1 {
		t.Fatalf("after submit: app %+v (found %v), want 2 running and 1 pending", a, ok)
	}
	if q, _ := obs.Queue("a"); q.PendingContainers != 1 {
		t.Fatalf("after submit: queue a %+v, want 1 pending container", q)
	}
	if n, _ := obs.Node("n1"); n.GPUsUsed != 4 {
		t.Fatalf("after submit: node %+v, want 4 GPUs used", n)
	}

	must(t, sim.SetNodeState("n1", "UNHEALTHY"))
	if n, _ := observe(t, c).Node("n1"); n.State != "UNHEALTHY" {
		t.Fatalf("after SetNodeState: node state %q, want UNHEALTHY", n.State)
	}

	must(t, sim.Finish(id))
	obs = observe(t, c)
	if _, ok := obs.App(id); ok {
		t.Fatalf("after finish: app %s still listed", id)
	}
	if q, _ := obs.Queue("a"); q.PendingContainers != 0 {
		t.Fatalf("after finish: queue a %+v, want nothing pending", q)
	}
	if n, _ := obs.Node("n1"); n.GPUsUsed != 0 {
		t.Fatalf("after finish: node %+v, want no GPUs used", n)
	}
}
