package store_test

import (
	"context"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// TestPoolDevices: a pool keeps its MIG layout and GPU memory; a pool that
// does not state its memory remembers what its nodes showed and the
// ledger gives it as the pool's memory, while a stated value wins.
func TestPoolDevices(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	mig := broker.Pool{Name: "mig", Provider: "aws", Group: "mig", GPUModel: "A100", GPUsPerNode: 4, MaxNodes: 2,
		Sides: broker.PoolK8s, MIGProfile: "1g.10gb", MIGPerGPU: 7, GPUMemoryMiB: 80 << 10}
	plain := broker.Pool{Name: "plain", Provider: "aws", Group: "plain", GPUModel: "A10G", GPUsPerNode: 4, MaxNodes: 2, Sides: broker.PoolShared}
	for _, p := range []broker.Pool{mig, plain} {
		if _, err := s.UpsertPool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetPool(ctx, "mig")
	if err != nil || got.MIGProfile != "1g.10gb" || got.MIGPerGPU != 7 || got.GPUMemoryMiB != 80<<10 || got.Units() != 28 {
		t.Fatalf("mig pool %+v, %v: want its layout and memory back", got, err)
	}
	if err := s.SetPoolLearnedGPUMemory(ctx, "plain", 23028); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPoolLearnedGPUMemory(ctx, "mig", 1); err != nil {
		t.Fatal(err)
	}
	// Only a lower figure replaces a learned one.
	if err := s.SetPoolLearnedGPUMemory(ctx, "plain", 24576); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPoolLearnedGPUMemory(ctx, "plain", 0); err == nil {
		t.Error("learning 0 MiB must be refused")
	}
	states, err := s.Ledger().PoolSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mem := map[string]int{}
	for _, ps := range states {
		mem[ps.Pool.Name] = ps.Pool.GPUMemoryMiB
	}
	if mem["plain"] != 23028 || mem["mig"] != 80<<10 {
		t.Fatalf("pool memory %v, want plain's learned 23028 MiB and mig's stated 80Gi", mem)
	}
	recs, err := s.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if want := map[string]int{"plain": 23028, "mig": 0}[r.Name]; r.LearnedGPUMemoryMiB != want || (r.Name == "plain" && r.GPUMemoryMiB != 0) {
			t.Errorf("record %s: learned %d, stated %d; want learned %d and the stated value untouched", r.Name, r.LearnedGPUMemoryMiB, r.GPUMemoryMiB, want)
		}
	}
}
