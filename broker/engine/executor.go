package engine

import (
	"context"
	"fmt"
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
// p has its defaults applied (the tick applies them where the policy enters).
func opTimeout(k broker.ActionKind, p broker.Policy) time.Duration {
	prov, drain := p.MaxProvisionTime.D(), p.DrainTimeout.D()
	switch k {
	case broker.ActScaleUp:
		// Setting the capacity, then the machines booting to gpu-ready.
		return 2 * prov
	case broker.ActMigrate:
		// The wait for each task's next checkpoint, then the release
		// and terminate of the emptied node.
		return p.MigrateMaxWait.D() + drain + prov
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

func (r *Runtime) fail(op broker.Op, now time.Time, why string) broker.Op {
	op.State, op.LastError, op.NextAttempt = broker.OpFailed, why, time.Time{}
	r.log.Warn("op failed", "op", op.ID, "kind", op.Kind, "pool", op.Pool, "node", op.Node, "reason", why)
	return op
}

// backoff is the retry delay after n failed attempts: 1s doubling to 1m.
func backoff(n int) time.Duration {
	d := time.Second << min(n-1, 6)
	return min(d, time.Minute)
}
