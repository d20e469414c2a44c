package broker

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Consolidation and preemption: one eviction cost for YARN containers and
// Kubernetes pods (cost.go), idle reclaim that never throws away work
// beyond the policy (scaledown.go, attrition.go), and preemption across
// sides (preempt.go).

func batch(w *Workload) { w.Class = WorkBatch }
func bare(w *Workload)  { w.Class = WorkBare }
func app(name string, am bool) func(*Workload) {
	return func(w *Workload) { w.App, w.AM = name, am }
}
func appGPUs(n int) func(*Workload)           { return func(w *Workload) { w.AppGPUs = n } }
func doNotDisrupt(why string) func(*Workload) { return func(w *Workload) { w.DoNotDisrupt = why } }
func noPreempt(d *Demand)                     { d.NoPreempt = true }

func attritionOn(p *Policy)   { p.YARNDrainByAttrition = true }
func cordonAndWait(p *Policy) { p.CordonAndWait = true }

func downByAttrition(pool, node string, from Owner) Action {
	return Action{Kind: ActScaleDown, Pool: pool, Node: node, From: from, Attrition: true}
}

func TestCost(t *testing.T) {
	now := t0
	cases := []struct {
		name  string
		w     Workload
		lost  time.Duration
		hours float64
		never bool
	}{
		{"service replicas lose nothing", job("s", 2, 0, true, service), 0, 0, false},
		{"batch loses the work since its checkpoint", job("b", 2, 0, true, batch, checkpoint(30*time.Minute)), 30 * time.Minute, 1, false},
		{"batch without a checkpoint loses its whole run time", job("b", 2, 0, true, batch, started(3*time.Hour)), 3 * time.Hour, 6, false},
		{"unknown class is batch", job("u", 1, 0, true, checkpoint(time.Hour)), time.Hour, 1, false},
		{"bare pods are never evicted for consolidation", job("p", 1, 0, true, bare, checkpoint(time.Minute)), time.Minute, 1.0 / 60, true},
		{"do-not-disrupt work is never evicted for consolidation", job("d", 1, 0, true, service, doNotDisrupt("karpenter.sh/do-not-disrupt")), 0, 0, true},
		{"YARN containers on the same scale", job("c", 4, 0, true, yarnWork, checkpoint(15*time.Minute)), 15 * time.Minute, 1, false},
		// Stopping an AM ends its application: 4 GPUs elsewhere lose their
		// work too.
		{"a 0-GPU ApplicationMaster is priced on its whole application", job("am", 0, 0, true, yarnWork, app("application_1_0001", true), appGPUs(4), checkpoint(30*time.Minute)), 30 * time.Minute, 2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.w.Cost(now)
			if c.Lost != tc.lost || math.Abs(c.GPUHours-tc.hours) > 1e-9 || (c.Never != "") != tc.never {
				t.Fatalf("cost %+v, want lost %s, %.3f GPU-hours, never %v", c, tc.lost, tc.hours, tc.never)
			}
		})
	}
}

// keptReason returns the note for node in plan, or "".
func keptReason(plan Plan, node string) string {
	for _, k := range plan.Kept {
		if k.Node == node {
			return k.Reason
		}
	}
	return ""
}

func TestConsolidation(t *testing.T) {
	two := []PoolState{gpuPool(gtg, 2)}
	under := underused(10 * time.Minute)
	yarnNode := func(name string, ws ...Workload) Node {
		return gpuNode(name, gtg, OwnerYARN, 4, 0, under, work(ws...))
	}
	k8sNode := func(name string, ws ...Workload) Node {
		return gpuNode(name, gtg, OwnerK8s, 4, 0, under, work(ws...))
	}
	room := gpuNode("room", gtg, OwnerK8s, 4, 2)    // 2 free GPUs take moved work
	yroom := gpuNode("yroom", gtg, OwnerYARN, 4, 2) // the same on YARN
	type tc struct {
		name    string
		snap    *Snapshot
		policy  Policy
		actions []Action
		waits   []Wait
		kept    map[string]string // node → a phrase its note must contain
	}
	cases := []tc{
		{
			name:    "a YARN node running a GPU container is never reclaimed for idleness",
			snap:    snap(two, []Node{yarnNode("y1", job("c", 1, 0, true, yarnWork, batch, checkpoint(time.Second))), yarnNode("y2")}, nil),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "y2", OwnerYARN)},
			kept:    map[string]string{"y1": "idle reclaim never stops YARN work"},
		},
		{
			// The RM kills what still runs at a finite graceful timeout, so
			// no checkpoint age or max_work_lost makes an idle drain safe:
			// only a recorded preemption may cut YARN work short.
			name:   "nor when its container checkpointed a second ago, max_work_lost is 100h and another YARN node has room for it",
			snap:   snap(two, []Node{yarnNode("y1", job("c", 1, 0, true, yarnWork, batch, checkpoint(time.Second))), yroom}, nil),
			policy: refPolicy(func(p *Policy) { p.MaxWorkLost = Duration(100 * time.Hour) }),
			kept:   map[string]string{"y1": "idle reclaim never stops YARN work"},
		},
		{
			// A GPU node running only CPU containers (a Spark job's
			// executor) holds no GPU, but the RM kills its containers at a
			// finite graceful timeout all the same.
			name:    "a YARN node running only CPU containers is never reclaimed for idleness",
			snap:    snap(two, []Node{yarnNode("y1", job("spark-exec", 0, 0, true, yarnWork, batch, checkpoint(time.Second))), yarnNode("y2")}, nil),
			policy:  refPolicy(func(p *Policy) { p.MaxWorkLost = Duration(100 * time.Hour) }),
			actions: []Action{down(gtg, "y2", OwnerYARN)},
			kept:    map[string]string{"y1": "1 YARN containers without GPUs"},
		},
		{
			// Killing the AM ends its application, GPU containers on other
			// nodes included.
			name:   "a YARN node running only a 0-GPU ApplicationMaster is never reclaimed for idleness",
			snap:   snap(two, []Node{yarnNode("y1", job("am", 0, 0, true, yarnWork, batch, app("application_1_0001", true))), gpuNode("y2", gtg, OwnerYARN, 4, 4, under, work(job("gpu", 4, 0, true, yarnWork, batch, app("application_1_0001", false))))}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"y1": "any container keeps a YARN node"},
		},
		{
			name:    "with attrition a YARN node of CPU containers leaves by attrition, never drained",
			snap:    snap(two, []Node{yarnNode("y1", job("spark-exec", 0, 0, true, yarnWork, batch, checkpoint(time.Second))), gpuNode("y2", gtg, OwnerYARN, 4, 4)}, nil),
			policy:  refPolicy(attritionOn),
			actions: []Action{downByAttrition(gtg, "y1", OwnerYARN)},
		},
		{
			name:    "nor handed to the other side",
			snap:    snap(two, []Node{yarnNode("y1", job("c", 1, 0, true, yarnWork, service)), gpuNode("y2", gtg, OwnerYARN, 4, 1)}, []Demand{pod("p", perUnit(4))}),
			policy:  refPolicy(func(p *Policy) { p.ClusterMaxGPUs = 8 }),
			waits:   []Wait{wait("k8s/p", WaitNoPreemptible)},
			kept:    map[string]string{"y1": "YARN GPU containers"},
			actions: nil,
		},
		{
			name:    "with yarn_drain_by_attrition it is decommissioned with an infinite timeout",
			snap:    snap(two, []Node{yarnNode("y1", job("c", 1, 0, true, yarnWork)), yarnNode("y2")}, nil),
			policy:  refPolicy(attritionOn),
			actions: []Action{down(gtg, "y2", OwnerYARN), downByAttrition(gtg, "y1", OwnerYARN)},
		},
		{
			name:   "attrition never goes below the pool minimum",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(1, 5))}, []Node{yarnNode("y1", job("c", 1, 0, true, yarnWork))}, nil),
			policy: refPolicy(attritionOn),
		},
		{
			name: "a pending attrition is cancelled as soon as YARN demand could use the node",
			snap: snap(two, []Node{gpuNode("y1", gtg, OwnerNone, 4, 0, phase(PhaseDraining, time.Hour), work(job("c", 1, 0, true, yarnWork)))},
				[]Demand{yarnApp("a/1", 1, 2)},
				inflight(Op{ID: 7, Kind: ActScaleDown, Pool: gtg, Node: "y1", State: OpRunning, Step: StepRelease,
					Data: []byte(`{"from":"yarn","attrition":true,"prepared":true}`)})),
			policy:  refPolicy(attritionOn),
			actions: []Action{{Kind: ActRecommission, Pool: gtg, Node: "y1", From: OwnerNone, To: OwnerYARN}},
			waits:   []Wait{wait("yarn/a/1", WaitScheduler)},
		},
		{
			name: "but not for demand that does not fit it",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("y1", gtg, OwnerNone, 4, 0, phase(PhaseDraining, time.Hour), work(job("c", 3, 0, true, yarnWork)))},
				[]Demand{yarnApp("a/1", 1, 2)},
				inflight(Op{ID: 7, Kind: ActScaleDown, Pool: gtg, Node: "y1", State: OpRunning, Step: StepRelease,
					Data: []byte(`{"from":"yarn","attrition":true,"prepared":true}`)})),
			policy:  refPolicy(attritionOn),
			actions: []Action{{Kind: ActScaleUp, Pool: gtg, Target: 2, Serves: []string{"yarn/a/1"}}},
		},
		{
			name:   "allocated GPUs without listed work are unknown, never idle",
			snap:   snap(two, []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, under, func(n *Node) { n.GPUsAllocated = 2 })}, nil),
			policy: refPolicy(attritionOn),
			kept:   map[string]string{"y1": "unknown work is never idle"},
		},
		{
			name:   "a node running a Job pod with no checkpoint is not drained",
			snap:   snap(two, []Node{k8sNode("k1", job("train", 1, 0, true, batch)), room}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"k1": "no known checkpoint (its whole run time)"},
		},
		{
			name:    "the same with a checkpoint 1 min old is",
			snap:    snap(two, []Node{k8sNode("k1", job("train", 1, 0, true, batch, checkpoint(time.Minute))), room}, nil),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "k1", OwnerK8s)},
		},
		{
			name:   "the decision says how old the checkpoint is",
			snap:   snap(two, []Node{k8sNode("k1", job("train", 1, 0, true, batch, checkpoint(2*time.Hour))), room}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"k1": "runs batch work with 2h0m0s since its last checkpoint"},
		},
		{
			name:   "work lost is summed over the node's pods",
			snap:   snap(two, []Node{k8sNode("k1", job("a", 1, 0, true, checkpoint(6*time.Minute)), job("b", 0, 0, true, checkpoint(6*time.Minute))), room}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"k1": "all its work would lose 12m0s"},
		},
		{
			name:    "a Deployment's pod is moved",
			snap:    snap(two, []Node{k8sNode("k1", job("web", 2, 0, true, service, app("ReplicaSet/ml/web", false))), room}, nil),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "k1", OwnerK8s)},
		},
		{
			name:   "pods annotated do-not-disrupt are left",
			snap:   snap(two, []Node{k8sNode("k1", job("web", 1, 0, true, service, doNotDisrupt("cluster-autoscaler.kubernetes.io/safe-to-evict=false"))), room}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"k1": "marked do-not-disrupt"},
		},
		{
			name:   "bare pods are left",
			snap:   snap(two, []Node{k8sNode("k1", job("lone", 1, 0, true, bare, checkpoint(time.Second))), room}, nil),
			policy: refPolicy(),
			kept:   map[string]string{"k1": "bare pod"},
		},
		{
			name:   "a larger max_work_lost drains it",
			snap:   snap(two, []Node{k8sNode("k1", job("train", 1, 0, true, batch, checkpoint(time.Hour))), room}, nil),
			policy: refPolicy(func(p *Policy) { p.MaxWorkLost = Duration(2 * time.Hour) }), actions: []Action{down(gtg, "k1", OwnerK8s)},
		},
		{
			name:    "with cordon_and_wait the node is cordoned and reclaimed when its batch work ends",
			snap:    snap(two, []Node{k8sNode("k1", job("train", 1, 0, true, batch)), room}, nil),
			policy:  refPolicy(cordonAndWait),
			actions: []Action{downByAttrition(gtg, "k1", OwnerK8s)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runPlanCases(t, []planCase{{name: "plan", snap: c.snap, policy: c.policy, actions: c.actions, waits: c.waits}})
			plan := MakePlan(c.snap, c.policy)
			for node, phrase := range c.kept {
				if got := keptReason(plan, node); !strings.Contains(got, phrase) {
					t.Errorf("note for %s = %q, want it to say %q (all notes: %+v)", node, got, phrase, plan.Kept)
				}
			}
			for _, k := range plan.Kept {
				if _, ok := c.kept[k.Node]; !ok && k.Node != "room" {
					t.Errorf("unexpected note %+v", k)
				}
			}
		})
	}
}

func TestPreemptionCost(t *testing.T) {
	full := []PoolState{gpuPool(gtg, 2, bounds(0, 2))}
	full1 := []PoolState{gpuPool(gtg, 1, bounds(0, 1))}
	k8sNode := func(name string, ws ...Workload) Node { return gpuNode(name, gtg, OwnerK8s, 4, 0, work(ws...)) }
	yarnNode := func(name string, ws ...Workload) Node { return gpuNode(name, gtg, OwnerYARN, 4, 0, work(ws...)) }
	hi := pod("hi", prio(1000))
	yhi := yarnApp("hi/1", 1, 1, prio(1000))

	svc := job("svc", 2, 0, true, service)
	train := job("train", 2, 0, true, batch, checkpoint(30*time.Minute))
	am := job("am", 1, 0, true, yarnWork, app("app1", true), checkpoint(time.Minute))
	exec := job("exec", 3, 0, true, yarnWork, app("app1", false), checkpoint(time.Minute))
	other := job("other", 3, 0, true, yarnWork, app("app2", false), checkpoint(30*time.Minute))
	far := job("far", 4, 0, true, yarnWork, app("app1", false), checkpoint(time.Hour))
	g1 := job("g1", 1, 0, true, batch, app("Job/ml/train", false), checkpoint(time.Minute))
	g2 := job("g2", 1, 0, true, batch, app("Job/ml/train", false), checkpoint(time.Minute))
	solo := job("solo", 2, 0, true, batch, checkpoint(time.Hour))
	yc := job("yc", 4, 0, true, yarnWork, batch, started(2*time.Hour))
	lowPod := job("low", 4, 0, true, batch, started(time.Hour))

	runPlanCases(t, []planCase{
		{
			name:    "the cheapest victims first: a service replica before a training job",
			snap:    snap(full1, []Node{k8sNode("n1", train, svc)}, []Demand{hi}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{svc}, "k8s/hi")},
		},
		{
			name:    "never a lone AM: its application also runs elsewhere",
			snap:    snap(full, []Node{yarnNode("y1", am, other), yarnNode("y2", far)}, []Demand{yhi}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "y1", []Workload{other}, "yarn/hi/1")},
		},
		{
			name:    "the whole application when all of it is on the node",
			snap:    snap(full1, []Node{yarnNode("y1", am, exec)}, []Demand{yarnApp("hi/1", 1, 1, prio(1000))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "y1", []Workload{am, exec}, "yarn/hi/1")},
		},
		{
			name:    "gangs as a whole",
			snap:    snap(full1, []Node{k8sNode("n1", g1, g2, solo)}, []Demand{pod("hi", prio(1000), perUnit(1))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{g1, g2}, "k8s/hi")},
		},
		{
			name:   "not for demand that may not preempt (preemptionPolicy Never)",
			snap:   snap(full1, []Node{k8sNode("n1", svc, train)}, []Demand{pod("hi", prio(1000), noPreempt)}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
		{
			name:   "a Kubernetes pod at priority 1000000 preempts a YARN container at 0 and takes its node",
			snap:   snap(full1, []Node{yarnNode("y1", yc)}, []Demand{pod("elastic-gpu-training", prio(1000000))}),
			policy: refPolicy(),
			actions: []Action{{Kind: ActPreempt, Pool: gtg, Node: "y1", From: OwnerYARN, To: OwnerK8s,
				Victims: []Workload{yc}, Serves: []string{"k8s/elastic-gpu-training"}}},
		},
		{
			name:   "a YARN app preempts a lower-priority pod and takes its node",
			snap:   snap(full1, []Node{k8sNode("k1", lowPod)}, []Demand{yarnApp("a/1", 1, 2, prio(1000))}),
			policy: refPolicy(),
			actions: []Action{{Kind: ActPreempt, Pool: gtg, Node: "k1", From: OwnerK8s, To: OwnerYARN,
				Victims: []Workload{lowPod}, Serves: []string{"yarn/a/1"}}},
		},
		{
			name:   "not across sides when some work on the node may not be preempted",
			snap:   snap(full1, []Node{yarnNode("y1", job("yc", 2, 0, true, yarnWork), job("keep", 2, 0, false, yarnWork))}, []Demand{hi}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
		{
			name:   "not across sides over higher-priority work",
			snap:   snap(full1, []Node{yarnNode("y1", job("yc", 4, 5000, true, yarnWork))}, []Demand{hi}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
	})
}

// TestPreemptionRecordsWorkLost: the action carries the GPU-hours its
// victims lose, in the field and in its reason.
func TestPreemptionRecordsWorkLost(t *testing.T) {
	yc := job("yc", 4, 0, true, yarnWork, batch, started(2*time.Hour))
	s := snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, work(yc))},
		[]Demand{pod("elastic-gpu-training", prio(1000000))})
	plan := MakePlan(s, refPolicy())
	if len(plan.Actions) != 1 {
		t.Fatalf("actions %+v, want one preemption", plan.Actions)
	}
	a := plan.Actions[0]
	if a.GPUHoursLost != 8 || !strings.Contains(a.Reason, "losing 8.00 GPU-hours") || !strings.Contains(a.Reason, "hand it to k8s") {
		t.Fatalf("preemption records %.2f GPU-hours, reason %q; want 8 GPU-hours (4 GPUs for 2h) and the hand-over", a.GPUHoursLost, a.Reason)
	}
}
