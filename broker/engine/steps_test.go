package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestEveryStepHasAHandler: the executor runs a handler for every step of
// every op kind's table (broker.OpSteps), and has none the tables lack.
func TestEveryStepHasAHandler(t *testing.T) {
	inTable := map[string]bool{}
	for kind, k := range broker.OpSteps {
		for _, s := range k.Steps {
			inTable[s.Name] = true
			if stepHandlers[s.Name] == nil {
				t.Errorf("step %s of %s has no handler in stepHandlers", s.Name, kind)
			}
		}
	}
	for name := range stepHandlers {
		if !inTable[name] {
			t.Errorf("stepHandlers runs %s, which no op kind's table has", name)
		}
	}
}

// TestMoveOutsideTheTableGivesUp: a handler that moves an op along an
// edge its kind's table does not name gives the op up (a node it holds
// goes back to its side) instead of running on in a state nobody drew.
func TestMoveOutsideTheTableGivesUp(t *testing.T) {
	w := newRTWorld(t, 2)
	r := w.runtime()
	s := &stepCtx{r: r, now: w.clock.Now(), op: broker.Op{ID: 7, Kind: broker.ActScaleUp, Pool: rtPool, Step: broker.StepSetDesired, State: broker.OpRunning}}
	op, _ := s.moveTo(broker.StepTerminate)
	if op.State != broker.OpFailed || op.Step != broker.StepSetDesired || !strings.Contains(op.LastError, "broker.OpSteps") {
		t.Fatalf("scale-up moved to terminate: %+v, want failed in set-desired naming the table", op)
	}
	s = &stepCtx{r: r, now: w.clock.Now(), op: broker.Op{ID: 8, Kind: broker.ActTransfer, Node: "n1", Step: broker.StepAdmit, State: broker.OpRunning},
		data: broker.OpData{From: broker.OwnerK8s, Prepared: true}}
	op, _ = s.moveTo(broker.StepSurge)
	if op.State != broker.OpRunning || op.Step != broker.StepGiveBack || !strings.Contains(op.LastError, "broker.OpSteps") {
		t.Fatalf("transfer moved to surge: %+v, want the node given back", op)
	}
	s = &stepCtx{r: r, now: w.clock.Now(), op: broker.Op{ID: 9, Kind: broker.ActScaleUp, Pool: rtPool, Step: broker.StepAwaitInstances, State: broker.OpRunning}}
	if op, _ := s.done(); op.State != broker.OpFailed {
		t.Fatalf("scale-up done while awaiting instances: %+v, want failed", op)
	}
}

// TestPolicyDefaultsAppliedAtTheEdge: a stored policy without a max
// provision time (zero: "the default") does not make a scale-up waiting
// for its instances back off at once: the tick applies the defaults
// where the policy enters (Policy.WithDefaults), for every step.
func TestPolicyDefaultsAppliedAtTheEdge(t *testing.T) {
	w := newRTWorld(t, 3)
	w.ledger.policy.MaxProvisionTime = 0
	r := w.runtime()
	now := w.clock.Now()
	raw, err := broker.EncodeOpData(broker.OpData{SetAt: now.Add(-time.Minute), SetTo: 2, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ledger.InsertOp(context.Background(), broker.Op{Kind: broker.ActScaleUp, Pool: rtPool, Target: 2, Reason: "test",
		State: broker.OpRunning, Step: broker.StepAwaitInstances, Data: raw}); err != nil {
		t.Fatal(err)
	}
	w.ticks(r, 1, time.Second)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) == 0 || ups[0].State.Terminal() {
		t.Fatalf("scale-up %+v: a minute after setting the capacity it must still wait (default max provision time %s)", ups, broker.DefaultPolicy().MaxProvisionTime)
	}
}
