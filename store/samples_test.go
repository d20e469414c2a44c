package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// RecordSamples writes all samples in one statement; a repeated (at, side)
// within one call or across calls keeps the last sample.
func TestRecordSamplesBatchLastWins(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	if err := s.RecordSamples(ctx, []broker.CapacitySample{
		{At: t0, Side: "k8s", GPUsBusy: 1}, {At: t0, Side: "yarn", GPUsIdle: 2}, {At: t0, Side: "k8s", GPUsBusy: 3},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordSamples(ctx, []broker.CapacitySample{{At: t0, Side: "yarn", GPUsIdle: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordSamples(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Samples(ctx, t0.Add(-time.Second), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bySide := map[string]broker.CapacitySample{}
	for _, c := range got {
		bySide[c.Side] = c
	}
	if len(got) != 2 || bySide["k8s"].GPUsBusy != 3 || bySide["yarn"].GPUsIdle != 5 {
		t.Fatalf("samples: %+v, want k8s busy 3 and yarn idle 5", got)
	}
}
