package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// Direct tests of validate(): a destructive action is accepted only when
// planning on a fresh observation proposes the very same action.

// preemptWorld: the pool is at max, its one node runs low-priority
// preemptible work, and two high-priority pods wait, one of which must
// never preempt.
func preemptWorld(t *testing.T) (*rtWorld, *Runtime, broker.Workload) {
	w := newRTWorld(t, 1)
	w.machine(w.k8s, "n1")
	low := broker.Workload{Source: broker.SourceK8s, Key: "low", Name: "default/low", Tenant: "training", GPUs: 4, Preemptible: true, CheckpointAge: -1}
	w.k8s.nodes["n1"].Work = []broker.Workload{low}
	w.k8s.nodes["n1"].GPUsAllocated = 4
	w.k8s.submit(trainingPod("p", 4, 1000))
	np := trainingPod("np", 4, 1000)
	np.NoPreempt = true
	w.k8s.submit(np)
	return w, w.runtime(), low
}

func validateOne(t *testing.T, r *Runtime, a broker.Action) bool {
	t.Helper()
	acc, rej, err := r.validate(context.Background(), broker.Plan{Actions: []broker.Action{a}})
	if err != nil {
		t.Fatal(err)
	}
	if len(acc)+len(rej) != 1 {
		t.Fatalf("accepted %+v, rejected %+v", acc, rej)
	}
	return len(acc) == 1
}

func TestValidate(t *testing.T) {
	w, r, low := preemptWorld(t)
	fresh, err := r.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var confirmed broker.Action
	for _, a := range fresh.Actions {
		if a.Kind == broker.ActPreempt {
			confirmed = a
		}
	}
	if confirmed.Node != "n1" || len(confirmed.Victims) != 1 || confirmed.Victims[0].Key != "low" {
		t.Fatalf("fresh plan %+v, want a preemption of low on n1", fresh.Actions)
	}
	other := low
	other.Key = "someone-else"
	cases := []struct {
		name   string
		action func(broker.Action) broker.Action
		want   bool
	}{
		{"the action fresh state proposes is accepted", func(a broker.Action) broker.Action { return a }, true},
		{"a preemption of other victims is rejected", func(a broker.Action) broker.Action { a.Victims = []broker.Workload{other}; return a }, false},
		{"a preemption of more victims is rejected", func(a broker.Action) broker.Action { a.Victims = []broker.Workload{low, other}; return a }, false},
		{"a preemption serving demand that must never preempt is rejected", func(a broker.Action) broker.Action { a.Serves = []string{"k8s/np"}; return a }, false},
		{"an action on another node is rejected", func(a broker.Action) broker.Action { a.Node = "n2"; return a }, false},
		{"an action with another instance is rejected", func(a broker.Action) broker.Action { a.InstanceID = "i-other"; return a }, false},
		{"a scale-down fresh state does not propose is rejected", func(a broker.Action) broker.Action {
			return broker.Action{Kind: broker.ActScaleDown, Pool: rtPool, Node: "n1", InstanceID: "i-n1", From: broker.OwnerK8s, Reason: "test"}
		}, false},
		{"a scale-up passes unchecked", func(a broker.Action) broker.Action {
			return broker.Action{Kind: broker.ActScaleUp, Pool: rtPool, Target: 1, Reason: "test"}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := validateOne(t, r, tc.action(confirmed)); got != tc.want {
				t.Fatalf("accepted = %v, want %v", got, tc.want)
			}
		})
	}
	_ = w
}

func TestValidateTransferTarget(t *testing.T) {
	w := newRTWorld(t, 1)
	w.machine(w.k8s, "n1")
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 2, Units: 2, Gang: true})
	r := w.runtime()
	fresh, err := r.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.Actions) != 1 || fresh.Actions[0].Kind != broker.ActTransfer {
		t.Fatalf("fresh plan %+v, want one transfer", fresh.Actions)
	}
	a := fresh.Actions[0]
	if !validateOne(t, r, a) {
		t.Fatal("the confirmed transfer was rejected")
	}
	a.To = broker.OwnerNone
	if validateOne(t, r, a) {
		t.Fatal("a transfer to another side than fresh state proposes was accepted")
	}
	a = fresh.Actions[0]
	a.From = broker.OwnerYARN
	if validateOne(t, r, a) {
		t.Fatal("a transfer from another side than fresh state proposes was accepted")
	}
}

// TestRuntimeValidationRejectsWhatFreshStateDoesNotConfirm: between the
// plan's observation and the validation's, a pod lands on the idle node
// the plan would reclaim. The scale-down is rejected and recorded, and no
// op is journaled for it.
func TestRuntimeValidationRejectsWhatFreshStateDoesNotConfirm(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "n1")
	r := w.runtime()
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.k8s.afterObserve = func(s *rtSide) {
		s.afterObserve = nil
		n := s.nodes["n1"]
		n.Work = []broker.Workload{{Source: broker.SourceK8s, Key: "late", Name: "default/late", GPUs: 4, CheckpointAge: -1}}
		n.GPUsAllocated = 4
	}
	rep := w.tick(r)
	if len(rep.Plan.Actions) != 1 || rep.Plan.Actions[0].Kind != broker.ActScaleDown {
		t.Fatalf("plan %+v, want the scale-down of n1", rep.Plan.Actions)
	}
	if len(rep.Rejected) != 1 || len(w.ledger.opsOf(broker.ActScaleDown)) != 0 || len(w.decisionsOf("rejected")) != 1 {
		t.Fatalf("rejected %+v, ops %+v: the scale-down must be rejected, recorded and not journaled", rep.Rejected, w.ledger.ops)
	}
}
