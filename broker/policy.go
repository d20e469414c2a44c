package broker

import "time"

// Expander chooses which pool grows when several could serve demand.
type Expander string

// The expanders.
const (
	// ExpanderLeastWaste picks the pool that leaves the fewest idle GPUs.
	ExpanderLeastWaste Expander = "least-waste"
	// ExpanderMostPods picks the pool that places the most pending units.
	ExpanderMostPods Expander = "most-pods"
	// ExpanderPriority picks the pool with the highest ExpanderPriority.
	ExpanderPriority Expander = "priority"
	// ExpanderPrice picks the cheapest pool per GPU.
	ExpanderPrice Expander = "price"
)

// Valid reports whether e is a known expander.
func (e Expander) Valid() bool {
	switch e {
	case ExpanderLeastWaste, ExpanderMostPods, ExpanderPriority, ExpanderPrice:
		return true
	}
	return false
}

// Policy holds the cluster-wide rules the planner applies.
type Policy struct {
	// ClusterMinGPUs and ClusterMaxGPUs bound the GPUs of all pools together.
	ClusterMinGPUs int `json:"cluster_min_gpus"`
	ClusterMaxGPUs int `json:"cluster_max_gpus"`
	// ModelMaxGPUs bounds the GPUs of one model across pools (optional).
	ModelMaxGPUs map[string]int `json:"model_max_gpus,omitempty"`
	// ScaleDownUnneeded is how long a node must stay under the threshold
	// before it is reclaimed.
	ScaleDownUnneeded Duration `json:"scale_down_unneeded"`
	// ScaleDownUtilisation is the GPU allocation fraction at or under which
	// a node counts as underused.
	ScaleDownUtilisation float64 `json:"scale_down_utilisation"`
	// ScaleDownMeasured also counts a node as underused when the GPU
	// utilisation its agent measures is at or under ScaleDownUtilisation,
	// even if its GPUs are allocated: work that holds GPUs without using
	// them is then drained (it must fit elsewhere). Off by default, as the
	// cluster autoscaler decides by requests alone.
	ScaleDownMeasured bool `json:"scale_down_measured"`
	// MaxProvisionTime is how long an ordered node may take to offer GPUs
	// before the pool backs off.
	MaxProvisionTime Duration `json:"max_provision_time"`
	// Expander picks among pools for scale-up.
	Expander Expander `json:"expander"`
	// DrainTimeout bounds a Kubernetes drain or YARN graceful decommission.
	DrainTimeout Duration `json:"drain_timeout"`
	// ForceAfterDrainTimeout terminates a node whose drain timed out; when
	// false it is reported and given back to its side if disruption
	// budgets held it (engine.givesBackOnTimeout), else left cordoned for
	// an operator.
	ForceAfterDrainTimeout bool `json:"force_after_drain_timeout"`
	// Preemption allows preempting lower-priority work.
	Preemption bool `json:"preemption"`
	// OwnershipTransfer allows moving idle nodes between YARN and Kubernetes.
	OwnershipTransfer bool `json:"ownership_transfer"`
	// UnhealthyNodeTimeout is how long a node may stay down (NotReady,
	// LOST, unhealthy) before it is replaced.
	UnhealthyNodeTimeout Duration `json:"unhealthy_node_timeout"`
	// PlacementGrace is how long demand may stay pending while a node bought
	// or kept for it is gpu-ready before the broker records "capacity
	// present but not scheduling" and stops reserving capacity for it.
	PlacementGrace Duration `json:"placement_grace"`
	// YARNDrainByAttrition lets idle reclaim decommission a YARN node that
	// still runs GPU containers, with an infinite graceful timeout, so no new
	// containers land and the node leaves when its work ends. Off by
	// default: such a node is left alone until it is empty.
	YARNDrainByAttrition bool `json:"yarn_drain_by_attrition"`
	// MaxWorkLost bounds the work (time since the last checkpoint, summed
	// over a node's pods) that consolidation may throw away to reclaim a
	// Kubernetes node. Only a recorded preemption may exceed it.
	MaxWorkLost Duration `json:"consolidation_max_work_lost"`
	// CordonAndWait lets consolidation cordon a Kubernetes node whose work
	// costs more than MaxWorkLost and reclaim it when its batch work ends
	// (the Kubernetes mirror of YARNDrainByAttrition). Off by default.
	CordonAndWait bool `json:"consolidation_cordon_and_wait"`
	// Migrate lets consolidation move checkpointed work off an underused
	// node right after its checkpoint, so the node can leave
	// (migrate.go): off by default.
	Migrate MigrateMode `json:"consolidation_migrate,omitempty"`
	// MigrateWindow bounds how late a migration may see a task's next
	// checkpoint (written after the node was cordoned) and still stop
	// it: the work it throws away is at most this per task, in practice
	// the time the broker took to see the checkpoint (zero:
	// DefaultMigrateWindow).
	MigrateWindow Duration `json:"consolidation_migrate_window,omitzero"`
	// MigrateMaxWait bounds how long a migration holds its cordoned node
	// waiting for each task's next checkpoint; a task whose newest
	// checkpoint is older than this is not migrated at all (zero:
	// DefaultMigrateMaxWait).
	MigrateMaxWait Duration `json:"consolidation_migrate_max_wait,omitzero"`
	// MaxMigrationsPerHour bounds the tasks migrations restart in any
	// hour (zero: DefaultMaxMigrationsPerHour).
	MaxMigrationsPerHour int `json:"consolidation_max_migrations_per_hour,omitempty"`
	// NoMigrateTenants are tenants that opted out: none of their work is
	// ever migrated, and a node running any of it is not emptied by one.
	NoMigrateTenants []string `json:"consolidation_no_migrate_tenants,omitempty"`
	// Version increases on every change (optimistic concurrency).
	Version int64 `json:"version"`
}

// WithDefaults returns p with the durations whose zero means "the
// default" (max provision time, drain timeout, unhealthy node timeout) and
// the expander filled in from DefaultPolicy. The planner (MakePlan) and
// the runtime (each tick's policy) apply it once, where a policy enters;
// nothing downstream falls back on its own.
func (p Policy) WithDefaults() Policy {
	d := DefaultPolicy()
	if p.MaxProvisionTime <= 0 {
		p.MaxProvisionTime = d.MaxProvisionTime
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = d.DrainTimeout
	}
	if p.UnhealthyNodeTimeout <= 0 {
		p.UnhealthyNodeTimeout = d.UnhealthyNodeTimeout
	}
	if p.Expander == "" {
		p.Expander = d.Expander
	}
	if p.Migrate == "" {
		p.Migrate = MigrateOff
	}
	if p.MigrateWindow <= 0 {
		p.MigrateWindow = Duration(DefaultMigrateWindow)
	}
	if p.MigrateMaxWait <= 0 {
		p.MigrateMaxWait = Duration(DefaultMigrateMaxWait)
	}
	if p.MaxMigrationsPerHour <= 0 {
		p.MaxMigrationsPerHour = DefaultMaxMigrationsPerHour
	}
	return p
}

// DefaultPolicy returns the defaults of docs/design.md: 5 minutes unneeded at or
// under 0.5 GPU allocation, 15 minutes max provision time, least-waste.
func DefaultPolicy() Policy {
	return Policy{
		ClusterMinGPUs:       0,
		ClusterMaxGPUs:       1 << 20,
		ScaleDownUnneeded:    Duration(5 * time.Minute),
		ScaleDownUtilisation: 0.5,
		MaxProvisionTime:     Duration(15 * time.Minute),
		Expander:             ExpanderLeastWaste,
		DrainTimeout:         Duration(10 * time.Minute),
		Preemption:           true,
		OwnershipTransfer:    true,
		UnhealthyNodeTimeout: Duration(10 * time.Minute),
		PlacementGrace:       Duration(3 * time.Minute),
		MaxWorkLost:          Duration(10 * time.Minute),
		Migrate:              MigrateOff,
		MigrateWindow:        Duration(DefaultMigrateWindow),
		MigrateMaxWait:       Duration(DefaultMigrateMaxWait),
		MaxMigrationsPerHour: DefaultMaxMigrationsPerHour,
	}
}

// Validate checks the policy's fields.
func (p Policy) Validate() error {
	switch {
	case p.ClusterMinGPUs < 0:
		return Invalid("cluster_min_gpus", "must not be negative, got %d", p.ClusterMinGPUs)
	case p.ClusterMaxGPUs < p.ClusterMinGPUs:
		return Invalid("cluster_max_gpus", "must be at least cluster_min_gpus (%d), got %d", p.ClusterMinGPUs, p.ClusterMaxGPUs)
	case p.ScaleDownUnneeded < 0:
		return Invalid("scale_down_unneeded", "must not be negative, got %s", p.ScaleDownUnneeded)
	case !(p.ScaleDownUtilisation >= 0 && p.ScaleDownUtilisation <= 1):
		return Invalid("scale_down_utilisation", "must be between 0 and 1, got %g", p.ScaleDownUtilisation)
	case p.MaxProvisionTime <= 0:
		return Invalid("max_provision_time", "must be positive, got %s", p.MaxProvisionTime)
	case !p.Expander.Valid():
		return Invalid("expander", "must be one of least-waste, most-pods, priority, price; got %q", p.Expander)
	case p.DrainTimeout <= 0:
		return Invalid("drain_timeout", "must be positive, got %s", p.DrainTimeout)
	case p.UnhealthyNodeTimeout <= 0:
		return Invalid("unhealthy_node_timeout", "must be positive, got %s", p.UnhealthyNodeTimeout)
	case p.PlacementGrace <= 0:
		return Invalid("placement_grace", "must be positive, got %s", p.PlacementGrace)
	case p.MaxWorkLost < 0:
		return Invalid("consolidation_max_work_lost", "must not be negative, got %s", p.MaxWorkLost)
	case !p.Migrate.Valid():
		return Invalid("consolidation_migrate", "must be off or checkpointed, got %q", p.Migrate)
	case p.MigrateWindow < 0:
		return Invalid("consolidation_migrate_window", "must not be negative, got %s", p.MigrateWindow)
	case p.MigrateMaxWait < 0:
		return Invalid("consolidation_migrate_max_wait", "must not be negative, got %s", p.MigrateMaxWait)
	case p.MaxMigrationsPerHour < 0:
		return Invalid("consolidation_max_migrations_per_hour", "must not be negative, got %d", p.MaxMigrationsPerHour)
	}
	for model, max := range p.ModelMaxGPUs {
		if max < 0 {
			return Invalid("model_max_gpus."+model, "must not be negative, got %d", max)
		}
	}
	return nil
}

// Usage is the share of node n's GPUs that counts against scale-down:
// the allocated share, or with ScaleDownMeasured the measured utilisation
// when an agent reports it and it is lower. GPU use decides, never CPU.
func (p Policy) Usage(n *Node) float64 {
	if n.GPUsTotal <= 0 {
		return 0
	}
	u := float64(n.GPUsAllocated) / float64(n.GPUsTotal)
	if p.ScaleDownMeasured && n.Utilisation >= 0 && n.Utilisation < u {
		u = n.Utilisation
	}
	return u
}
