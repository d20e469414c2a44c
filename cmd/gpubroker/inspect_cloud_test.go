package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// startCloudSim serves two discovered groups: one healthy at 2 nodes, one
// whose launches fail for lack of capacity.
func startCloudSim(t *testing.T) string {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	sim := awssim.New(awssim.Config{LaunchRetry: time.Hour})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close(context.Background()) })
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "gpu-training-group", Max: 5, Desired: 2, Tags: map[string]string{
		"gpubroker.io/pool": "gpu-training",
		"k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu": "4",
		"k8s.io/cluster-autoscaler/node-template/label/infra-type":         "gpu",
	}}); err != nil {
		t.Fatal(err)
	}
	sim.FailLaunches("h100-group", -1, "")
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "h100-group", Max: 3, Desired: 1, InstanceType: "p5.48xlarge", Tags: map[string]string{
		"gpubroker.io/pool": "h100", "gpubroker.io/gpus-per-node": "8", "gpubroker.io/gpu-model": "H100",
	}}); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestInspectCloudJSON(t *testing.T) {
	url := startCloudSim(t)
	code, out, errOut := runCLI(t, nil, "inspect", "cloud", "--endpoint", url, "--region", "us-east-1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Pools []struct {
			Name          string     `json:"name"`
			Min           int        `json:"min"`
			Max           int        `json:"max"`
			Desired       int        `json:"desired"`
			InService     int        `json:"in_service"`
			GPUsPerNode   int        `json:"gpus_per_node"`
			GPUModel      string     `json:"gpu_model"`
			BackoffUntil  *time.Time `json:"backoff_until"`
			BackoffReason string     `json:"backoff_reason"`
			Instances     []struct {
				ID       string `json:"id"`
				Hostname string `json:"hostname"`
			} `json:"instances"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Pools) != 2 {
		t.Fatalf("got %d pools, want 2:\n%s", len(got.Pools), out)
	}
	a, h := got.Pools[0], got.Pools[1]
	if a.Name != "gpu-training" || a.Min != 0 || a.Max != 5 || a.Desired != 2 || a.InService != 2 || a.GPUsPerNode != 4 || a.BackoffUntil != nil {
		t.Errorf("gpu-training = %+v", a)
	}
	for _, in := range a.Instances {
		if !strings.HasSuffix(in.Hostname, ".ec2.internal") {
			t.Errorf("instance %s has host name %q", in.ID, in.Hostname)
		}
	}
	if h.Name != "h100" || h.Desired != 1 || h.InService != 0 || h.GPUsPerNode != 8 || h.GPUModel != "H100" ||
		h.BackoffUntil == nil || !strings.Contains(h.BackoffReason, "sufficient p5.48xlarge capacity") {
		t.Errorf("h100 = %+v", h)
	}
}

func TestInspectCloudTable(t *testing.T) {
	url := startCloudSim(t)
	code, out, errOut := runCLI(t, nil, "inspect", "cloud", "--endpoint", url, "--region", "us-east-1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "POOL") {
		t.Fatalf("table:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 10 || f[0] != "gpu-training" || f[4] != "2" || f[5] != "2" || f[9] != "-" {
		t.Errorf("gpu-training row: %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "h100") || !strings.Contains(lines[2], "launch failed") {
		t.Errorf("h100 row: %q", lines[2])
	}
}

func TestInspectCloudFromConfig(t *testing.T) {
	url := startCloudSim(t)
	path := writeFile(t, "cloud:\n  provider: aws\n  region: us-east-1\n  endpoint: "+url+"\n"+
		"pools:\n  - name: training\n    group: gpu-training-group\n    gpu_model: A100\n    gpus_per_node: 4\n    min_nodes: 0\n    max_nodes: 3\n    sides: k8s\n")
	code, out, errOut := runCLI(t, nil, "inspect", "cloud", "--config", path, "--discover=false", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"name": "training"`) || !strings.Contains(out, `"max": 3`) || strings.Contains(out, `"h100"`) {
		t.Errorf("configured pool only, max narrowed to 3:\n%s", out)
	}
}

func TestInspectCloudBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "cloud", "--endpoint", "ftp://example", "--region", "us-east-1"},
		{"inspect", "cloud", "extra"},
		{"inspect", "cloud", "--no-such-flag"},
	} {
		if code, _, errOut := runCLI(t, nil, args...); code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
