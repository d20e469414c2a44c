package broker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCapacityBySide pins the one rule of capacity by side that the
// executor's samples and the API's summary share.
func TestCapacityBySide(t *testing.T) {
	pools := []Pool{{Name: "a100", GPUsPerNode: 4}}
	nodes := []Node{
		{Name: "k1", Pool: "a100", Owner: OwnerK8s, Phase: PhaseActive, GPUsTotal: 4, GPUsAllocated: 3},
		{Name: "k2", Pool: "a100", Owner: OwnerK8s, Phase: PhaseActive, GPUsTotal: 4, GPUsAllocated: 9}, // over-reported: capped
		{Name: "y1", Pool: "a100", Owner: OwnerYARN, Phase: PhaseActive, GPUsTotal: 4, GPUsAllocated: 1},
		// Ordered and not advertising GPUs yet: its pool's GPUs per node, in flight.
		{Name: "new", Pool: "a100", Owner: OwnerNone, Phase: PhaseRequested},
		{Name: "boot", Pool: "a100", Owner: OwnerK8s, Phase: PhaseBooting, GPUsTotal: 4},
		// Neither capacity nor capacity on its way.
		{Name: "down", Pool: "a100", Owner: OwnerK8s, Phase: PhaseActive, GPUsTotal: 4, Down: "kubelet NotReady"},
		{Name: "term", Pool: "a100", Owner: OwnerNone, Phase: PhaseTerminating, GPUsTotal: 4},
		{Name: "gone", Pool: "a100", Owner: OwnerYARN, Phase: PhaseGone, GPUsTotal: 4},
		// Released by its side: counts for none.
		{Name: "drain", Pool: "a100", Owner: OwnerNone, Phase: PhaseDraining, GPUsTotal: 4, GPUsAllocated: 2},
	}
	pending := []Demand{
		{Source: SourceK8s, Key: "a", GPUsPerUnit: 2, Units: 3},
		{Source: SourceYARN, Key: "b", GPUsPerUnit: 1, Units: 1},
	}
	got := CapacityBySide(nodes, pools, pending)
	want := [3]SideCapacity{
		{Side: OwnerYARN, Nodes: 1, GPUsTotal: 4, GPUsBusy: 1, GPUsIdle: 3, GPUsPending: 1},
		{Side: OwnerK8s, Nodes: 3, NodesInFlight: 1, GPUsTotal: 12, GPUsBusy: 7, GPUsIdle: 1, GPUsInFlight: 4, GPUsPending: 6},
		{Side: OwnerNone, Nodes: 2, NodesInFlight: 1, GPUsTotal: 8, GPUsBusy: 2, GPUsIdle: 2, GPUsInFlight: 4},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("capacity by side (-want +got):\n%s", d)
	}

	snap := &Snapshot{Now: t0, Nodes: nodes, Pools: []PoolState{{Pool: pools[0]}}, Demand: pending}
	samples := CapacitySamples(snap)
	for i, s := range samples {
		w := want[i]
		if s.Side != string(w.Side) || !s.At.Equal(t0) || s.GPUsBusy != w.GPUsBusy || s.GPUsIdle != w.GPUsIdle ||
			s.GPUsInFlight != w.GPUsInFlight || s.GPUsPending != w.GPUsPending {
			t.Errorf("sample %d %+v disagrees with capacity by side %+v", i, s, w)
		}
	}
}
