package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// startYARNSim serves two nodes and two apps: one waiting for GPUs, one
// running without any pending.
func startYARNSim(t *testing.T) (*yarnsim.Sim, string) {
	t.Helper()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"gpu-1", "gpu-2"} {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sim.Submit(yarnsim.AppSpec{Name: "fits", Queue: "b", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Submit(yarnsim.AppSpec{Name: "waits", Queue: "a", Priority: 7, Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

func TestInspectYARNJSON(t *testing.T) {
	_, url := startYARNSim(t)
	cfg := writeFile(t, `
yarn:
  rm: ["http://127.0.0.1:1"]
tenants:
  - name: research
    base_priority: 500
    yarn_queues: [root.a]
`)
	// --rm overrides the configured (dead) RM; tenants come from --config.
	code, out, errOut := runCLI(t, nil, "inspect", "yarn", "--config", cfg, "--rm", url, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		RM   string `json:"rm"`
		Apps []struct {
			ID                string `json:"id"`
			Name              string `json:"name"`
			Queue             string `json:"queue"`
			Priority          int64  `json:"priority"`
			PendingContainers int    `json:"pending_containers"`
			PendingGPUs       int    `json:"pending_gpus"`
			Tenant            string `json:"tenant"`
			UnifiedPriority   int64  `json:"unified_priority"`
		} `json:"apps"`
		Nodes []struct {
			Host      string `json:"host"`
			State     string `json:"state"`
			GPUsTotal int    `json:"gpus_total"`
			GPUsUsed  int    `json:"gpus_used"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, out)
	}
	if got.RM != url {
		t.Errorf("rm = %q, want %q", got.RM, url)
	}
	// Only the app waiting for GPUs: 4 GPUs free on gpu-2 take two of its
	// three 2-GPU containers.
	if len(got.Apps) != 1 {
		t.Fatalf("apps = %+v, want only the waiting one", got.Apps)
	}
	a := got.Apps[0]
	if a.Name != "waits" || a.Queue != "root.a" || a.Priority != 7 || a.PendingContainers != 1 || a.PendingGPUs != 2 ||
		a.Tenant != "research" || a.UnifiedPriority != 507 || !strings.HasPrefix(a.ID, "application_") {
		t.Errorf("app = %+v", a)
	}
	if len(got.Nodes) != 2 || got.Nodes[0].Host != "gpu-1" || got.Nodes[0].State != "RUNNING" ||
		got.Nodes[0].GPUsTotal != 4 || got.Nodes[0].GPUsUsed+got.Nodes[1].GPUsUsed != 8 {
		t.Errorf("nodes = %+v", got.Nodes)
	}
}

func TestInspectYARNTable(t *testing.T) {
	_, url := startYARNSim(t)
	code, out, errOut := runCLI(t, nil, "inspect", "yarn", "--rm", url, "--all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"APP", "PENDING_GPUS", "root.a", "root.b", "NODE", "GPUS_TOTAL", "gpu-1", "gpu-2", "RUNNING", "2 GPUs pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectYARNBadInput(t *testing.T) {
	sim, url := startYARNSim(t)
	if code, _, errOut := runCLI(t, nil, "inspect", "yarn"); code != 2 || !strings.Contains(errOut, "--rm") {
		t.Errorf("no RM: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "inspect", "yarn", "--rm", "ftp://x"); code != 2 || !strings.Contains(errOut, "rms[0]") {
		t.Errorf("bad RM URL: exit %d, %q", code, errOut)
	}
	sim.SetFault(yarnsim.FaultHTML)
	code, out, errOut := runCLI(t, nil, "inspect", "yarn", "--rm", url, "--json")
	if code != 1 || out != "" || !strings.Contains(errOut, url) || !strings.Contains(errOut, "stale") || !strings.Contains(errOut, "HTML") {
		t.Errorf("login page: exit %d, stdout %q, stderr %q; want exit 1 naming the RM, stale, nothing printed", code, out, errOut)
	}
}
