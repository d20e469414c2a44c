package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
)

// TestStartupTaintsFromConfigAddToDefaults: kubernetes.startup_taints adds
// taints to the built-in list the adapter treats as a node still starting;
// a malformed entry is refused with its field.
func TestStartupTaintsFromConfigAddToDefaults(t *testing.T) {
	c, err := parseConfig("t.yaml", []byte(`
kubernetes:
  startup_taints: [example.com/gpu-agent-not-ready, boot.example.com/]
  stale_after: 45s
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := kubeConfig(c.file.Kubernetes)
	for _, k := range append([]string{"example.com/gpu-agent-not-ready", "boot.example.com/"}, k8s.DefaultStartupTaints...) {
		if !slices.Contains(cfg.StartupTaints, k) {
			t.Errorf("startup taints %v lack %q", cfg.StartupTaints, k)
		}
	}
	if cfg.StaleAfter.Seconds() != 45 {
		t.Errorf("stale_after %s, want 45s", cfg.StaleAfter)
	}
	if cfg := kubeConfig(kubernetesConfig{}); cfg.StartupTaints != nil {
		t.Errorf("no startup_taints in the file: %v, want the adapter's defaults (nil)", cfg.StartupTaints)
	}
	_, err = parseConfig("t.yaml", []byte("kubernetes:\n  startup_taints: [\"key=value:NoSchedule\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "kubernetes.startup_taints[0]") {
		t.Fatalf("malformed taint: %v, want an error naming kubernetes.startup_taints[0]", err)
	}
}

// TestRestartKeepsPoolBoundsEditedThroughAPI: max_nodes raised through the
// API survives a restart that seeds the file's older value, and the
// restart says so: a warning naming the pool, the field and both values.
// The cloud provider reads the same stored bounds on every call.
func TestRestartKeepsPoolBoundsEditedThroughAPI(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := parseConfig("t.yaml", []byte(`
pools:
  - {name: gpu-training-group, gpus_per_node: 4, min_nodes: 0, max_nodes: 5, labels: {infra-type: gpu}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := seed(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	p, err := st.GetPool(ctx, "gpu-training-group")
	if err != nil {
		t.Fatal(err)
	}
	p.MaxNodes = 8 // PATCH /api/v1/pools/gpu-training-group
	if _, err := st.UpdatePool(ctx, p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "differs") {
		t.Fatalf("first seed warned: %s", logs.String())
	}
	if err := seed(ctx, st, c, log); err != nil { // the restart
		t.Fatal(err)
	}
	p, err = st.GetPool(ctx, "gpu-training-group")
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxNodes != 8 {
		t.Errorf("max_nodes %d after the restart, want the API's 8", p.MaxNodes)
	}
	out := logs.String()
	for _, want := range []string{"level=WARN", "pool=gpu-training-group", "field=max_nodes", "file_value=5", "stored_value=8"} {
		if !strings.Contains(out, want) {
			t.Errorf("restart log lacks %q:\n%s", want, out)
		}
	}
	minN, maxN, ok, err := app.StoreBounds(st)(ctx, "gpu-training-group")
	if err != nil || !ok || minN != 0 || maxN != 8 {
		t.Errorf("provider bounds %d..%d ok %v err %v, want 0..8 from the store", minN, maxN, ok, err)
	}
	if _, _, ok, err := app.StoreBounds(st)(ctx, "unknown"); ok || err != nil {
		t.Errorf("bounds of an unknown pool: ok %v err %v, want none", ok, err)
	}
	pol, err := st.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := app.StoreProvisionTime(st)(ctx); err != nil || d != pol.MaxProvisionTime.D() {
		t.Errorf("provider provision time %s err %v, want the stored policy's %s", d, err, pol.MaxProvisionTime)
	}
}
