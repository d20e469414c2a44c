package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Op steps, in order per kind:
//
//	scale-up:           set-desired → await-instances → done
//	scale-down/replace: release → terminate (→ forget, for a YARN node) → done
//	transfer:           release → admit → done (on drain timeout: give back → failed)
//	preempt:            evict → done
const (
	stepSetDesired     = "set-desired"
	stepAwaitInstances = "await-instances"
	stepRelease        = "release"
	stepTerminate      = "terminate"
	stepAdmit          = "admit"
	stepGiveBack       = "give-back"
	stepEvict          = "evict"
	stepForget         = "forget"
)

// opData is the step state kept in the journal, so a resumed step knows
// what the first attempt decided.
type opData struct {
	// From is the side that owned the node when the op started (OwnerNone
	// when none did); a node it already cordoned reports no owner afterwards.
	From Owner `json:"from,omitempty"`
	// InstanceID and Deadline are fixed when the op starts.
	InstanceID string `json:"instance_id,omitempty"`
	// CordonOnly releases the node without draining it (manual cordon).
	CordonOnly bool `json:"cordon_only,omitempty"`
	// Prepared is set once From and InstanceID are persisted.
	Prepared bool      `json:"prepared,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
	// SetAt is when the desired capacity was set.
	SetAt     time.Time  `json:"set_at,omitzero"`
	Victims   []Workload `json:"victims,omitempty"`
	Remaining []string   `json:"remaining,omitempty"`
	BlockedBy string     `json:"blocked_by,omitempty"`
	// Attrition releases the node without evicting anything (attrition.go);
	// Cancel is why a pending attrition was cancelled.
	Attrition bool   `json:"attrition,omitempty"`
	Cancel    string `json:"cancel,omitempty"`
}

func firstStep(k ActionKind) string {
	switch k {
	case ActScaleUp:
		return stepSetDesired
	case ActPreempt:
		return stepEvict
	default:
		return stepRelease
	}
}

// validate re-checks destructive actions against a fresh observation: an
// action survives only if planning on the fresh snapshot proposes it too
// (Karpenter's validation before disruption). Scale-ups pass as they are.
func (r *Runtime) validate(ctx context.Context, plan Plan) (accepted, rejected []Action, err error) {
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
	fresh, policy, err := r.observe(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("validate: %w", err)
	}
	confirmed := map[string]bool{}
	for _, a := range MakePlan(fresh, policy).Actions {
		confirmed[string(a.Kind)+"/"+a.Node] = true
	}
	for _, a := range plan.Actions {
		if !a.Kind.Destructive() || confirmed[string(a.Kind)+"/"+a.Node] {
			accepted = append(accepted, a)
			continue
		}
		r.log.Info("action not confirmed by fresh state", "kind", a.Kind, "node", a.Node, "reason", a.Reason)
		rejected = append(rejected, a)
	}
	return accepted, rejected, nil
}

// journal writes accepted actions to the ops journal before anything is
// done. An action whose node or pool already has an open op is skipped.
func (r *Runtime) journal(ctx context.Context, now time.Time, actions []Action) []Op {
	var out []Op
	for _, a := range actions {
		if a.Kind == ActRecommission {
			r.cancelAttrition(ctx, a) // ends the open op on the node (attrition.go)
			continue
		}
		data := opData{From: a.From, Victims: a.Victims, Attrition: a.Attrition}
		raw, _ := json.Marshal(data)
		op := Op{Kind: a.Kind, Pool: a.Pool, Node: a.Node, Target: a.Target, To: a.To,
			Serves: a.Serves, Reason: a.Reason, State: OpPending, Step: firstStep(a.Kind), Data: raw}
		// IMPORTANT: the intent is persisted before any step runs, so a
		// crash after this point resumes the op instead of forgetting it.
		stored, err := r.cfg.Ledger.InsertOp(ctx, op)
		if errors.Is(err, ErrConflict) {
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

// record writes the decisions of a tick: every action, every rejected
// action, and each wait whose reason changed since the last tick.
func (r *Runtime) record(ctx context.Context, snap *Snapshot, plan Plan, rejected []Action) error {
	var ds []Decision
	tick := r.Status().Tick
	for _, a := range plan.Actions {
		detail, _ := json.Marshal(a)
		ds = append(ds, Decision{At: snap.Now, Tick: tick, Kind: string(a.Kind), Demand: first(a.Serves),
			Pool: a.Pool, Node: a.Node, Reason: a.Reason, Detail: detail})
	}
	for _, a := range rejected {
		ds = append(ds, Decision{At: snap.Now, Tick: tick, Kind: "rejected", Pool: a.Pool, Node: a.Node,
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
		detail, _ := json.Marshal(w)
		ds = append(ds, Decision{At: snap.Now, Tick: tick, Kind: "wait", Demand: w.Demand,
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
		detail, _ := json.Marshal(k)
		ds = append(ds, Decision{At: snap.Now, Tick: tick, Kind: "kept", Node: k.Node, Reason: k.Reason, Detail: detail})
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
	if err := r.cfg.Ledger.SetWaitReasons(ctx, plan.Waits); err != nil {
		return err
	}
	return r.cfg.Ledger.RecordSamples(ctx, capacitySamples(snap))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// capacitySamples summarises GPUs by side: busy, idle, in flight, pending.
func capacitySamples(s *Snapshot) []CapacitySample {
	by := map[string]*CapacitySample{}
	for _, side := range []string{string(OwnerYARN), string(OwnerK8s), string(OwnerNone)} {
		by[side] = &CapacitySample{At: s.Now, Side: side}
	}
	for _, n := range s.Nodes {
		if n.Phase == PhaseGone || n.Phase == PhaseTerminating {
			continue
		}
		c := by[string(n.Owner)]
		if c == nil {
			continue
		}
		if n.Phase.InFlight() {
			c.GPUsInFlight += n.GPUsTotal
			continue
		}
		c.GPUsBusy += min(n.GPUsAllocated, n.GPUsTotal)
		c.GPUsIdle += n.FreeGPUs()
	}
	for _, d := range s.Demand {
		by[string(d.Source)].GPUsPending += d.GPUs()
	}
	return []CapacitySample{*by["yarn"], *by["k8s"], *by["none"]}
}

// advance runs the due steps of every open op. Each step is idempotent, so
// after a crash the op simply runs its current step again.
func (r *Runtime) advance(ctx context.Context, policy Policy) (int, error) {
	ops, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		return 0, fmt.Errorf("read journal: %w", err)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	pools, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		return 0, fmt.Errorf("observe pools for the executor: %w", err)
	}
	steps := 0
	for _, op := range ops {
		now := r.cfg.Now()
		if !op.NextAttempt.IsZero() && op.NextAttempt.After(now) {
			continue
		}
		for i := 0; i < r.cfg.StepsPerOp && !op.State.Terminal(); i++ {
			next, progressed := r.step(ctx, op, policy, pools, ops)
			stored, err := r.cfg.Ledger.AdvanceOp(ctx, next)
			if err != nil {
				r.log.Error("advance op", "op", op.ID, "err", err)
				break
			}
			steps++
			op = stored
			if !progressed {
				break
			}
		}
	}
	return steps, nil
}

// step runs the op's current step once and returns the op's next state and
// whether it moved on (so the executor may run the next step now).
func (r *Runtime) step(ctx context.Context, op Op, policy Policy, pools []PoolState, open []Op) (Op, bool) {
	now := r.cfg.Now()
	var data opData
	if len(op.Data) > 0 {
		if err := json.Unmarshal(op.Data, &data); err != nil {
			return r.fail(op, now, fmt.Sprintf("corrupt step data: %s", err)), false
		}
	}
	op.State = OpRunning
	save := func(o Op) Op {
		o.Data, _ = json.Marshal(data)
		return o
	}
	retry := func(err error) (Op, bool) {
		op.Attempts++
		op.LastError = err.Error()
		op.NextAttempt = now.Add(backoff(op.Attempts))
		r.log.Warn("op step failed, will retry", "op", op.ID, "kind", op.Kind, "step", op.Step, "attempt", op.Attempts, "err", err)
		return save(op), false
	}
	moveTo := func(step string) (Op, bool) {
		op.Step, op.Attempts, op.LastError, op.NextAttempt = step, 0, "", time.Time{}
		return save(op), true
	}
	done := func() (Op, bool) {
		op.State, op.LastError, op.NextAttempt = OpDone, "", time.Time{}
		r.log.Info("op done", "op", op.ID, "kind", op.Kind, "pool", op.Pool, "node", op.Node)
		return save(op), false
	}
	waitFor := func(d time.Duration) (Op, bool) {
		op.NextAttempt = now.Add(d)
		return save(op), false
	}

	switch op.Step {
	case stepSetDesired:
		// IMPORTANT: the target is absolute and was planned as if the
		// pool's pending removals had already happened. Setting it before
		// they terminate (each decrementing the desired capacity) would
		// lose capacity, so wait for them; they are bounded by the drain
		// timeout.
		for _, o := range open {
			if o.Pool == op.Pool && o.ID != op.ID && (o.Kind == ActScaleDown || o.Kind == ActReplace) && !o.State.Terminal() && !attritionOp(&o) {
				op.LastError = fmt.Sprintf("waiting for the removal of node %s (op %d) before resizing", o.Node, o.ID)
				return waitFor(2 * time.Second)
			}
		}
		err := r.cfg.Pools.SetDesired(ctx, op.Pool, op.Target)
		var be *BackoffError
		if errors.As(err, &be) {
			if berr := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, be.Until, be.Reason); berr != nil {
				return retry(berr)
			}
			return r.fail(save(op), now, "pool backs off: "+be.Reason), false
		}
		if err != nil {
			return retry(err)
		}
		data.SetAt = now
		return moveTo(stepAwaitInstances)

	case stepAwaitInstances:
		// Done once the provider reports the new desired capacity (or the
		// instances): from then on the planner counts the pool's size and
		// its in-flight nodes, so the op need not hold the pool's single
		// open scale-up slot while machines boot.
		fresh, err := r.cfg.Pools.Pools(ctx)
		if err != nil {
			return retry(err)
		}
		ps, ok := findPool(fresh, op.Pool)
		if ok && (ps.Desired >= op.Target || ps.InService() >= op.Target) {
			return done()
		}
		if now.Sub(data.SetAt) > policy.MaxProvisionTime.D() {
			reason := fmt.Sprintf("pool %s has %d of %d instances %s after setting the desired capacity", op.Pool, ps.InService(), op.Target, policy.MaxProvisionTime)
			if err := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, now.Add(policy.MaxProvisionTime.D()), reason); err != nil {
				return retry(err)
			}
			return r.fail(save(op), now, reason), false
		}
		return waitFor(time.Second)

	case stepRelease:
		if data.Deadline.IsZero() {
			data.Deadline = now.Add(policy.DrainTimeout.D())
		}
		if !data.Prepared {
			// IMPORTANT: decide and persist which side owned the node before
			// the first Release. A cordoned node reports no owner, so after a
			// crash the owner could no longer be found and the drain skipped.
			if data.From == "" {
				data.From = r.ownerOf(op.Node)
			}
			if data.InstanceID == "" {
				data.InstanceID, _ = findNode(pools, op)
			}
			data.Prepared = true
			return moveTo(stepRelease)
		}
		side, ok := data.From.Side()
		if !ok {
			// Registered on no side: nothing to drain.
			return r.afterRelease(op, data, save, moveTo, done)
		}
		act := r.actions[side]
		if act == nil {
			return r.fail(save(op), now, fmt.Sprintf("no actions configured for %s", side)), false
		}
		if data.CordonOnly {
			if err := act.Cordon(ctx, op.Node); err != nil {
				return retry(err)
			}
			return done()
		}
		st, err := r.releaseStep(ctx, act, side, op.Node, data, policy, now)
		if err != nil {
			return retry(err)
		}
		data.Remaining, data.BlockedBy = st.Remaining, st.BlockedBy
		if st.Drained {
			r.log.Info("node released", "op", op.ID, "node", op.Node, "side", side)
			return r.afterRelease(op, data, save, moveTo, done)
		}
		if !data.Attrition && now.After(data.Deadline) {
			why := fmt.Sprintf("drain of %s timed out after %s with %d workloads left", op.Node, policy.DrainTimeout, len(st.Remaining))
			if st.BlockedBy != "" {
				why += ", blocked by " + st.BlockedBy
			}
			if op.Kind == ActTransfer || op.Kind == ActPreempt {
				// IMPORTANT: a transfer that cannot drain gives the node
				// back to its side, so no node stays half-drained.
				op.LastError = why
				return moveTo(stepGiveBack)
			}
			if policy.ForceAfterDrainTimeout {
				r.log.Warn("drain timed out, terminating as the policy allows", "node", op.Node, "remaining", st.Remaining)
				return moveTo(stepTerminate)
			}
			return r.fail(save(op), now, why+"; node left cordoned for an operator"), false
		}
		return waitFor(2 * time.Second)

	case stepTerminate:
		if data.InstanceID == "" {
			return r.fail(save(op), now, fmt.Sprintf("node %s has no cloud instance to terminate", op.Node)), false
		}
		// IMPORTANT: only reached after release reported the node drained
		// (or the policy forces it after the drain timeout).
		if err := r.cfg.Pools.Terminate(ctx, op.Pool, data.InstanceID); err != nil {
			return retry(err)
		}
		if data.From == OwnerYARN && r.actions[SourceYARN] != nil {
			return moveTo(stepForget)
		}
		return done()

	case stepForget:
		// The terminated machine's host stays in YARN's exclude file
		// otherwise, and a later machine that reuses its name (cloud
		// hostnames follow private IPs) would be refused by the RM.
		if err := r.actions[SourceYARN].Admit(ctx, op.Node); err != nil {
			return retry(err)
		}
		return done()

	case stepAdmit:
		if op.To == OwnerNone {
			return done() // a manual drain: the node stays with no side
		}
		to, ok := op.To.Side()
		if !ok || r.actions[to] == nil {
			return r.fail(save(op), now, fmt.Sprintf("cannot hand node to %q", op.To)), false
		}
		if err := r.actions[to].Admit(ctx, op.Node); err != nil {
			return retry(err)
		}
		return done()

	case stepGiveBack:
		from, ok := data.From.Side()
		if ok && r.actions[from] != nil {
			if err := r.actions[from].Admit(ctx, op.Node); err != nil {
				return retry(err)
			}
		}
		return r.fail(save(op), now, "transfer abandoned and node given back: "+op.LastError), false

	case stepEvict:
		for len(data.Victims) > 0 {
			w := data.Victims[0]
			act := r.actions[w.Source]
			if act == nil {
				return r.fail(save(op), now, fmt.Sprintf("no actions configured for %s", w.Source)), false
			}
			if err := act.Evict(ctx, op.Node, w); err != nil {
				return retry(err)
			}
			r.log.Info("preempted", "op", op.ID, "node", op.Node, "workload", w.Name, "priority", w.Priority)
			data.Victims = data.Victims[1:]
		}
		if op.To == OwnerK8s || op.To == OwnerYARN {
			return moveTo(stepRelease) // preemption across sides: hand the node over
		}
		return done()

	case stepRecommission:
		return r.recommissionStep(ctx, save(op), data, now)
	}
	return r.fail(save(op), now, fmt.Sprintf("unknown step %q", op.Step)), false
}

func (r *Runtime) afterRelease(op Op, data opData, save func(Op) Op, moveTo func(string) (Op, bool), done func() (Op, bool)) (Op, bool) {
	switch op.Kind {
	case ActTransfer:
		return moveTo(stepAdmit)
	case ActScaleDown, ActReplace:
		return moveTo(stepTerminate)
	case ActPreempt:
		if op.To == OwnerK8s || op.To == OwnerYARN {
			return moveTo(stepAdmit)
		}
	}
	return done()
}

func (r *Runtime) fail(op Op, now time.Time, why string) Op {
	op.State, op.LastError, op.NextAttempt = OpFailed, why, time.Time{}
	r.log.Warn("op failed", "op", op.ID, "kind", op.Kind, "pool", op.Pool, "node", op.Node, "reason", why)
	return op
}

// ownerOf finds the side to drain node from in the last good
// observations: the side that owns it, else a side that lists it at all (a
// node cordoned there still runs that side's work), else OwnerNone.
func (r *Runtime) ownerOf(node string) Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed := OwnerNone
	for _, src := range Sources {
		for _, n := range r.lastGood[src].Nodes {
			if n.Name != node {
				continue
			}
			if n.Owner != OwnerNone {
				return n.Owner
			}
			if listed == OwnerNone {
				listed = Owner(src)
			}
		}
	}
	return listed
}

func findPool(pools []PoolState, name string) (PoolState, bool) {
	i := slices.IndexFunc(pools, func(p PoolState) bool { return p.Pool.Name == name })
	if i < 0 {
		return PoolState{}, false
	}
	return pools[i], true
}

// findNode returns the instance id of op's node in its pool.
func findNode(pools []PoolState, op Op) (string, bool) {
	for _, p := range pools {
		for _, in := range p.Instances {
			if in.Hostname == op.Node || in.ID == op.Node {
				return in.ID, true
			}
		}
	}
	return "", false
}

// backoff is the retry delay after n failed attempts: 1s doubling to 1m.
func backoff(n int) time.Duration {
	d := time.Second << min(n-1, 6)
	return min(d, time.Minute)
}
