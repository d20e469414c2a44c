package broker

import (
	"fmt"
	"strings"
	"time"
)

// GPUReport is one GPU as the node agent reads it through NVML.
type GPUReport struct {
	Index       int     `json:"index"`
	UUID        string  `json:"uuid"`
	Product     string  `json:"product"`
	Utilisation float64 `json:"utilisation"` // 0..1, GPU busy fraction over the sample window
	// MemoryUsed is memory allocated on the GPU; MemoryReserved is what
	// the driver and firmware reserve, apart from it (NVML's v2 memory
	// info: the v1 call counted the reserve as used, so an idle H200 on
	// driver 580 showed 615 MiB used while nvidia-smi showed 0).
	MemoryUsed     uint64  `json:"memory_used_bytes"`
	MemoryReserved uint64  `json:"memory_reserved_bytes,omitempty"`
	MemoryTotal    uint64  `json:"memory_total_bytes"`
	Temperature    int     `json:"temperature_c"`
	PowerWatts     float64 `json:"power_watts"`
	// ECCUncorrected counts volatile uncorrectable ECC errors since boot.
	ECCUncorrected uint64 `json:"ecc_uncorrected"`
	// XIDs are the XID error codes the agent has seen since it started:
	// the broker keeps only the latest report, so a fatal XID reported
	// once must stay in every later report until the GPU is reset.
	XIDs []uint64 `json:"xids,omitempty"`
	// MIGEnabled and MIGDevices describe MIG partitioning.
	MIGEnabled bool     `json:"mig_enabled"`
	MIGDevices []string `json:"mig_devices,omitempty"`
}

// NodeReport is what the node agent pushes to the broker at an interval.
// Reports are small and the latest one wins.
type NodeReport struct {
	// Node is the Kubernetes node name / NodeManager host (private DNS name).
	Node string `json:"node"`
	// At is when the agent sampled the GPUs, by the agent's clock. It only
	// orders an agent's reports; it never makes one fresh.
	At            time.Time   `json:"at"`
	AgentVersion  string      `json:"agent_version"`
	DriverVersion string      `json:"driver_version"`
	GPUs          []GPUReport `json:"gpus"`
	// ReceivedAt is when the broker's store received the report, by the
	// database's clock; it decides freshness. Set by the store only: an
	// agent's value is discarded, so a report dated in the future cannot
	// stay fresh.
	ReceivedAt time.Time `json:"received_at,omitzero"`
	// Previous is the report the node's agent sent before this one (nil
	// when there was none), so an unhealthy verdict can need two
	// consecutive reports.
	Previous *NodeReport `json:"-"`
}

// MinGPUMemoryMiB is the least memory of the report's whole GPUs in MiB,
// 0 when none reports it (or a GPU is in MIG mode: its devices' memory is
// their profile's).
func (r NodeReport) MinGPUMemoryMiB() int {
	least := 0
	for _, g := range r.GPUs {
		if g.MIGEnabled || g.MemoryTotal == 0 {
			return 0
		}
		if m := int(g.MemoryTotal >> 20); least == 0 || m < least {
			least = m
		}
	}
	return least
}

// MIGDevices counts the MIG devices of profile the agent found on the
// node's GPUs (each listed as "<profile> gi=<id>"); reported is false when
// no GPU is in MIG mode, so the count says nothing.
func (r NodeReport) MIGDevices(profile string) (n int, reported bool) {
	for _, g := range r.GPUs {
		if !g.MIGEnabled {
			continue
		}
		reported = true
		for _, d := range g.MIGDevices {
			if p, _, _ := strings.Cut(d, " "); p == profile {
				n++
			}
		}
	}
	return n, reported
}

// MaxReportSkew is how far ahead of the server's clock a report's "at"
// may be: more is a wrong clock or a forged report, refused.
const MaxReportSkew = 2 * time.Minute

// Validate checks a report before it is stored.
func (r NodeReport) Validate() error {
	if r.Node == "" {
		return Invalid("node", "must name the node (its Kubernetes node name or NodeManager host)")
	}
	if r.At.IsZero() {
		return Invalid("at", "must be the sample time (RFC 3339)")
	}
	if len(r.GPUs) > 64 {
		return Invalid("gpus", "at most 64 GPUs per node, got %d", len(r.GPUs))
	}
	for i, g := range r.GPUs {
		if !(g.Utilisation >= 0 && g.Utilisation <= 1) {
			return Invalid(fmt.Sprintf("gpus[%d].utilisation", i), "must be between 0 and 1, got %g", g.Utilisation)
		}
		if g.MemoryUsed > g.MemoryTotal && g.MemoryTotal > 0 {
			return Invalid(fmt.Sprintf("gpus[%d].memory_used_bytes", i), "must not exceed memory_total_bytes")
		}
		if g.MemoryReserved > g.MemoryTotal && g.MemoryTotal > 0 {
			return Invalid(fmt.Sprintf("gpus[%d].memory_reserved_bytes", i), "must not exceed memory_total_bytes")
		}
	}
	return nil
}

// XIDClass says what an XID means for the node that logged it.
type XIDClass string

// The XID classes, from worst to harmless.
const (
	// XIDFatal: the GPU is broken (fell off the bus, uncontained memory
	// errors, NVLink down). The node takes no work and is replaced.
	XIDFatal XIDClass = "fatal"
	// XIDNeedsReset: the GPU works but needs a reset before it is trusted
	// again (a row remap pending, a high single-bit ECC rate). The node
	// takes no new work and is replaced once its running work has ended:
	// a fresh instance is the only reset the broker can do, and it never
	// cuts work short for one.
	XIDNeedsReset XIDClass = "needs-reset"
	// XIDApplication: the error is the application's (its own page fault,
	// an exception, a contained ECC error that killed only it). The GPU
	// is healthy.
	XIDApplication XIDClass = "application"
)

// XIDClasses maps XID codes to their class. Codes it does not list are
// logged by the agent and ignored here, like application errors.
type XIDClasses map[uint64]XIDClass

// defaultXIDs are the default classes, from NVIDIA's XID catalogue, the
// NVIDIA device plugin's application-error list (13, 31, 43, 45, 68,
// which leave a GPU healthy) and the EKS node monitoring agent's repair
// actions (reboot for resettable faults, replace for broken hardware).
var defaultXIDs = map[uint64]struct {
	class XIDClass
	what  string
}{
	13: {XIDApplication, "graphics engine exception"}, 31: {XIDApplication, "GPU memory page fault"},
	43: {XIDApplication, "GPU stopped processing"}, 45: {XIDApplication, "preemptive cleanup after previous errors"},
	68: {XIDApplication, "video processor exception"}, 94: {XIDApplication, "contained ECC error"},
	109: {XIDApplication, "context switch timeout"},
	63:  {XIDNeedsReset, "row remapping pending"}, 92: {XIDNeedsReset, "high single-bit ECC rate"},
	48: {XIDFatal, "double-bit ECC error"}, 64: {XIDFatal, "row remapping failure"},
	74: {XIDFatal, "NVLink error"}, 79: {XIDFatal, "GPU has fallen off the bus"},
	95: {XIDFatal, "uncontained ECC error"}, 119: {XIDFatal, "GSP RPC timeout"},
	120: {XIDFatal, "GSP error"}, 140: {XIDFatal, "unrecovered ECC error"},
}

// DefaultXIDClasses returns the default classification (see defaultXIDs).
func DefaultXIDClasses() XIDClasses {
	c := make(XIDClasses, len(defaultXIDs))
	for x, d := range defaultXIDs {
		c[x] = d.class
	}
	return c
}

// NewXIDClasses builds a classification from the defaults and the lists an
// operator configured: a code listed in a class takes that class. A code
// in two lists is refused, naming the field.
func NewXIDClasses(fatal, needsReset, application []uint64) (XIDClasses, error) {
	c := DefaultXIDClasses()
	seen := map[uint64]string{}
	for _, l := range []struct {
		field string
		class XIDClass
		codes []uint64
	}{{"xid_fatal", XIDFatal, fatal}, {"xid_needs_reset", XIDNeedsReset, needsReset}, {"xid_application", XIDApplication, application}} {
		for _, x := range l.codes {
			if other, ok := seen[x]; ok && other != l.field {
				return nil, Invalid(l.field, "XID %d is also listed in %s; give each code one class", x, other)
			}
			seen[x] = l.field
			c[x] = l.class
		}
	}
	return c, nil
}

func xidWhat(x uint64) string {
	if d, ok := defaultXIDs[x]; ok {
		return d.what
	}
	return "configured"
}

// Assess summarises a report under classes c (nil: the defaults): the mean
// GPU utilisation and the worst class it shows — XIDFatal, XIDNeedsReset,
// or "" when the GPUs are healthy (application errors included) — with the
// reason. Uncorrectable ECC errors need a reset (the memory is remapped or
// its pages retired on the next one).
func (r NodeReport) Assess(c XIDClasses) (utilisation float64, class XIDClass, reason string) {
	if c == nil {
		c = DefaultXIDClasses()
	}
	if len(r.GPUs) == 0 {
		return 0, "", ""
	}
	var sum float64
	for _, g := range r.GPUs {
		sum += g.Utilisation
		if class == XIDFatal {
			continue
		}
		for _, x := range g.XIDs {
			switch k := c[x]; {
			case k == XIDFatal:
				class, reason = XIDFatal, fmt.Sprintf("GPU %d (%s): XID %d, %s (fatal)", g.Index, g.UUID, x, xidWhat(x))
			case k == XIDNeedsReset && class == "":
				class, reason = XIDNeedsReset, fmt.Sprintf("GPU %d (%s): XID %d, %s (needs a reset)", g.Index, g.UUID, x, xidWhat(x))
			}
			if class == XIDFatal {
				break
			}
		}
		if class == "" && g.ECCUncorrected > 0 {
			class, reason = XIDNeedsReset, fmt.Sprintf("GPU %d (%s): %d uncorrectable ECC errors (needs a reset)", g.Index, g.UUID, g.ECCUncorrected)
		}
	}
	return sum / float64(len(r.GPUs)), class, reason
}

// Health summarises a report under the default classes: the mean GPU
// utilisation and whether the node is healthy (no fatal or needs-reset
// fault), with the reason when it is not. The broker's verdict needs more
// than one report; see MergeInput.
func (r NodeReport) Health() (utilisation float64, healthy bool, reason string) {
	u, class, why := r.Assess(nil)
	return u, class == "", why
}
