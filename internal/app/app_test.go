package app

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// registeringPools is a provider with no groups that records the machines
// the assembly reports as registered nodes.
type registeringPools struct {
	noPools
	mu   sync.Mutex
	seen []string
}

func (p *registeringPools) ObserveRegistered(names []string) {
	p.mu.Lock()
	p.seen = append([]string(nil), names...)
	p.mu.Unlock()
}

// TestOpenReportsRegisteredNodesToTheProvider: whatever provider the
// assembly is given, every side's observed nodes reach it, so instances
// that never register are caught (the e2e world and the benchmark used to
// leave this out).
func TestOpenReportsRegisteredNodesToTheProvider(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	pools := &registeringPools{}
	m, err := Open(ctx, Config{Store: st, YARN: YARNConfig{RM: []string{srv.URL}}, Cloud: CloudConfig{NodePool: pools}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	rt, err := m.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pools.mu.Lock()
	defer pools.mu.Unlock()
	if !slices.Contains(pools.seen, "gpu-1") {
		t.Fatalf("registered %v, want gpu-1", pools.seen)
	}
}

// TestOpenRefusesHalfAYARNAdminConfig: the admin address without the
// exclude file (or the reverse) is a usage error naming both keys, not a
// broker that silently cannot decommission.
func TestOpenRefusesHalfAYARNAdminConfig(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, err = Open(ctx, Config{Store: st, Cloud: CloudConfig{NodePool: noPools{}},
		YARN: YARNConfig{RM: []string{"http://127.0.0.1:1"}, AdminAddress: []string{"127.0.0.1:2"}}})
	var ue *UsageError
	if !errors.As(err, &ue) || ue.Msg != "config: yarn.admin_address and yarn.exclude_file go together: set both to let the broker decommission NodeManagers" {
		t.Fatalf("open: %v, want the usage error naming both keys", err)
	}
}
