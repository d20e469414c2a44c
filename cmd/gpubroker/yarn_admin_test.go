package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func TestYARNDecommissionAndRecommission(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	exclude := filepath.Join(t.TempDir(), "exclude.xml")
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: exclude, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := admin.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.RunOn("a", "gpu-1", 1, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--rm", srv.URL, "--admin", addr, "--exclude", exclude, "--poll", "20ms"}

	code, out, errOut := runCLI(t, nil, append([]string{"yarn", "decommission", "gpu-1", "--timeout", "10m"}, conn...)...)
	if code != 0 {
		t.Fatalf("decommission: exit %d: %s%s", code, out, errOut)
	}
	if !strings.Contains(out, "gpu-1: DECOMMISSIONING, running: 1 containers") || !strings.HasSuffix(out, "gpu-1: DECOMMISSIONED\n") || strings.Contains(out, "cut off") {
		t.Fatalf("decommission output:\n%s", out)
	}
	if b, _ := os.ReadFile(exclude); !strings.Contains(string(b), "<timeout>600</timeout>") {
		t.Fatalf("exclude file:\n%s", b)
	}

	// The NodeManager restarts (still excluded: it stays DECOMMISSIONED)
	// only after the recommission takes it out of the file.
	code, out, errOut = runCLI(t, nil, append([]string{"yarn", "recommission", "gpu-1", "--wait", "0"}, conn...)...)
	if code != 0 || !strings.Contains(out, "recommissioned") {
		t.Fatalf("recommission: exit %d: %s%s", code, out, errOut)
	}
	if err := admin.RestartNodeManager(t.Context(), "gpu-1"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, append([]string{"yarn", "recommission", "gpu-1", "--wait", "1m"}, conn...)...)
	if code != 0 || out != "gpu-1: RUNNING\n" {
		t.Fatalf("recommission --wait: exit %d: %q %s", code, out, errOut)
	}

	for _, args := range [][]string{
		{"yarn"},
		{"yarn", "drain", "gpu-1"},
		{"yarn", "decommission"},
		append([]string{"yarn", "decommission", "gpu-1", "--timeout", "0s"}, conn...),
		{"yarn", "decommission", "gpu-1", "--rm", srv.URL},
	} {
		if code, _, _ := runCLI(t, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
