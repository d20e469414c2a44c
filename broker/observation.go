package broker

import "time"

// SideObservation is one complete, successful observation of one side
// (YARN or Kubernetes): its pending demand and its GPU nodes.
type SideObservation struct {
	Source Source
	At     time.Time
	// Demand is every pending demand of the side that maps to a tenant.
	Demand []Demand
	// Which demand left is the ledger's to say (engine.Ledger.ApplyDemand
	// closes the side's demand this observation no longer holds); the
	// adapter only says why, from what it observes now. Closed gives the
	// reason for keys it names (CloseScheduled, CloseFinished, CloseDeleted
	// or ClosePreempted; keys that are still pending or were never demand
	// are ignored). Departed, when set, gives the reason for any other key
	// that left (e.g. a pod that now runs was scheduled, one that does not
	// was deleted); the ledger calls it only for keys that left. A key
	// neither names closes as CloseVanished.
	Closed   map[string]CloseReason
	Departed func(key string) CloseReason
	// Nodes are the side's GPU nodes with their running work. Owner is the
	// side for schedulable nodes and OwnerNone for ones this side has
	// released (cordoned, decommissioned).
	Nodes []Node
	// Ignored explains pending GPU work that does not count as demand
	// (gated, nominated, other scheduler, unmapped namespace or queue).
	Ignored []Wait
}

// CloseReason says why demand left the ledger.
type CloseReason string

// Why demand closed. CloseVanished is for demand that left an observation
// without the adapter knowing why (for example a pod deleted between two
// observations).
const (
	CloseScheduled CloseReason = "scheduled"
	CloseFinished  CloseReason = "finished"
	CloseDeleted   CloseReason = "deleted"
	ClosePreempted CloseReason = "preempted"
	CloseVanished  CloseReason = "vanished"
)

// Valid reports whether r is a known reason.
func (r CloseReason) Valid() bool {
	switch r {
	case CloseScheduled, CloseFinished, CloseDeleted, ClosePreempted, CloseVanished:
		return true
	}
	return false
}

// ReleaseStatus says how far taking a node away from a side has come.
type ReleaseStatus struct {
	// Drained is true when no non-system work is left on the node.
	Drained bool
	// Remaining names the work still running.
	Remaining []string
	// BlockedBy names what holds the drain back, e.g. "PodDisruptionBudget ml/trainer".
	BlockedBy string
	// Unknown says why the side cannot tell how far the release has come
	// (the RM does not list the host, a refresh went to a standby). Unknown
	// is never drained: the executor keeps waiting until the op's deadline
	// and then fails the op; it never terminates such a node, whatever the
	// policy says about forcing after a drain timeout.
	Unknown string
	// Unplanned names work on the node that the plan did not see (a pod
	// bound after the observation the plan was made from), found by a
	// release that compares the live work with the plan; the drain evicted
	// nothing of it, and the executor gives the node back.
	Unplanned []string
	// Lost names work that was running on the node at the side's last
	// look and ended without the release stopping it (YARN: a NodeManager
	// an RM failover shut down). The executor records it in the op.
	Lost []string
}

// CapacitySample is GPUs by state on one side at one time, for the
// dashboard's time series.
type CapacitySample struct {
	At           time.Time `json:"at"`
	Side         string    `json:"side"`
	GPUsBusy     int       `json:"gpus_busy"`
	GPUsIdle     int       `json:"gpus_idle"`
	GPUsInFlight int       `json:"gpus_in_flight"`
	GPUsPending  int       `json:"gpus_pending"`
}
