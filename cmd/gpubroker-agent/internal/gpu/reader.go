package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubroker/gpubroker/broker"
)

// ErrNoLibrary means the NVML library could not be loaded: the node has no
// NVIDIA driver, or the library is not where the agent looked.
var ErrNoLibrary = errors.New("NVML library not found")

// xidGPULost is the XID the driver logs when a GPU falls off the bus. The
// reader reports it itself when NVML answers GPU_IS_LOST, since a lost GPU
// sends no more events.
const xidGPULost = 79

// Config configures a Reader.
type Config struct {
	// NVML is the library (required): nvml.New() in production, a
	// go-nvml mock server in tests.
	NVML nvml.Interface
	// Library names the library file in messages (default libnvidia-ml.so.1).
	Library string
	// Logger receives warnings about metrics a GPU does not provide
	// (default: discard).
	Logger *slog.Logger
	// EventWait bounds one blocking wait for NVML events, and so how long
	// Watch takes to notice cancellation (default 1s).
	EventWait time.Duration
	// MaxXIDs caps the distinct XID codes kept per GPU (default 32).
	MaxXIDs int
	// BusyMemoryFraction is used when a GPU does not report its
	// utilisation (MIG mode, some vGPU setups): a GPU with more than this
	// fraction of its memory in use counts as fully busy, otherwise idle
	// (default 0.01). Unknown use must never make a working node look
	// reclaimable.
	BusyMemoryFraction float64
}

func (c *Config) setDefaults() error {
	if c.NVML == nil {
		return broker.Invalid("nvml", "must be set")
	}
	if c.Library == "" {
		c.Library = "libnvidia-ml.so.1"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.EventWait == 0 {
		c.EventWait = time.Second
	}
	if c.EventWait < time.Millisecond {
		return broker.Invalid("event_wait", "must be at least 1ms, got %s", c.EventWait)
	}
	if c.MaxXIDs == 0 {
		c.MaxXIDs = 32
	}
	if c.MaxXIDs < 0 {
		return broker.Invalid("max_xids", "must be positive, got %d", c.MaxXIDs)
	}
	if c.BusyMemoryFraction == 0 {
		c.BusyMemoryFraction = 0.01
	}
	if !(c.BusyMemoryFraction > 0 && c.BusyMemoryFraction < 1) {
		return broker.Invalid("busy_memory_fraction", "must be between 0 and 1, got %g", c.BusyMemoryFraction)
	}
	return nil
}

// Reader samples the GPUs of one node. It is safe for concurrent use:
// Watch runs in its own goroutine while Sample is called at an interval.
type Reader struct {
	cfg    Config
	lib    nvml.Interface
	log    *slog.Logger
	driver string
	events nvml.EventSet // nil when the driver offers no events

	mu     sync.Mutex
	xids   map[string][]uint64 // by GPU UUID, distinct, in order seen
	warned map[string]bool     // metric problems already logged once
}

// Open initialises NVML and registers for XID events on every GPU. It
// returns an error wrapping ErrNoLibrary when the library is missing. Call
// Close when done.
func Open(ctx context.Context, cfg Config) (*Reader, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	lib := cfg.NVML
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("load %s: %w", cfg.Library, ErrNoLibrary)
		}
		return nil, fmt.Errorf("initialise NVML: %w", ret)
	}
	r := &Reader{cfg: cfg, lib: lib, log: cfg.Logger, xids: map[string][]uint64{}, warned: map[string]bool{}}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.driver = v
	}
	if err := r.registerEvents(ctx); err != nil {
		lib.Shutdown()
		return nil, err
	}
	return r, nil
}

// registerEvents creates the event set for XID errors. A driver or GPU
// without event support is logged, not fatal: ECC counters still work.
func (r *Reader) registerEvents(ctx context.Context) error {
	set, ret := r.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		r.log.WarnContext(ctx, "NVML events unavailable; XID errors will not be reported", "error", ret.Error())
		return nil
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return fmt.Errorf("count GPUs: %w", ret)
	}
	registered := 0
	for i := range n {
		d, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			r.log.WarnContext(ctx, "GPU handle unavailable for events", "gpu", i, "error", ret.Error())
			continue
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			r.log.WarnContext(ctx, "XID events unavailable on GPU", "gpu", i, "error", ret.Error())
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return nil
	}
	r.events = set
	return nil
}

// DriverVersion is the NVIDIA driver version, or "" when unknown.
func (r *Reader) DriverVersion() string { return r.driver }

// Close frees the event set and shuts NVML down.
func (r *Reader) Close() error {
	if r.events != nil {
		r.events.Free()
	}
	if ret := r.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down NVML: %w", ret)
	}
	return nil
}

// Watch records XID events until ctx is done. It returns nil on
// cancellation and at once when the GPUs offer no events.
func (r *Reader) Watch(ctx context.Context) error {
	if r.events == nil {
		return nil
	}
	wait := uint32(r.cfg.EventWait / time.Millisecond)
	for ctx.Err() == nil {
		data, ret := r.events.Wait(wait)
		switch ret {
		case nvml.SUCCESS:
			r.recordEvent(ctx, data)
		case nvml.ERROR_TIMEOUT:
		default:
			// A failed wait (GPU lost, driver unloaded) must neither spin
			// nor fill the log.
			r.warnOnce(ctx, "events/"+ret.Error(), "wait for NVML events", "error", ret.Error())
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.EventWait):
			}
		}
	}
	return nil
}

func (r *Reader) recordEvent(ctx context.Context, e nvml.EventData) {
	if e.EventType&nvml.EventTypeXidCriticalError == 0 {
		return
	}
	uuid := ""
	if e.Device != nil {
		if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
			uuid = u
		}
	}
	if uuid == "" {
		// NVML may deliver an XID without a device; it then concerns
		// the whole node, so every GPU carries it.
		uuid = "*"
	}
	r.log.WarnContext(ctx, "GPU XID error", "gpu_uuid", uuid, "xid", e.EventData)
	r.addXID(uuid, e.EventData)
}

func (r *Reader) addXID(uuid string, xid uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := r.xids[uuid]
	for _, x := range have {
		if x == xid {
			return
		}
	}
	if len(have) < r.cfg.MaxXIDs {
		r.xids[uuid] = append(have, xid)
	}
}

func (r *Reader) xidsOf(uuid string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	out = append(out, r.xids[uuid]...)
	for _, x := range r.xids["*"] {
		if !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func contains(xs []uint64, x uint64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Sample reads every GPU now. A GPU that cannot be read at all (it fell
// off the bus) is still reported, with XID 79, so the broker replaces the
// node instead of forgetting the GPU.
func (r *Reader) Sample(ctx context.Context) ([]broker.GPUReport, error) {
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count GPUs: %w", ret)
	}
	out := make([]broker.GPUReport, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := broker.GPUReport{Index: i}
		d, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			if ret != nvml.ERROR_GPU_IS_LOST {
				return nil, fmt.Errorf("get handle of GPU %d: %w", i, ret)
			}
			g.XIDs = []uint64{xidGPULost}
			out = append(out, g)
			continue
		}
		r.readDevice(ctx, d, &g)
		out = append(out, g)
	}
	return out, nil
}

// readDevice fills g from one device. Metrics a GPU does not support stay
// zero; GPU_IS_LOST on any call marks the GPU with XID 79.
func (r *Reader) readDevice(ctx context.Context, d nvml.Device, g *broker.GPUReport) {
	lost := false
	check := func(what string, ret nvml.Return) bool {
		switch ret {
		case nvml.SUCCESS:
			return true
		case nvml.ERROR_GPU_IS_LOST:
			lost = true
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			r.warnOnce(ctx, fmt.Sprintf("%d/%s", g.Index, what), "read GPU metric", "gpu", g.Index, "metric", what, "error", ret.Error())
		}
		return false
	}

	if v, ret := d.GetUUID(); check("uuid", ret) {
		g.UUID = v
	}
	if v, ret := d.GetName(); check("name", ret) {
		g.Product = v
	}
	r.readMemory(ctx, d, g, check)
	if v, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); check("temperature", ret) {
		g.Temperature = int(v)
	}
	if v, ret := d.GetPowerUsage(); check("power", ret) {
		g.PowerWatts = float64(v) / 1000
	}
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); check("ecc", ret) {
		g.ECCUncorrected = v
	}
	if cur, _, ret := d.GetMigMode(); check("mig_mode", ret) {
		g.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
	}
	if g.MIGEnabled {
		g.MIGDevices = r.migDevices(ctx, d, g)
	}
	if u, ret := d.GetUtilizationRates(); check("utilisation", ret) {
		g.Utilisation = min(float64(u.Gpu)/100, 1)
	} else if g.MemoryTotal > 0 && float64(g.MemoryUsed) > r.cfg.BusyMemoryFraction*float64(g.MemoryTotal) {
		// IMPORTANT: no utilisation reading (MIG) must not look idle while
		// memory is in use, or the broker would reclaim a working node.
		g.Utilisation = 1
	}
	g.XIDs = r.xidsOf(g.UUID)
	if lost && !contains(g.XIDs, xidGPULost) {
		g.XIDs = append(g.XIDs, xidGPULost)
	}
}

// readMemory reads GPU memory through NVML's v2 memory info, which
// reports the memory the driver and firmware reserve apart from what is
// allocated. The v1 call counts that reserve as used: on an H200 with
// driver 580 an idle GPU showed 615 MiB used where nvidia-smi showed 0,
// which would make idle GPUs look busy when utilisation is unknown (MIG).
// A driver without the v2 call (before R510) falls back to v1.
func (r *Reader) readMemory(ctx context.Context, d nvml.Device, g *broker.GPUReport, check func(string, nvml.Return) bool) {
	m, ret := d.GetMemoryInfo_v2()
	switch ret {
	case nvml.SUCCESS:
		g.MemoryUsed, g.MemoryReserved, g.MemoryTotal = m.Used, m.Reserved, m.Total
		return
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
		r.warnOnce(ctx, fmt.Sprintf("%d/memory_v2", g.Index), "NVML v2 memory info unavailable; reading v1, which counts reserved memory as used",
			"gpu", g.Index, "error", ret.Error())
	default:
		check("memory", ret)
		return
	}
	if m1, ret := d.GetMemoryInfo(); check("memory", ret) {
		g.MemoryUsed, g.MemoryTotal = m1.Used, m1.Total
	}
}

func (r *Reader) warnOnce(ctx context.Context, key, msg string, args ...any) {
	r.mu.Lock()
	seen := r.warned[key]
	r.warned[key] = true
	r.mu.Unlock()
	if !seen {
		r.log.WarnContext(ctx, msg, args...)
	}
}
