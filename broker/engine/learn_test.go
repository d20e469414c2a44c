package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

type learnLedger struct {
	Ledger
	learned map[string]int
}

func (l *learnLedger) LearnPoolGPUMemory(_ context.Context, pool string, mib int) error {
	l.learned[pool] = mib
	return nil
}

// TestLearnPoolMemory: a pool that does not state its GPUs' memory learns
// the least its live whole-GPU nodes show, and a smaller node lowers it; a
// MIG pool, a gone node and a node that shows nothing teach nothing; an
// unchanged figure is not asked again; a ledger that cannot remember
// (plan's preview) is not asked.
func TestLearnPoolMemory(t *testing.T) {
	l := &learnLedger{learned: map[string]int{}}
	r := &Runtime{cfg: RuntimeConfig{Ledger: l}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	snap := &broker.Snapshot{
		Pools: []broker.PoolState{
			{Pool: broker.Pool{Name: "a10g"}},
			{Pool: broker.Pool{Name: "stated", GPUMemoryMiB: 80 << 10}},
			{Pool: broker.Pool{Name: "mig", MIGProfile: "1g.10gb", MIGPerGPU: 7}},
			{Pool: broker.Pool{Name: "silent"}},
		},
		Nodes: []broker.Node{
			{Name: "a", Pool: "a10g", GPUMemoryMiB: 23028, Phase: broker.PhaseActive},
			{Name: "b", Pool: "a10g", GPUMemoryMiB: 23040, Phase: broker.PhaseActive},
			{Name: "gone", Pool: "a10g", GPUMemoryMiB: 100, Phase: broker.PhaseGone},
			{Name: "s", Pool: "stated", GPUMemoryMiB: 81559, Phase: broker.PhaseActive},
			{Name: "m", Pool: "mig", GPUMemoryMiB: 81559, MIGProfile: "1g.10gb", Phase: broker.PhaseActive},
			{Name: "q", Pool: "silent", Phase: broker.PhaseActive},
		},
	}
	r.learnPoolMemory(context.Background(), snap)
	// a10g learns the least of its live nodes; "stated" is offered a lower
	// figure than its value, which the store ignores for a stated pool
	// (TestPoolDevices).
	if len(l.learned) != 2 || l.learned["a10g"] != 23028 || l.learned["stated"] != 81559 {
		t.Fatalf("learned %v, want a10g's 23028 MiB (the least of its live nodes) and stated's lower 81559", l.learned)
	}
	// The same figures again: the ledger is not asked twice.
	l.learned = map[string]int{}
	r.learnPoolMemory(context.Background(), snap)
	if len(l.learned) != 0 {
		t.Fatalf("asked again for unchanged figures: %v", l.learned)
	}
	// A smaller node joins a10g, whose memory the ledger now gives as
	// 23028: it lowers it.
	snap.Pools[0].Pool.GPUMemoryMiB = 23028
	snap.Nodes = append(snap.Nodes, broker.Node{Name: "c", Pool: "a10g", GPUMemoryMiB: 15360, Phase: broker.PhaseActive})
	r.learnPoolMemory(context.Background(), snap)
	if len(l.learned) != 1 || l.learned["a10g"] != 15360 {
		t.Fatalf("learned %v, want a10g lowered to 15360", l.learned)
	}
	// plan's preview ledger has no LearnPoolGPUMemory: nothing is asked.
	r.cfg.Ledger, r.learnedMemory = previewLike{l}, nil
	l.learned = map[string]int{}
	r.learnPoolMemory(context.Background(), snap)
	if len(l.learned) != 0 {
		t.Fatalf("a ledger without the learner was asked: %v", l.learned)
	}
}

type previewLike struct{ Ledger }
