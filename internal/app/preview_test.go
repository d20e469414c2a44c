package app

import (
	"context"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// TestPreviewLedgerIsTheStoreAsSeedWouldLeaveIt: what the store holds wins
// (pool bounds edited through the API, a tenant's queues, the policy), and
// the configuration fills in only what is not stored, without writing it.
func TestPreviewLedgerIsTheStoreAsSeedWouldLeaveIt(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: pg.NewDatabase(t, store.Migrate)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	stored := broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "A100", GPUsPerNode: 4, MaxNodes: 8,
		Sides: broker.PoolShared, Labels: map[string]string{"infra-type": "gpu"}}
	if _, err := st.UpsertPool(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateTenant(ctx, broker.Tenant{Name: "training", MaxGPUs: 8, Weight: 1, YARNQueues: []string{"root.a"}}); err != nil {
		t.Fatal(err)
	}
	filePool, newPool := stored, stored
	filePool.MaxNodes = 5
	newPool.Name, newPool.Group = "gpu-2", "gpu-2"
	pol := broker.DefaultPolicy()
	pol.ClusterMaxGPUs = 7
	l := previewLedger{Ledger: st.Ledger(), pools: []broker.Pool{filePool, newPool}, policy: pol,
		tenants: []broker.Tenant{{Name: "training", MaxGPUs: 1, Weight: 1, YARNQueues: []string{"root.b"}},
			{Name: "research", MaxGPUs: 4, Weight: 1, YARNQueues: []string{"root.a", "root.c"}},
			{Name: "lab", MaxGPUs: 4, Weight: 1, YARNQueues: []string{"root.d"}, Namespaces: []string{"lab"}}}}

	ps, err := l.PoolSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, p := range ps {
		got[p.Pool.Name] = p.Pool.MaxNodes
	}
	if len(got) != 2 || got["gpu"] != 8 || got["gpu-2"] != 8 {
		t.Errorf("pools %v, want gpu at the stored 8 and gpu-2 from the file", got)
	}
	idx, err := l.TenantIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, research := idx.Tenants["research"]
	if idx.Tenants["training"].MaxGPUs != 8 || idx.Queues["root.a"] != "training" || idx.Queues["root.b"] != "" ||
		research || idx.Queues["root.c"] != "" || idx.Queues["root.d"] != "lab" || idx.Namespaces["lab"] != "lab" {
		t.Errorf("tenant index %+v: the stored training tenant must win, research (its queue taken) is left out as Seed leaves it, lab is added", idx)
	}
	p, err := l.Policy(ctx)
	if err != nil || p.ClusterMaxGPUs != 7 {
		t.Errorf("policy %+v (%v), want the file's while none is stored", p, err)
	}
	storedPol := broker.DefaultPolicy()
	storedPol.ClusterMaxGPUs = 9
	if _, err := st.UpdatePolicy(ctx, storedPol); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Policy(ctx); err != nil || p.ClusterMaxGPUs != 9 {
		t.Errorf("policy %+v (%v), want the stored one", p, err)
	}
	if ps, err := st.ListPools(ctx); err != nil || len(ps) != 1 {
		t.Errorf("stored pools %d (%v): the preview must write nothing", len(ps), err)
	}
}
