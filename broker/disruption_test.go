package broker

import (
	"strings"
	"testing"
	"time"
)

// What limits a drain before it starts (disruption.go): budgets that allow
// no disruption, work whose data lives on the node, and work whose
// eviction fails its controller for good.

func budgets(bs ...Budget) func(*Workload) { return func(w *Workload) { w.Budgets = bs } }
func localStorage(v string) func(*Workload) {
	return func(w *Workload) { w.LocalStorage = v }
}
func fatal(why string, since time.Duration) func(*Workload) {
	return func(w *Workload) { w.Fatal, w.FatalSince = why, t0.Add(-since) }
}

func TestConsolidationKnowsDrainLimits(t *testing.T) {
	two := []PoolState{gpuPool(gtg, 2)}
	under := underused(10 * time.Minute)
	k8sNode := func(name string, ws ...Workload) Node { return gpuNode(name, gtg, OwnerK8s, 4, 0, under, work(ws...)) }
	room := gpuNode("room", gtg, OwnerK8s, 4, 2)
	svc := func(opts ...func(*Workload)) Workload {
		return job("web", 1, 0, true, append([]func(*Workload){service, app("ReplicaSet/ml/web", false)}, opts...)...)
	}
	cases := []struct {
		name    string
		nodes   []Node
		actions []Action
		kept    string // a phrase the note on k1 must contain; "" when k1 is drained
	}{
		{"a service whose budget allows a disruption is moved",
			[]Node{k8sNode("k1", svc(budgets(Budget{"ml/web", 1}))), room}, []Action{down(gtg, "k1", OwnerK8s)}, ""},
		{"one whose budget allows none is left",
			[]Node{k8sNode("k1", svc(budgets(Budget{"ml/web", 0}))), room}, nil, "PodDisruptionBudget ml/web allows no disruption of pod web now"},
		{"as is one with two budgets, which the Eviction API refuses",
			[]Node{k8sNode("k1", svc(budgets(Budget{"ml/a", 3}, Budget{"ml/b", 3}))), room}, nil, "2 PodDisruptionBudgets (ml/a, ml/b)"},
		{"a budget on a system pod does not block",
			[]Node{k8sNode("k1", svc(), job("ds", 0, 0, true, system, budgets(Budget{"kube-system/ds", 0}))), room}, []Action{down(gtg, "k1", OwnerK8s)}, ""},
		{"a service with emptyDir scratch is left",
			[]Node{k8sNode("k1", svc(localStorage("emptyDir scratch"))), room}, nil, "keeps data on the node (emptyDir scratch)"},
		{"a Job pod at its backoffLimit is left, even with a fresh checkpoint",
			[]Node{k8sNode("k1", job("train", 1, 0, true, batch, checkpoint(time.Second), fatal("Job ml/train has failed 0 of backoffLimit 0", time.Second))), room},
			nil, "would fail it for good: Job ml/train"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snap(two, c.nodes, nil)
			runPlanCases(t, []planCase{{name: "plan", snap: s, policy: refPolicy(), actions: c.actions}})
			got := keptReason(MakePlan(s, refPolicy()), "k1")
			if c.kept == "" && got != "" || !strings.Contains(got, c.kept) {
				t.Fatalf("note for k1 = %q, want %q", got, c.kept)
			}
		})
	}
}

// TestFatalVictimCostsItsWholeJob: a preemption prefers the pod whose
// eviction costs little over a younger one whose eviction fails its Job for
// good, and records the Job's whole run time as the work lost.
func TestFatalVictimCostsItsWholeJob(t *testing.T) {
	full1 := []PoolState{gpuPool(gtg, 1, bounds(0, 1))}
	young := job("young", 2, 0, true, batch, app("Job/ml/young", false), started(time.Minute), fatal("Job ml/young has failed 0 of backoffLimit 0", 3*time.Hour))
	old := job("old", 2, 0, true, batch, app("Job/ml/old", false), started(30*time.Minute))
	s := snap(full1, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, work(young, old))}, []Demand{pod("hi", prio(1000), perUnit(2))})
	runPlanCases(t, []planCase{{name: "the cheaper victim", snap: s, policy: refPolicy(),
		actions: []Action{evict(gtg, "n1", []Workload{old}, "k8s/hi")}}})

	c := young.Cost(t0)
	if c.Lost != 3*time.Hour || c.GPUHours != 6 || c.Never == "" {
		t.Fatalf("cost of the fatal victim %+v, want its Job's 3h on 2 GPUs and never moved for consolidation", c)
	}
	s = snap(full1, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, work(young))}, []Demand{pod("hi", prio(1000), perUnit(3))})
	plan := MakePlan(s, refPolicy())
	if len(plan.Actions) != 1 || plan.Actions[0].GPUHoursLost != 6 {
		t.Fatalf("actions %+v, want one preemption losing 6 GPU-hours (the whole Job)", plan.Actions)
	}
}
