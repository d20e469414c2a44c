package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

// BenchmarkObserve measures one Observe over informer caches holding
// 20,000 pods (benchObserver).
func BenchmarkObserve(b *testing.B) {
	o, ctx := benchObserver(b)
	for b.Loop() {
		if _, err := o.Observe(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/observe")
	b.ReportMetric(benchObjects, "objects")
}

// BenchmarkSideObserve measures what the tick loop calls: Observe, then
// the tenant mapping and the side's observation, on BenchmarkObserve's
// cluster with every namespace mapped to a tenant.
func BenchmarkSideObserve(b *testing.B) {
	o, ctx := benchObserver(b)
	ns := make([]string, 50)
	for i := range ns {
		ns[i] = fmt.Sprintf("ns-%02d", i)
	}
	idx := broker.NewTenantIndex([]broker.Tenant{{Name: "even", Namespaces: ns[:25]}, {Name: "odd", Namespaces: ns[25:]}})
	s := NewSide(nil, o, nil, 0)
	for b.Loop() {
		if _, err := s.Observe(ctx, idx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/observe")
	b.ReportMetric(benchObjects, "objects")
}

const (
	benchNodes, benchRunning, benchPending = 2000, 16000, 4000
	benchObjects                           = benchNodes + benchRunning + benchPending
)

// benchObserver starts an observer on 20,000 pods on 2,000 GPU nodes:
// 16,000 running (half of them holding GPUs), 4,000 pending GPU pods the
// scheduler gave up on. Its informers stop when the benchmark ends.
func benchObserver(b *testing.B) (*Observer, context.Context) {
	b.Helper()
	const nodes, running, pending = benchNodes, benchRunning, benchPending
	objs := make([]runtime.Object, 0, nodes+running+pending)
	for i := range nodes {
		objs = append(objs, gpuNode(fmt.Sprintf("node-%04d", i), 8, "H100"))
	}
	for i := range running {
		g := 0
		if i%2 == 0 {
			g = 1
		}
		objs = append(objs, gpuPod(fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("run-%05d", i), g,
			onNode(fmt.Sprintf("node-%04d", i%nodes), corev1.PodRunning), withPriority(int32(i%1000))))
	}
	for i := range pending {
		objs = append(objs, gpuPod(fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("pend-%05d", i), 1+i%4, withPriority(int32(i%1000))))
	}
	// The API server gives every object a resourceVersion; the fake
	// tracker does not, so set one as a real list would carry it.
	for i, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ResourceVersion = fmt.Sprint(i + 1)
		}
	}
	client := fake.NewSimpleClientset(objs...)
	o, err := NewObserver(client, Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	start := time.Now()
	if err := o.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("informers synced %d objects in %s", len(objs), time.Since(start).Round(time.Millisecond))
	obs, err := o.Observe(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(obs.Demand) != pending || len(obs.Nodes) != nodes {
		b.Fatalf("observed %d demand on %d nodes, want %d on %d", len(obs.Demand), len(obs.Nodes), pending, nodes)
	}
	return o, ctx
}
