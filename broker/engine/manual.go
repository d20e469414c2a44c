package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Manual operations from the API. Each is journaled like a planned action
// and carried out by the executor, so it survives a restart and shows in
// the audit. A node with an open operation refuses a second one
// (ErrConflict).

// Cordon takes node away from its side's scheduler without evicting
// anything: a release whose drain is left to the operator. It is a
// transfer to no side that skips the drain.
func (r *Runtime) Cordon(ctx context.Context, node string) error {
	return r.manual(ctx, node, broker.OwnerNone, true, "manual cordon of "+node+" through the API")
}

// Drain cordons node and evicts its work; the node then belongs to no side
// until it is transferred or terminated.
func (r *Runtime) Drain(ctx context.Context, node string) error {
	return r.manual(ctx, node, broker.OwnerNone, false, "manual drain of "+node+" through the API")
}

// Transfer drains node from its side and hands it to the other.
func (r *Runtime) Transfer(ctx context.Context, node string, to broker.Owner) error {
	if _, ok := to.Side(); !ok {
		return broker.Invalid("to", "must be %q or %q, got %q", broker.OwnerYARN, broker.OwnerK8s, to)
	}
	return r.manual(ctx, node, to, false, fmt.Sprintf("manual transfer of %s to %s through the API", node, to))
}

func (r *Runtime) manual(ctx context.Context, node string, to broker.Owner, cordonOnly bool, reason string) error {
	if node == "" {
		return broker.Invalid("node", "must name a node")
	}
	from := r.ownerOf(node)
	if from == broker.OwnerNone && !r.knows(node) {
		return fmt.Errorf("node %q is not observed on either side: %w", node, broker.ErrNotFound)
	}
	if to != broker.OwnerNone && from == to {
		return fmt.Errorf("node %q already belongs to %s: %w", node, to, broker.ErrConflict)
	}
	// A node must not be cordoned for a side that can never admit it, nor
	// taken from one that cannot release it.
	for _, o := range []broker.Owner{from, to} {
		if src, ok := o.Side(); ok && r.actions[src] == nil {
			return broker.Invalid("node", "no actions are configured for %s, which node %q would move from or to", src, node)
		}
	}
	op, err := ManualOp(node, from, to, cordonOnly, time.Time{}, reason)
	if err != nil {
		return err
	}
	op, err = r.cfg.Ledger.InsertOp(ctx, op)
	if err != nil {
		return err
	}
	r.log.Info("manual action", "op", op.ID, "node", node, "to", to, "reason", reason)
	return nil
}

// ManualOp returns the journal entry of a manual operation on node: a
// transfer from side from (OwnerNone: nothing to drain) to side to
// (OwnerNone: the node stays with no side, a drain), without a drain when
// cordonOnly, with the release's deadline (zero: now plus the policy's
// drain timeout when the executor starts it). Operators' tools outside the
// API (gpubroker yarn decommission) journal it directly, so the leader's
// executor carries it out and the planner sees it, instead of undoing a
// change made behind its back. It fails only on a deadline JSON cannot
// hold (past the year 9999).
func ManualOp(node string, from, to broker.Owner, cordonOnly bool, deadline time.Time, reason string) (broker.Op, error) {
	raw, err := broker.EncodeOpData(broker.OpData{From: from, CordonOnly: cordonOnly, Deadline: deadline})
	if err != nil {
		return broker.Op{}, fmt.Errorf("manual op on node %q: %w", node, err)
	}
	return broker.Op{Kind: broker.ActTransfer, Node: node, To: to, Reason: reason, State: broker.OpPending, Step: broker.StepRelease, Data: raw}, nil
}

// knows reports whether any side observed node in its last good observation.
func (r *Runtime) knows(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, obs := range r.seen.lastGood {
		for _, n := range obs.Nodes {
			if n.Name == node {
				return true
			}
		}
	}
	return false
}
