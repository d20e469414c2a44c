package yarnsim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// rawNode is a node of /ws/v1/cluster/nodes as the RM renders it.
type rawNode struct {
	ID              string   `json:"id"`
	State           string   `json:"state"`
	NodeHostName    string   `json:"nodeHostName"`
	NodeHTTPAddress string   `json:"nodeHTTPAddress"`
	Version         string   `json:"version"`
	Rack            string   `json:"rack"`
	NumContainers   int      `json:"numContainers"`
	NodeLabels      []string `json:"nodeLabels"`
}

func rawNodes(t *testing.T, url string) map[string]rawNode {
	t.Helper()
	resp, err := http.Get(url + "/ws/v1/cluster/nodes")
	must(t, err)
	defer resp.Body.Close()
	var d struct {
		Nodes struct {
			Node []rawNode `json:"node"`
		} `json:"nodes"`
	}
	must(t, json.NewDecoder(resp.Body).Decode(&d))
	out := map[string]rawNode{}
	for _, n := range d.Nodes.Node {
		if _, dup := out[n.NodeHostName]; dup {
			t.Fatalf("host %s listed twice", n.NodeHostName)
		}
		out[n.NodeHostName] = n
	}
	return out
}

// TestFailoverSemantics follows what Hadoop 3.3.6 did in test/hadoop
// (README, "RM restart and failover"): through two failovers of the HA
// pair, an excluded host under a graceful decommission (timeout -1)
// becomes the placeholder host:-1 and its container dies; a node under an
// exclusive label no queue uses keeps its GPU and CPU containers and its
// label, and takes nothing new until the label comes off (the new RM lists
// it once its NodeManager re-registers); an updateNodeResource total
// survives.
func TestFailoverSemantics(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	must(t, err)
	for _, h := range []string{"h0", "h1", "h2"} {
		must(t, sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4, MemoryMB: 16384, VCores: 16}))
	}
	ex := filepath.Join(t.TempDir(), "exclude.xml")
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: ex, Tick: 5 * time.Millisecond})
	must(t, err)
	addr, err := admin.Start("127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ha, err := sim.StartHA()
	must(t, err)
	t.Cleanup(func() { _ = ha.Close(context.Background()) })
	ha.SetAdmin(admin)

	gpuApp, err := admin.RunOn("a", "h0", 1, time.Hour)
	must(t, err)
	cpuApp, err := admin.RunOn("b", "h0", 0, time.Hour)
	must(t, err)
	doomed, err := admin.RunOn("a", "h1", 1, time.Hour)
	must(t, err)
	must(t, sim.AddClusterLabels([]yarnsim.ClusterLabel{{Name: "gpubroker-cordon", Exclusive: true}}))
	must(t, sim.ReplaceNodeLabels(map[string][]string{"h0": {"gpubroker-cordon"}}, true))
	must(t, os.WriteFile(ex, []byte(`<hosts><host><name>h1</name><timeout>-1</timeout></host></hosts>`), 0o644))
	must(t, sim.SetNodeState("h1", "DECOMMISSIONING")) // as refreshNodes -g does
	// updateNodeResource through the admin path keeps the registered total.
	rc, err := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	must(t, err)
	must(t, rc.UpdateNodeResource(context.Background(), rawNodes(t, ha.URLs()[0])["h2"].ID,
		rmadmin.Resource{MemoryMB: 16384, VCores: 16, Others: map[string]int64{"yarn.io/gpu": 2}}, -1))

	for round := 1; round <= 2; round++ {
		must(t, ha.SetActive(-1))
		must(t, ha.SetActive(round%2))
		url := ha.URLs()[round%2]
		nodes := rawNodes(t, url)
		p := nodes["h1"]
		if p.ID != "h1:-1" || p.State != "DECOMMISSIONED" || p.NodeHTTPAddress != "" || p.Version != "unknown" || p.Rack != "" {
			t.Fatalf("failover %d: h1 = %+v, want the placeholder h1:-1", round, p)
		}
		if _, err := sim.Containers(doomed); err == nil {
			t.Fatalf("failover %d: the container on the excluded h1 survived; Hadoop's NodeManager is told SHUTDOWN", round)
		}
		for _, app := range []string{gpuApp, cpuApp} {
			cs, err := sim.Containers(app)
			if err != nil || len(cs) != 1 || cs[0].Host != "h0" {
				t.Fatalf("failover %d: app %s on the cordoned h0: %+v, %v", round, app, cs, err)
			}
		}
		// The new RM lists h0 only once its NodeManager re-registers, at
		// its next heartbeat (500ms here).
		if n, listed := nodes["h0"]; listed {
			t.Fatalf("failover %d: h0 = %+v listed before its NodeManager's next heartbeat", round, n)
		}
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if nodes = rawNodes(t, url); nodes["h0"].State != "" {
				break
			}
		}
		if n := nodes["h0"]; n.State != "RUNNING" || !slices.Equal(n.NodeLabels, []string{"gpubroker-cordon"}) || n.NumContainers != 2 {
			t.Fatalf("failover %d: h0 = %+v, want RUNNING under the cordon with 2 containers", round, n)
		}
		if g := sim.NodeGPUs("h2"); g != 2 {
			t.Fatalf("failover %d: h2 has %d GPUs, want the updateNodeResource total 2", round, g)
		}
		if !sim.Placeholder("h1") {
			t.Fatalf("failover %d: Placeholder(h1) = false", round)
		}
	}
	// A 3-GPU ask fits only h0 (3 GPUs free; h2 has 2): it waits while the
	// cordon holds, and lands once the label is off.
	_, err = sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 3}}})
	must(t, err)
	if _, _, pending := sim.Counts(); pending != 3 {
		t.Fatalf("pending GPUs = %d under the cordon, want 3", pending)
	}
	must(t, sim.ReplaceNodeLabels(map[string][]string{"h0": nil}, true))
	if _, _, pending := sim.Counts(); pending != 0 {
		t.Fatalf("pending GPUs = %d after the cordon came off, want 0", pending)
	}
	// The NodeManager of h1, restarted once h1 leaves the exclude file,
	// registers as a real node again.
	must(t, os.WriteFile(ex, []byte(`<hosts></hosts>`), 0o644))
	must(t, admin.RestartNodeManager(context.Background(), "h1"))
	if n := rawNodes(t, ha.URLs()[0])["h1"]; n.State != "RUNNING" || n.ID == "h1:-1" {
		t.Fatalf("h1 after its NodeManager restarted = %+v", n)
	}
}
