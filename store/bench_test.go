package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// BenchmarkApplyObservation50k applies a 50,000-row observation on top of
// the previous one, with 10% of rows new and 10% gone, as one tick of a
// large cluster would. It reports rows/s and ms per observation.
func BenchmarkApplyObservation50k(b *testing.B) { benchApply(b, false, false) }

// BenchmarkApplyObservation50kCold is the same with a fresh Store for every
// observation (a restart, or a new leader): no cache of the last applied
// observation, so every row goes through COPY and the full merge.
func BenchmarkApplyObservation50kCold(b *testing.B) { benchApply(b, true, false) }

// BenchmarkApplyObservation50kColdDeparted is the cold apply as both sides
// make it in production: with a Departed callback, so the keys that leave
// are read before they close (here every second one was preempted).
func BenchmarkApplyObservation50kColdDeparted(b *testing.B) { benchApply(b, true, true) }

func benchApply(b *testing.B, cold, departed bool) {
	const rows = 50000
	const churn = rows / 10
	ctx := context.Background()
	s, url := newStore(b)
	for i := 0; i < 20; i++ {
		mustTenant(b, s, fmt.Sprintf("tenant-%02d", i), nil, []string{fmt.Sprintf("ns-%02d", i)})
	}
	mk := func(i int) broker.Demand {
		return broker.Demand{Source: broker.SourceK8s, Key: fmt.Sprintf("pod-%08d", i), Name: fmt.Sprintf("ns/pod-%d", i),
			Tenant: fmt.Sprintf("tenant-%02d", i%20), Queue: fmt.Sprintf("ns-%02d", i%20), Priority: int64(i % 7 * 1000),
			GPUsPerUnit: 1 + i%8, Units: 1, Preemptible: i%3 != 0,
			Constraints: broker.Constraints{NodeSelector: map[string]string{"infra-type": "gpu"}}}
	}
	window := func(start int) []broker.Demand {
		ds := make([]broker.Demand, rows)
		for i := range ds {
			ds[i] = mk(start + i)
		}
		return ds
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: at, Demand: window(0)}); err != nil {
		b.Fatal(err)
	}
	steps := map[string]time.Duration{}
	store.SetTraceApplyForTest(func(step string, took time.Duration) { steps[step] += took })
	defer store.SetTraceApplyForTest(nil)
	b.ResetTimer()
	start := time.Now()
	var paused time.Duration // building the input and opening fresh Stores is not an observation
	for n := 1; n <= b.N; n++ {
		b.StopTimer()
		p := time.Now()
		// Slide the window: the oldest 10% vanish, 10% new arrive.
		obs := window(n * churn)
		at = at.Add(5 * time.Second)
		if cold {
			s.Close()
			var err error
			if s, err = store.Open(ctx, store.Config{URL: url}); err != nil {
				b.Fatal(err)
			}
		}
		paused += time.Since(p)
		b.StartTimer()
		o := store.Observation{Source: broker.SourceK8s, At: at, Demand: obs}
		if departed {
			o.Departed = func(key string) store.CloseReason {
				if key[len(key)-1]%2 == 0 {
					return store.ClosePreempted
				}
				return ""
			}
		}
		res, err := s.ApplyObservation(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		if res.Inserted != churn || res.Closed != churn {
			b.Fatalf("observation %d: %+v, want %d inserted and closed", n, res, churn)
		}
	}
	elapsed := time.Since(start) - paused
	if cold {
		defer s.Close()
	}
	b.ReportMetric(float64(rows*b.N)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/observation")
	for step, took := range steps {
		b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "ms/"+step)
	}
}

// BenchmarkDemandFirstSeen50k is the ledger read the runtime makes every
// tick for first-seen times (the ledger owns them), over a 50,000-row
// ledger.
func BenchmarkDemandFirstSeen50k(b *testing.B) {
	ctx := context.Background()
	s, _ := newStore(b)
	mustTenant(b, s, "tenant-00", nil, []string{"ns-00"})
	ds := make([]broker.Demand, 50000)
	for i := range ds {
		ds[i] = broker.Demand{Source: broker.SourceK8s, Key: fmt.Sprintf("pod-%08d", i), Name: fmt.Sprintf("ns/pod-%d", i),
			Tenant: "tenant-00", Queue: "ns-00", GPUsPerUnit: 1, Units: 1}
	}
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: time.Now(), Demand: ds}); err != nil {
		b.Fatal(err)
	}
	l := s.Ledger()
	b.ResetTimer()
	for range b.N {
		fs, err := l.DemandFirstSeen(ctx)
		if err != nil || len(fs) != len(ds) {
			b.Fatalf("first seen: %d rows, %v", len(fs), err)
		}
	}
}
