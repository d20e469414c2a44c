package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// world is the broker assembled as serve and the demo assemble it, on the
// simulators.
type world struct {
	rt   *engine.Runtime
	ysim *yarnsim.Sim
	kc   *k8ssim.Cluster
}

func newWorld(tb testing.TB, nodes, demands int) *world {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	url := pg.NewDatabase(tb, store.Migrate)
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	pool := broker.Pool{Name: "gpu", Provider: "aws", Group: "gpu", GPUModel: "A100", GPUsPerNode: 8,
		MinNodes: 0, MaxNodes: 2 * nodes, Sides: broker.PoolShared, Labels: map[string]string{"infra-type": "gpu"}}
	if _, err := st.UpsertPool(ctx, pool); err != nil {
		tb.Fatal(err)
	}
	for _, t := range []broker.Tenant{
		{Name: "training", MaxGPUs: 1 << 20, Weight: 1, YARNQueues: []string{"root.a"}, Namespaces: []string{"ml"}},
		{Name: "research", MaxGPUs: 1 << 20, Weight: 1, YARNQueues: []string{"root.b"}, Namespaces: []string{"lab"}},
	} {
		if _, err := st.CreateTenant(ctx, t); err != nil {
			tb.Fatal(err)
		}
	}

	// YARN: half the nodes and half the demand.
	ysim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < nodes/2; i++ {
		if err := ysim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("yarn-%05d", i), GPUs: 8}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < demands/2; i++ {
		q := "root.a"
		if i%2 == 1 {
			q = "root.b"
		}
		// Big asks that do not fit: they stay pending.
		if _, err := ysim.Submit(yarnsim.AppSpec{Name: fmt.Sprintf("app-%d", i), Queue: q, Priority: int64(i % 5),
			Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 16}}}); err != nil {
			tb.Fatal(err)
		}
	}
	ysrv := httptest.NewServer(ysim.Handler())
	tb.Cleanup(ysrv.Close)
	yc, err := yarn.NewClient(yarn.Config{RMs: []string{ysrv.URL}, MaxResponseBytes: 1 << 30, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}

	// Kubernetes: the other half, through the real informers.
	kc := k8ssim.New(k8ssim.Config{})
	for i := 0; i < nodes/2; i++ {
		if err := kc.AddNode(ctx, k8ssim.NodeSpec{Name: fmt.Sprintf("k8s-%05d", i), GPUs: 8,
			Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < demands/2; i++ {
		ns := "ml"
		if i%2 == 1 {
			ns = "lab"
		}
		if err := kc.SubmitPod(ctx, k8ssim.PodSpec{Namespace: ns, Name: fmt.Sprintf("pod-%06d", i), GPUs: 16,
			Priority: int32(i % 7 * 100), NodeSelector: map[string]string{"infra-type": "gpu"},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, Duration: time.Hour}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := kc.Step(ctx); err != nil { // marks them unschedulable
		tb.Fatal(err)
	}
	// AWS: the pool's group, empty (16-GPU asks fit no 8-GPU node, so the
	// plan buys nothing and every tick measures observe-persist-plan).
	aws := awssim.New(awssim.Config{})
	endpoint, err := aws.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { aws.Close(context.Background()) })
	if err := aws.CreateGroup(awssim.GroupSpec{Name: "gpu", Min: 0, Max: 2 * nodes}); err != nil {
		tb.Fatal(err)
	}
	// The broker, assembled as serve assembles it (YARN observed only: no
	// admin port here).
	m, err := app.Open(ctx, app.Config{Store: st, Policy: broker.DefaultPolicy(),
		YARN:       app.YARNConfig{Client: yc},
		Kubernetes: app.KubernetesConfig{Client: kc.Client(), Adapter: k8s.Config{NamespaceIsTenant: true}, DrainStep: time.Second},
		Cloud: app.CloudConfig{Region: "us-east-1", Endpoint: endpoint,
			Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""),
			Pools:       []cloud.PoolConfig{{Name: "gpu", GPUsPerNode: 8, GPUModel: "A100"}}},
		ObserveTimeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	rt, err := m.NewRuntime()
	if err != nil {
		tb.Fatal(err)
	}
	return &world{rt: rt, ysim: ysim, kc: kc}
}

// BenchmarkTick measures one full tick of the real runtime against the
// simulators and PostgreSQL: 1,000 GPU nodes and 10,000 pending demands
// (half YARN over HTTP, half Kubernetes through informers).
func BenchmarkTick(b *testing.B) {
	w := newWorld(b, 1000, 10000)
	ctx := context.Background()
	rep, err := w.rt.Tick(ctx) // the first tick inserts the whole ledger
	if err != nil {
		b.Fatal(err)
	}
	if got := len(rep.Snapshot.Demand); got != 10000 {
		b.Fatalf("first tick saw %d demands, want 10000 (waits %d)", got, len(rep.Plan.Waits))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.rt.Tick(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/tick")
}

// TestTickAtScale runs the same world once, smaller, so the wiring is
// checked by every test run: every demand is seen and explained.
func TestTickAtScale(t *testing.T) {
	w := newWorld(t, 100, 1000)
	rep, err := w.rt.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Snapshot.Demand) != 1000 || len(rep.Plan.Waits) != 1000 {
		t.Fatalf("demand %d, waits %d; want 1000 each", len(rep.Snapshot.Demand), len(rep.Plan.Waits))
	}
	for _, wt := range rep.Plan.Waits {
		if wt.Reason != broker.WaitUnsatisfiable {
			t.Fatalf("16-GPU asks on 8-GPU nodes must be unsatisfiable, got %+v", wt)
		}
	}
	if st := w.rt.Status(); len(st.Stale) != 0 {
		t.Fatalf("stale sources: %v", st.Stale)
	}
}
