package broker

import (
	"fmt"
	"time"
)

// GPUReport is one GPU as the node agent reads it through NVML.
type GPUReport struct {
	Index       int     `json:"index"`
	UUID        string  `json:"uuid"`
	Product     string  `json:"product"`
	Utilisation float64 `json:"utilisation"` // 0..1, GPU busy fraction over the sample window
	MemoryUsed  uint64  `json:"memory_used_bytes"`
	MemoryTotal uint64  `json:"memory_total_bytes"`
	Temperature int     `json:"temperature_c"`
	PowerWatts  float64 `json:"power_watts"`
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
	// At is when the agent sampled the GPUs.
	At            time.Time   `json:"at"`
	AgentVersion  string      `json:"agent_version"`
	DriverVersion string      `json:"driver_version"`
	GPUs          []GPUReport `json:"gpus"`
}

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
	}
	return nil
}

// fatalXIDs are XID codes that mean the GPU needs a reset or replacement
// (NVIDIA's XID catalogue: 48 double-bit ECC, 63/64 row remapping, 74 NVLink,
// 79 fallen off the bus, 92/94/95 ECC and containment errors).
var fatalXIDs = map[uint64]string{
	48: "double-bit ECC error", 63: "ECC page retirement or row remapping", 64: "row remapping failure",
	74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate",
	94: "contained ECC error", 95: "uncontained ECC error",
}

// Health summarises a report: the mean GPU utilisation and whether the node
// is healthy, with the reason when it is not.
func (r NodeReport) Health() (utilisation float64, healthy bool, reason string) {
	if len(r.GPUs) == 0 {
		return 0, true, ""
	}
	var sum float64
	healthy = true
	for _, g := range r.GPUs {
		sum += g.Utilisation
		if !healthy {
			continue
		}
		if g.ECCUncorrected > 0 {
			healthy, reason = false, fmt.Sprintf("GPU %d (%s): %d uncorrectable ECC errors", g.Index, g.UUID, g.ECCUncorrected)
			continue
		}
		for _, x := range g.XIDs {
			if what, ok := fatalXIDs[x]; ok {
				healthy, reason = false, fmt.Sprintf("GPU %d (%s): XID %d, %s", g.Index, g.UUID, x, what)
				break
			}
		}
	}
	return sum / float64(len(r.GPUs)), healthy, reason
}
