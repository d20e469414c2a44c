package gpu_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cmd/gpubroker-agent/internal/gpu"
)

// metrics is what one mock GPU reports beyond the DGX server's identity.
type metrics struct {
	util        uint32 // percent
	utilRet     nvml.Return
	memUsed     uint64 // allocated
	memReserved uint64 // reserved by the driver and firmware
	noV2        bool   // the driver lacks nvmlDeviceGetMemoryInfo_v2
	tempC       uint32
	powerMW     uint32
	eccUncorr   uint64
	eccRet      nvml.Return
	handleLost  bool // DeviceGetHandleByIndex answers GPU_IS_LOST
	noXIDEvents bool // RegisterEvents answers NOT_SUPPORTED
}

// rig is a go-nvml mock DGX server with the metric calls the mock leaves
// unset filled in, and an event set the test feeds.
type rig struct {
	srv      *server.Server
	mu       sync.Mutex
	m        []metrics
	events   chan nvml.EventData
	freed    bool
	waitErrs int // the next event waits that fail with ERROR_UNKNOWN
}

func newRig(t testing.TB, srv *server.Server, m []metrics) *rig {
	t.Helper()
	if len(m) != len(srv.Devices) {
		t.Fatalf("%d metrics for %d GPUs", len(m), len(srv.Devices))
	}
	r := &rig{srv: srv, m: m, events: make(chan nvml.EventData, 16)}
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		total := dev.MemoryInfo.Total
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			// v1 counts the driver's reserve as used, as a real driver does.
			g := r.get(i)
			used := g.memUsed + g.memReserved
			return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
		}
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			g := r.get(i)
			if g.noV2 {
				return nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
			}
			return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Reserved: g.memReserved,
				Used: g.memUsed, Free: total - g.memUsed - g.memReserved}, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			g := r.get(i)
			if g.utilRet != nvml.SUCCESS {
				return nvml.Utilization{}, g.utilRet
			}
			return nvml.Utilization{Gpu: g.util, Memory: g.util / 2}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return r.get(i).tempC, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return r.get(i).powerMW, nvml.SUCCESS }
		dev.GetTotalEccErrorsFunc = func(et nvml.MemoryErrorType, ct nvml.EccCounterType) (uint64, nvml.Return) {
			// Only the volatile uncorrected counter means the GPU is failing now.
			if et != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || ct != nvml.VOLATILE_ECC {
				return 1 << 40, nvml.SUCCESS
			}
			g := r.get(i)
			return g.eccUncorr, g.eccRet
		}
		dev.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
			if r.get(i).noXIDEvents {
				return nvml.ERROR_NOT_SUPPORTED
			}
			if types&nvml.EventTypeXidCriticalError == 0 {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.SUCCESS
		}
	}
	getHandle := srv.DeviceGetHandleByIndexFunc
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i >= 0 && i < len(m) && r.get(i).handleLost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return getHandle(i)
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				r.mu.Lock()
				fail := r.waitErrs > 0
				if fail {
					r.waitErrs--
				}
				r.mu.Unlock()
				if fail {
					return nvml.EventData{}, nvml.ERROR_UNKNOWN
				}
				select {
				case e := <-r.events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.freed = true
				return nvml.SUCCESS
			},
		}, nvml.SUCCESS
	}
	return r
}

func (r *rig) get(i int) metrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[i]
}

func (r *rig) set(i int, f func(*metrics)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.m[i])
}

func (r *rig) uuid(i int) string { return r.srv.Devices[i].(*server.Device).UUID }

func open(t *testing.T, lib nvml.Interface) *gpu.Reader {
	t.Helper()
	rd, err := gpu.Open(context.Background(), gpu.Config{NVML: lib, EventWait: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rd.Close(); err != nil {
			t.Error(err)
		}
	})
	return rd
}

func sample(t *testing.T, rd *gpu.Reader) []broker.GPUReport {
	t.Helper()
	gs, err := rd.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

const gib = 1 << 30

func TestSampleDGXH100MapsEveryMetric(t *testing.T) {
	m := make([]metrics, 8)
	for i := range m {
		m[i] = metrics{util: uint32(i * 14), memUsed: uint64(i) * gib, tempC: uint32(30 + i), powerMW: uint32(100000 + 1500*i)}
	}
	r := newRig(t, dgxh100.New(), m)
	rd := open(t, r.srv)
	if rd.DriverVersion() != "550.54.15" {
		t.Fatalf("driver version %q", rd.DriverVersion())
	}
	got := sample(t, rd)
	var want []broker.GPUReport
	for i := range m {
		want = append(want, broker.GPUReport{
			Index: i, UUID: r.uuid(i), Product: "NVIDIA H100 80GB HBM3",
			Utilisation: float64(i*14) / 100, MemoryUsed: uint64(i) * gib, MemoryTotal: 80 * gib,
			Temperature: 30 + i, PowerWatts: 100 + 1.5*float64(i),
		})
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("sample (-want +got):\n%s", d)
	}
	rep := broker.NodeReport{Node: "dgx-1", At: time.Now(), GPUs: got}
	if err := rep.Validate(); err != nil {
		t.Fatalf("the broker would refuse the report: %v", err)
	}
	util, healthy, reason := rep.Health()
	if want := (0.0 + 14 + 28 + 42 + 56 + 70 + 84 + 98) / 800; util < want-1e-9 || util > want+1e-9 || !healthy || reason != "" {
		t.Fatalf("health = %g %t %q, want %g true", util, healthy, reason, want)
	}

	// The next sample reads the GPUs again: utilisation follows the device.
	r.set(3, func(m *metrics) { m.util = 100 })
	if got := sample(t, rd)[3].Utilisation; got != 1 {
		t.Fatalf("utilisation after change = %g, want 1", got)
	}
}

func TestSampleDGXH200(t *testing.T) {
	r := newRig(t, dgxh200.New(), make([]metrics, 8))
	got := sample(t, open(t, r.srv))
	if len(got) != 8 {
		t.Fatalf("%d GPUs, want 8", len(got))
	}
	for i, g := range got {
		if g.Product != "NVIDIA H200 141GB HBM3e" || g.MemoryTotal != 141*gib || g.UUID != r.uuid(i) || g.Index != i {
			t.Fatalf("GPU %d: %+v", i, g)
		}
	}
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g.UUID] {
			t.Fatalf("duplicate UUID %s", g.UUID)
		}
		seen[g.UUID] = true
	}
}

func TestUncorrectableECCMakesTheNodeUnhealthy(t *testing.T) {
	m := make([]metrics, 8)
	m[3].eccUncorr = 2
	m[5].eccRet = nvml.ERROR_NOT_SUPPORTED // no ECC on this GPU: zero, not an error
	r := newRig(t, dgxh100.New(), m)
	got := sample(t, open(t, r.srv))
	if got[3].ECCUncorrected != 2 || got[5].ECCUncorrected != 0 {
		t.Fatalf("ECC counts %d %d", got[3].ECCUncorrected, got[5].ECCUncorrected)
	}
	_, healthy, reason := broker.NodeReport{Node: "n", At: time.Now(), GPUs: got}.Health()
	if healthy || !strings.Contains(reason, "GPU 3 ("+r.uuid(3)+"): 2 uncorrectable ECC errors") {
		t.Fatalf("health %t %q", healthy, reason)
	}
}

// waitXIDs polls samples until GPU i carries want, or fails after a deadline.
func waitXIDs(t *testing.T, rd *gpu.Reader, i int, want []uint64) []broker.GPUReport {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := sample(t, rd)
		if cmp.Equal(got[i].XIDs, want) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU %d XIDs = %v, want %v", i, got[i].XIDs, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestXIDEventsAreReportedAndKept(t *testing.T) {
	r := newRig(t, dgxh100.New(), make([]metrics, 8))
	rd := open(t, r.srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rd.Watch(ctx) }()

	dev := func(i int) nvml.Device { return r.srv.Devices[i] }
	// An application error (XID 13) twice, then the GPU falls off the bus.
	r.events <- nvml.EventData{Device: dev(1), EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	r.events <- nvml.EventData{Device: dev(1), EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	waitXIDs(t, rd, 1, []uint64{13})
	_, healthy, reason := broker.NodeReport{Node: "n", At: time.Now(), GPUs: sample(t, rd)}.Health()
	if !healthy {
		t.Fatalf("XID 13 is an application error, not a broken GPU: %q", reason)
	}

	r.events <- nvml.EventData{Device: dev(5), EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	got := waitXIDs(t, rd, 5, []uint64{79})
	_, healthy, reason = broker.NodeReport{Node: "n", At: time.Now(), GPUs: got}.Health()
	if healthy || reason != "GPU 5 ("+r.uuid(5)+"): XID 79, GPU has fallen off the bus (fatal)" {
		t.Fatalf("health %t %q", healthy, reason)
	}
	// The XID stays in later reports: the GPU stays broken until reset.
	for range 3 {
		if g := sample(t, rd); !cmp.Equal(g[5].XIDs, []uint64{79}) || !cmp.Equal(g[1].XIDs, []uint64{13}) || g[0].XIDs != nil {
			t.Fatalf("later sample XIDs: %v %v %v", g[0].XIDs, g[1].XIDs, g[5].XIDs)
		}
	}
	// An XID without a device concerns every GPU.
	r.events <- nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	waitXIDs(t, rd, 0, []uint64{48})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch returned %v on cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not stop after cancellation")
	}
}

func TestLostGPUIsReportedWithXID79(t *testing.T) {
	m := make([]metrics, 8)
	m[2].utilRet = nvml.ERROR_GPU_IS_LOST
	m[6].handleLost = true
	r := newRig(t, dgxh100.New(), m)
	got := sample(t, open(t, r.srv))
	if len(got) != 8 {
		t.Fatalf("%d GPUs, want all 8 including the lost ones", len(got))
	}
	if !cmp.Equal(got[2].XIDs, []uint64{79}) || !cmp.Equal(got[6].XIDs, []uint64{79}) || got[6].Index != 6 {
		t.Fatalf("lost GPUs: %+v / %+v", got[2], got[6])
	}
	_, healthy, reason := broker.NodeReport{Node: "n", At: time.Now(), GPUs: got}.Health()
	if healthy || !strings.Contains(reason, "GPU 2") || !strings.Contains(reason, "XID 79") {
		t.Fatalf("health %t %q", healthy, reason)
	}
}

func TestMIGInstancesAndUtilisationFallback(t *testing.T) {
	m := make([]metrics, 8)
	// MIG GPUs do not report utilisation; GPU 0 has memory in use, GPU 1 none.
	m[0] = metrics{utilRet: nvml.ERROR_NOT_SUPPORTED, memUsed: 24 * gib}
	m[1] = metrics{utilRet: nvml.ERROR_NOT_SUPPORTED}
	m[2] = metrics{util: 40}
	r := newRig(t, dgxh100.New(), m)
	for _, i := range []int{0, 1} {
		d := r.srv.Devices[i]
		if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	d0 := r.srv.Devices[0]
	for _, p := range []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE} {
		info, ret := d0.GetGpuInstanceProfileInfo(p)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if _, ret := d0.CreateGpuInstance(&info); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	got := sample(t, open(t, r.srv))
	if !got[0].MIGEnabled || !cmp.Equal(got[0].MIGDevices, []string{"1g.10gb gi=0", "1g.10gb gi=1", "3g.40gb gi=2"}) {
		t.Fatalf("GPU 0 MIG: %t %q", got[0].MIGEnabled, got[0].MIGDevices)
	}
	if !got[1].MIGEnabled || len(got[1].MIGDevices) != 0 || got[2].MIGEnabled || got[2].MIGDevices != nil {
		t.Fatalf("GPUs 1, 2 MIG: %+v / %+v", got[1], got[2])
	}
	// Unknown utilisation with memory in use counts as busy, never idle.
	if got[0].Utilisation != 1 || got[1].Utilisation != 0 || got[2].Utilisation != 0.4 {
		t.Fatalf("utilisation %g %g %g, want 1 0 0.4", got[0].Utilisation, got[1].Utilisation, got[2].Utilisation)
	}
}

func TestNoLibrary(t *testing.T) {
	// The real go-nvml loader, pointed at a library that does not exist:
	// exactly what happens on a node without the NVIDIA driver.
	lib := nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	_, err := gpu.Open(context.Background(), gpu.Config{NVML: lib, Library: "/nonexistent/libnvidia-ml.so.1"})
	if !errors.Is(err, gpu.ErrNoLibrary) || !strings.Contains(err.Error(), "/nonexistent/libnvidia-ml.so.1") {
		t.Fatalf("Open = %v, want ErrNoLibrary naming the library", err)
	}
}

func TestInitFailureOtherThanMissingLibrary(t *testing.T) {
	srv := dgxh100.New()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	_, err := gpu.Open(context.Background(), gpu.Config{NVML: srv})
	if err == nil || errors.Is(err, gpu.ErrNoLibrary) || !strings.Contains(err.Error(), "initialise NVML") {
		t.Fatalf("Open = %v", err)
	}
}

func TestWithoutEventSupport(t *testing.T) {
	m := make([]metrics, 8)
	for i := range m {
		m[i].noXIDEvents = true
	}
	r := newRig(t, dgxh100.New(), m)
	rd := open(t, r.srv)
	r.mu.Lock()
	freed := r.freed
	r.mu.Unlock()
	if !freed {
		t.Fatal("an event set with no GPU registered must be freed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rd.Watch(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("Watch without events must return at once: %v %v", err, ctx.Err())
	}
	if got := sample(t, rd); len(got) != 8 {
		t.Fatalf("%d GPUs", len(got))
	}
}

func TestWatchSurvivesFailedWaits(t *testing.T) {
	r := newRig(t, dgxh100.New(), make([]metrics, 8))
	r.waitErrs = 3
	var logs strings.Builder
	var mu sync.Mutex
	rd, err := gpu.Open(context.Background(), gpu.Config{NVML: r.srv, EventWait: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rd.Watch(ctx) }()
	r.events <- nvml.EventData{Device: r.srv.Devices[7], EventType: nvml.EventTypeXidCriticalError, EventData: 95}
	waitXIDs(t, rd, 7, []uint64{95})
	cancel()
	<-done
	mu.Lock()
	if n := strings.Count(logs.String(), "wait for NVML events"); n != 1 {
		t.Errorf("failed waits logged %d times, want once:\n%s", n, logs.String())
	}
	mu.Unlock()
	shutdown := 0
	r.srv.ShutdownFunc = func() nvml.Return { shutdown++; return nvml.SUCCESS }
	if err := rd.Close(); err != nil || shutdown != 1 || !r.freed {
		t.Fatalf("Close: %v, shutdown %d, event set freed %t", err, shutdown, r.freed)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestMemoryThroughNVMLv2: GPU memory is read with the v2 call, which
// keeps the driver's reserve apart from allocated memory. On an H200 with
// driver 580 an idle GPU showed 615 MiB "used" through v1 while nvidia-smi
// showed 0: that was the reserve. A driver without v2 falls back to v1,
// saying so once.
func TestMemoryThroughNVMLv2(t *testing.T) {
	const mib = 1 << 20
	m := make([]metrics, 8)
	for i := range m {
		m[i].memReserved = 615 * mib
	}
	m[1].memUsed = 40 * gib
	r := newRig(t, dgxh200.New(), m)
	var logs syncBuf
	rd, err := gpu.Open(context.Background(), gpu.Config{NVML: r.srv, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	got := sample(t, rd)
	if g := got[0]; g.MemoryUsed != 0 || g.MemoryReserved != 615*mib || g.MemoryTotal != 141*gib {
		t.Fatalf("idle H200: used %d reserved %d total %d, want 0, 615 MiB reserved apart, 141 GiB", g.MemoryUsed, g.MemoryReserved, g.MemoryTotal)
	}
	if g := got[1]; g.MemoryUsed != 40*gib || g.MemoryReserved != 615*mib {
		t.Fatalf("busy H200: used %d reserved %d", g.MemoryUsed, g.MemoryReserved)
	}
	for i := range m {
		r.set(i, func(m *metrics) { m.noV2 = true })
	}
	got = sample(t, rd)
	sample(t, rd)
	if g := got[0]; g.MemoryUsed != 615*mib || g.MemoryReserved != 0 {
		t.Fatalf("v1 fallback: used %d reserved %d, want the reserve counted as used", g.MemoryUsed, g.MemoryReserved)
	}
	if n := strings.Count(logs.String(), "NVML v2 memory info unavailable"); n != 8 {
		t.Fatalf("v1 fallback warned %d times over two samples of 8 GPUs, want once per GPU:\n%s", n, logs.String())
	}
}

// syncBuf is a log sink safe for the reader's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
