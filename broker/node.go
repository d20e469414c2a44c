package broker

import "time"

// Phase is a node's lifecycle phase. Nodes move forward through the phases
// in the order below; Draining may go back to Active when a drain is
// cancelled or a node is handed to the other side.
type Phase string

// The lifecycle phases of a node.
const (
	PhaseRequested   Phase = "requested"   // ordered from the cloud, no instance yet
	PhaseBooting     Phase = "booting"     // instance exists, not registered yet
	PhaseRegistered  Phase = "registered"  // a kubelet or NodeManager registered it
	PhaseGPUReady    Phase = "gpu-ready"   // GPUs advertised (device plugin / yarn.io/gpu)
	PhaseActive      Phase = "active"      // schedulable and serving its side
	PhaseDraining    Phase = "draining"    // cordoned or decommissioning; work leaving
	PhaseDrained     Phase = "drained"     // no work left; may be handed over or terminated
	PhaseTerminating Phase = "terminating" // termination requested from the cloud
	PhaseGone        Phase = "gone"        // terminated; kept for history only
)

// Phases lists all phases in lifecycle order.
var Phases = [...]Phase{
	PhaseRequested, PhaseBooting, PhaseRegistered, PhaseGPUReady, PhaseActive,
	PhaseDraining, PhaseDrained, PhaseTerminating, PhaseGone,
}

// Valid reports whether p is a known phase.
func (p Phase) Valid() bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// InFlight reports whether a node in this phase is capacity on its way:
// ordered but not yet offering GPUs to a scheduler.
func (p Phase) InFlight() bool {
	return p == PhaseRequested || p == PhaseBooting || p == PhaseRegistered
}

// Owner is the side a node currently serves.
type Owner string

// Node owners. OwnerNone is a node that neither side may schedule on, such
// as one in transfer between sides or not registered anywhere yet.
const (
	OwnerYARN Owner = "yarn"
	OwnerK8s  Owner = "k8s"
	OwnerNone Owner = "none"
)

// Valid reports whether o is a known owner.
func (o Owner) Valid() bool { return o == OwnerYARN || o == OwnerK8s || o == OwnerNone }

// Side returns the source whose work the owner runs, and false for OwnerNone.
func (o Owner) Side() (Source, bool) {
	switch o {
	case OwnerYARN:
		return SourceYARN, true
	case OwnerK8s:
		return SourceK8s, true
	}
	return "", false
}

// Node is one GPU machine as the broker sees it, merged from the cloud, the
// Kubernetes API, the YARN RM and the node agent.
type Node struct {
	// Name is the Kubernetes node name or YARN NodeManager host; the same
	// machine has the same name on both sides (its private DNS name).
	Name string `json:"name"`
	// InstanceID is the cloud instance id, empty for nodes outside any pool.
	InstanceID string `json:"instance_id,omitempty"`
	// Pool is the pool the node belongs to, empty if unmanaged.
	Pool string `json:"pool,omitempty"`
	// Owner is the side that may schedule on the node.
	Owner Owner `json:"owner"`
	// Phase is the lifecycle phase.
	Phase Phase `json:"phase"`
	// PhaseSince is when the node entered its phase.
	PhaseSince time.Time `json:"phase_since,omitzero"`
	// GPUModel is the node's GPU product.
	GPUModel string `json:"gpu_model,omitempty"`
	// GPUsTotal is what the node offers; GPUsAllocated is what running work holds.
	GPUsTotal     int `json:"gpus_total"`
	GPUsAllocated int `json:"gpus_allocated"`
	// MIGProfile, when set, says the node offers MIG devices of this
	// profile and GPUsTotal and GPUsAllocated count them (slices), not
	// whole GPUs.
	MIGProfile string `json:"mig_profile,omitempty"`
	// GPUMemoryMiB is each GPU's memory, from the node's published devices
	// or its pool; 0 when unknown.
	GPUMemoryMiB int `json:"gpu_memory_mib,omitempty"`
	// Labels and Taints are the node's current ones.
	Labels map[string]string `json:"labels,omitempty"`
	Taints []Taint           `json:"taints,omitempty"`
	// Utilisation is the mean GPU utilisation (0..1) from the agent; -1 if unknown.
	Utilisation float64 `json:"utilisation"`
	// Healthy is false when the agent reported XID or ECC failures.
	Healthy bool `json:"healthy"`
	// HealthReason says why a node is unhealthy.
	HealthReason string `json:"health_reason,omitempty"`
	// NeedsReset is set on an unhealthy node whose fault a reset clears
	// (XIDNeedsReset): it takes no new work and is replaced only once its
	// running work has ended.
	NeedsReset bool `json:"needs_reset,omitempty"`
	// Protected nodes are never chosen for scale-down.
	Protected bool `json:"protected"`
	// UnderusedSince is when GPU allocation last dropped to or under the
	// scale-down threshold; zero while above it.
	UnderusedSince time.Time `json:"underused_since,omitzero"`
	// Partition is the node's YARN node label (partition); empty for the
	// default partition. Labelled YARN demand fits only nodes of its
	// partition and default demand only default-partition nodes.
	Partition string `json:"partition,omitempty"`
	// Down says why a node that had been ready no longer serves its side
	// (kubelet NotReady or unreachable, NodeManager LOST or UNHEALTHY);
	// empty while it is up. A down node is neither capacity nor capacity on
	// its way: it absorbs no demand, does not push its pool into backoff,
	// and is replaced once down for Policy.UnhealthyNodeTimeout.
	Down string `json:"down,omitempty"`
	// DownSince is when the node went down, as its side reports it.
	DownSince time.Time `json:"down_since,omitzero"`
	// Work lists what runs on the node.
	Work []Workload `json:"work,omitempty"`
}

// FreeGPUs returns GPUs not allocated to running work.
func (n Node) FreeGPUs() int {
	if f := n.GPUsTotal - n.GPUsAllocated; f > 0 {
		return f
	}
	return 0
}

// Workload is one running pod or container on a node.
type Workload struct {
	// Source and Key identify it as for Demand.
	Source Source `json:"source"`
	Key    string `json:"key"`
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	// Priority is on the unified scale.
	Priority int64 `json:"priority"`
	// GPUs held on this node: whole GPUs, or MIG slices when MIGProfile
	// is set.
	GPUs int `json:"gpus"`
	// MIGProfile is the profile of the MIG devices the work holds, if any.
	MIGProfile string `json:"mig_profile,omitempty"`
	// Preemptible is false for work that must never be preempted.
	Preemptible bool `json:"preemptible"`
	// StartedAt is when the work started running.
	StartedAt time.Time `json:"started_at,omitzero"`
	// CheckpointAge is the time since the newest checkpoint, or -1 if unknown
	// (treated as the whole run time: the worst case).
	CheckpointAge time.Duration `json:"checkpoint_age"`
	// CheckpointDir is where the work checkpoints (the
	// gpubroker.io/checkpoint-dir pod annotation or YARN app tag), if named.
	CheckpointDir string `json:"checkpoint_dir,omitempty"`
	// System is true for DaemonSet, mirror and other per-node pods that drains leave.
	System bool `json:"system"`
	// App groups work that lives and dies together: the YARN application
	// id of a container, or "<kind>/<namespace>/<name>" of a pod's
	// controller. Empty for bare pods.
	App string `json:"app,omitempty"`
	// AM marks a YARN ApplicationMaster container: it is never a victim
	// unless its whole application is.
	AM bool `json:"am,omitempty"`
	// AppGPUs is set on an ApplicationMaster: the GPUs its whole
	// application holds on all nodes. Stopping the AM ends the
	// application, so its cost is priced on these GPUs, not on the AM's
	// own (usually none).
	AppGPUs int `json:"app_gpus,omitempty"`
	// EvictGrace is how long a victim may take to exit after it was told
	// to stop gracefully before it is stopped forcefully: its tenant's
	// evict grace (Tenant.EvictGrace), zero for the side's default.
	EvictGrace time.Duration `json:"evict_grace,omitempty"`
	// Class says what moving the work costs for consolidation.
	Class WorkClass `json:"class,omitempty"`
	// DoNotDisrupt names what forbids evicting the work for consolidation
	// (an annotation such as karpenter.sh/do-not-disrupt); empty if nothing.
	// Only a recorded preemption for higher-priority demand may stop it.
	DoNotDisrupt string `json:"do_not_disrupt,omitempty"`
	// Budgets are the PodDisruptionBudgets that select the pod, with the
	// disruptions each allows now: a drain blocked by one is never
	// planned (disruption.go).
	Budgets []Budget `json:"budgets,omitempty"`
	// LocalStorage names the node-local volume (an emptyDir not declared
	// safe to evict, a hostPath) whose data an eviction throws away; such
	// work is not moved for consolidation, as the cluster autoscaler does
	// not move it. Empty if none.
	LocalStorage string `json:"local_storage,omitempty"`
	// Fatal says why evicting the work fails its controller for good (a
	// Job at its backoffLimit, a pod on a PersistentVolume local to the
	// node); empty when its controller recreates it. Such work is never
	// moved for consolidation, and a preemption loses its controller's
	// whole work: the time since FatalSince (the Job's start).
	Fatal      string    `json:"fatal,omitempty"`
	FatalSince time.Time `json:"fatal_since,omitzero"`
	// Unlisted marks what the side counts on the node but cannot name
	// (YARN: containers beyond the listed ones, such as those of an
	// application the RM is still recovering after a restart). While a
	// node holds it, a named workload missing from the node's listing may
	// still run there: its absence proves nothing.
	Unlisted bool `json:"unlisted,omitempty"`
	// Constraints are what the work asks of a node if it restarts (the
	// pod's node selector, affinity and tolerations; the YARN partition
	// its container runs in), when the side observed them; nil when
	// unknown. A migration lands work with known constraints on any node
	// of its side they match, and work without them only on its own pool.
	Constraints *Constraints `json:"constraints,omitempty"`
}

// WorkClass says how costly it is to move running work off a node.
type WorkClass string

// The work classes. Unknown ("") is treated like batch: its cost is the
// work since its last checkpoint, else its whole run time.
const (
	// WorkService is a replica of a Deployment, ReplicaSet or StatefulSet
	// (or work a PDB allows to move): cheap to move.
	WorkService WorkClass = "service"
	// WorkBatch is a Job's pod, a pod marked as training, or a YARN
	// container: moving it loses the work since its last checkpoint.
	WorkBatch WorkClass = "batch"
	// WorkBare is a pod without a controller: nothing recreates it, so it
	// is never evicted for consolidation.
	WorkBare WorkClass = "bare"
)

// unknownWork stands for work of unknown size: the worst case.
const unknownWork = time.Duration(1 << 62)

// WorkAtRisk returns how much work preempting this workload would lose at now.
func (w Workload) WorkAtRisk(now time.Time) time.Duration {
	if w.CheckpointAge >= 0 {
		return w.CheckpointAge
	}
	if w.StartedAt.IsZero() {
		return unknownWork
	}
	if now.Before(w.StartedAt) {
		return 0
	}
	return now.Sub(w.StartedAt)
}
