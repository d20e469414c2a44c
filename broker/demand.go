package broker

import (
	"fmt"
	"time"
)

// Source is the system a unit of demand or work comes from.
type Source string

// The two sources of GPU demand.
const (
	SourceYARN Source = "yarn"
	SourceK8s  Source = "k8s"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool { return s == SourceYARN || s == SourceK8s }

// Sources lists every source in a fixed order.
var Sources = [...]Source{SourceYARN, SourceK8s}

// Demand is one pending ask for GPUs, as observed in YARN or Kubernetes.
//
// A Kubernetes demand is one pod (Units = 1). A YARN demand is one app's ANY
// ("*") resource request at one request priority: Units containers of
// GPUsPerUnit GPUs each. A gang needs all its units at once or none.
type Demand struct {
	// Source is where the demand was observed.
	Source Source `json:"source"`
	// Key is stable for the life of the demand within its source: the pod UID,
	// or "<application id>/<request priority>" for YARN.
	Key string `json:"key"`
	// Name is what a person recognises: "namespace/pod" or the YARN app name.
	Name string `json:"name"`
	// Tenant is the quota holder the YARN queue or namespace maps to.
	Tenant string `json:"tenant"`
	// Queue is the YARN queue or the Kubernetes namespace.
	Queue string `json:"queue"`
	// Priority is on the unified scale: the PriorityClass value for pods, the
	// tenant's base priority plus the app priority for YARN.
	Priority int64 `json:"priority"`
	// GPUsPerUnit is the GPUs one container or pod needs, on one node.
	GPUsPerUnit int `json:"gpus_per_unit"`
	// Units is the number of containers or pods asking (at least 1).
	Units int `json:"units"`
	// Gang is true when all units must be placed together or not at all.
	Gang bool `json:"gang"`
	// Constraints restrict which nodes can serve the demand.
	Constraints Constraints `json:"constraints"`
	// Preemptible is true when this work may be preempted once running.
	Preemptible bool `json:"preemptible"`
	// NoPreempt is true for demand that must never preempt other work
	// (a pod with preemptionPolicy: Never).
	NoPreempt bool `json:"no_preempt,omitempty"`
	// SchedulerReason is the scheduler's or RM's latest word on why the
	// demand is not placed (the PodScheduled condition's message, the YARN
	// app's diagnostics), for "capacity present but not scheduling".
	SchedulerReason string `json:"scheduler_reason,omitempty"`
	// Unsatisfiable, when set, says why the side cannot map the demand's
	// request to GPUs the planner can place (a DRA selector it does not
	// understand): the demand waits unsatisfiable with this reason and
	// nothing is bought for it on a guess.
	Unsatisfiable string `json:"unsatisfiable,omitempty"`
	// FirstSeen is when the broker first observed the demand. The ledger
	// owns it (engine.Ledger.DemandFirstSeen): adapters leave it zero and
	// the runtime fills it in the snapshot.
	FirstSeen time.Time `json:"first_seen"`
	// LastSeen is the time of the latest observation that still showed it.
	LastSeen time.Time `json:"last_seen"`
}

// GPUs returns the total GPUs the demand asks for (MIG slices for MIG
// demand, in the units its nodes offer).
func (d Demand) GPUs() int { return d.GPUsPerUnit * d.Units }

// Wait returns how long the demand has been pending at now.
func (d Demand) Wait(now time.Time) time.Duration {
	if d.FirstSeen.IsZero() || now.Before(d.FirstSeen) {
		return 0
	}
	return now.Sub(d.FirstSeen)
}

// ID returns "source/key", unique across sources.
func (d Demand) ID() string { return string(d.Source) + "/" + d.Key }

// Validate checks the fields that every adapter must fill in.
func (d Demand) Validate() error {
	switch {
	case !d.Source.Valid():
		return Invalid("source", "must be %q or %q, got %q", SourceYARN, SourceK8s, d.Source)
	case d.Key == "":
		return Invalid("key", "must not be empty")
	case d.Tenant == "":
		return Invalid("tenant", "must name a tenant; map the queue or namespace %q to one", d.Queue)
	case d.GPUsPerUnit <= 0:
		return Invalid("gpus_per_unit", "must be positive, got %d", d.GPUsPerUnit)
	case d.Units <= 0:
		return Invalid("units", "must be positive, got %d", d.Units)
	}
	return nil
}

// Toleration lets demand land on a node with a matching taint, with the
// semantics of a Kubernetes toleration.
type Toleration struct {
	Key string `json:"key,omitempty"`
	// Operator is "Equal" (default) or "Exists".
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	// Effect is empty (any), "NoSchedule", "PreferNoSchedule" or "NoExecute".
	Effect string `json:"effect,omitempty"`
}

// Tolerates reports whether the toleration matches taint t.
func (tol Toleration) Tolerates(t Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Operator == "Exists" {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}

// Taint keeps work off a node unless the work tolerates it.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

func (t Taint) String() string {
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

// Constraints are the placement restrictions of a demand.
type Constraints struct {
	// GPUModels lists acceptable GPU models; empty means any.
	GPUModels []string `json:"gpu_models,omitempty"`
	// NodeSelector must all match the node's labels.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Affinity terms are ORed; the requirements within a term are ANDed, as
	// in requiredDuringSchedulingIgnoredDuringExecution.
	Affinity []AffinityTerm `json:"affinity,omitempty"`
	// Tolerations of the demand; NoSchedule and NoExecute taints of a node
	// that none of them tolerates keep the demand off it.
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// NodeLabel is the YARN node-label expression, if any.
	NodeLabel string `json:"node_label,omitempty"`
	// MIGProfile, when set, says the demand asks for MIG devices of this
	// profile ("1g.10gb"): GPUsPerUnit counts slices, and only nodes and
	// pools that offer the profile match. Whole-GPU demand (empty) never
	// matches a node that offers MIG slices, nor MIG demand a whole-GPU
	// node.
	MIGProfile string `json:"mig_profile,omitempty"`
	// MinGPUMemoryMiB, when positive, is the least memory each GPU must
	// have (a DRA selector on the device's memory); nodes and pools of
	// unknown memory do not match.
	MinGPUMemoryMiB int `json:"min_gpu_memory_mib,omitempty"`
}

// AffinityTerm is a conjunction of label requirements.
type AffinityTerm struct {
	Requirements []LabelRequirement `json:"requirements"`
}

// LabelRequirement is one node-selector requirement.
type LabelRequirement struct {
	Key string `json:"key"`
	// Operator is In, NotIn, Exists, DoesNotExist, Gt or Lt.
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}
