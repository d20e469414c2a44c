package broker

import (
	"fmt"
	"slices"
	"strings"
)

// The op state machines as data. Each op kind has one table (OpSteps):
// its first step, and for every step where it may go next, whether it
// holds a node taken from its side (so giving up gives it back first) and
// what it does. The executor (broker/engine) runs one handler per step and
// moves only along these edges: a move the table does not name gives the
// op up. TestOpStepsWalk checks every table (every step reachable, every
// path ends, every step that holds a node can give it back), and the
// README's op diagram is generated from it (StepDiagram).

// StepDone is the pseudo-step an op moves to when it ends done.
const StepDone = "done"

// StepSpec is one step of an op kind.
type StepSpec struct {
	Name string
	// Next are the steps it may move to, StepDone when it may end done.
	// A step may always run again (a retry, a wait, or persisting what it
	// decided before acting). Ending failed or cancelled is always
	// possible and not listed.
	Next []string
	// HoldsNode: the op holds a node taken from its side in this step;
	// giving up (its retries spent, its deadline passed, a drain that
	// cannot finish, work found that the plan did not see) moves it to
	// StepGiveBack, which gives the node back first. That move is implied
	// and not listed in Next.
	HoldsNode bool
	// Doc says what the step does, for the diagram.
	Doc string
}

// KindSteps is one op kind's state machine.
type KindSteps struct {
	First string
	Steps []StepSpec
	// Interrupts are the moves other actions make into an open op of the
	// kind from outside its steps: from the steps listed, to To.
	Interrupts []Interrupt
}

// Interrupt is a move into an open op made by another action.
type Interrupt struct {
	By   ActionKind
	From []string
	To   string
}

// The steps every removal and hand-over shares.
var (
	stepRelease = func(next ...string) StepSpec {
		return StepSpec{Name: StepRelease, Next: next, HoldsNode: true,
			Doc: "cordon and drain the node on every side that holds it (the YARN cordon while containers run; the exclude file only once empty)"}
	}
	stepTerminate = StepSpec{Name: StepTerminate, Next: []string{StepForget, StepDone}, HoldsNode: true,
		Doc: "terminate the node's instance, by the id fixed when the op started"}
	stepForget = StepSpec{Name: StepForget, Next: []string{StepDone},
		Doc: "take the terminated host out of the exclude file and the RM's node list"}
	stepAdmit = StepSpec{Name: StepAdmit, Next: []string{StepAwaitAdmitted, StepDone}, HoldsNode: true,
		Doc: "the receiving side admits the node (YARN: exclude-file removal, refresh, NodeManager restart; Kubernetes: uncordon)"}
	stepAwaitAdmitted = StepSpec{Name: StepAwaitAdmitted, Next: []string{StepDone}, HoldsNode: true,
		Doc: "wait until the receiving side lists the node schedulable with its GPUs"}
	stepGiveBack = StepSpec{Name: StepGiveBack,
		Doc: "give the node back to the side it came from (taking it from the side it was handed to first); ends failed, or cancelled"}
)

// OpSteps is every op kind's state machine.
var OpSteps = map[ActionKind]KindSteps{
	ActScaleUp: {First: StepSetDesired, Steps: []StepSpec{
		{Name: StepSetDesired, Next: []string{StepAwaitInstances},
			Doc: "set the pool's desired capacity (never lower than the group's)"},
		{Name: StepAwaitInstances, Next: []string{StepAwaitReady},
			Doc: "wait for the provider to report the new capacity"},
		{Name: StepAwaitReady, Next: []string{StepDone},
			Doc: "stay open, serving the demand, until the machines are gpu-ready; a pool in backoff hands back what never launched"},
	}},
	ActScaleDown: {First: StepRelease, Steps: []StepSpec{
		stepRelease(StepTerminate),
		stepTerminate, stepForget, stepGiveBack,
		{Name: StepRecommission,
			Doc: "an attrition cancelled for pending demand: the node goes back to its side; ends cancelled"},
	}, Interrupts: []Interrupt{
		{By: ActCancelScaleDown, From: []string{StepRelease}, To: StepGiveBack},
		{By: ActRecommission, From: []string{StepRelease}, To: StepRecommission},
	}},
	ActReplace: {First: StepRelease, Steps: []StepSpec{
		stepRelease(StepSurge),
		{Name: StepSurge, Next: []string{StepTerminate}, HoldsNode: true,
			Doc: "buy the replacement first (desired + 1, within the pool's and the cluster's max)"},
		stepTerminate, stepForget, stepGiveBack,
	}},
	ActTransfer: {First: StepRelease, Steps: []StepSpec{
		stepRelease(StepAdmit, StepDone),
		stepAdmit, stepAwaitAdmitted, stepGiveBack,
	}},
	ActMigrate: {First: StepEvict, Steps: []StepSpec{
		{Name: StepEvict, Next: []string{StepRelease}, HoldsNode: true,
			Doc: "cordon the node (YARN: the cordon label; Kubernetes: cordon), then stop the tasks right after their checkpoints, so they restart elsewhere"},
		stepRelease(StepTerminate),
		stepTerminate, stepForget, stepGiveBack,
	}, Interrupts: []Interrupt{
		// Pending demand the cordoned node could serve ends the wait for
		// checkpoints: the node goes back to its side (tasks already moved
		// lost nothing) rather than the demand waiting for a boot.
		{By: ActCancelScaleDown, From: []string{StepEvict}, To: StepGiveBack},
	}},
	ActPreempt: {First: StepEvict, Steps: []StepSpec{
		{Name: StepEvict, Next: []string{StepRelease, StepDone}, HoldsNode: true,
			Doc: "stop the victims (YARN: the cordon first, GRACEFUL_SHUTDOWN, FORCEFUL_SHUTDOWN after the grace)"},
		stepRelease(StepAdmit),
		stepAdmit, stepAwaitAdmitted, stepGiveBack,
	}},
}

// Steps returns kind's step named step.
func (k KindSteps) Step(step string) (StepSpec, bool) {
	i := slices.IndexFunc(k.Steps, func(s StepSpec) bool { return s.Name == step })
	if i < 0 {
		return StepSpec{}, false
	}
	return k.Steps[i], true
}

// FirstStep is where an op of kind starts.
func FirstStep(kind ActionKind) string {
	if k, ok := OpSteps[kind]; ok {
		return k.First
	}
	return StepRelease
}

// CanMove reports whether an op of kind may move from step from to step
// to (StepDone: end done). Running a step again is always allowed.
func CanMove(kind ActionKind, from, to string) error {
	if from == to {
		return nil
	}
	k, ok := OpSteps[kind]
	if !ok {
		return fmt.Errorf("op kind %q has no step table", kind)
	}
	s, ok := k.Step(from)
	if !ok {
		return fmt.Errorf("op kind %s has no step %q", kind, from)
	}
	if !slices.Contains(s.Next, to) {
		return fmt.Errorf("op kind %s may not move from step %s to %s (broker.OpSteps)", kind, from, to)
	}
	return nil
}

// HoldsNode reports whether an op of kind in step holds a node taken from
// its side, which giving up gives back first.
func HoldsNode(kind ActionKind, step string) bool {
	s, ok := OpSteps[kind].Step(step)
	return ok && s.HoldsNode
}

// InterruptTo returns where action by moves an open op of kind in step
// from, if it may.
func InterruptTo(kind ActionKind, by ActionKind, from string) (string, bool) {
	for _, in := range OpSteps[kind].Interrupts {
		if in.By == by && slices.Contains(in.From, from) {
			return in.To, true
		}
	}
	return "", false
}

// diagramKinds is the order StepDiagram lists the kinds in.
var diagramKinds = []ActionKind{ActScaleUp, ActScaleDown, ActReplace, ActTransfer, ActPreempt, ActMigrate}

// StepDiagram renders every op kind's table as text: one line per step
// with where it may go next, a mark on the steps that hold a node, and
// the interrupts. The README's op diagram is this text.
func StepDiagram() string {
	var b strings.Builder
	for i, kind := range diagramKinds {
		k := OpSteps[kind]
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (starts at %s)\n", kind, k.First)
		for _, s := range k.Steps {
			mark := " "
			if s.HoldsNode {
				mark = "*"
			}
			next := "ends (failed or cancelled)"
			if len(s.Next) > 0 {
				next = "→ " + strings.Join(s.Next, " | ")
			}
			fmt.Fprintf(&b, "  %s %-16s %s\n", mark, s.Name, next)
			fmt.Fprintf(&b, "      %s\n", s.Doc)
		}
		for _, in := range k.Interrupts {
			fmt.Fprintf(&b, "  ! %s moves an op in %s to %s\n", in.By, strings.Join(in.From, ", "), in.To)
		}
	}
	b.WriteString("\n* holds a node taken from its side: giving up (retries spent, the op's deadline) gives it back first\n")
	return b.String()
}

// PendingRemoval reports whether open op o will still lower its pool's
// desired capacity by one and has not yet: a scale-down that evicts
// (releasing or terminating; neither cancelled nor an attrition, whose
// node keeps counting until its work has ended, days perhaps), or a
// replace that raised the desired capacity first (surging or
// terminating: its terminate takes the surge back), or a migration
// (stopping its tasks, releasing or terminating the emptied node). The planner (which
// also drops ops whose node is already terminating) and the executor's
// scale-up both count with it.
func PendingRemoval(o *Op) bool {
	if o.State.Terminal() {
		return false
	}
	d := OpDataOf(o)
	switch o.Kind {
	case ActScaleDown:
		return (o.Step == StepRelease || o.Step == StepTerminate) && !d.Cancel && !d.Attrition
	case ActReplace:
		return d.SurgeTo > 0 && (o.Step == StepSurge || o.Step == StepTerminate)
	case ActMigrate:
		return o.Step == StepEvict || o.Step == StepRelease || o.Step == StepTerminate
	}
	return false
}
