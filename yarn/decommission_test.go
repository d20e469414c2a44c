package yarn_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestDecommissionerSideActions drives the SideActions contract the way
// the executor does (repeated calls) against yarnsim's REST and admin
// ports.
func TestDecommissionerSideActions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"g1", "g2"} {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	exPath := filepath.Join(t.TempDir(), "exclude.xml")
	as, err := yarnsim.NewAdminServer(sim, yarnsim.AdminConfig{ExcludePath: exPath, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := as.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	client, _ := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	admin, _ := rmadmin.New(rmadmin.Config{Addrs: []string{addr}})
	ex, _ := yarn.NewExcludeFile(exPath)
	d, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex})
	if err != nil {
		t.Fatal(err)
	}
	var act broker.SideActions = d

	// g1 runs a container for 300 ms: Release waits for it.
	if _, err := as.RunOn("a", "g1", 2, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	st, err := act.Release(ctx, "g1", deadline)
	if err != nil {
		t.Fatal(err)
	}
	if st.Drained || len(st.Remaining) != 1 {
		t.Fatalf("first Release = %+v, want one container remaining", st)
	}
	for !st.Drained {
		if time.Now().After(deadline) {
			t.Fatalf("g1 not drained: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
		if st, err = act.Release(ctx, "g1", deadline); err != nil {
			t.Fatal(err)
		}
	}
	if hs, _ := ex.Hosts(); len(hs) != 1 || hs[0].Name != "g1" || hs[0].Timeout < 50*time.Second {
		t.Fatalf("exclude file = %+v, want g1 with about a minute", hs)
	}

	// Admit takes it out of the file; after its NodeManager restarts it
	// is RUNNING.
	if err := act.Admit(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := ex.Contains("g1"); ok {
		t.Fatal("g1 still excluded")
	}
	if err := as.Restart("g1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Recommission(ctx, "g1", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	// Cordon starts a graceful decommission; Admit before it ends makes
	// the node RUNNING again without a restart.
	if _, err := as.RunOn("a", "g2", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := act.Cordon(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := act.Cordon(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if s := state(t, ctx, client, "g2"); s != "DECOMMISSIONING" {
		t.Fatalf("g2 is %s after Cordon, want DECOMMISSIONING", s)
	}
	if err := act.Admit(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if s := state(t, ctx, client, "g2"); s != "RUNNING" {
		t.Fatalf("g2 is %s after Admit, want RUNNING", s)
	}

	// A host YARN does not know is released at once.
	if st, err := act.Release(ctx, "unknown", deadline); err != nil || !st.Drained {
		t.Fatalf("Release(unknown) = %+v, %v", st, err)
	}
	if err := act.Evict(ctx, "g2", broker.Workload{Key: "application_1_0001/1"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Evict = %v, want ErrUnsupported", err)
	}
	// An unreachable admin port is an error, not a silent success.
	as.Close()
	if _, err := d.Decommission(ctx, "g2", time.Minute); err == nil {
		t.Fatal("decommission with the admin port closed succeeded")
	}
}

func state(t *testing.T, ctx context.Context, c *yarn.Client, host string) string {
	t.Helper()
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := obs.Node(host)
	return n.State
}
