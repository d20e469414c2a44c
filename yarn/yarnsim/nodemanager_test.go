package yarnsim_test

import (
	"os"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestNodeManagerLifecycle: a decommissioned NodeManager stays down until
// restarted, and an excluded host's NodeManager is turned away. (That a
// restart registers the configured GPUs again, dropping an
// updateNodeResource override, is checked in yarn's
// TestAdmitRestartsNodeManager over the admin RPC.)
func TestNodeManagerLifecycle(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ex := t.TempDir() + "/exclude.xml"
	admin, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: ex, Tick: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ex, `<hosts><host><name>g2</name></host></hosts>`); err != nil {
		t.Fatal(err)
	}
	if err := admin.StartNodeManager(yarnsim.NodeSpec{Host: "g1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if err := admin.StartNodeManager(yarnsim.NodeSpec{Host: "g2", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if s := sim.NodeState("g2"); s != "DECOMMISSIONED" {
		t.Fatalf("an excluded host's NodeManager is %s, want turned away (DECOMMISSIONED)", s)
	}
	if err := admin.RestartNodeManager(t.Context(), "g2"); err != nil || sim.NodeState("g2") != "DECOMMISSIONED" {
		t.Fatalf("restart while excluded: %v, %s", err, sim.NodeState("g2"))
	}
	if err := writeFile(ex, `<hosts></hosts>`); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestartNodeManager(t.Context(), "g2"); err != nil || sim.NodeState("g2") != "RUNNING" {
		t.Fatalf("restart after the exclusion ended: %v, %s", err, sim.NodeState("g2"))
	}
	if err := sim.SetNodeState("g1", "DECOMMISSIONED"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestartNodeManager(t.Context(), "nope"); err == nil {
		t.Fatal("restart of an unknown host succeeded")
	}
	if err := admin.RestartNodeManager(t.Context(), "g1"); err != nil || sim.NodeState("g1") != "RUNNING" {
		t.Fatalf("restart of a decommissioned NodeManager: %v, %s", err, sim.NodeState("g1"))
	}
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
