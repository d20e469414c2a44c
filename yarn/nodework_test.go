package yarn_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// workOn returns node host's workloads from BrokerNodes.
func workOn(t *testing.T, obs *yarn.Observation, host string) []broker.Workload {
	t.Helper()
	for _, n := range yarn.BrokerNodes(obs, yarn.NewQueueMap(nil)) {
		if n.Name == host {
			return n.Work
		}
	}
	t.Fatalf("no node %s in %+v", host, obs.Nodes)
	return nil
}

// TestEveryContainerCounts: against yarnsim (an RM that lists the
// containers of app attempts, and NodeManagers), a GPU node running only
// the CPU containers of an app that holds no GPUs, and a GPU node running
// the 0-GPU ApplicationMaster of a GPU app, both carry that work; the AM
// carries its whole application's GPUs. The RM's numContainers, memory and
// vcores of the CPU node are explained by its NodeManager, read once and
// reused while they hold; when its NodeManager does not answer, the node
// carries work of unknown size instead (never idle) and the observation
// of the rest stays good.
func TestEveryContainerCounts(t *testing.T) {
	ctx := context.Background()
	sim, err := yarnsim.New(yarnsim.Config{})
	must(t, err)
	rm := httptest.NewServer(sim.Handler())
	t.Cleanup(rm.Close)
	nm := httptest.NewServer(sim.NodeManagerHandler())
	t.Cleanup(nm.Close)
	u, _ := url.Parse(nm.URL)
	rt := &nmRoute{nm: u}
	c := newClient(t, yarn.Config{RMs: []string{rm.URL}, Transport: rt})

	// The Spark job's executors land on cpu-host, the only node then.
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n2", GPUs: 4}))
	spark, err := sim.Submit(yarnsim.AppSpec{Name: "spark", Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 0, MemoryMB: 2048, VCores: 2}}})
	must(t, err)
	// The trainer's AM (0 GPUs) and its 4-GPU container land on n1 and
	// fill its memory.
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4, MemoryMB: 2048}))
	train, err := sim.Submit(yarnsim.AppSpec{Name: "train", Queue: "a", ManagedAM: true, Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	must(t, err)
	sparkCs, err := sim.Containers(spark)
	must(t, err)
	trainCs, err := sim.Containers(train)
	must(t, err)
	if len(sparkCs) != 2 || sparkCs[0].Host != "n2" || sparkCs[1].Host != "n2" || len(trainCs) != 2 || trainCs[0].Host != "n1" || trainCs[1].Host != "n1" {
		t.Fatalf("placement: spark %+v, train %+v; want spark's on n2 and train's on n1", sparkCs, trainCs)
	}

	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2 := workOn(t, obs, "n2")
	if len(w2) != 2 || w2[0].App != spark || w2[1].App != spark || w2[0].GPUs != 0 || w2[0].Name != "spark" {
		t.Errorf("n2 work = %+v, want spark's two CPU containers and nothing unknown", w2)
	}
	w1 := workOn(t, obs, "n1")
	am := 0
	for _, w := range w1 {
		if w.Name == yarn.KindUnknownWork {
			t.Errorf("n1 has unknown work: %+v", w1)
		}
		if w.AM {
			am++
			if w.GPUs != 0 || w.AppGPUs != 4 || w.App != train {
				t.Errorf("AM %+v: want 0 GPUs of its own, its application's 4", w)
			}
		}
	}
	if len(w1) != 2 || am != 1 {
		t.Errorf("n1 work = %+v, want the AM and the GPU container", w1)
	}
	calls := rt.calls.Load()
	if calls != 1 {
		t.Errorf("%d NodeManager calls, want 1: n2's, whose figures the GPU apps' containers do not explain", calls)
	}

	// Unchanged: the NodeManager's answer is reused.
	if _, err := c.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.calls.Load(); got != calls {
		t.Errorf("a steady poll made %d NodeManager calls, want none", got-calls)
	}

	// An executor ends, which changes n2's figures; its NodeManager is
	// down now.
	rt.down = "n2"
	must(t, sim.Finish(spark))
	spark3, err := sim.Submit(yarnsim.AppSpec{Name: "spark3", Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 0, MemoryMB: 3072, VCores: 3}}})
	must(t, err)
	if cs, _ := sim.Containers(spark3); len(cs) != 1 || cs[0].Host != "n2" {
		t.Fatalf("spark3 runs %+v, want its container on n2", cs)
	}
	obs, err = c.Observe(ctx)
	if err != nil {
		t.Fatalf("a NodeManager that does not answer must not make the observation stale: %v", err)
	}
	unknown := 0
	for _, w := range workOn(t, obs, "n2") {
		if w.Name == yarn.KindUnknownWork {
			unknown++
			if w.Preemptible {
				t.Errorf("unknown work %+v is preemptible", w)
			}
		}
	}
	if unknown != 1 {
		t.Errorf("n2 work = %+v, want one unknown workload: its figures are not explained", workOn(t, obs, "n2"))
	}
}

// TestNumContainersMismatchIsUnknown: the RM counts a container on a GPU
// node that no listing shows (allocated, not launched: the NodeManager
// does not list it yet). The node carries unknown work, not nothing, and
// the NodeManager is read again on the next poll rather than trusted.
func TestNumContainersMismatchIsUnknown(t *testing.T) {
	ctx := context.Background()
	sim, err := yarnsim.New(yarnsim.Config{})
	must(t, err)
	must(t, sim.AddNode(yarnsim.NodeSpec{Host: "n1", GPUs: 4}))
	rmh := sim.Handler()
	// The RM's node list says one more container, 512 MB and one vcore
	// more than anything lists: one allocated between the answers.
	rm := httptest.NewServer(addContainerToNodes(rmh))
	t.Cleanup(rm.Close)
	nm := httptest.NewServer(sim.NodeManagerHandler())
	t.Cleanup(nm.Close)
	u, _ := url.Parse(nm.URL)
	rt := &nmRoute{nm: u}
	c := newClient(t, yarn.Config{RMs: []string{rm.URL}, Transport: rt})
	for poll := range 2 {
		obs, err := c.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := workOn(t, obs, "n1")
		if len(w) != 1 || w[0].Name != yarn.KindUnknownWork || w[0].GPUs != 0 {
			t.Fatalf("poll %d: n1 work = %+v, want one unknown workload", poll, w)
		}
		n := yarn.BrokerNodes(obs, yarn.NewQueueMap(nil))[0]
		// The planner's judgement: a YARN node with any work is kept.
		if n.GPUsAllocated != 0 || len(n.Work) == 0 {
			t.Fatalf("poll %d: node %+v looks idle", poll, n)
		}
		if got := rt.calls.Load(); got != int64(poll+1) {
			t.Errorf("poll %d: %d NodeManager calls in all, want %d: an answer that did not explain the node is not reused", poll, got, poll+1)
		}
	}
}

// addContainerToNodes serves h, with one more container (512 MB, one
// vcore) on every node of the node list than h says.
func addContainerToNodes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws/v1/cluster/nodes" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var doc struct {
			Nodes struct {
				Node []map[string]any `json:"node"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, n := range doc.Nodes.Node {
			n["numContainers"] = n["numContainers"].(float64) + 1
			n["usedMemoryMB"] = n["usedMemoryMB"].(float64) + 512
			n["usedVirtualCores"] = n["usedVirtualCores"].(float64) + 1
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
}
