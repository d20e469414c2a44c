package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/replay"
)

const replayHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func replayFiles(t *testing.T, rows string) (trace, nodes string) {
	t.Helper()
	dir := t.TempDir()
	trace = filepath.Join(dir, "trace.csv")
	nodes = filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(trace, []byte(replayHeader+rows), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,T4\nn1,1000,1024,2,T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return trace, nodes
}

func TestReplayBadInputExitsTwo(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\nb,1000,1024,1,1000,,LS,Running,x,600,0\n")
	code, _, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes)
	if code != 2 || !strings.Contains(errOut, `line 3 column "creation_time"`) {
		t.Errorf("malformed row: exit %d, stderr %q; want 2 naming line 3 column creation_time", code, errOut)
	}
	trace, nodes = replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\n")
	code, _, errOut = runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--policies", "gpubroker,karpenter")
	if code != 2 || !strings.Contains(errOut, `unknown policy "karpenter"`) || !strings.Contains(errOut, "per-side-autoscaler") {
		t.Errorf("unknown policy: exit %d, stderr %q; want 2 listing the known policies", code, errOut)
	}
	if code, _, errOut = runCLI(t, nil, "replay"); code != 2 || !strings.Contains(errOut, "--trace is required") {
		t.Errorf("no trace: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ = runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "0"); code != 2 {
		t.Errorf("--load 0: exit %d, want 2", code)
	}
}

func TestReplayJSONAndReport(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\nb,1000,1024,2,1000,,BE,Running,60,900,60\nc,1000,1024,1,1000,,BE,Running,120,700,120\n")
	out := t.TempDir()
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "1,10", "--json", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Trace    map[string]any   `json:"trace"`
		World    map[string]any   `json:"world"`
		Policies []map[string]any `json:"policies"`
		Loads    []map[string]any `json:"loads"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if rep.Trace["gpu_tasks"] != 3.0 || rep.World["launch_to_ready_s"] == nil || len(rep.Policies) != len(replay.Policies) || len(rep.Loads) != 2 {
		t.Fatalf("report: trace %v world %v, %d policies, %d loads", rep.Trace, rep.World, len(rep.Policies), len(rep.Loads))
	}
	for _, key := range []string{"name", "gpu_hours", "allocation_ratio", "wait_p50_s", "wait_p95_s", "wait_p99_s", "unserved", "preemptions", "launches", "terminations", "handovers", "peak_nodes"} {
		if _, ok := rep.Policies[0][key]; !ok {
			t.Errorf("policy result lacks %q", key)
		}
	}
	if _, ok := rep.Policies[0]["wait_p95_s"].(map[string]any)["LS"]; !ok {
		t.Errorf("wait_p95_s has no LS entry: %v", rep.Policies[0]["wait_p95_s"])
	}
	for _, f := range []string{"report.md", "capacity.svg", "wait-cdf-ls.svg", "wait-cdf-be.svg"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".svg") && !strings.Contains(string(b), "<polyline") {
			t.Errorf("%s has no series", f)
		}
	}
}

// --config's policy is what the planner gets, so the consolidation rule
// (max work lost) can be replayed on and off.
func TestReplayConfigPolicy(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\n")
	cfg := writeFile(t, "policy:\n  ownership_transfer: false\n  consolidation:\n    max_work_lost: 0s\n")
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--config", cfg, "--policies", "gpubroker", "--load", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		World struct {
			Policy map[string]any `json:"policy"`
		} `json:"world"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.World.Policy["ownership_transfer"] != false || rep.World.Policy["consolidation_max_work_lost"] != "0s" {
		t.Errorf("policy replayed: %v", rep.World.Policy)
	}
	bad := writeFile(t, "policy:\n  expander: biggest\n")
	if code, _, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--config", bad); code != 2 || !strings.Contains(errOut, "expander") {
		t.Errorf("bad config: exit %d, %q", code, errOut)
	}
}

// Without --config the replay runs serve's defaults and says so; the tuned
// and attrition configs under docs/ change exactly what they say, and the
// report names each change with its default.
func TestReplayDefaultPolicyIsServes(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,600,0\n")
	cases := []struct {
		name    string
		args    []string
		changes []string
	}{
		{"no --config", nil, nil},
		{"docs/replay-tuned.yaml", []string{"--config", "../../docs/replay-tuned.yaml"},
			[]string{`consolidation_max_work_lost "1h0m0s" (default "10m0s")`}},
		{"docs/replay-attrition.yaml", []string{"--config", "../../docs/replay-attrition.yaml"},
			[]string{`yarn_drain_by_attrition true (default false)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"replay", "--trace", trace, "--nodes", nodes, "--policies", "gpubroker", "--load", "1"}, tc.args...)
			code, stdout, errOut := runCLI(t, nil, append(args, "--json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var rep struct {
				World struct {
					PolicyChanges []string `json:"policy_changes"`
				} `json:"world"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tc.changes, rep.World.PolicyChanges) {
				t.Errorf("policy changes %q, want %q", rep.World.PolicyChanges, tc.changes)
			}
			code, stdout, errOut = runCLI(t, nil, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			want := "policy is serve's defaults"
			if len(tc.changes) > 0 {
				want = "policy differs from serve's defaults in: " + strings.Join(tc.changes, "; ")
			}
			if !strings.Contains(stdout, want) {
				t.Errorf("text report does not say %q:\n%s", want, stdout)
			}
		})
	}
}

// TestReplayWhatIfShapes: --what-if-shapes adds gpubroker's rows with
// smaller nodes to the report (JSON and text); a size that is not a whole
// number of GPUs, or shapes with --fleet, exit 2 naming the flag.
func TestReplayWhatIfShapes(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,3600,0\nb,1000,1024,2,1000,,BE,Running,60,900,60\n")
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "1", "--what-if-shapes", "1", "--json",
		"--policies", "gpubroker,static-p95")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Shapes []struct {
			Shape  int    `json:"shape_gpus"`
			Policy string `json:"policy"`
			Load   float64
		} `json:"what_if_shapes"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Shapes) != 1 || rep.Shapes[0].Shape != 1 || rep.Shapes[0].Policy != replay.PolicyBroker {
		t.Fatalf("what_if_shapes %+v: want gpubroker with 1-GPU nodes (a static split is not replayed per shape)", rep.Shapes)
	}
	code, stdout, errOut = runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "1", "--what-if-shapes", "1")
	if code != 0 || !strings.Contains(stdout, "WHAT-IF NODE SHAPES") || !strings.Contains(stdout, "also 1-GPU") {
		t.Fatalf("exit %d, %s; stdout lacks the shapes table:\n%s", code, errOut, stdout)
	}
	for _, bad := range [][]string{{"--what-if-shapes", "half"}, {"--what-if-shapes", "0"}, {"--what-if-shapes", "1", "--fleet", "2"}} {
		args := append([]string{"replay", "--trace", trace, "--nodes", nodes, "--load", "1"}, bad...)
		if code, _, errOut := runCLI(t, nil, args...); code != 2 || !strings.Contains(errOut, "--what-if-shapes") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming --what-if-shapes", bad, code, errOut)
		}
	}
}

// TestReplaySizesDerivesTheTrace: --sizes adds the sizes list's extra
// rows as tasks and says so in the report; a missing file exits 2.
func TestReplaySizesDerivesTheTrace(t *testing.T) {
	trace, nodes := replayFiles(t, "a,1000,1024,1,1000,,LS,Running,0,3600,0\n")
	sizes := filepath.Join(t.TempDir(), "sizes.csv")
	if err := os.WriteFile(sizes, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,1000\nb,1000,1024,2,1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--load", "1", "--policies", "gpubroker", "--sizes", sizes, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Trace struct {
			Tasks   int    `json:"gpu_tasks"`
			Derived string `json:"derived"`
		} `json:"trace"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Trace.Tasks != 2 || !strings.Contains(rep.Trace.Derived, "sizes.csv") {
		t.Fatalf("trace %+v: want 2 GPU tasks and the derivation named", rep.Trace)
	}
	if code, _, errOut := runCLI(t, nil, "replay", "--trace", trace, "--nodes", nodes, "--sizes", sizes+".missing"); code != 2 || !strings.Contains(errOut, "--sizes") {
		t.Errorf("missing --sizes file: exit %d, stderr %q; want 2 naming --sizes", code, errOut)
	}
}
