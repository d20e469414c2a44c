package broker

import (
	"encoding/json"
	"fmt"
	"time"
)

// Op steps. Each op kind's order is its table in steps.go (OpSteps),
// rendered in the README by StepDiagram.
//
// Every op ends: each step retries a bounded number of times with backoff
// (the executor in broker/engine), and every op has a deadline
// (OpData.Expires) after which it ends failed with its reason. An op that
// took a node from its side and cannot finish gives it back first
// (give-back); a cancelled scale-down does the same and ends cancelled.
const (
	StepSetDesired     = "set-desired"
	StepAwaitInstances = "await-instances"
	StepAwaitReady     = "await-ready"
	StepRelease        = "release"
	StepSurge          = "surge"
	StepTerminate      = "terminate"
	StepAdmit          = "admit"
	StepAwaitAdmitted  = "await-admitted"
	StepGiveBack       = "give-back"
	StepEvict          = "evict"
	StepForget         = "forget"
)

// OpData is the step state kept in the journal, so a resumed step knows
// what the first attempt decided.
type OpData struct {
	// From is the side that owned the node when the op started (OwnerNone
	// when none did); a node it already cordoned reports no owner afterwards.
	From Owner `json:"from,omitempty"`
	// Sides lists every side that held the node when a removal started
	// (From first); each is released before the terminate. Released lists
	// those done.
	Sides    []Owner `json:"sides,omitempty"`
	Released []Owner `json:"released,omitempty"`
	// InstanceID is the node's cloud instance from the provider's instance
	// map, fixed when the op starts.
	InstanceID string `json:"instance_id,omitempty"`
	// CordonOnly releases the node without draining it (manual cordon).
	CordonOnly bool `json:"cordon_only,omitempty"`
	// Prepared is set once From, Sides and InstanceID are persisted.
	Prepared bool `json:"prepared,omitempty"`
	// Deadline bounds the drain (Policy.DrainTimeout from the first release).
	Deadline time.Time `json:"deadline,omitzero"`
	// Expires is the op's own deadline, set when it is journaled: past it
	// the op ends failed with its reason, whatever step it is in.
	Expires time.Time `json:"expires,omitzero"`
	// Down is set when a replace started on a node its side reports down:
	// its work is already lost, so the node is cordoned, not drained.
	Down bool `json:"down,omitempty"`
	// SurgeTo is the desired capacity a replace raised the pool to before
	// terminating with a decrement; zero when it did not.
	SurgeTo int `json:"surge_to,omitempty"`
	// SetTo is the desired capacity a scale-up actually set (its target
	// plus removals that had not reached the cloud yet).
	SetTo int `json:"set_to,omitempty"`
	// Admitted is set once the receiving side was told to admit the node.
	Admitted bool `json:"admitted,omitempty"`
	// Cancel marks a scale-down cancelled for pending demand: it gives the
	// node back and ends cancelled.
	Cancel bool `json:"cancel,omitempty"`
	// SetAt is when the desired capacity was set.
	SetAt   time.Time  `json:"set_at,omitzero"`
	Victims []Workload `json:"victims,omitempty"`
	// Stopped records, victim by victim, what a preemption actually
	// stopped and how (a container after GRACEFUL_SHUTDOWN or
	// FORCEFUL_SHUTDOWN, an application killed because all of it was the
	// victim), in the order they stopped.
	Stopped []string `json:"stopped,omitempty"`
	// Stopping are the keys of a migration's tasks told to stop (each
	// right after a checkpoint): they are stopped to the end whatever
	// their checkpoint's age by then.
	Stopping []string `json:"stopping,omitempty"`
	// MigrateFrom is when a migration's node was cordoned: each task is
	// stopped only at a checkpoint written since.
	MigrateFrom time.Time `json:"migrate_from,omitzero"`
	Remaining   []string  `json:"remaining,omitempty"`
	BlockedBy   string    `json:"blocked_by,omitempty"`
	// Attrition releases the node without evicting anything (attrition.go);
	// CancelReason is why a pending attrition was cancelled.
	Attrition    bool   `json:"attrition,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	// Guarded is set on the scale-downs and transfers the planner
	// journals (not on an operator's drain, whose work is meant to go):
	// Planned lists the GPU work ("source/key") the plan saw on the node;
	// after the node is fenced, GPU work outside it landed after the plan,
	// and the node is given back instead of drained (broker/engine
	// fence.go).
	Guarded bool     `json:"guarded,omitempty"`
	Planned []string `json:"planned,omitempty"`
	// Fenced lists the sides on which the node was fenced (cordoned; for
	// YARN the graceful decommission started) at FencedAt; Checked those
	// whose observation taken after the fence showed no work landed.
	Fenced   []Owner   `json:"fenced,omitempty"`
	FencedAt time.Time `json:"fenced_at,omitzero"`
	Checked  []Owner   `json:"checked,omitempty"`
	// Cordon is the side cordon that keeps new work off the node while
	// its running work stays (YARN: the broker's exclusive node label),
	// journaled before it is applied so that a crash still undoes it
	// exactly. Nil while the op has not cordoned the node.
	Cordon *CordonRecord `json:"cordon,omitempty"`
	// Lost records work that ended on the node while the op held it
	// although nothing the op did could stop it (an RM failover that shut
	// a NodeManager down): the release goes on, but never silently.
	Lost *WorkLost `json:"lost,omitempty"`
}

// CordonRecord is a cordon an op put on a node, and what it replaced.
type CordonRecord struct {
	// Side is the side whose scheduler the cordon holds off.
	Side Source `json:"side"`
	// Prior is the node's state the cordon replaces (YARN: the host's node
	// labels, empty for the default partition): undoing the cordon puts
	// back exactly this.
	Prior []string `json:"prior"`
	// Applied is set once the side accepted the cordon; Undone once Prior
	// was restored.
	Applied bool `json:"applied,omitempty"`
	Undone  bool `json:"undone,omitempty"`
}

// Holds reports whether the cordon is on the node as far as the journal
// knows: applied and not undone.
func (c *CordonRecord) Holds() bool { return c != nil && c.Applied && !c.Undone }

// WorkLost is work that ended on a node an op held, not by the op's doing.
type WorkLost struct {
	// At is when the side reported the work gone.
	At time.Time `json:"at"`
	// Containers and Apps name what was lost; GPUHours is the GPU time
	// the lost work had run, from the last observation that held it.
	Containers []string `json:"containers,omitempty"`
	Apps       []string `json:"apps,omitempty"`
	GPUHours   float64  `json:"gpu_hours"`
	// Why is what the side reported.
	Why string `json:"why"`
}

// EncodeOpData encodes an op's step data for the journal. json.Marshal fails
// only on values JSON cannot hold (a deadline past the year 9999, a NaN or
// infinite float in a victim); callers then journal or advance nothing, so
// a step's state is never silently replaced by an empty one.
func EncodeOpData(d OpData) (json.RawMessage, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode op data: %w", err)
	}
	return b, nil
}

// DecodeOpData decodes an op's step data: the one decoder of the journal's
// step data (EncodeOpData is the one encoder). No data is empty data.
func DecodeOpData(op *Op) (OpData, error) {
	var d OpData
	if len(op.Data) == 0 {
		return d, nil
	}
	if err := json.Unmarshal(op.Data, &d); err != nil {
		return OpData{}, fmt.Errorf("decode op %d step data: %w", op.ID, err)
	}
	return d, nil
}

// OpDataOf is DecodeOpData for readers that only look: undecodable data
// reads as empty (the executor fails such an op on its next step).
func OpDataOf(op *Op) OpData {
	d, _ := DecodeOpData(op)
	return d
}
