package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/test/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// runCLI runs one command line in-process and returns its exit status and output.
func runCLI(t *testing.T, environ map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := env{stdout: &out, stderr: &errOut, getenv: func(k string) string { return environ[k] }}
	code := run(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpubroker.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersionAndUsage(t *testing.T) {
	if code, out, _ := runCLI(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "gpubroker ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errOut := runCLI(t, nil, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errOut)
	}
	if code, _, _ := runCLI(t, nil); code != 2 {
		t.Fatalf("no command: %d", code)
	}
	if code, _, errOut := runCLI(t, nil, "migrate", "--bogus"); code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") > 20 {
		t.Fatalf("bad flag: %d %q", code, errOut)
	}
}

func TestMigrateUpAndStatus(t *testing.T) {
	url := pg.NewDatabase(t, nil)
	code, out, errOut := runCLI(t, nil, "migrate", "up", "--database-url", url)
	if code != 0 || !strings.Contains(out, "applied migration 1") || !strings.Contains(out, "schema at version") {
		t.Fatalf("migrate up: %d %q %q", code, out, errOut)
	}
	// From the environment, and idempotent.
	code, out, errOut = runCLI(t, map[string]string{"GPUBROKER_DATABASE_URL": url}, "migrate")
	if code != 0 || strings.Contains(out, "applied migration") {
		t.Fatalf("second migrate: %d %q %q", code, out, errOut)
	}
	cfg := writeFile(t, "database:\n  url: "+url+"\n")
	code, out, errOut = runCLI(t, nil, "migrate", "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "00001_init.sql") || strings.Contains(out, "pending") {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
}

func TestMigrateUnreachableDatabase(t *testing.T) {
	code, _, errOut := runCLI(t, nil, "migrate", "--database-url", "postgres://gpubroker:secret@127.0.0.1:1/gpubroker?connect_timeout=2")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, errOut)
	}
	line := strings.TrimSpace(errOut)
	if strings.Contains(line, "\n") || !strings.Contains(line, "127.0.0.1:1/gpubroker") || strings.Contains(line, "secret") {
		t.Fatalf("want one line naming the address without the password, got %q", errOut)
	}
	if code, _, errOut := runCLI(t, nil, "migrate"); code != 2 || !strings.Contains(errOut, "GPUBROKER_DATABASE_URL") {
		t.Fatalf("no database: %d %q", code, errOut)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"unknown key", "database:\n  url: x\n  pasword: y\n", `line 3: unknown key "pasword" in database`},
		{"unknown top-level key", "tennants: []\n", `unknown key "tennants" in the top level`},
		{"negative quota", "tenants:\n  - name: training\n    max_gpus: -4\n", "tenants[0].max_gpus: must not be negative"},
		{"guaranteed above max", "tenants:\n  - name: training\n    guaranteed_gpus: 8\n    max_gpus: 4\n", "tenants[0].max_gpus: must be at least guaranteed_gpus (8)"},
		{"min above max", "pools:\n  - name: gpu\n    gpus_per_node: 4\n    min_nodes: 6\n    max_nodes: 5\n", "pools[0].max_nodes: must be at least min_nodes (6)"},
		{"bad taint", "pools:\n  - name: gpu\n    max_nodes: 5\n    taints: [{key: a, effect: Sometimes}]\n", "pools[0].taints[0].effect"},
		{"bad duration", "policy:\n  scale_down_unneeded: soon\n", `duration "soon"`},
		{"bad expander", "policy:\n  expander: random\n", "policy.expander: must be one of"},
		{"threshold", "policy:\n  scale_down_utilisation: 2\n", "policy.scale_down_utilisation"},
		{"namespace twice", "tenants:\n  - {name: a, max_gpus: 1, namespaces: [ml]}\n  - {name: b, max_gpus: 1, namespaces: [ml]}\n", `tenants[1].namespaces: namespace "ml" already belongs to tenant "a"`},
		{"not yaml", "database: [\n", "config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.body)
			code, _, errOut := runCLI(t, nil, "migrate", "--config", p)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			line := strings.TrimSpace(errOut)
			if strings.Contains(line, "\n") || !strings.Contains(line, tc.want) {
				t.Fatalf("want one line containing %q, got %q", tc.want, errOut)
			}
		})
	}
}

func TestConfigReferenceScenario(t *testing.T) {
	c, err := parseConfig("ref.yaml", []byte(`
database: {url: "postgres://localhost/gpubroker"}
policy:
  cluster_min_gpus: 0
  cluster_max_gpus: 50
  scale_down_unneeded: 5m
  scale_down_utilisation: 0.5
  expander: most-pods
pools:
  - name: cpu-node-group
    gpus_per_node: 0
    min_nodes: 1
    max_nodes: 10
    sides: k8s
  - name: gpu-training-group
    gpu_model: A10G
    gpus_per_node: 4
    min_nodes: 0
    max_nodes: 5
    labels: {infra-type: gpu, gpu.vendor: nvidia}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
tenants:
  - {name: training, base_priority: 1000000, max_gpus: 50, namespaces: [default]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.policy.ClusterMaxGPUs != 50 || c.policy.ScaleDownUnneeded.String() != "5m0s" || c.policy.Expander != "most-pods" {
		t.Fatalf("policy: %+v", c.policy)
	}
	if len(c.pools) != 2 || c.pools[1].Sides != "shared" || c.pools[1].Group != "gpu-training-group" || len(c.pools[1].Taints) != 1 {
		t.Fatalf("pools: %+v", c.pools)
	}
	if len(c.tenants) != 1 || c.tenants[0].Weight != 1 {
		t.Fatalf("tenants: %+v", c.tenants)
	}
}
