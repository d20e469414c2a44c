package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// maxStepAttempts bounds the tries of one step; the op then ends (given
// back where it holds a node) with the last error.
const maxStepAttempts = 8

// KeepDesiredTerminator is implemented by node pools that can terminate an
// instance without lowering the desired capacity, so the provider launches
// a replacement itself (AWS: TerminateInstanceInAutoScalingGroup with
// ShouldDecrementDesiredCapacity=false). Replacements use it when present;
// otherwise they raise the desired capacity by one first (buy the
// replacement), then terminate with a decrement, so a pool at its minimum
// never refuses the terminate.
type KeepDesiredTerminator interface {
	TerminateKeepDesired(ctx context.Context, pool, instanceID string) error
}

// opTimeout is how long an op of kind may take in all, from its journaling.
func opTimeout(k broker.ActionKind, p broker.Policy) time.Duration {
	p = p.WithDefaults()
	prov, drain := p.MaxProvisionTime.D(), p.DrainTimeout.D()
	switch k {
	case broker.ActScaleUp:
		// Setting the capacity, then the machines booting to gpu-ready.
		return 2 * prov
	case broker.ActPreempt:
		// The victims' grace periods, and for a preemption across sides the
		// release and the receiving side admitting the node, as a transfer.
		return drain + prov
	default:
		// The drain, then the terminate or the receiving side admitting
		// the node (a NodeManager restarting and re-registering).
		return drain + prov
	}
}

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
	fresh, policy, err := r.observe(ctx, false)
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
		data := broker.OpData{From: a.From, Victims: a.Victims, InstanceID: a.InstanceID, Attrition: a.Attrition}
		if a.Kind == broker.ActScaleDown || a.Kind == broker.ActTransfer {
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

// advance runs the due steps of every open op. Each step is idempotent, so
// after a crash the op simply runs its current step again. When the cloud
// cannot be read, the last-known pools stand in, marked stale: steps that
// change a stale pool wait.
func (r *Runtime) advance(ctx context.Context, policy broker.Policy) (int, error) {
	ops, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		return 0, fmt.Errorf("read journal: %w", err)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	pools, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		r.log.Warn("observe pools for the executor", "err", err)
		pools = r.lastPoolStates("describe pools: " + err.Error())
	}
	steps := 0
	for i, op := range ops {
		now := r.cfg.Now()
		if !op.NextAttempt.IsZero() && op.NextAttempt.After(now) {
			continue
		}
		for k := 0; k < r.cfg.StepsPerOp && !op.State.Terminal(); k++ {
			next, progressed := r.step(ctx, op, policy, pools, ops)
			stored, err := r.cfg.Ledger.AdvanceOp(ctx, next)
			if err != nil {
				r.log.Error("advance op", "op", op.ID, "err", err)
				break
			}
			steps++
			op = stored
			ops[i] = stored
			if !progressed {
				break
			}
		}
		if op.State.Terminal() {
			r.opEnded(op)
		}
	}
	return steps, nil
}

// opEnded counts ended ops by state for the status.
func (r *Runtime) opEnded(op broker.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch op.State {
	case broker.OpFailed:
		r.opsFailed++
	case broker.OpCancelled:
		r.opsCancelled++
	}
}

// stepCtx carries one step's op, its decoded data and the transitions.
type stepCtx struct {
	r    *Runtime
	op   broker.Op
	data broker.OpData
	now  time.Time
}

// save returns the op with its data encoded. Data JSON cannot hold keeps
// the op's previous data and records why in LastError (logged), so the
// journal never loses the step's state to an empty encoding.
func (s *stepCtx) save() broker.Op {
	raw, err := broker.EncodeOpData(s.data)
	if err != nil {
		s.op.LastError = err.Error()
		s.r.log.Error("save op step", "op", s.op.ID, "kind", s.op.Kind, "step", s.op.Step, "err", err)
		return s.op
	}
	s.op.Data = raw
	return s.op
}

// retry counts a failed attempt; past maxStepAttempts the op gives up.
func (s *stepCtx) retry(err error) (broker.Op, bool) {
	s.op.Attempts++
	s.op.LastError = err.Error()
	if s.op.Attempts >= maxStepAttempts {
		return s.giveUp(fmt.Sprintf("step %s failed %d times, last: %s", s.op.Step, s.op.Attempts, err))
	}
	s.op.NextAttempt = s.now.Add(backoff(s.op.Attempts))
	s.r.log.Warn("op step failed, will retry", "op", s.op.ID, "kind", s.op.Kind, "step", s.op.Step, "attempt", s.op.Attempts, "err", err)
	return s.save(), false
}

// moveTo moves the op to step, along an edge of its kind's table
// (broker.OpSteps); a move the table does not name is a defect: the op
// gives up, giving back a node it holds.
func (s *stepCtx) moveTo(step string) (broker.Op, bool) {
	if err := broker.CanMove(s.op.Kind, s.op.Step, step); err != nil {
		s.r.log.Error("op step move outside its table", "op", s.op.ID, "err", err)
		return s.giveUp(err.Error())
	}
	s.op.Step, s.op.Attempts, s.op.LastError, s.op.NextAttempt = step, 0, "", time.Time{}
	return s.save(), true
}

func (s *stepCtx) done() (broker.Op, bool) {
	if err := broker.CanMove(s.op.Kind, s.op.Step, broker.StepDone); err != nil {
		s.r.log.Error("op ends outside its table", "op", s.op.ID, "err", err)
		return s.giveUp(err.Error())
	}
	s.op.State, s.op.LastError, s.op.NextAttempt = broker.OpDone, "", time.Time{}
	s.r.log.Info("op done", "op", s.op.ID, "kind", s.op.Kind, "pool", s.op.Pool, "node", s.op.Node)
	return s.save(), false
}

// waitFor checks again after d; why says what the op waits for.
func (s *stepCtx) waitFor(d time.Duration, why string) (broker.Op, bool) {
	s.op.NextAttempt = s.now.Add(d)
	if why != "" {
		s.op.LastError = why
	}
	return s.save(), false
}

func (s *stepCtx) fail(why string) (broker.Op, bool) {
	return s.r.fail(s.save(), s.now, why), false
}

// giveUp ends the op: one that holds a node taken from its side gives it
// back first; others fail with why.
func (s *stepCtx) giveUp(why string) (broker.Op, bool) {
	if broker.HoldsNode(s.op.Kind, s.op.Step) {
		if _, ok := s.data.From.Side(); ok && s.data.Prepared && !s.data.CordonOnly {
			return s.giveBack(why, false)
		}
	}
	return s.fail(why)
}

// giveBack moves an op that holds a node (broker.HoldsNode) to
// StepGiveBack, with why as its reason; cancel ends it cancelled rather
// than failed once the node is back. It is the one way into give-back.
func (s *stepCtx) giveBack(why string, cancel bool) (broker.Op, bool) {
	if !broker.HoldsNode(s.op.Kind, s.op.Step) {
		s.r.log.Error("give-back from a step that holds no node", "op", s.op.ID, "kind", s.op.Kind, "step", s.op.Step)
		return s.fail(why)
	}
	if cancel {
		s.data.Cancel = true
	}
	s.op.LastError = why
	s.op.Step, s.op.Attempts, s.op.NextAttempt = broker.StepGiveBack, 0, time.Time{}
	return s.save(), true
}

// step runs the op's current step once and returns the op's next state and
// whether it moved on (so the executor may run the next step now).
func (r *Runtime) step(ctx context.Context, op broker.Op, policy broker.Policy, pools []broker.PoolState, open []broker.Op) (broker.Op, bool) {
	s := &stepCtx{r: r, op: op, now: r.cfg.Now()}
	data, err := broker.DecodeOpData(&op)
	if err != nil {
		return r.fail(op, s.now, fmt.Sprintf("corrupt step data: %s", err)), false
	}
	s.data = data
	s.op.State = broker.OpRunning
	if s.data.Expires.IsZero() && !s.data.Attrition {
		// Ops journaled before deadlines existed, and manual ones, get
		// theirs on their first step. An attrition has none (see journal).
		s.data.Expires = s.now.Add(opTimeout(op.Kind, policy))
	}
	// IMPORTANT: every op ends. Past its deadline it stops where it is
	// (giving its node back where it holds one), except while giving back.
	if !s.data.Expires.IsZero() && s.now.After(s.data.Expires) && op.Step != broker.StepGiveBack {
		why := fmt.Sprintf("op deadline %s passed in step %s", s.data.Expires.UTC().Format(time.RFC3339), op.Step)
		if op.LastError != "" {
			why += ": " + op.LastError
		}
		return s.giveUp(why)
	}

	h, ok := stepHandlers[op.Step]
	if !ok {
		return s.fail(fmt.Sprintf("unknown step %q", op.Step))
	}
	return h(r, ctx, s, stepEnv{policy: policy, pools: pools, open: open})
}

// setDesired sets a scale-up's absolute target. The target was planned as
// if the pool's pending removals had already terminated; each of those
// will still lower the desired capacity by one, so the value set now adds
// them back. Only when that would pass the pool's max does the scale-up
// wait for them, so a drain in progress does not hold the pool's
// scale-ups back.
func (r *Runtime) setDesired(ctx context.Context, s *stepCtx, pools []broker.PoolState, open []broker.Op) (broker.Op, bool) {
	op := s.op
	ps, found := findPool(pools, op.Pool)
	if found && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	pending, first := pendingRemovals(op, open)
	target := op.Target + pending
	if found && ps.Desired > target {
		// IMPORTANT: a scale-up never lowers the group. Its desired
		// capacity went above what this op planned (raised outside the
		// broker): end the op, so the next plan starts from the group.
		return s.fail(fmt.Sprintf("pool %s wants %d nodes, more than the %d this scale-up planned: not lowering it; planning again", op.Pool, ps.Desired, target))
	}
	if first != nil && found && ps.Pool.MaxNodes > 0 && target > ps.Pool.MaxNodes {
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for the removal of node %s (op %d) before resizing: %d would pass the pool's max of %d",
			first.Node, first.ID, target, ps.Pool.MaxNodes))
	}
	err := r.cfg.Pools.SetDesired(ctx, op.Pool, target)
	var be *broker.BackoffError
	if errors.As(err, &be) {
		if berr := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, be.Until, be.Reason); berr != nil {
			return s.retry(berr)
		}
		return s.fail("pool backs off: " + be.Reason)
	}
	if err != nil {
		return s.retry(err)
	}
	s.data.SetAt, s.data.SetTo = s.now, target
	return s.moveTo(broker.StepAwaitInstances)
}

// pendingRemovals counts the open ops of op's pool that will remove one of
// its instances with a decrement (a scale-down draining or terminating; a
// replace that surged), and returns the first of them.
func pendingRemovals(op broker.Op, open []broker.Op) (int, *broker.Op) {
	pending := 0
	var first *broker.Op
	for i := range open {
		o := &open[i]
		if o.Pool != op.Pool || o.ID == op.ID || !broker.PendingRemoval(o) {
			continue
		}
		pending++
		if first == nil {
			first = o
		}
	}
	return pending, first
}

// handBack ends a scale-up whose pool backs off (the provider could not
// launch: insufficient capacity, a launch that failed) before all its
// machines exist. IMPORTANT: the provider keeps retrying a desired capacity
// it could not reach, while the planner no longer counts it as on its way
// and plans the demand elsewhere: the order that did not launch is handed
// back first, or the retry would later buy a second machine for the same
// demand. The desired capacity is lowered by the missing machines, never
// below the machines that exist (a lower value would terminate one) nor the
// pool's min; raising it again is refused during the backoff.
func (r *Runtime) handBack(ctx context.Context, s *stepCtx, ps broker.PoolState, missing int) (broker.Op, bool) {
	op := s.op
	to := max(ps.Desired-missing, ps.InService(), ps.Pool.MinNodes)
	if to < ps.Desired {
		if err := r.cfg.Pools.SetDesired(ctx, op.Pool, to); err != nil {
			return s.retry(fmt.Errorf("hand back the %d nodes of pool %s that did not launch: %w", missing, op.Pool, err))
		}
	}
	why := ps.BackoffReason
	if why == "" {
		why = "the provider asked to back off"
	}
	return s.fail(fmt.Sprintf("pool %s backs off until %s (%s) with %d of its nodes not launched; desired capacity handed back from %d to %d",
		op.Pool, ps.BackoffUntil.UTC().Format(time.RFC3339), why, missing, ps.Desired, to))
}

// release takes the node away from every side that holds it (From first).
func (r *Runtime) release(ctx context.Context, s *stepCtx, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	if s.data.Deadline.IsZero() {
		s.data.Deadline = s.now.Add(policy.DrainTimeout.D())
	}
	if !s.data.Prepared {
		// IMPORTANT: decide and persist which sides hold the node and its
		// instance before the first Release. A cordoned node reports no
		// owner, so after a crash the owner could no longer be found and
		// the drain skipped.
		if s.data.From == "" {
			s.data.From = r.ownerOf(op.Node)
		}
		if op.Kind == broker.ActScaleDown || op.Kind == broker.ActReplace {
			s.data.Sides = r.sidesOf(op.Node, s.data.From)
		}
		if s.data.InstanceID == "" {
			s.data.InstanceID = r.instanceOf(op.Node)
		}
		if op.Kind == broker.ActReplace {
			s.data.Down = r.nodeDown(op.Node) != ""
		}
		s.data.Prepared = true
		return s.moveTo(broker.StepRelease)
	}
	sides := s.data.Sides
	if len(sides) == 0 && s.data.From != broker.OwnerNone {
		sides = []broker.Owner{s.data.From}
	}
	for _, o := range sides {
		if slices.Contains(s.data.Released, o) {
			continue
		}
		side, ok := o.Side()
		if !ok {
			continue
		}
		act := r.actions[side]
		if act == nil {
			return s.fail(fmt.Sprintf("no actions configured for %s, which holds node %s", side, op.Node))
		}
		if guardsLanding(op, s.data, side) && !slices.Contains(s.data.Checked, o) {
			return r.fenceAndCheck(ctx, s, o, side, act, policy)
		}
		if s.data.CordonOnly || (s.data.Down && r.nodeDown(op.Node) != "") {
			// A manual cordon; or a replace of a node that is down, whose
			// work is already lost: nothing can drain from a dead machine.
			if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {
				return next, progressed
			}
			if s.data.CordonOnly {
				return s.done()
			}
			s.data.Released = append(s.data.Released, o)
			continue
		}
		if _, labelled := r.cordoner(side); labelled {
			// IMPORTANT: a side with a cordon holds the node with it while
			// its work ends; the release decommissions only what is empty.
			// Without one, a busy node is left alone: an attrition has
			// nothing to hold it with and is given back.
			if why := r.cordonUnavailable(ctx, side); why == "" {
				if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {
					return next, progressed
				}
			} else if s.data.Attrition {
				return s.giveUp(fmt.Sprintf("drain by attrition of node %s needs the %s cordon: %s", op.Node, side, why))
			}
		}
		var st broker.ReleaseStatus
		var err error
		if side == broker.SourceYARN && yarnPreemptAcross(op, s.data) && !s.data.Attrition {
			st, err = r.releaseYARNPreempted(ctx, act, s)
		} else {
			st, err = r.releaseStep(ctx, act, side, op.Node, s.data, policy, s.now)
		}
		if err != nil {
			return s.retry(err)
		}
		s.data.Remaining, s.data.BlockedBy = st.Remaining, st.BlockedBy
		if len(st.Unplanned) > 0 {
			return r.unplannedWork(s, side, st.Unplanned) // drainlimits.go
		}
		if st.Unknown != "" {
			// IMPORTANT: unknown is never drained, and never forced: wait
			// for the side to tell, until the op's deadline.
			return s.waitFor(5*time.Second, fmt.Sprintf("%s cannot tell whether node %s is released: %s", side, op.Node, st.Unknown))
		}
		if st.Drained {
			if len(st.Lost) > 0 && s.data.Lost == nil {
				// IMPORTANT: never silently: what the side lost is in the
				// op and the decisions before the node goes on.
				r.recordLoss(ctx, s, side, st.Lost)
			}
			// The side keeps the released node out (YARN: the exclude
			// file, its NodeManager DECOMMISSIONED): the cordon is undone
			// now, so the host's labels are its own again.
			if err := r.uncordonNode(ctx, s, side); err != nil {
				return s.retry(err)
			}
			r.log.Info("node released", "op", op.ID, "node", op.Node, "side", side)
			s.data.Released = append(s.data.Released, o)
			continue
		}
		if !s.data.Attrition && s.now.After(s.data.Deadline) {
			why := fmt.Sprintf("drain of %s from %s timed out after %s with %d workloads left", op.Node, side, policy.DrainTimeout, len(st.Remaining))
			if st.BlockedBy != "" {
				why += ", blocked by " + st.BlockedBy
			}
			if givesBackOnTimeout(op, st, policy) { // drainlimits.go
				// IMPORTANT: a transfer (or a preemption handing the node
				// across, or a scale-down blocked by a disruption budget)
				// that cannot drain gives the node back to its side, so no
				// node stays half-drained and owned by nobody. The why is
				// kept: giveBack records it as the op's failure.
				return s.giveBack(why, false)
			}
			if policy.ForceAfterDrainTimeout {
				r.log.Warn("drain timed out, terminating as the policy allows", "node", op.Node, "remaining", st.Remaining)
				s.data.Released = append(s.data.Released, o)
				continue
			}
			return s.fail(why + "; node left cordoned for an operator")
		}
		if side == broker.SourceYARN && yarnPreemptAcross(op, s.data) {
			return s.waitFor(2*time.Second, st.BlockedBy)
		}
		return s.waitFor(2*time.Second, "")
	}
	switch op.Kind {
	case broker.ActTransfer:
		return s.moveTo(broker.StepAdmit)
	case broker.ActReplace:
		return s.moveTo(broker.StepSurge)
	case broker.ActScaleDown:
		return s.moveTo(broker.StepTerminate)
	case broker.ActPreempt:
		if op.To == broker.OwnerK8s || op.To == broker.OwnerYARN {
			return s.moveTo(broker.StepAdmit)
		}
	}
	return s.done()
}

// stepEnv is what a step handler reads besides its op: the policy, the
// pools and the open ops of this tick.
type stepEnv struct {
	policy broker.Policy
	pools  []broker.PoolState
	open   []broker.Op
}

// stepHandler runs one step of an op once and returns the op's next state
// and whether it moved on.
type stepHandler func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool)

// stepHandlers runs each step of broker.OpSteps; the moves between them
// are the table's (stepCtx.moveTo checks each).
var stepHandlers = map[string]stepHandler{
	broker.StepSetDesired: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.setDesired(ctx, s, e.pools, e.open)
	},
	broker.StepAwaitInstances: (*Runtime).awaitInstances,
	broker.StepAwaitReady:     (*Runtime).awaitReady,
	broker.StepRelease: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.release(ctx, s, e.policy)
	},
	broker.StepSurge: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.surge(ctx, s, e.pools, e.policy)
	},
	broker.StepTerminate: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.terminate(ctx, s, e.pools)
	},
	broker.StepForget:        (*Runtime).forget,
	broker.StepAdmit:         (*Runtime).admit,
	broker.StepAwaitAdmitted: (*Runtime).awaitAdmitted,
	broker.StepGiveBack: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.giveBack(ctx, s)
	},
	broker.StepEvict: (*Runtime).evict,
	broker.StepRecommission: func(r *Runtime, ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
		return r.recommissionStep(ctx, s)
	},
}

// awaitInstances waits for the provider to report a scale-up's new desired capacity (or its instances).
func (r *Runtime) awaitInstances(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// The provider reports the new desired capacity (or the instances).
	fresh, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		return s.waitFor(5*time.Second, "observe pools: "+err.Error())
	}
	ps, ok := findPool(fresh, op.Pool)
	if ok && ps.Stale == "" && (ps.Desired >= op.Target || ps.InService() >= op.Target) {
		return s.moveTo(broker.StepAwaitReady)
	}
	if s.now.Sub(s.data.SetAt) > e.policy.MaxProvisionTime.D() {
		reason := fmt.Sprintf("pool %s has %d of %d instances %s after setting the desired capacity", op.Pool, ps.InService(), op.Target, e.policy.MaxProvisionTime)
		if err := r.cfg.Ledger.SetPoolBackoff(ctx, op.Pool, s.now.Add(e.policy.MaxProvisionTime.D()), reason); err != nil {
			return s.retry(err)
		}
		return s.fail(reason)
	}
	return s.waitFor(time.Second, "")
}

// awaitReady keeps a scale-up open until its pool's machines are gpu-ready.
func (r *Runtime) awaitReady(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// IMPORTANT: the op stays e.open, serving its demand, until the
	// pool's machines are gpu-ready (docs/design.md, arbitration rule 4): the planner keeps
	// the ordered capacity for that demand, so it does not take another
	// node meanwhile while the new one idles.
	fresh, err := r.cfg.Pools.Pools(ctx)
	if err != nil {
		return s.waitFor(5*time.Second, "observe pools: "+err.Error())
	}
	ps, _ := findPool(fresh, op.Pool)
	// The desired capacity is set before the provider has launched the
	// instances: until they exist, none of them can be in flight, and
	// ending now would let the demand buy a second node.
	want := s.data.SetTo
	if want == 0 {
		want = op.Target
	}
	// SetTo counted the pool's removals still to come; one that has
	// finished since took its instance with it (a terminate with a
	// decrement), so it is no longer to be waited for.
	if pending, _ := pendingRemovals(op, e.open); op.Target+pending < want {
		want = op.Target + pending
	}
	if have := ps.InService(); have < want {
		if ps.Stale == "" && ps.BackoffUntil.After(s.now) {
			return r.handBack(ctx, s, ps, want-have)
		}
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for pool %s to launch its instances (%d of %d)", op.Pool, have, want))
	}
	if n := r.poolInFlight(ps); n > 0 {
		return s.waitFor(2*time.Second, fmt.Sprintf("waiting for %d nodes of pool %s to become gpu-ready", n, op.Pool))
	}
	return s.done()
}

// forget takes a terminated YARN host out of the exclude file and the RM's node list.
func (r *Runtime) forget(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// The terminated machine's host stays in YARN's exclude file
	// otherwise, and a later machine that reuses its name (cloud
	// hostnames follow private IPs) would be refused by the RM.
	// IMPORTANT: Forget, never Admit: admitting would run the side's
	// NodeManager restart hook against a machine being terminated.
	f, ok := r.actions[broker.SourceYARN].(Forgetter)
	if !ok {
		return s.done()
	}
	if err := f.Forget(ctx, op.Node); err != nil {
		return s.retry(err)
	}
	// IMPORTANT: a cordon still on the terminated host (a release
	// forced after the drain timeout) comes off too: a later machine
	// that reuses the host name would otherwise start cordoned.
	if err := r.uncordonNode(ctx, s, broker.SourceYARN); err != nil {
		return s.retry(err)
	}
	return s.done()
}

// admit has the receiving side admit a node handed over.
func (r *Runtime) admit(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	if op.To == broker.OwnerNone {
		return s.done() // a manual drain: the node stays with no side
	}
	to, ok := op.To.Side()
	if !ok || r.actions[to] == nil {
		return s.giveUp(fmt.Sprintf("cannot hand node to %q: no actions configured for it", op.To))
	}
	if err := r.actions[to].Admit(ctx, op.Node); err != nil {
		return s.retry(err)
	}
	s.data.Admitted = true
	if _, ok := r.actions[to].(AdmitChecker); ok {
		return s.moveTo(broker.StepAwaitAdmitted)
	}
	return s.done()
}

// awaitAdmitted waits until the receiving side lists the node schedulable.
func (r *Runtime) awaitAdmitted(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	// IMPORTANT: a hand-over stays e.open (and its demand linked) until
	// the receiving side lists the node schedulable with its GPUs; the
	// op deadline gives it back otherwise.
	to, _ := op.To.Side()
	ok, why, err := r.actions[to].(AdmitChecker).Admitted(ctx, op.Node)
	if err != nil {
		return s.retry(err)
	}
	if ok {
		return s.done()
	}
	return s.waitFor(5*time.Second, fmt.Sprintf("waiting for %s to list node %s schedulable with its GPUs: %s", to, op.Node, why))
}

// evict stops a preemption's victims, one by one.
func (r *Runtime) evict(ctx context.Context, s *stepCtx, e stepEnv) (broker.Op, bool) {
	op := s.op
	if from, ok := s.data.From.Side(); ok && from == broker.SourceK8s && op.To == broker.OwnerYARN && !s.data.Prepared && r.actions[from] != nil {
		// IMPORTANT: a preemption taking a Kubernetes node across
		// sides cordons it before evicting the victims, as a drain
		// does: otherwise the scheduler binds pending pods to the
		// space a victim frees, and the release's drain evicts them,
		// work no preemption names. (A YARN node is cordoned before
		// its victims are signalled: see cordonYARNVictimsNode.)
		// Prepared: a giving up now gives the node back.
		if err := r.actions[from].Cordon(ctx, op.Node); err != nil {
			return s.retry(err)
		}
		s.data.Prepared = true
		s.op = s.save()
	}
	if yarnPreemptAcross(op, s.data) && !s.data.Prepared && r.actions[broker.SourceYARN] != nil {
		if next, progressed, done := r.cordonYARNVictimsNode(ctx, s); !done {
			return next, progressed
		}
		s.data.Prepared = true
		s.op = s.save()
	}
	for len(s.data.Victims) > 0 {
		w := s.data.Victims[0]
		act := r.actions[w.Source]
		if act == nil {
			return s.fail(fmt.Sprintf("no actions configured for %s", w.Source))
		}
		err := act.Evict(ctx, op.Node, w)
		if errors.Is(err, broker.ErrInProgress) {
			// The victim is stopping (a YARN container told to shut
			// down): progress, not a failed attempt.
			return s.waitFor(2*time.Second, err.Error())
		}
		if err != nil {
			return s.retry(err)
		}
		r.log.Info("preempted", "op", op.ID, "node", op.Node, "workload", w.Name, "priority", w.Priority)
		s.data.Stopped = append(s.data.Stopped, howStopped(act, w))
		s.data.Victims = s.data.Victims[1:]
	}
	if op.To == broker.OwnerK8s || op.To == broker.OwnerYARN {
		return s.moveTo(broker.StepRelease) // preemption across sides: hand the node over
	}
	return s.done()
}

// yarnPreemptAcross reports whether op is a preemption taking a YARN node
// for Kubernetes.
func yarnPreemptAcross(op broker.Op, data broker.OpData) bool {
	return op.Kind == broker.ActPreempt && data.From == broker.OwnerYARN && op.To == broker.OwnerK8s
}

// cordonYARNVictimsNode starts a preemption taking a YARN node: it
// cordons the node (journaled, see cordonNode) and then signals every YARN
// victim (Evict's first call sends GRACEFUL_SHUTDOWN). It reports done once
// both are under way.
//
// IMPORTANT: the cordon, never the exclude file, holds the node while the
// victims exit: the RM places nothing of another application in the space
// a victim frees (no request names the cordon label), the node stays
// RUNNING so the RM delivers container signals to it (it drops them for a
// DECOMMISSIONING node), and an RM failover keeps the label where it would
// shut an excluded NodeManager down with everything on it. Without a
// cordon the preemption is refused: nothing would keep the freed GPUs for
// the other side.
func (r *Runtime) cordonYARNVictimsNode(ctx context.Context, s *stepCtx) (broker.Op, bool, bool) {
	act := r.actions[broker.SourceYARN]
	if why := r.cordonUnavailable(ctx, broker.SourceYARN); why != "" {
		op, progressed := s.fail(fmt.Sprintf("preemption taking YARN node %s needs the yarn cordon to hold it while its victims exit: %s", s.op.Node, why))
		return op, progressed, false
	}
	if next, progressed, done := r.cordonNode(ctx, s, broker.SourceYARN, act); !done {
		return next, progressed, false
	}
	left := s.data.Victims[:0:0]
	for _, w := range s.data.Victims {
		if w.Source != broker.SourceYARN {
			left = append(left, w)
			continue
		}
		err := act.Evict(ctx, s.op.Node, w)
		switch {
		case err == nil:
			r.log.Info("preempted", "op", s.op.ID, "node", s.op.Node, "workload", w.Name, "priority", w.Priority)
			s.data.Stopped = append(s.data.Stopped, howStopped(act, w))
		case errors.Is(err, broker.ErrInProgress):
			left = append(left, w)
		default:
			op, progressed := s.retry(err)
			return op, progressed, false
		}
	}
	s.data.Victims = left
	r.log.Info("yarn node cordoned and victims signalled", "op", s.op.ID, "node", s.op.Node, "victims", len(left))
	return broker.Op{}, false, true
}

// releaseYARNPreempted is the release of a YARN node whose victims are
// gone: the side's release, which decommissions the node only once it is
// empty under the cordon and with a timeout that cannot kill anything.
//
// IMPORTANT: a container still there is no victim (each was seen gone
// before the release): work of another application. The cordon keeps it
// running and the op waits for it; the drain deadline gives the node back,
// with the containers named in why.
func (r *Runtime) releaseYARNPreempted(ctx context.Context, act SideActions, s *stepCtx) (broker.ReleaseStatus, error) {
	st, err := act.Release(ctx, s.op.Node, s.data.Deadline)
	if err != nil || st.Drained || st.Unknown != "" {
		return st, err
	}
	if len(st.Remaining) > 0 {
		st.BlockedBy = fmt.Sprintf("work the preemption does not name runs on the node (%s): the cordon keeps it running, and the node is handed over only once it ends", strings.Join(st.Remaining, ", "))
	}
	return st, nil
}

// surge buys a replace's replacement first: the desired capacity goes up
// by one, and the terminate's decrement takes it back, so a pool at its
// minimum never refuses the terminate and never waits for a scale-up that
// waits for it. Providers that terminate without a decrement skip it.
//
// The surge stays within the pool's max and the policy's cluster GPU max
// (counted over every pool's desired capacity as the provider answers
// it); where it cannot, the terminate goes first.
func (r *Runtime) surge(ctx context.Context, s *stepCtx, pools []broker.PoolState, policy broker.Policy) (broker.Op, bool) {
	op := s.op
	if _, ok := r.cfg.Pools.(KeepDesiredTerminator); ok {
		return s.moveTo(broker.StepTerminate)
	}
	if s.data.SurgeTo == 0 {
		fresh, err := r.cfg.Pools.Pools(ctx)
		if err != nil {
			return s.waitFor(5*time.Second, "observe pools: "+err.Error())
		}
		ps, ok := findPool(fresh, op.Pool)
		clusterGPUs := 0
		for _, p := range fresh {
			clusterGPUs += p.Desired * p.Pool.GPUsPerNode
		}
		// IMPORTANT: a surge never takes the cluster over its GPU max
		// (chaos, seed 1: a replace surged a cluster at 24 of 24 GPUs to
		// 28 while its terminate failed).
		withinCluster := policy.ClusterMaxGPUs <= 0 || clusterGPUs+ps.Pool.GPUsPerNode <= policy.ClusterMaxGPUs
		switch {
		case !ok || ps.Stale != "":
			return s.waitFor(5*time.Second, fmt.Sprintf("pool %s is not observed at the cloud provider", op.Pool))
		case withinCluster && (ps.Pool.MaxNodes <= 0 || ps.Desired+1 <= ps.Pool.MaxNodes):
			// IMPORTANT: persist the surge before setting it, so a resumed
			// step sets the same absolute value and the planner and the
			// pool's scale-ups count the decrement still to come.
			s.data.SurgeTo = ps.Desired + 1
			return s.save(), true
		case ps.Desired-1 >= ps.Pool.MinNodes:
			// At the pool's or the cluster's max: the terminate's
			// decrement keeps the pool within min.
			return s.moveTo(broker.StepTerminate)
		default:
			return s.giveUp(fmt.Sprintf("pool %s is at its min and max of %d nodes and the provider cannot terminate without lowering the desired capacity", op.Pool, ps.Desired))
		}
	}
	if ps, ok := findPool(pools, op.Pool); ok && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	if err := r.cfg.Pools.SetDesired(ctx, op.Pool, s.data.SurgeTo); err != nil {
		return s.retry(err)
	}
	return s.moveTo(broker.StepTerminate)
}

// terminate removes the node's instance, by the id from the provider's
// instance map, once every side has released it.
func (r *Runtime) terminate(ctx context.Context, s *stepCtx, pools []broker.PoolState) (broker.Op, bool) {
	op := s.op
	if s.data.InstanceID == "" {
		// IMPORTANT: never guess an instance from a host name. A node
		// whose instance is unknown is given back, not left cordoned.
		return s.giveUp(fmt.Sprintf("node %s has no cloud instance in the provider's instance map to terminate", op.Node))
	}
	if ps, ok := findPool(pools, op.Pool); ok && ps.Stale != "" {
		return s.waitFor(5*time.Second, "pool is stale at the cloud provider: "+ps.Stale)
	}
	// IMPORTANT: only reached after release reported the node drained on
	// every side that held it (or the policy forces it after the drain
	// timeout, never for a release the side could not confirm).
	var err error
	if kd, ok := r.cfg.Pools.(KeepDesiredTerminator); ok && op.Kind == broker.ActReplace {
		err = kd.TerminateKeepDesired(ctx, op.Pool, s.data.InstanceID)
	} else {
		err = r.cfg.Pools.Terminate(ctx, op.Pool, s.data.InstanceID)
	}
	if err != nil {
		return s.retry(err)
	}
	if slices.Contains(s.data.Released, broker.OwnerYARN) || s.data.From == broker.OwnerYARN {
		if _, ok := r.actions[broker.SourceYARN].(Forgetter); ok {
			return s.moveTo(broker.StepForget)
		}
	}
	return s.done()
}

// giveBack returns the node to the side it came from (taking it from the
// side it was handed to first) and ends the op: failed with the reason
// that stopped it, or cancelled for a cancelled scale-down.
func (r *Runtime) giveBack(ctx context.Context, s *stepCtx) (broker.Op, bool) {
	op := s.op
	if s.data.Admitted {
		if to, ok := op.To.Side(); ok && r.actions[to] != nil {
			if _, labelled := r.cordoner(to); labelled && r.cordonUnavailable(ctx, to) != "" {
				r.log.Warn("cannot cordon the node on the side it was handed to: left as it is", "op", op.ID, "node", op.Node, "side", to)
			} else if next, progressed, done := r.cordonNode(ctx, s, to, r.actions[to]); !done {
				return next, progressed
			}
		}
	}
	from, ok := s.data.From.Side()
	if ok && r.actions[from] != nil {
		if err := r.actions[from].Admit(ctx, op.Node); err != nil {
			return r.giveBackRetry(s, err)
		}
		// IMPORTANT: the cordon the op put on the node comes off only
		// after the side admitted it back, restoring exactly what it had.
		if err := r.uncordonNode(ctx, s, from); err != nil {
			return r.giveBackRetry(s, err)
		}
	}
	if s.data.Cancel {
		s.op.State, s.op.NextAttempt = broker.OpCancelled, time.Time{}
		r.log.Info("op cancelled, node given back", "op", op.ID, "kind", op.Kind, "node", op.Node, "side", s.data.From, "reason", op.LastError)
		return s.save(), false
	}
	why := op.LastError
	if why == "" {
		why = "op abandoned"
	}
	return s.fail(fmt.Sprintf("node given back to %s: %s", s.data.From, why))
}

func (r *Runtime) giveBackRetry(s *stepCtx, err error) (broker.Op, bool) {
	s.op.Attempts++
	if s.op.Attempts >= maxStepAttempts {
		return s.fail(fmt.Sprintf("giving node %s back to %s failed %d times (%s), after: %s", s.op.Node, s.data.From, s.op.Attempts, err, s.op.LastError))
	}
	s.op.NextAttempt = s.now.Add(backoff(s.op.Attempts))
	r.log.Warn("give back failed, will retry", "op", s.op.ID, "node", s.op.Node, "attempt", s.op.Attempts, "err", err)
	return s.save(), false
}

func (r *Runtime) fail(op broker.Op, now time.Time, why string) broker.Op {
	op.State, op.LastError, op.NextAttempt = broker.OpFailed, why, time.Time{}
	r.log.Warn("op failed", "op", op.ID, "kind", op.Kind, "pool", op.Pool, "node", op.Node, "reason", why)
	return op
}

// ownerOf finds the side to drain node from in the last good
// observations: the side that owns it, else a side that lists it at all (a
// node cordoned there still runs that side's work), else OwnerNone.
func (r *Runtime) ownerOf(node string) broker.Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed := broker.OwnerNone
	for _, src := range broker.Sources {
		for _, n := range r.lastGood[src].Nodes {
			if n.Name != node {
				continue
			}
			if n.Owner != broker.OwnerNone {
				return n.Owner
			}
			if listed == broker.OwnerNone {
				listed = broker.Owner(src)
			}
		}
	}
	return listed
}

// sidesOf lists every side whose last good observation lists node, from
// first: a removal releases all of them before the terminate.
func (r *Runtime) sidesOf(node string, from broker.Owner) []broker.Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []broker.Owner
	if _, ok := from.Side(); ok {
		out = append(out, from)
	}
	for _, src := range broker.Sources {
		if slices.Contains(out, broker.Owner(src)) {
			continue
		}
		if slices.ContainsFunc(r.lastGood[src].Nodes, func(n broker.Node) bool { return n.Name == node }) {
			out = append(out, broker.Owner(src))
		}
	}
	return out
}

// instanceOf returns node's cloud instance from the latest merged nodes,
// whose instance ids come from the provider's instance map.
func (r *Runtime) instanceOf(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.lastNodes {
		// Pool membership comes from the provider's instance list alone:
		// an instance id a side reports for a node in no pool is not one.
		if n.Name == node && n.Pool != "" {
			return n.InstanceID
		}
	}
	return ""
}

// nodeDown says why node is down in the latest merged nodes, or "".
func (r *Runtime) nodeDown(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.lastNodes {
		if n.Name == node {
			return n.Down
		}
	}
	return ""
}

// poolInFlight counts the pool's machines on their way: instances the
// latest merged nodes do not know yet, or know in an in-flight phase (not
// yet gpu-ready, and not down).
func (r *Runtime) poolInFlight(ps broker.PoolState) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := make(map[string]*broker.Node, len(r.lastNodes))
	for i := range r.lastNodes {
		if id := r.lastNodes[i].InstanceID; id != "" {
			byID[id] = &r.lastNodes[i]
		}
	}
	k := 0
	for _, in := range ps.Instances {
		if in.Phase == broker.PhaseTerminating || in.Phase == broker.PhaseGone {
			continue
		}
		n, ok := byID[in.ID]
		if !ok || (n.Phase.InFlight() && n.Down == "") {
			k++
		}
	}
	return k
}

func findPool(pools []broker.PoolState, name string) (broker.PoolState, bool) {
	i := slices.IndexFunc(pools, func(p broker.PoolState) bool { return p.Pool.Name == name })
	if i < 0 {
		return broker.PoolState{}, false
	}
	return pools[i], true
}

// backoff is the retry delay after n failed attempts: 1s doubling to 1m.
func backoff(n int) time.Duration {
	d := time.Second << min(n-1, 6)
	return min(d, time.Minute)
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
