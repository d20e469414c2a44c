package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/internal/app"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
	"github.com/gpubroker/gpubroker/yarn"
)

var pg *pgtest.Server

var (
	tickProfile = flag.String("tick.cpuprofile", "", "write a CPU profile of the steady ticks alone (not the world's setup) to this file")
	tickHeap    = flag.String("tick.memprofile", "", "write a heap profile after the steady ticks to this file (in-use space tells the broker's share of the RSS from the simulators')")
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(simsEnv); spec != "" {
		os.Exit(serveSims(spec))
	}
	pgtest.Main(m, &pg)
}

// world is the broker assembled as serve and the demo assemble it, on the
// simulators: yarnsim and awssim in a child process, k8ssim (a fake
// clientset, not a server) in this one.
type world struct {
	rt   *engine.Runtime
	sims *sims
	kc   *k8ssim.Cluster
	// k8ssimHeap is the live heap k8ssim's own state adds (its object
	// tracker and watch history), measured before the broker opens: the
	// part of this process's memory that is not the broker's.
	k8ssimHeap int64
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

	// YARN and AWS: served by a child process (see sims_test.go), so this
	// process's figures are the broker's.
	sim := startSims(tb, nodes, demands)
	yc, err := yarn.NewClient(yarn.Config{RMs: []string{sim.YARN}, MaxResponseBytes: 1 << 30, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}

	// Kubernetes: the other half, through the real informers.
	heap0 := liveHeap()
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
	// Step's own UpdateStatus calls stay in the fake clientset's action
	// log until its next Step clears it: 25,000 pod copies at 50,000
	// demands that only a long-lived k8ssim would drop. Drop them now so
	// the heap is the informers' and the tracker's, as in steady state.
	if f, ok := kc.Client().(interface{ ClearActions() }); ok {
		f.ClearActions()
	}
	k8ssimHeap := liveHeap() - heap0
	// The broker, assembled as serve assembles it (YARN observed only: no
	// admin port here).
	m, err := app.Open(ctx, app.Config{Store: st, Policy: broker.DefaultPolicy(),
		YARN:       app.YARNConfig{Client: yc},
		Kubernetes: app.KubernetesConfig{Client: kc.Client(), Adapter: k8s.Config{}, DrainStep: time.Second},
		Cloud: app.CloudConfig{Region: "us-east-1", Endpoint: sim.AWS,
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
	return &world{rt: rt, sims: sim, kc: kc, k8ssimHeap: k8ssimHeap}
}

// BenchmarkTick measures one full tick of the real runtime against the
// simulators and PostgreSQL: 1,000 GPU nodes and 10,000 pending demands
// (half YARN over HTTP, half Kubernetes through informers).
func BenchmarkTick(b *testing.B) { benchTicks(b, 1000, 10000) }

// BenchmarkTick5000 is the production size: 5,000 GPU nodes and 50,000
// pending demands. Run it with -benchtime 10x (make bench does) for
// meaningful percentiles.
func BenchmarkTick5000(b *testing.B) { benchTicks(b, 5000, 50000) }

// benchTicks builds the world, runs the first tick (which inserts the whole
// ledger) outside the timer, then steady ticks (b.Loop: the world is
// built once however many ticks the benchtime asks for), and reports the tick
// time's p50 and p90, each phase's median, the peak RSS over the steady
// ticks and over the first, and CPU time per tick of this process (the
// broker and k8ssim) and, apart, of the child serving yarnsim and awssim.
func benchTicks(b *testing.B, nodes, demands int) {
	w := newWorld(b, nodes, demands)
	ctx := context.Background()
	// The world's setup (k8ssim's 25,000 pods written and marked, the
	// broker's informers filled) peaks higher than any tick and leaves
	// garbage a running broker does not have: hand it back and measure
	// the peak of the ticks alone (the first one included).
	setupHWM := vmHWM(b)
	debug.FreeOSMemory()
	resetHWM(b)
	rep, err := w.rt.Tick(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got := len(rep.Snapshot.Demand); got != demands {
		b.Fatalf("first tick saw %d demands, want %d (waits %d)", got, demands, len(rep.Plan.Waits))
	}
	b.Logf("first tick: %s", phaseLine(rep.Phases))
	// The first tick writes the whole ledger; the steady ticks' peak is
	// measured apart.
	firstHWM := vmHWM(b)
	resetHWM(b)
	var phases []engine.TickPhases
	if *tickProfile != "" {
		f, err := os.Create(*tickProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	cpu0, child0 := cpuTime(b), w.sims.stats(b)
	for b.Loop() {
		rep, err := w.rt.Tick(ctx)
		if err != nil {
			b.Fatal(err)
		}
		phases = append(phases, rep.Phases)
	}
	cpu := (cpuTime(b) - cpu0) / time.Duration(len(phases))
	child := w.sims.stats(b)
	childCPU := (child.CPU - child0.CPU) / time.Duration(len(phases))
	if *tickHeap != "" {
		f, err := os.Create(*tickHeap)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	total := median(phases, func(p engine.TickPhases) time.Duration { return p.Total })
	b.ReportMetric(ms(total), "p50-ms/tick")
	b.ReportMetric(ms(percentile(phases, 90, func(p engine.TickPhases) time.Duration { return p.Total })), "p90-ms/tick")
	hwm := vmHWM(b)
	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(firstHWM)/(1<<20), "first-tick-peak-RSS-MiB")
	b.ReportMetric(float64(w.k8ssimHeap)/(1<<20), "k8ssim-live-heap-MiB")
	b.ReportMetric(ms(cpu), "cpu-ms/tick")
	b.ReportMetric(float64(child.HWM)/(1<<20), "sims-peak-RSS-MiB")
	b.ReportMetric(ms(childCPU), "sims-cpu-ms/tick")
	med := engine.TickPhases{Observe: map[broker.Source]time.Duration{}}
	for _, src := range broker.Sources {
		med.Observe[src] = median(phases, func(p engine.TickPhases) time.Duration { return p.Observe[src] })
	}
	med.Cloud = median(phases, func(p engine.TickPhases) time.Duration { return p.Cloud })
	med.ObserveAll = median(phases, func(p engine.TickPhases) time.Duration { return p.ObserveAll })
	med.Persist = median(phases, func(p engine.TickPhases) time.Duration { return p.Persist })
	med.Merge = median(phases, func(p engine.TickPhases) time.Duration { return p.Merge })
	med.Plan = median(phases, func(p engine.TickPhases) time.Duration { return p.Plan })
	med.Validate = median(phases, func(p engine.TickPhases) time.Duration { return p.Validate })
	med.Record = median(phases, func(p engine.TickPhases) time.Duration { return p.Record })
	med.Act = median(phases, func(p engine.TickPhases) time.Duration { return p.Act })
	med.Total = total
	b.Logf("%d nodes × %d demands, %d ticks, peak RSS %d MiB over the steady ticks (%d MiB over the first, %d MiB during setup; k8ssim's own live heap %d MiB), CPU %s/tick (broker and k8ssim); yarnsim and awssim: peak RSS %d MiB, CPU %s/tick; medians: %s",
		nodes, demands, len(phases), hwm>>20, firstHWM>>20, setupHWM>>20, w.k8ssimHeap>>20, r(cpu), child.HWM>>20, r(childCPU), phaseLine(med))
}

func phaseLine(p engine.TickPhases) string {
	return fmt.Sprintf("total %s = observe %s (yarn %s, k8s %s, cloud %s) + persist %s + merge %s + plan %s + validate %s + record %s + act %s",
		r(p.Total), r(p.ObserveAll), r(p.Observe[broker.SourceYARN]), r(p.Observe[broker.SourceK8s]), r(p.Cloud),
		r(p.Persist), r(p.Merge), r(p.Plan), r(p.Validate), r(p.Record), r(p.Act))
}

func r(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(ps []engine.TickPhases, f func(engine.TickPhases) time.Duration) time.Duration {
	return percentile(ps, 50, f)
}

// percentile is the nearest-rank percentile p of f over ps.
func percentile(ps []engine.TickPhases, p int, f func(engine.TickPhases) time.Duration) time.Duration {
	if len(ps) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(ps))
	for i, x := range ps {
		ds[i] = f(x)
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	if i > 0 {
		i--
	}
	return ds[i]
}

// cpuTime is the CPU time (user and system) this process has used: the
// broker and k8ssim, not the child's simulators nor PostgreSQL.
func cpuTime(tb testing.TB) time.Duration {
	d, err := selfCPU()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// vmHWM is this process's peak resident set size in bytes since it
// started or resetHWM: the broker and k8ssim (its share shows in
// -tick.memprofile), not the child's simulators.
func vmHWM(tb testing.TB) int64 {
	n, err := selfHWM()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// resetHWM starts this process's peak RSS afresh at its current RSS
// (Linux: 5 written to /proc/self/clear_refs).
func resetHWM(tb testing.TB) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatalf("reset peak RSS: %v", err)
	}
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
