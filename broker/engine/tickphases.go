package engine

// The tick phases around execution: validate (a fresh observation must
// plan the same destructive action), journal (intent persisted before any
// step runs) and record (every decision and changed wait).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// validate re-checks destructive actions against a fresh observation: an
// action survives only if planning on the fresh snapshot proposes the same
// action — kind, pool, node, instance, sides and, for a preemption, the
// same victims (Karpenter's validation before disruption). A preemption
// that serves demand which must never preempt is rejected outright.
// Scale-ups pass as they are.
func (r *Runtime) validate(ctx context.Context, plan broker.Plan) (accepted, rejected []broker.Action, err error) {
	var destructive bool
	for _, a := range plan.Actions {
		if a.Kind.Destructive() {
			destructive = true
			break
		}
	}
	if !destructive {
		return plan.Actions, nil, nil
	}
	fresh, policy, err := r.observe(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("validate: %w", err)
	}
	confirmed := map[string]bool{}
	for _, a := range broker.MakePlan(fresh, policy).Actions {
		confirmed[actionKey(a)] = true
	}
	noPreempt := map[string]bool{}
	for _, d := range fresh.Demand {
		if d.NoPreempt {
			noPreempt[d.ID()] = true
		}
	}
	for _, a := range plan.Actions {
		if !a.Kind.Destructive() {
			accepted = append(accepted, a)
			continue
		}
		if a.Kind == broker.ActPreempt {
			if i := slices.IndexFunc(a.Serves, func(id string) bool { return noPreempt[id] }); i >= 0 {
				r.log.Warn("preemption for demand that must never preempt rejected", "node", a.Node, "demand", a.Serves[i])
				a.Reason = fmt.Sprintf("demand %s must never preempt (preemptionPolicy: Never): %s", a.Serves[i], a.Reason)
				rejected = append(rejected, a)
				continue
			}
		}
		if confirmed[actionKey(a)] {
			accepted = append(accepted, a)
			continue
		}
		r.log.Info("action not confirmed by fresh state", "kind", a.Kind, "node", a.Node, "reason", a.Reason)
		rejected = append(rejected, a)
	}
	return accepted, rejected, nil
}

// actionKey identifies what a destructive action does, for validation.
func actionKey(a broker.Action) string {
	victims := make([]string, 0, len(a.Victims))
	for _, v := range a.Victims {
		victims = append(victims, fmt.Sprintf("%s/%s:%d", v.Source, v.Key, v.GPUs))
	}
	slices.Sort(victims)
	// Strings only (kinds and owners are string types): JSON encodes them
	// all, so the error is always nil.
	b, _ := json.Marshal([]any{a.Kind, a.Pool, a.Node, a.InstanceID, a.From, a.To, victims})
	return string(b)
}

// journal writes accepted actions to the ops journal before anything is
// done. An action whose node or pool already has an open op is skipped,
// except that a scale-up supersedes the pool's scale-up that only waits
// for its machines to become gpu-ready (keeping the demand it serves
// linked), and a cancellation turns the node's open scale-down into a
// give-back.
func (r *Runtime) journal(ctx context.Context, now time.Time, policy broker.Policy, actions []broker.Action) []broker.Op {
	var out []broker.Op
	for _, a := range actions {
		if a.Kind == broker.ActCancelScaleDown {
			if op, ok := r.cancelScaleDown(ctx, a); ok {
				out = append(out, op)
			}
			continue
		}
		if a.Kind == broker.ActRecommission {
			r.cancelAttrition(ctx, a) // ends the open op on the node (attrition.go)
			continue
		}
		data := broker.OpData{From: a.From, Victims: a.Victims, InstanceID: a.InstanceID, Attrition: a.Attrition, CordonOnly: a.CordonOnly}
		if a.Kind == broker.ActScaleDown || a.Kind == broker.ActTransfer || a.Kind == broker.ActMigrate {
			// A migration's release compares too: what runs on the
			// emptied node besides its tasks is no work it may evict.
			data.Guarded, data.Planned = true, r.plannedWork(a)
		}
		if !a.Attrition {
			// An attrition has no deadline of its own: it ends when the
			// node's work does, or is cancelled when demand could use it.
			data.Expires = now.Add(opTimeout(a.Kind, policy))
		}
		raw, err := broker.EncodeOpData(data)
		if err != nil {
			r.log.Error("journal action", "kind", a.Kind, "pool", a.Pool, "node", a.Node, "err", err)
			continue
		}
		op := broker.Op{Kind: a.Kind, Pool: a.Pool, Node: a.Node, Target: a.Target, To: a.To,
			Serves: a.Serves, Reason: a.Reason, State: broker.OpPending, Step: broker.FirstStep(a.Kind), Data: raw}
		// IMPORTANT: the intent is persisted before any step runs, so a
		// crash after this point resumes the op instead of forgetting it.
		stored, err := r.cfg.Ledger.InsertOp(ctx, op)
		if errors.Is(err, broker.ErrConflict) && a.Kind == broker.ActScaleUp {
			if prev, ok := r.supersede(ctx, op); ok {
				op.Serves = mergeServes(prev.Serves, op.Serves)
				stored, err = r.cfg.Ledger.InsertOp(ctx, op)
			}
		}
		if errors.Is(err, broker.ErrConflict) {
			r.log.Debug("op already in progress", "kind", a.Kind, "pool", a.Pool, "node", a.Node)
			continue
		}
		if err != nil {
			r.log.Error("journal action", "kind", a.Kind, "pool", a.Pool, "node", a.Node, "err", err)
			continue
		}
		r.log.Info("action", "op", stored.ID, "kind", a.Kind, "pool", a.Pool, "node", a.Node, "target", a.Target, "reason", a.Reason)
		out = append(out, stored)
	}
	return out
}

// supersede ends the pool's open scale-up when it only waits for its
// machines to become gpu-ready, so a new scale-up may take its place.
func (r *Runtime) supersede(ctx context.Context, next broker.Op) (broker.Op, bool) {
	open, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		return broker.Op{}, false
	}
	for _, o := range open {
		if o.Kind != broker.ActScaleUp || o.Pool != next.Pool || o.Step != broker.StepAwaitReady || o.Target > next.Target {
			continue
		}
		o.State, o.LastError, o.NextAttempt = broker.OpDone, "", time.Time{}
		if _, err := r.cfg.Ledger.AdvanceOp(ctx, o); err != nil {
			return broker.Op{}, false
		}
		r.log.Info("scale-up superseded", "op", o.ID, "pool", o.Pool, "target", next.Target)
		return o, true
	}
	return broker.Op{}, false
}

func mergeServes(a, b []string) []string {
	out := slices.Clone(a)
	for _, id := range b {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// cancelScaleDown turns the node's scale-down, still draining, into a
// give-back that ends cancelled.
func (r *Runtime) cancelScaleDown(ctx context.Context, a broker.Action) (broker.Op, bool) {
	open, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		r.log.Error("cancel scale-down", "node", a.Node, "err", err)
		return broker.Op{}, false
	}
	for _, o := range open {
		to, ok := broker.InterruptTo(o.Kind, broker.ActCancelScaleDown, o.Step)
		if o.Node != a.Node || !ok {
			continue
		}
		data := broker.OpDataOf(&o)
		data.Cancel = true
		if o.Data, err = broker.EncodeOpData(data); err != nil {
			r.log.Error("cancel scale-down", "op", o.ID, "node", a.Node, "err", err)
			return broker.Op{}, false
		}
		o.Step, o.Attempts, o.NextAttempt, o.LastError = to, 0, time.Time{}, a.Reason
		stored, err := r.cfg.Ledger.AdvanceOp(ctx, o)
		if err != nil {
			r.log.Error("cancel scale-down", "op", o.ID, "node", a.Node, "err", err)
			return broker.Op{}, false
		}
		r.log.Info("action", "op", o.ID, "kind", a.Kind, "pool", a.Pool, "node", a.Node, "reason", a.Reason)
		return stored, true
	}
	return broker.Op{}, false
}

// record writes the decisions of a tick: every action, every rejected
// action, and each wait whose reason changed since the last tick.
func (r *Runtime) record(ctx context.Context, snap *broker.Snapshot, plan broker.Plan, rejected []broker.Action, extra []broker.Decision) error {
	ds := extra
	tick := r.Status().Tick
	for _, a := range plan.Actions {
		detail := r.decisionDetail(string(a.Kind), a)
		ds = append(ds, broker.Decision{At: snap.Now, Tick: tick, Kind: string(a.Kind), Demand: first(a.Serves),
			Pool: a.Pool, Node: a.Node, Reason: a.Reason, Detail: detail})
	}
	for _, a := range rejected {
		ds = append(ds, broker.Decision{At: snap.Now, Tick: tick, Kind: broker.DecisionRejected, Pool: a.Pool, Node: a.Node,
			Reason: "not confirmed by a fresh observation: " + a.Reason})
	}
	tenants := map[string]string{}
	for _, d := range snap.Demand {
		tenants[d.ID()] = d.Tenant
	}
	r.mu.Lock()
	for _, w := range plan.Waits {
		if r.waitSeen[w.Demand] == w.Reason {
			continue
		}
		r.waitSeen[w.Demand] = w.Reason
		detail := r.decisionDetail(broker.DecisionWait, w)
		ds = append(ds, broker.Decision{At: snap.Now, Tick: tick, Kind: broker.DecisionWait, Demand: w.Demand,
			Tenant: tenants[w.Demand], Reason: string(w.Reason) + ": " + w.Detail, Detail: detail})
	}
	if r.keptSeen == nil {
		r.keptSeen = map[string]string{}
	}
	kept := make(map[string]bool, len(plan.Kept))
	for _, k := range plan.Kept {
		kept[k.Node] = true
		if r.keptSeen[k.Node] == k.Reason {
			continue
		}
		r.keptSeen[k.Node] = k.Reason
		detail := r.decisionDetail(broker.DecisionKept, k)
		ds = append(ds, broker.Decision{At: snap.Now, Tick: tick, Kind: broker.DecisionKept, Node: k.Node, Reason: k.Reason, Detail: detail})
	}
	for node := range r.keptSeen {
		if !kept[node] {
			delete(r.keptSeen, node) // a later note for it is news again
		}
	}
	r.mu.Unlock()
	if err := r.cfg.Ledger.RecordDecisions(ctx, ds); err != nil {
		return err
	}
	r.learnPoolMemory(ctx, snap)
	if err := r.cfg.Ledger.SetWaitReasons(ctx, r.changedWaits(plan.Waits)); err != nil {
		return err
	}
	r.wroteWaits(plan.Waits)
	return r.cfg.Ledger.RecordSamples(ctx, broker.CapacitySamples(snap))
}

// changedWaits are the waits that differ from what this runtime last
// wrote, so a steady ledger of 50,000 waiting demands is not sent again
// every tick. A demand missing from a tick's waits is forgotten
// (wroteWaits): one that left the ledger and came back, a fresh row without
// a reason, is written again; a new runtime (a new term) writes them all.
func (r *Runtime) changedWaits(ws []broker.Wait) []broker.Wait {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []broker.Wait
	for _, w := range ws {
		if prev, ok := r.waitsWritten[w.Demand]; !ok || prev != w {
			out = append(out, w)
		}
	}
	return out
}

// wroteWaits remembers the waits the ledger now holds.
func (r *Runtime) wroteWaits(ws []broker.Wait) {
	m := make(map[string]broker.Wait, len(ws))
	for _, w := range ws {
		m[w.Demand] = w
	}
	r.mu.Lock()
	r.waitsWritten = m
	r.mu.Unlock()
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// decisionDetail encodes v as the structured detail of a decision of kind.
// A value that cannot be encoded is logged and left out: the decision is
// still recorded with its reason.
func (r *Runtime) decisionDetail(kind string, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		r.log.Error("encode decision detail", "kind", kind, "err", err)
		return nil
	}
	return b
}

// learnPoolMemory remembers, for each pool that does not state its GPUs'
// memory, the least memory its live whole-GPU nodes show (their DRA
// devices' capacity, or the agent's NVML reading), so a pool back at zero
// still matches demand that selects GPUs by memory. A node with less than
// the pool's value lowers it (the store keeps only a lower one and never
// touches a stated value); the runtime asks only when its figure for a
// pool changes. A failure is logged and asked again next tick.
func (r *Runtime) learnPoolMemory(ctx context.Context, snap *broker.Snapshot) {
	l, ok := r.cfg.Ledger.(PoolMemoryLearner)
	if !ok {
		return
	}
	var least map[string]int
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if n.Pool == "" || n.GPUMemoryMiB <= 0 || n.MIGProfile != "" || n.Phase == broker.PhaseGone {
			continue
		}
		if least == nil {
			least = map[string]int{}
		}
		if m, seen := least[n.Pool]; !seen || n.GPUMemoryMiB < m {
			least[n.Pool] = n.GPUMemoryMiB
		}
	}
	for _, ps := range snap.Pools {
		m := least[ps.Pool.Name]
		if m <= 0 || ps.Pool.MIGProfile != "" || ps.Pool.GPUMemoryMiB != 0 && m >= ps.Pool.GPUMemoryMiB ||
			r.learnedMemory[ps.Pool.Name] == m {
			continue
		}
		if err := l.LearnPoolGPUMemory(ctx, ps.Pool.Name, m); err != nil {
			r.log.Warn("remember the GPU memory of a pool", "pool", ps.Pool.Name, "mib", m, "err", err)
			continue
		}
		if r.learnedMemory == nil {
			r.learnedMemory = map[string]int{}
		}
		r.learnedMemory[ps.Pool.Name] = m
	}
}
