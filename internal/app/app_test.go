package app

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/fleet"
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
	st := openStore(t)
	_, srv := simRM(t, yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4})
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

// TestOpenFleetWithoutCloud: with fleet pools only, the broker opens no
// cloud provider (no region, no endpoint, no credentials) and the hosts
// the sides list become the pool's members at the next observation; a
// cloud pool without a usable cloud section is an error naming it.
func TestOpenFleetWithoutCloud(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	ctx := context.Background()
	st := openStore(t)
	// lab-1 is a NodeManager in partition lab: a member of the lab fleet
	// by its partition, which only the nodes the assembly reports tell.
	_, srv := simRM(t, yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}, yarnsim.NodeSpec{Host: "gpu-2", GPUs: 4},
		yarnsim.NodeSpec{Host: "lab-1", GPUs: 4, Labels: []string{"lab"}})
	fleetPool := broker.Pool{Name: "owned", Provider: broker.ProviderFleet, GPUModel: "A100", GPUsPerNode: 4, MinNodes: 3, MaxNodes: 3, Sides: broker.PoolShared}
	labPool := fleetPool
	labPool.Name = "lab"
	m, err := Open(ctx, Config{Store: st, Seed: true, Policy: broker.DefaultPolicy(), Pools: []broker.Pool{fleetPool, labPool},
		FleetMembers: map[string]fleet.Members{"owned": {Hosts: []string{"gpu-1", "gpu-2", "gpu-3"}}, "lab": {YARNPartition: "lab"}},
		YARN:         YARNConfig{RM: []string{srv.URL}}})
	if err != nil {
		t.Fatalf("open with a fleet and no cloud section: %v", err)
	}
	t.Cleanup(m.Close)
	if m.Provider() != nil {
		t.Error("a cloud provider was opened for a fleet")
	}
	rt, err := m.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the first tick lists the sides; the second sees the members
		if _, err := rt.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	states, err := m.Pools().Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[1].Stale != "" || states[1].Desired != 2 || states[1].Pool.MaxNodes != 2 || len(states[1].Missing) != 1 {
		t.Fatalf("pools %+v, want the fleet with its 2 listed hosts (gpu-3 is off)", states)
	}
	if lab := states[0]; lab.Pool.Name != "lab" || lab.Stale != "" || len(lab.Instances) != 1 || lab.Instances[0].Hostname != "lab-1" {
		t.Fatalf("lab fleet %+v, want lab-1, its partition's NodeManager", lab)
	}

	cloudPool := broker.Pool{Name: "a100", Provider: "aws", Group: "a100", GPUsPerNode: 4, MaxNodes: 2, Sides: broker.PoolShared}
	_, err = Open(ctx, Config{Store: st, Pools: []broker.Pool{fleetPool, cloudPool},
		FleetMembers: map[string]fleet.Members{"owned": {Hosts: []string{"gpu-1"}}}})
	if err == nil || !strings.Contains(err.Error(), "cloud pools a100") || !strings.Contains(err.Error(), "region") {
		t.Fatalf("open with a cloud pool and no cloud section: %v, want an error naming pool a100 and the region", err)
	}

	// A fleet named by partition with no YARN configured would wait for a
	// listing that never comes: refused, naming the pool and the key.
	_, err = Open(ctx, Config{Store: st, Pools: []broker.Pool{labPool}, FleetMembers: map[string]fleet.Members{"lab": {YARNPartition: "lab"}}})
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(ue.Msg, "pool lab names members by yarn_partition") {
		t.Fatalf("a partition fleet without YARN: %v, want a usage error naming the pool", err)
	}
}

// openStore opens a store on a fresh database, closed when the test ends.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// simRM is a simulated ResourceManager with nodes, served until the test
// ends.
func simRM(t *testing.T, nodes ...yarnsim.NodeSpec) (*yarnsim.Sim, *httptest.Server) {
	t.Helper()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := sim.AddNode(n); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	return sim, srv
}
