package broker

import "time"

// Snapshot is one immutable view of both clusters and the pools, taken at
// Now. The planner reads nothing else; it must not modify a snapshot.
type Snapshot struct {
	// Now is the observation time; the planner has no clock of its own.
	Now time.Time `json:"now"`
	// Demand is every pending demand from both sources.
	Demand []Demand `json:"demand"`
	// Tenants by name.
	Tenants map[string]Tenant `json:"tenants"`
	// Pools are the node pools with their provider state.
	Pools []PoolState `json:"pools"`
	// Nodes are all GPU nodes known on either side or in a pool.
	Nodes []Node `json:"nodes"`
	// InFlight are operations in progress from the journal, so the planner
	// counts ordered capacity and does not repeat work.
	InFlight []Op `json:"in_flight"`
	// MigratedLastHour is how many tasks migrate ops started in the hour
	// before Now restart (MigratedTasks): the planner keeps migrations
	// within Policy.MaxMigrationsPerHour with it.
	MigratedLastHour int `json:"migrated_last_hour,omitempty"`
	// Stale lists sources whose observation failed or is too old; no
	// destructive action may touch their side.
	Stale map[Source]string `json:"stale,omitempty"`
	// CapacityPresentSince gives, per demand ID, since when ready capacity
	// that fits the demand has been there for it (the previous plans said
	// its scheduler should place it) without the demand being placed. The
	// runtime keeps this memory across ticks; past Policy.PlacementGrace
	// the planner records "capacity present but not scheduling" and stops
	// reserving capacity for the demand.
	CapacityPresentSince map[string]time.Time `json:"capacity_present_since,omitempty"`
	// NoActions lists sides that have no SideActions configured, with why:
	// nothing can be released from or admitted to them, so ownership
	// transfer to or from them is off.
	NoActions map[Source]string `json:"no_actions,omitempty"`
	// TerminateKeepsDesired says the node pool can terminate an instance
	// without lowering the desired capacity (KeepDesiredTerminator); without
	// it a replacement needs room for one more node or one less.
	TerminateKeepsDesired bool `json:"terminate_keeps_desired,omitempty"`
}

// IsStale reports whether side s must not be acted on destructively.
func (s *Snapshot) IsStale(src Source) bool {
	_, ok := s.Stale[src]
	return ok
}

// Plan is the planner's output: actions to take and, for pending demand
// that gets nothing, why it waits.
type Plan struct {
	// Actions in the order they should be started.
	Actions []Action `json:"actions"`
	// Waits explains every pending demand that no action serves.
	Waits []Wait `json:"waits"`
	// Kept explains every node that idle reclaim would have taken (underused
	// for the unneeded time) but keeps because of the work it runs, and
	// every unhealthy node that is not repaired (its pool's repairs are
	// paused, or it needs a reset and still runs work).
	Kept []NodeNote `json:"kept,omitempty"`
}

// NodeNote is a non-decision about a node: why it was not reclaimed.
type NodeNote struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// ActionKind names what an action does.
type ActionKind string

// The kinds of action.
const (
	// ActScaleUp sets a pool's desired capacity to Target.
	ActScaleUp ActionKind = "scale-up"
	// ActScaleDown drains Node and terminates it with a desired decrement.
	ActScaleDown ActionKind = "scale-down"
	// ActTransfer drains Node from its owner and hands it to To.
	ActTransfer ActionKind = "transfer"
	// ActPreempt evicts the Victims to make room for demand.
	ActPreempt ActionKind = "preempt"
	// ActReplace drains an unhealthy or down Node and terminates it,
	// keeping the pool's desired capacity (the replacement is bought first
	// or the provider terminates without a decrement).
	ActReplace ActionKind = "replace"
	// ActCancelScaleDown gives a node whose scale-down has not reached the
	// cloud yet back to its side, because pending demand fits it.
	ActCancelScaleDown ActionKind = "cancel-scale-down"
	// ActRecommission cancels the attrition (or cordon-and-wait) scale-down
	// in flight on Node and gives the node back to its side, because demand
	// there could use it. It journals no op of its own: the open op on the
	// node is ended.
	ActRecommission ActionKind = "recommission"
	// ActMigrate moves the Victims off underused Node right after their
	// checkpoints (cordon, stop them, then release and terminate the
	// emptied node with a desired decrement): migrate.go.
	ActMigrate ActionKind = "migrate"
)

// Destructive reports whether the action removes work or capacity; those are
// re-validated against fresh observations and never taken on a stale side.
// A recommission gives capacity back and removes nothing.
func (k ActionKind) Destructive() bool { return k != ActScaleUp && k != ActRecommission }

// Action is one change the planner wants, with a reason a person can read.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Pool is the pool being resized (scale-up/down) or the node's pool.
	Pool string `json:"pool,omitempty"`
	// Target is the absolute desired capacity for ActScaleUp.
	Target int `json:"target,omitempty"`
	// Node is the node to drain, transfer, replace or terminate.
	Node string `json:"node,omitempty"`
	// InstanceID is the cloud instance of Node, from the provider's
	// instance map; terminate steps use it and never guess from names.
	InstanceID string `json:"instance_id,omitempty"`
	// From and To are the sides of an ownership transfer.
	From Owner `json:"from,omitempty"`
	To   Owner `json:"to,omitempty"`
	// Victims are the workloads an ActPreempt evicts, or an ActMigrate
	// moves.
	Victims []Workload `json:"victims,omitempty"`
	// Landing names the nodes an ActMigrate expects its work to restart
	// on (its scheduler decides; the cordon keeps it off Node).
	Landing []string `json:"landing,omitempty"`
	// Serves lists the demand IDs (Demand.ID) the action is for.
	Serves []string `json:"serves,omitempty"`
	// Reason explains the action in one sentence.
	Reason string `json:"reason"`
	// Attrition marks a scale-down that evicts nothing: the node is
	// decommissioned with an infinite graceful timeout (YARN) or cordoned
	// (Kubernetes, cordon-and-wait) and leaves when its work ends.
	Attrition bool `json:"attrition,omitempty"`
	// CordonOnly marks a transfer to OwnerNone that cordons the node on its
	// side and drains nothing: a faulty host of a fleet pool, which no
	// cloud replaces, takes no new work and is reported for repair.
	CordonOnly bool `json:"cordon_only,omitempty"`
	// GPUHoursLost is the work a preemption, or a drain for idle reclaim,
	// throws away (time since each workload's last checkpoint times its
	// GPUs; services lose none), for the decision record and the replay.
	GPUHoursLost float64 `json:"gpu_hours_lost,omitempty"`
}

// WaitReason classifies why pending demand gets nothing this tick.
type WaitReason string

// Why demand waits.
const (
	WaitUnsatisfiable WaitReason = "unsatisfiable"   // no pool could ever serve it
	WaitQuota         WaitReason = "over-quota"      // beyond the tenant's max GPUs
	WaitInFlight      WaitReason = "in-flight"       // a node ordered for it is on its way
	WaitBackoff       WaitReason = "pool-backoff"    // the fitting pools back off
	WaitPoolMax       WaitReason = "pool-max"        // the fitting pools are at max
	WaitClusterMax    WaitReason = "cluster-max"     // the cluster GPU max is reached
	WaitPriority      WaitReason = "lower-priority"  // higher-priority demand took the room
	WaitStale         WaitReason = "stale-source"    // its side is stale
	WaitScheduler     WaitReason = "scheduler"       // free GPUs exist; its scheduler should place it
	WaitNoPreemptible WaitReason = "no-preemptible"  // nothing lower-priority to preempt
	WaitGang          WaitReason = "gang-incomplete" // not all units of the gang fit
	// WaitNotScheduling is demand whose capacity has been ready for the
	// placement grace without its scheduler placing it (CPU or memory, a
	// volume's zone, anti-affinity, queue limits): more capacity would
	// not help, so none is reserved or bought for it.
	WaitNotScheduling WaitReason = "not-scheduling"
	// WaitUnmapped is pending GPU work that is not demand because its YARN
	// queue or namespace maps to no tenant (SideObservation.Ignored); the
	// one name both sides use for it.
	WaitUnmapped WaitReason = "unmapped"
)

// Wait is a non-decision: pending demand that no action serves, and why.
type Wait struct {
	Demand string     `json:"demand"`
	Reason WaitReason `json:"reason"`
	Detail string     `json:"detail"`
}
