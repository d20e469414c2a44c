package k8s

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Well-known keys gpubroker reads and writes on Kubernetes objects.
const (
	// OwnerTaintKey is the NoSchedule taint gpubroker puts on nodes it takes
	// away from the Kubernetes scheduler; its value names the new owner.
	OwnerTaintKey = "gpubroker.io/owner"
	// PreemptibleAnnotation on a pod overrides the priority rule:
	// "false" marks work that must never be preempted, "true" allows it.
	PreemptibleAnnotation = "gpubroker.io/preemptible"
	// DefaultGPUModelLabel is the label gpu-feature-discovery puts on nodes.
	DefaultGPUModelLabel = "nvidia.com/gpu.product"
	// DefaultPoolLabel names the gpubroker pool a node belongs to.
	DefaultPoolLabel = "gpubroker.io/pool"
	// mirrorPodAnnotation marks static pods mirrored by the kubelet.
	mirrorPodAnnotation = "kubernetes.io/config.mirror"
)

// Config configures the Kubernetes adapter. The zero value of every field
// means its default; see Defaults.
type Config struct {
	// SchedulerNames are the schedulers whose pods count as demand
	// (default: "default-scheduler").
	SchedulerNames []string
	// GPUModelLabel is the node label holding the GPU product
	// (default DefaultGPUModelLabel).
	GPUModelLabel string
	// PoolLabel is the node label holding the gpubroker pool name
	// (default DefaultPoolLabel).
	PoolLabel string
	// GPUNodeLabels mark nodes that will offer GPUs even before their device
	// plugin advertises them, e.g. {"infra-type": "gpu"}. A node carrying
	// all of them, the model label or the pool label is a GPU node.
	GPUNodeLabels map[string]string
	// NonPreemptiblePriority: pods at or above this priority are never
	// preemptible (default 1000000000, the system-critical range). The
	// PreemptibleAnnotation overrides it per pod.
	NonPreemptiblePriority int64
	// EventSource is the component name on the Events gpubroker writes
	// (default "gpubroker").
	EventSource string
	// DeviceClasses are the DRA DeviceClasses whose devices are GPUs and
	// MIG slices (default DefaultDeviceClasses: NVIDIA's).
	DeviceClasses DeviceClasses
	// GPUDrivers are the DRA drivers whose published devices are GPUs on
	// their node (default gpu.nvidia.com; a device whose "type" attribute
	// is not "gpu", a MIG slice, is not a whole GPU).
	GPUDrivers []string
	// DRA is "auto" (the default: on where the API server serves
	// resource.k8s.io/v1), "on" or "off": whether pods' ResourceClaims
	// count as GPU demand.
	DRA string
	// ResyncPeriod of the informers; 0 (the default) disables resync.
	ResyncPeriod time.Duration
	// NotifyBuffer is the capacity of the unschedulable-pod channel
	// (default 1: one pending wake-up is enough for a batching tick loop).
	NotifyBuffer int
	// StartupTaints are taint keys that a new node carries until it is
	// initialised (default DefaultStartupTaints). A key ending in "/" is a
	// prefix. A node carrying one is capacity still arriving, never a ready
	// node the pending pods do not fit: it must not trigger a second buy.
	StartupTaints []string
	// StaleAfter bounds how old the adapter's view of the cluster may be:
	// when no call to the API server has succeeded for this long, or an
	// informer's watch failed and has not resynced since, Observe fails
	// with broker.ErrStale (default 30s).
	StaleAfter time.Duration
}

// DefaultStartupTaints are the taints well-known components put on a node
// while it starts, after the cluster autoscaler's list of taints it ignores
// on new nodes (utils/taints: the node lifecycle controller's condition
// taints, the cloud controller's uninitialized taint, and the
// startup-taint/ignore-taint prefixes), plus the CNI and storage agents'
// own and the Node Readiness Controller's prefix that NVIDIA's GPU
// readiness rule uses (readiness.k8s.io/nvidia-gpu-not-ready) until the
// device plugin is up.
var DefaultStartupTaints = []string{
	"node.kubernetes.io/not-ready",
	"node.kubernetes.io/unreachable",
	"node.kubernetes.io/network-unavailable",
	"node.cloudprovider.kubernetes.io/uninitialized",
	"node.cilium.io/agent-not-ready",
	"ebs.csi.aws.com/agent-not-ready",
	"efs.csi.aws.com/agent-not-ready",
	"readiness.k8s.io/",
	"startup-taint.cluster-autoscaler.kubernetes.io/",
	"ignore-taint.cluster-autoscaler.kubernetes.io/",
}

// Defaults returns c with every unset field set to its default.
func (c Config) Defaults() Config {
	if len(c.SchedulerNames) == 0 {
		c.SchedulerNames = []string{"default-scheduler"}
	}
	if c.GPUModelLabel == "" {
		c.GPUModelLabel = DefaultGPUModelLabel
	}
	if c.PoolLabel == "" {
		c.PoolLabel = DefaultPoolLabel
	}
	if c.NonPreemptiblePriority == 0 {
		c.NonPreemptiblePriority = 1_000_000_000
	}
	if c.EventSource == "" {
		c.EventSource = "gpubroker"
	}
	if c.NotifyBuffer == 0 {
		c.NotifyBuffer = 1
	}
	if len(c.DeviceClasses.GPU) == 0 && len(c.DeviceClasses.MIG) == 0 {
		c.DeviceClasses = DefaultDeviceClasses()
	}
	if c.DRA == "" {
		c.DRA = "auto"
	}
	if len(c.GPUDrivers) == 0 {
		c.GPUDrivers = []string{DefaultGPUDeviceClass}
	}
	if len(c.StartupTaints) == 0 {
		c.StartupTaints = append([]string(nil), DefaultStartupTaints...)
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 30 * time.Second
	}
	return c
}

// Validate checks a defaulted Config.
func (c Config) Validate() error {
	for i, s := range c.SchedulerNames {
		if s == "" {
			return broker.Invalid(fmt.Sprintf("scheduler_names[%d]", i), "must not be empty")
		}
	}
	switch {
	case c.ResyncPeriod < 0:
		return broker.Invalid("resync_period", "must not be negative, got %s", c.ResyncPeriod)
	case c.DRA != "auto" && c.DRA != "on" && c.DRA != "off":
		return broker.Invalid("dra", "must be auto, on or off, got %q", c.DRA)
	case c.NotifyBuffer < 0:
		return broker.Invalid("notify_buffer", "must not be negative, got %d", c.NotifyBuffer)
	case c.StaleAfter < 0:
		return broker.Invalid("stale_after", "must not be negative, got %s", c.StaleAfter)
	}
	for i, k := range c.StartupTaints {
		if strings.TrimSuffix(k, "/") == "" || strings.ContainsAny(k, " =:") {
			return broker.Invalid(fmt.Sprintf("startup_taints[%d]", i), "must be a taint key or a prefix ending in /, got %q", k)
		}
	}
	return nil
}

// isStartupTaint reports whether key is one of StartupTaints.
func (c *Config) isStartupTaint(key string) bool {
	for _, k := range c.StartupTaints {
		if k == key || strings.HasSuffix(k, "/") && strings.HasPrefix(key, k) {
			return true
		}
	}
	return false
}
