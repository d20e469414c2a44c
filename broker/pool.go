package broker

import (
	"strconv"
	"time"
)

// PoolSides says which side a pool's nodes may serve.
type PoolSides string

// Pool side settings.
const (
	PoolYARN   PoolSides = "yarn"
	PoolK8s    PoolSides = "k8s"
	PoolShared PoolSides = "shared"
)

// Serves reports whether a pool with these sides may serve side s.
func (p PoolSides) Serves(s Source) bool {
	return p == PoolShared || string(p) == string(s)
}

// Valid reports whether p is a known setting.
func (p PoolSides) Valid() bool { return p == PoolYARN || p == PoolK8s || p == PoolShared }

// ProviderFleet is the provider of a fleet pool: machines the company owns,
// named in the configuration, that the broker shares between the sides but
// never buys nor terminates (package fleet).
const ProviderFleet = "fleet"

// Pool is a node group behind a cloud autoscaling group, or a fleet of
// owned machines (Provider ProviderFleet).
type Pool struct {
	// Name identifies the pool in gpubroker.
	Name string `json:"name"`
	// Provider names the NodePool implementation ("aws").
	Provider string `json:"provider"`
	// Group is the provider's identifier, e.g. the autoscaling group name.
	Group string `json:"group"`
	// GPUModel is the GPU product of every node, e.g. "H100".
	GPUModel string `json:"gpu_model"`
	// GPUsPerNode is how many GPUs each node offers (0 for CPU pools).
	GPUsPerNode int `json:"gpus_per_node"`
	// MIGProfile, when set, says every GPU of a node is partitioned into
	// MIGPerGPU MIG devices of this profile ("1g.10gb"): the pool's nodes
	// offer MIG slices of the profile, not whole GPUs (Units).
	MIGProfile string `json:"mig_profile,omitempty"`
	MIGPerGPU  int    `json:"mig_per_gpu,omitempty"`
	// GPUMemoryMiB is the memory of each GPU; 0 when not declared. Demand
	// that selects GPUs by memory matches only pools and nodes whose
	// memory is known.
	GPUMemoryMiB int `json:"gpu_memory_mib,omitempty"`
	// MinNodes and MaxNodes bound the pool size.
	MinNodes int `json:"min_nodes"`
	MaxNodes int `json:"max_nodes"`
	// Labels and Taints are what the pool's nodes carry once they join.
	Labels map[string]string `json:"labels,omitempty"`
	Taints []Taint           `json:"taints,omitempty"`
	// Sides says which of YARN and Kubernetes the pool may serve.
	Sides PoolSides `json:"sides"`
	// PricePerHour is the cost of one node, for the price expander.
	PricePerHour float64 `json:"price_per_hour"`
	// ExpanderPriority ranks pools for the priority expander (higher first).
	ExpanderPriority int `json:"expander_priority"`
	// Partition is the YARN node label (partition) the pool's NodeManagers
	// join; empty for the default partition.
	Partition string `json:"partition,omitempty"`
	// Version increases on every change (optimistic concurrency).
	Version int64 `json:"version"`
}

// Fleet reports whether the pool is a fleet of owned machines: its size is
// the hosts present, and nothing buys or terminates one.
func (p Pool) Fleet() bool { return p.Provider == ProviderFleet }

// Validate checks the pool's fields.
func (p Pool) Validate() error {
	switch {
	case !ValidName(p.Name):
		return Invalid("name", "must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters), got %q", p.Name)
	case p.GPUsPerNode < 0:
		return Invalid("gpus_per_node", "must not be negative, got %d", p.GPUsPerNode)
	case p.MinNodes < 0:
		return Invalid("min_nodes", "must not be negative, got %d", p.MinNodes)
	case p.MaxNodes < p.MinNodes:
		return Invalid("max_nodes", "must be at least min_nodes (%d), got %d", p.MinNodes, p.MaxNodes)
	case !p.Sides.Valid():
		return Invalid("sides", "must be %q, %q or %q, got %q", PoolYARN, PoolK8s, PoolShared, p.Sides)
	case p.PricePerHour < 0:
		return Invalid("price_per_hour", "must not be negative, got %g", p.PricePerHour)
	case p.GPUMemoryMiB < 0:
		return Invalid("gpu_memory_mib", "must not be negative, got %d", p.GPUMemoryMiB)
	case p.MIGProfile == "" && p.MIGPerGPU != 0:
		return Invalid("mig_per_gpu", "is set (%d) without a MIG profile: name the profile every GPU is partitioned into, e.g. 1g.10gb", p.MIGPerGPU)
	case p.MIGProfile != "":
		c, ok := MIGComputeSlices(p.MIGProfile)
		switch {
		case !ok:
			return Invalid("mig_profile", "must be a MIG profile such as 1g.10gb, 2g.20gb or 3g.40gb (as nvidia.com/mig-<profile> names it), got %q", p.MIGProfile)
		case p.MIGPerGPU <= 0 || p.MIGPerGPU*c > MIGSlicesPerGPU:
			return Invalid("mig_per_gpu", "must be 1 to %d for profile %s (each device uses %d of a GPU's %d compute slices), got %d",
				MIGSlicesPerGPU/c, p.MIGProfile, c, MIGSlicesPerGPU, p.MIGPerGPU)
		case p.Sides != PoolK8s:
			return Invalid("sides", "must be %q for a MIG pool (MIG profile %s): YARN schedules whole GPUs only", PoolK8s, p.MIGProfile)
		case p.GPUsPerNode <= 0:
			return Invalid("gpus_per_node", "must be set for a MIG pool: the GPUs each node partitions into %d × %s", p.MIGPerGPU, p.MIGProfile)
		}
	}
	return nil
}

// Units returns what each node of the pool offers the planner: its GPUs,
// or for a MIG pool its MIG slices (GPUsPerNode × MIGPerGPU). Demand and
// running work on the pool's nodes count in the same units; cluster and
// per-model GPU limits count GPUsPerNode.
func (p Pool) Units() int {
	if p.MIGProfile != "" {
		return p.GPUsPerNode * p.MIGPerGPU
	}
	return p.GPUsPerNode
}

// PoolState is what the provider reports about a pool right now.
type PoolState struct {
	// Pool is the static definition, with tags from the provider applied.
	Pool Pool `json:"pool"`
	// Desired is the group's desired capacity.
	Desired int `json:"desired"`
	// Instances are the group's current instances.
	Instances []Instance `json:"instances"`
	// BackoffUntil, when in the future, means the pool must not be scaled up.
	BackoffUntil time.Time `json:"backoff_until,omitzero"`
	// BackoffReason says why the pool backs off (e.g. insufficient capacity).
	BackoffReason string `json:"backoff_reason,omitempty"`
	// Stale says why the provider could not observe the pool this time (its
	// describe failed, or the group is missing); empty when it is fresh. A
	// stale pool is never acted on destructively and never grown, while its
	// last-known GPUs still count against the cluster and per-model max.
	Stale string `json:"stale,omitempty"`
	// Missing are the hosts a fleet pool names that neither side lists: a
	// machine that is off, or not installed yet, and is no capacity.
	Missing []string `json:"missing,omitempty"`
}

// InService counts instances that are running in the group.
func (s PoolState) InService() int {
	n := 0
	for _, in := range s.Instances {
		if in.Phase != PhaseTerminating && in.Phase != PhaseGone {
			n++
		}
	}
	return n
}

// Instance is one cloud machine of a pool.
type Instance struct {
	// ID is the provider's instance id.
	ID string `json:"id"`
	// Hostname is the private DNS name, used to match the instance to a
	// Kubernetes node and a YARN NodeManager.
	Hostname string `json:"hostname"`
	// Phase is the lifecycle phase derived from the provider's state.
	Phase Phase `json:"phase"`
	// LaunchedAt is when the provider started the instance.
	LaunchedAt time.Time `json:"launched_at,omitzero"`
}

func itoa(i int) string { return strconv.Itoa(i) }
