package broker

import (
	"encoding/json"
	"time"
)

// OpState is where a journaled operation stands.
type OpState string

// Operation states. Pending and Running ops are resumed after a restart.
const (
	OpPending   OpState = "pending"
	OpRunning   OpState = "running"
	OpDone      OpState = "done"
	OpFailed    OpState = "failed"
	OpCancelled OpState = "cancelled"
)

// Terminal reports whether no more steps will run.
func (s OpState) Terminal() bool { return s == OpDone || s == OpFailed || s == OpCancelled }

// Op is one journaled operation: an accepted action advanced step by step
// by the executor. Every step is idempotent, so a crash at any point is
// repaired by running the current step again.
type Op struct {
	ID int64 `json:"id"`
	// Kind and the target fields repeat the action being carried out.
	Kind   ActionKind `json:"kind"`
	Pool   string     `json:"pool,omitempty"`
	Node   string     `json:"node,omitempty"`
	Target int        `json:"target,omitempty"`
	To     Owner      `json:"to,omitempty"`
	// Serves lists the demand IDs the op is for.
	Serves []string `json:"serves,omitempty"`
	// Reason is the action's reason.
	Reason string `json:"reason"`
	// State and Step say how far the op got.
	State OpState `json:"state"`
	Step  string  `json:"step"`
	// Data carries step-specific state (e.g. the desired capacity before
	// scale-up) as JSON so a resumed step can check what was already done.
	Data json.RawMessage `json:"data,omitempty"`
	// Attempts counts tries of the current step; NextAttempt is when to retry.
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Decision is one audit record: an action taken or a reason demand waits.
type Decision struct {
	ID   int64     `json:"id"`
	At   time.Time `json:"at"`
	Tick int64     `json:"tick"`
	// Kind is an ActionKind, or one of the Decision* kinds below.
	Kind   string `json:"kind"`
	Demand string `json:"demand,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
	// Detail holds the structured action or wait.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// The kinds of a Decision that are no ActionKind.
const (
	// DecisionWait says why demand still waits (recorded when it changes).
	DecisionWait = "wait"
	// DecisionKept says why reclaim keeps a node (recorded when it changes).
	DecisionKept = "kept"
	// DecisionRejected is an action a fresh observation did not confirm.
	DecisionRejected = "rejected"
	// DecisionConflict is a node both sides claimed, and the side kept.
	DecisionConflict = "conflict"
	// DecisionLoss names work a release lost (containers, apps, GPU-hours).
	DecisionLoss = "loss"
)

// DecisionKinds lists every kind a Decision may have: the action kinds the
// planner records, then the others.
func DecisionKinds() []string {
	return []string{string(ActScaleUp), string(ActScaleDown), string(ActTransfer), string(ActPreempt), string(ActReplace),
		string(ActMigrate), string(ActCancelScaleDown), string(ActRecommission),
		DecisionWait, DecisionKept, DecisionRejected, DecisionConflict, DecisionLoss}
}
