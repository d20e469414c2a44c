package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Expected actions and waits; reasons and details are checked separately.
func up(pool string, target int, serves ...string) Action {
	return Action{Kind: ActScaleUp, Pool: pool, Target: target, Serves: serves}
}
func down(pool, node string, from Owner) Action {
	return Action{Kind: ActScaleDown, Pool: pool, Node: node, From: from}
}
func move(pool, node string, from, to Owner, serves ...string) Action {
	return Action{Kind: ActTransfer, Pool: pool, Node: node, From: from, To: to, Serves: serves}
}
func evict(pool, node string, victims []Workload, serves ...string) Action {
	return Action{Kind: ActPreempt, Pool: pool, Node: node, Victims: victims, Serves: serves}
}
func replace(pool, node string, from Owner) Action {
	return Action{Kind: ActReplace, Pool: pool, Node: node, From: from}
}
func wait(id string, r WaitReason) Wait { return Wait{Demand: id, Reason: r} }

const gtg = "gpu-training-group"

// refPolicy is the reference scenario's policy: 0 to 50 GPUs in the cluster.
func refPolicy(opts ...func(*Policy)) Policy {
	p := DefaultPolicy()
	p.ClusterMaxGPUs = 50
	for _, o := range opts {
		o(&p)
	}
	return p
}

func noPreemption(p *Policy) { p.Preemption = false }
func noTransfer(p *Policy)   { p.OwnershipTransfer = false }
func expander(e Expander) func(*Policy) {
	return func(p *Policy) { p.Expander = e }
}

func cpuPool() PoolState {
	return PoolState{Pool: Pool{Name: "cpu-node-group", Provider: "aws", MinNodes: 1, MaxNodes: 10, Sides: PoolK8s}, Desired: 1}
}

type planCase struct {
	name    string
	snap    *Snapshot
	policy  Policy
	actions []Action
	waits   []Wait
}

func runPlanCases(t *testing.T, cases []planCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneSnapshot(tc.snap)
			got := MakePlan(tc.snap, tc.policy)
			opts := cmp.Options{
				cmpopts.IgnoreFields(Action{}, "Reason", "InstanceID", "GPUHoursLost"), // consolidation_test.go checks the figure
				cmpopts.IgnoreFields(Wait{}, "Detail"),
				cmpopts.EquateEmpty(),
			}
			if d := cmp.Diff(tc.actions, got.Actions, opts); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.waits, got.Waits, opts); d != "" {
				t.Errorf("waits (-want +got):\n%s", d)
			}
			for _, a := range got.Actions {
				if a.Reason == "" || strings.Contains(a.Reason, "%!") {
					t.Errorf("action %s on %s%s has a bad reason %q", a.Kind, a.Pool, a.Node, a.Reason)
				}
			}
			// Every action on a node names the node's cloud instance.
			for _, a := range got.Actions {
				for _, n := range tc.snap.Nodes {
					if a.Node != "" && n.Name == a.Node && a.InstanceID != n.InstanceID {
						t.Errorf("%s of node %s carries instance %q, want %q", a.Kind, a.Node, a.InstanceID, n.InstanceID)
					}
				}
			}
			for _, w := range got.Waits {
				if w.Detail == "" || strings.Contains(w.Detail, "%!") {
					t.Errorf("wait of %s has a bad detail %q", w.Demand, w.Detail)
				}
			}
			if d := cmp.Diff(before, tc.snap); d != "" {
				t.Errorf("planning modified the snapshot (-before +after):\n%s", d)
			}
			if again := MakePlan(tc.snap, tc.policy); !cmp.Equal(got, again) {
				t.Errorf("second plan differs:\n%s", cmp.Diff(got, again))
			}
		})
	}
}

func TestPlanReferenceScenario(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			name:    "pending training pod scales the GPU pool from 0 to 1",
			snap:    snap([]PoolState{cpuPool(), gpuPool(gtg, 0)}, nil, []Demand{pod("p1")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p1")},
		},
		{
			name:    "two pods share one new node",
			snap:    snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{pod("p1"), pod("p2")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p1", "k8s/p2")},
		},
		{
			name:    "three pods need two nodes",
			snap:    snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{pod("p1"), pod("p2"), pod("p3")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p1", "k8s/p2", "k8s/p3")},
		},
		{
			name: "the joined node's free GPUs are left to the scheduler",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, phase(PhaseGPUReady, time.Second))},
				[]Demand{pod("p1")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitScheduler)},
		},
		{
			name: "idle node past the unneeded time is drained and terminated",
			snap: snap([]PoolState{gpuPool(gtg, 1)},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, underused(6*time.Minute), work(job("ds", 0, 0, false, system)))}, nil),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "n1", OwnerK8s)},
		},
		{
			name: "YARN gang of 2 containers x 2 GPUs gets the idle Kubernetes node",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0)},
				[]Demand{yarnApp("application_1_0001/1", 2, 2)}),
			policy:  refPolicy(),
			actions: []Action{move(gtg, "n1", OwnerK8s, OwnerYARN, "yarn/application_1_0001/1")},
		},
		{
			name: "high-priority job preempts a low-priority one when the pool is at max",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))},
				[]Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, work(job("low", 4, 0, true)))},
				[]Demand{pod("hi", prio(1000000))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("low", 4, 0, true)}, "k8s/hi")},
		},
	})
}

func TestPlanUnsatisfiable(t *testing.T) {
	pools := []PoolState{cpuPool(), gpuPool(gtg, 0)}
	runPlanCases(t, []planCase{
		{"wrong GPU model", snap(pools, nil, []Demand{pod("p", models("H100"))}), refPolicy(), nil,
			[]Wait{wait("k8s/p", WaitUnsatisfiable)}},
		{"more GPUs per unit than any node", snap(pools, nil, []Demand{pod("p", perUnit(8))}), refPolicy(), nil,
			[]Wait{wait("k8s/p", WaitUnsatisfiable)}},
		{"GPU taint not tolerated", snap(pools, nil, []Demand{pod("p", noTolerations)}), refPolicy(), nil,
			[]Wait{wait("k8s/p", WaitUnsatisfiable)}},
		{"node selector matches no pool", snap(pools, nil, []Demand{pod("p", selector("infra-type", "tpu"))}), refPolicy(), nil,
			[]Wait{wait("k8s/p", WaitUnsatisfiable)}},
		{"YARN label matches no pool", snap(pools, nil, []Demand{yarnApp("a/1", 1, 2, func(d *Demand) { d.Constraints.NodeLabel = "fast" })}), refPolicy(), nil,
			[]Wait{wait("yarn/a/1", WaitUnsatisfiable)}},
		{"invalid demand", snap(pools, nil, []Demand{pod("p", perUnit(0))}), refPolicy(), nil,
			[]Wait{wait("k8s/p", WaitUnsatisfiable)}},
		{
			name: "a pool that cannot grow and has no node",
			snap: snap([]PoolState{gpuPool(gtg, 0, bounds(0, 0))}, nil, []Demand{pod("p")}), policy: refPolicy(),
			waits: []Wait{wait("k8s/p", WaitUnsatisfiable)},
		},
		{
			name: "a matching labelled YARN pool serves labelled YARN demand",
			snap: snap([]PoolState{gpuPool(gtg, 0, func(p *PoolState) { p.Pool.Partition = "fast" })}, nil,
				[]Demand{yarnApp("a/1", 1, 2, func(d *Demand) { d.Constraints.NodeLabel = "fast" }), yarnApp("b/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "yarn/a/1")},
			waits:   []Wait{wait("yarn/b/1", WaitUnsatisfiable)},
		},
	})
}

func TestPlanQuota(t *testing.T) {
	one := []PoolState{gpuPool(gtg, 0, bounds(0, 1))}
	full := func(name, ten string) Node {
		return gpuNode(name, gtg, OwnerK8s, 4, 0, work(job(name+"-w", 4, 0, false, wtenant(ten))))
	}
	runPlanCases(t, []planCase{
		{
			name:   "demand beyond the tenant's max waits for quota",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{full("n1", "research")}, []Demand{pod("p")}, tenants(Tenant{Name: "research", MaxGPUs: 4})),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitQuota)},
		},
		{
			name: "a non-gang YARN request is admitted for the units that fit",
			snap: snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{yarnApp("a/1", 3, 2, notGang)},
				tenants(Tenant{Name: "research", MaxGPUs: 4})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "yarn/a/1")},
		},
		{
			name: "a gang beyond the max waits whole",
			snap: snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{yarnApp("a/1", 3, 2)},
				tenants(Tenant{Name: "research", MaxGPUs: 4})),
			policy: refPolicy(),
			waits:  []Wait{wait("yarn/a/1", WaitQuota)},
		},
		{
			name: "guaranteed GPUs come before priority",
			snap: snap(one, nil, []Demand{pod("b", tenant("b"), prio(1000), perUnit(4)), pod("a", tenant("a"), perUnit(4))},
				tenants(Tenant{Name: "a", GuaranteedGPUs: 4, MaxGPUs: 8}, Tenant{Name: "b", MaxGPUs: 8})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/a")},
			waits:   []Wait{wait("k8s/b", WaitPriority)},
		},
		{
			name:    "then priority",
			snap:    snap(one, nil, []Demand{pod("lo", tenant("a"), prio(10), perUnit(4)), pod("hi", tenant("b"), prio(100), perUnit(4))}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/hi")},
			waits:   []Wait{wait("k8s/lo", WaitPriority)},
		},
		{
			name: "then fair share: the tenant using less goes first",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(0, 3))}, []Node{full("n1", "a"), full("n2", "a")},
				[]Demand{pod("a", tenant("a"), perUnit(4), seen(time.Hour)), pod("b", tenant("b"), perUnit(4))}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 3, "k8s/b")},
			waits:   []Wait{wait("k8s/a", WaitPriority)},
		},
		{
			name: "fair share is weighted",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(0, 3))}, []Node{full("n1", "a"), gpuNode("n2", gtg, OwnerK8s, 4, 0, work(job("bw", 2, 0, false, wtenant("b"))))},
				[]Demand{pod("a", tenant("a"), perUnit(4)), pod("b", tenant("b"), perUnit(4), seen(time.Hour))},
				tenants(Tenant{Name: "a", MaxGPUs: 100, Weight: 4}, Tenant{Name: "b", MaxGPUs: 100, Weight: 1})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 3, "k8s/a")},
			waits:   []Wait{wait("k8s/b", WaitPriority)},
		},
		{
			name: "demand an in-flight op serves counts against quota",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, work(job("low", 4, 0, true, wtenant("other"))))},
				[]Demand{pod("p1", perUnit(4), prio(100)), pod("p2")},
				tenants(Tenant{Name: "research", MaxGPUs: 4}),
				inflight(Op{ID: 3, Kind: ActPreempt, Pool: gtg, Node: "n1", Serves: []string{"k8s/p1"}, State: OpRunning})),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p1", WaitInFlight), wait("k8s/p2", WaitQuota)},
		},
		{
			name:   "free GPUs taken by higher-priority demand",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0)}, []Demand{pod("lo", perUnit(4)), pod("hi", prio(10), perUnit(4))}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitScheduler), wait("k8s/lo", WaitPriority)},
		},
		{
			name:    "then age",
			snap:    snap(one, nil, []Demand{pod("young", perUnit(4)), pod("old", perUnit(4), seen(time.Hour))}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/old")},
			waits:   []Wait{wait("k8s/young", WaitPriority)},
		},
	})
}

func TestPlanPlacement(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			name:   "free GPUs on its own side: its scheduler places it",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 2)}, []Demand{pod("p")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitScheduler)},
		},
		{
			name:    "free GPUs on the other side's busy node do not count",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 2)}, []Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name:    "an idle node of the other side moves before a new node is bought",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0)}, []Demand{pod("p"), pod("q")}),
			policy:  refPolicy(),
			actions: []Action{move(gtg, "n1", OwnerYARN, OwnerK8s, "k8s/p", "k8s/q")},
		},
		{
			name:    "no transfer when the policy forbids it",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0)}, []Demand{pod("p")}),
			policy:  refPolicy(noTransfer),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name:    "no transfer from a stale side",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0)}, []Demand{pod("p")}, stale(SourceYARN)),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name:    "no transfer of a protected node",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0, protected)}, []Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name: "a booting node counts for pending demand",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, 2*time.Minute))},
				[]Demand{pod("p")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitInFlight)},
		},
		{
			name: "a registered node whose GPUs are not advertised yet never causes a second buy",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 0, 0, phase(PhaseRegistered, time.Minute))},
				[]Demand{pod("p"), pod("q")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitInFlight), wait("k8s/q", WaitInFlight)},
		},
		{
			name: "a node on its way that registered with the other side does not count",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 0, 0, phase(PhaseRegistered, time.Minute))},
				[]Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name: "an in-flight scale-up ordered for the demand counts before the instance exists",
			snap: snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{pod("p")},
				inflight(Op{ID: 7, Kind: ActScaleUp, Pool: gtg, Target: 1, Serves: []string{"k8s/p"}, State: OpRunning})),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitInFlight)},
		},
		{
			name: "in-flight capacity is shared, the rest is bought",
			snap: snap([]PoolState{gpuPool(gtg, 0)}, nil, []Demand{pod("p", perUnit(4)), pod("q", perUnit(4))},
				inflight(Op{ID: 7, Kind: ActScaleUp, Pool: gtg, Target: 1, Serves: []string{"k8s/q"}, State: OpRunning})),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
			waits:   []Wait{wait("k8s/q", WaitInFlight)},
		},
		{
			name: "an in-flight preemption serves its demand",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, []Demand{pod("p")},
				inflight(Op{ID: 9, Kind: ActPreempt, Pool: gtg, Node: "n1", Serves: []string{"k8s/p"}, State: OpRunning})),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitInFlight)},
		},
		{
			name: "a node overdue past the max provision time backs its pool off and is terminated",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseBooting, 20*time.Minute))},
				[]Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "n1", OwnerNone)},
			waits:   []Wait{wait("k8s/p", WaitBackoff)},
		},
		{
			name:   "pool in backoff",
			snap:   snap([]PoolState{gpuPool(gtg, 0, backoffFor(5*time.Minute))}, nil, []Demand{pod("p")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitBackoff)},
		},
		{
			name:   "expired backoff allows growth",
			snap:   snap([]PoolState{gpuPool(gtg, 0, backoffFor(-time.Second))}, nil, []Demand{pod("p")}),
			policy: refPolicy(), actions: []Action{up(gtg, 1, "k8s/p")},
		},
		{
			name:   "pool at max without preemption",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, []Demand{pod("p")}),
			policy: refPolicy(noPreemption),
			waits:  []Wait{wait("k8s/p", WaitPoolMax)},
		},
		{
			name:   "pool at max and nothing preemptible",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, []Demand{pod("p")}),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitNoPreemptible)},
		},
		{
			name:   "cluster GPU max",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, []Demand{pod("p")}),
			policy: refPolicy(noPreemption, func(p *Policy) { p.ClusterMaxGPUs = 4 }),
			waits:  []Wait{wait("k8s/p", WaitClusterMax)},
		},
		{
			name: "per-model GPU max sends demand to another model's pool",
			snap: snap([]PoolState{gpuPool(gtg, 1), gpuPool("h100", 0, model("H100"))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)},
				[]Demand{pod("p")}),
			policy:  refPolicy(noPreemption, func(p *Policy) { p.ModelMaxGPUs = map[string]int{"A100": 4} }),
			actions: []Action{up("h100", 1, "k8s/p")},
		},
		{
			name:   "per-model GPU max",
			snap:   snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, []Demand{pod("p", models("A100"))}),
			policy: refPolicy(noPreemption, func(p *Policy) { p.ModelMaxGPUs = map[string]int{"A100": 6} }),
			waits:  []Wait{wait("k8s/p", WaitClusterMax)},
		},
		{
			name:    "a gang gets all its units or none",
			snap:    snap([]PoolState{gpuPool(gtg, 0, bounds(0, 2))}, nil, []Demand{yarnApp("a/1", 3, 4), pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 1, "k8s/p")},
			waits:   []Wait{wait("yarn/a/1", WaitGang)},
		},
		{
			name:    "a non-gang request gets the units that fit",
			snap:    snap([]PoolState{gpuPool(gtg, 0, bounds(0, 2))}, nil, []Demand{yarnApp("a/1", 3, 4, notGang)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/a/1")},
		},
		{
			name:    "a gang spans free GPUs and new nodes",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 2)}, []Demand{yarnApp("a/1", 3, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/a/1")},
		},
		{
			name: "a node's untolerated NoExecute taint keeps demand off its free GPUs",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, func(n *Node) {
				n.Taints = append(n.Taints, Taint{Key: "maintenance", Effect: "NoExecute"})
			})}, []Demand{pod("p")}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/p")},
		},
		{
			name: "required affinity picks the pool in its zone",
			snap: snap([]PoolState{
				gpuPool("zone-a", 0, func(p *PoolState) { p.Pool.Labels["zone"] = "a" }),
				gpuPool("zone-b", 0, func(p *PoolState) { p.Pool.Labels["zone"] = "b" }),
			}, nil, []Demand{pod("p", func(d *Demand) {
				d.Constraints.Affinity = []AffinityTerm{{Requirements: []LabelRequirement{{Key: "zone", Operator: "NotIn", Values: []string{"a"}}}}}
			})}),
			policy:  refPolicy(),
			actions: []Action{up("zone-b", 1, "k8s/p")},
		},
		{
			name: "a YARN node label keeps demand off a node of another partition",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0, func(n *Node) { n.Partition = "fast" })},
				[]Demand{yarnApp("a/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "yarn/a/1")},
		},
		{
			name:    "a pool below its minimum is restored",
			snap:    snap([]PoolState{gpuPool(gtg, 1, bounds(2, 5))}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 4)}, nil),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2)},
		},
	})
}

func TestPlanExpanders(t *testing.T) {
	// "mid": 4 GPUs per node, room for one node (two 2-GPU units, no waste).
	// "small": 3 GPUs per node, room for three (one unit each, 1 GPU wasted).
	pools := []PoolState{
		gpuPool("mid", 0, bounds(0, 1), price(8), exprio(5)),
		gpuPool("small", 0, gpus(3), bounds(0, 3), price(9), exprio(1)),
	}
	d := []Demand{yarnApp("a/1", 4, 2, notGang)}
	one := []Demand{pod("p")}
	runPlanCases(t, []planCase{
		{"least-waste fills the no-waste pool first", snap(pools, nil, d), refPolicy(), []Action{up("mid", 1, "yarn/a/1"), up("small", 2, "yarn/a/1")}, nil},
		{"most-pods takes the pool placing most units first", snap(pools, nil, d), refPolicy(expander(ExpanderMostPods)), []Action{up("mid", 1, "yarn/a/1"), up("small", 3, "yarn/a/1")}, nil},
		{"least-waste for one pod", snap(pools, nil, one), refPolicy(), []Action{up("small", 1, "k8s/p")}, nil},
		{"priority", snap(pools, nil, one), refPolicy(expander(ExpanderPriority)), []Action{up("mid", 1, "k8s/p")}, nil},
		{"price per GPU", snap(pools, nil, one), refPolicy(expander(ExpanderPrice)), []Action{up("mid", 1, "k8s/p")}, nil},
	})
}

func TestPlanPreemption(t *testing.T) {
	at := func(ws ...Workload) []Node {
		return []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, work(ws...))}
	}
	pools := []PoolState{gpuPool(gtg, 1, bounds(0, 1))}
	hi := []Demand{pod("hi", prio(1000))}
	runPlanCases(t, []planCase{
		{
			name:    "least work at risk first",
			snap:    snap(pools, at(job("a", 2, 0, true, checkpoint(30*time.Minute)), job("b", 2, 0, true, checkpoint(5*time.Minute))), hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("b", 2, 0, true, checkpoint(5*time.Minute))}, "k8s/hi")},
		},
		{
			name:    "then lowest priority",
			snap:    snap(pools, at(job("a", 2, 5, true), job("b", 2, 1, true)), hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("b", 2, 1, true)}, "k8s/hi")},
		},
		{
			name:    "then youngest",
			snap:    snap(pools, at(job("a", 2, 0, true, started(time.Hour), checkpoint(time.Minute)), job("b", 2, 0, true, started(time.Minute), checkpoint(time.Minute))), hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("b", 2, 0, true, started(time.Minute), checkpoint(time.Minute))}, "k8s/hi")},
		},
		{
			name: "victims that are not needed are added back",
			snap: snap(pools, at(job("small", 1, 0, true, checkpoint(time.Minute)), job("big", 2, 0, true, checkpoint(2*time.Minute)),
				job("keep", 1, 0, false)), hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("big", 2, 0, true, checkpoint(2*time.Minute))}, "k8s/hi")},
		},
		{
			name: "the node losing the fewest GPU-hours",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(0, 2))}, []Node{
				gpuNode("n1", gtg, OwnerK8s, 4, 0, work(job("a", 4, 0, true, checkpoint(time.Hour)))),
				gpuNode("n2", gtg, OwnerK8s, 4, 0, work(job("b", 2, 0, true, checkpoint(time.Hour)), job("c", 2, 0, false))),
			}, hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n2", []Workload{job("b", 2, 0, true, checkpoint(time.Hour))}, "k8s/hi")},
		},
		{
			name:   "never equal priority",
			snap:   snap(pools, at(job("a", 4, 1000, true)), hi),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
		{
			name:   "never non-preemptible work",
			snap:   snap(pools, at(job("a", 4, 0, false)), hi),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
		{
			name:   "never work of the other side without ownership transfer",
			snap:   snap(pools, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0, work(job("a", 4, 0, true, yarnWork)))}, hi),
			policy: refPolicy(noTransfer),
			waits:  []Wait{wait("k8s/hi", WaitNoPreemptible)},
		},
		{
			name:   "not when the policy forbids it",
			snap:   snap(pools, at(job("a", 4, 0, true)), hi),
			policy: refPolicy(noPreemption),
			waits:  []Wait{wait("k8s/hi", WaitPoolMax)},
		},
		{
			// Evicting a would free 4 GPUs for hi's 2: 2 would stand idle.
			name:    "a new node before a preemption that would leave GPUs idle",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, at(job("a", 4, 0, true)), hi),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/hi")},
		},
		{
			name:    "work that may not be preempted takes a victim that frees just its GPUs before a node boots",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, at(job("a", 2, 0, true, checkpoint(time.Minute)), job("keep", 2, 0, false)), hi),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("a", 2, 0, true, checkpoint(time.Minute))}, "k8s/hi")},
		},
		{
			// No known checkpoint: its 2 h run time, beyond the 10 min.
			name:    "but not one that would lose more than max_work_lost",
			snap:    snap([]PoolState{gpuPool(gtg, 1)}, at(job("a", 2, 0, true), job("keep", 2, 0, false)), hi),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/hi")},
		},
		{
			name: "preemptible demand waits for the new node instead",
			snap: snap([]PoolState{gpuPool(gtg, 1)}, at(job("a", 2, 0, true, checkpoint(time.Minute)), job("keep", 2, 0, false)),
				[]Demand{pod("hi", prio(1000), func(d *Demand) { d.Preemptible = true })}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 2, "k8s/hi")},
		},
		{
			name: "a gang that cannot preempt enough rolls its victims back for the next demand",
			snap: snap(pools, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 0, work(job("low", 4, 0, true, yarnWork)))},
				[]Demand{yarnApp("a/1", 2, 4, prio(1000)), yarnApp("b/1", 1, 2, prio(500))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("low", 4, 0, true, yarnWork)}, "yarn/b/1")},
			waits:   []Wait{wait("yarn/a/1", WaitGang)},
		},
		{
			name:    "freed GPUs beyond the need serve the next demand",
			snap:    snap(pools, at(job("a", 4, 0, true)), []Demand{pod("hi", prio(1000)), pod("mid", prio(500))}),
			policy:  refPolicy(),
			actions: []Action{evict(gtg, "n1", []Workload{job("a", 4, 0, true)}, "k8s/hi")},
			waits:   []Wait{wait("k8s/mid", WaitScheduler)},
		},
	})
}

func TestPlanScaleDown(t *testing.T) {
	idle := func(name string, opts ...func(*Node)) Node {
		return gpuNode(name, gtg, OwnerK8s, 4, 0, append([]func(*Node){underused(10 * time.Minute)}, opts...)...)
	}
	busy := func(name string, alloc int) Node { return gpuNode(name, gtg, OwnerK8s, 4, alloc) }
	two := []PoolState{gpuPool(gtg, 2)}
	runPlanCases(t, []planCase{
		{"not before the unneeded time", snap(two, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, underused(4*time.Minute)), busy("n2", 4)}, nil), refPolicy(), nil, nil},
		{"not above the threshold", snap(two, []Node{idle("n1", work(job("a", 3, 0, false))), busy("n2", 0)}, nil), refPolicy(), nil, nil},
		{"at the threshold when the work fits elsewhere", snap(two, []Node{idle("n1", work(job("a", 2, 0, false, service))), busy("n2", 2)}, nil), refPolicy(),
			[]Action{down(gtg, "n1", OwnerK8s)}, nil},
		{"not when the work fits nowhere else", snap(two, []Node{idle("n1", work(job("a", 2, 0, false))), busy("n2", 3)}, nil), refPolicy(), nil, nil},
		{"CPU-only work does not keep a GPU node", snap(two, []Node{idle("n1", work(job("cpu", 0, 0, false, service))), busy("n2", 4)}, nil), refPolicy(),
			[]Action{down(gtg, "n1", OwnerK8s)}, nil},
		{"never a protected node", snap(two, []Node{idle("n1", protected), busy("n2", 4)}, nil), refPolicy(), nil, nil},
		{"never below the pool minimum", snap([]PoolState{gpuPool(gtg, 2, bounds(1, 5))}, []Node{idle("n1"), idle("n2")}, nil), refPolicy(),
			[]Action{down(gtg, "n1", OwnerK8s)}, nil},
		{"never below the cluster minimum", snap(two, []Node{idle("n1"), idle("n2")}, nil), refPolicy(func(p *Policy) { p.ClusterMinGPUs = 4 }),
			[]Action{down(gtg, "n1", OwnerK8s)}, nil},
		{
			name:   "an in-flight scale-down counts towards the minimum",
			snap:   snap([]PoolState{gpuPool(gtg, 2, bounds(1, 5))}, []Node{idle("n1"), idle("n2")}, nil, inflight(Op{ID: 1, Kind: ActScaleDown, Pool: gtg, Node: "n1", State: OpRunning, Step: StepRelease})),
			policy: refPolicy(),
		},
		{
			name:   "a pool that grows in this plan does not shrink",
			snap:   snap(two, []Node{idle("n1"), busy("n2", 4)}, []Demand{yarnApp("a/1", 1, 4)}),
			policy: refPolicy(noTransfer), actions: []Action{up(gtg, 3, "yarn/a/1")},
		},
		{
			name: "offered to the other side first",
			snap: snap([]PoolState{gpuPool(gtg, 2, bounds(0, 2))}, []Node{idle("n1", work(job("a", 1, 0, false, service))), busy("n2", 2)},
				[]Demand{yarnApp("a/1", 1, 2)}),
			policy:  refPolicy(),
			actions: []Action{move(gtg, "n1", OwnerK8s, OwnerYARN, "yarn/a/1")},
		},
		{
			name: "nodes kept busy by free-GPU demand are not reclaimed",
			snap: snap(two, []Node{idle("n1"), busy("n2", 4)}, []Demand{pod("p")}), policy: refPolicy(),
			waits: []Wait{wait("k8s/p", WaitScheduler)},
		},
		{
			name:   "no replacement where it could not proceed (a pool at its min and max, a provider that lowers the desired capacity)",
			snap:   snap([]PoolState{gpuPool(gtg, 1, bounds(1, 1))}, []Node{gpuNode("n1", gtg, OwnerYARN, 4, 2, unhealthy("XID 79"))}, nil),
			policy: refPolicy(),
		},
		{
			name:    "unhealthy nodes are replaced",
			snap:    snap(two, []Node{busy("n1", 4), gpuNode("n2", gtg, OwnerYARN, 4, 2, unhealthy("XID 79"))}, nil),
			policy:  refPolicy(),
			actions: []Action{replace(gtg, "n2", OwnerYARN)},
		},
		{
			name:   "a node nobody owns and no op holds is terminated once unneeded",
			snap:   snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 20*time.Minute)), busy("n2", 4)}, nil),
			policy: refPolicy(), actions: []Action{down(gtg, "n1", OwnerNone)},
		},
		{
			name: "a node nobody owns is left to the op that holds it",
			snap: snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 20*time.Minute)), busy("n2", 4)}, nil,
				inflight(Op{ID: 1, Kind: ActTransfer, Pool: gtg, Node: "n1", State: OpRunning})),
			policy: refPolicy(),
		},
		{
			name:   "a node nobody owns waits the unneeded time",
			snap:   snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 4*time.Minute)), busy("n2", 4)}, nil),
			policy: refPolicy(),
		},
		{
			name:   "a node nobody owns that runs work is not terminated",
			snap:   snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 20*time.Minute), work(job("cpu", 0, 0, false))), busy("n2", 4)}, nil),
			policy: refPolicy(),
		},
		{
			name:    "a node nobody owns serves pending demand before any purchase",
			snap:    snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 2*time.Minute)), busy("n2", 4)}, []Demand{yarnApp("a/1", 1, 4)}),
			policy:  refPolicy(),
			actions: []Action{move(gtg, "n1", OwnerNone, OwnerYARN, "yarn/a/1")},
		},
		{
			name:    "a node nobody owns is offered only once it has settled",
			snap:    snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 30*time.Second)), busy("n2", 4)}, []Demand{yarnApp("a/1", 1, 4)}),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 3, "yarn/a/1")},
		},
		{
			name: "a node nobody owns is not offered while a side is stale",
			snap: snap(two, []Node{gpuNode("n1", gtg, OwnerNone, 4, 0, phase(PhaseDrained, 2*time.Minute)), busy("n2", 4)}, []Demand{pod("p", perUnit(4))},
				stale(SourceYARN)),
			policy:  refPolicy(),
			actions: []Action{up(gtg, 3, "k8s/p")},
		},
		{
			name:   "an operator's cordon is left alone",
			snap:   snap(two, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, phase(PhaseDrained, 20*time.Minute), underused(20*time.Minute)), busy("n2", 4)}, nil),
			policy: refPolicy(),
		},
		{
			name:   "a node without a health report is not replaced",
			snap:   snap(two, []Node{busy("n1", 4), gpuNode("n2", gtg, OwnerYARN, 4, 2, func(n *Node) { n.Healthy = false })}, nil),
			policy: refPolicy(),
		},
	})
}

func TestPlanStale(t *testing.T) {
	runPlanCases(t, []planCase{
		{
			name: "a stale side gets no destructive action and its demand waits; the other side goes on",
			snap: snap([]PoolState{gpuPool(gtg, 3)}, []Node{
				gpuNode("k1", gtg, OwnerK8s, 4, 0, underused(time.Hour)),
				gpuNode("k2", gtg, OwnerK8s, 4, 2, unhealthy("ECC")),
				gpuNode("y1", gtg, OwnerYARN, 4, 0, underused(time.Hour)),
			}, []Demand{pod("p", perUnit(4))}, stale(SourceK8s)),
			policy:  refPolicy(),
			actions: []Action{down(gtg, "y1", OwnerYARN)},
			waits:   []Wait{wait("k8s/p", WaitStale)},
		},
		{
			name: "no preemption on a stale side",
			snap: snap([]PoolState{gpuPool(gtg, 1, bounds(0, 1))}, []Node{gpuNode("y1", gtg, OwnerYARN, 4, 0, work(job("a", 4, 0, true, yarnWork)))},
				[]Demand{pod("p", prio(1000)), yarnApp("b/1", 1, 4, prio(1000))}, stale(SourceYARN)),
			policy: refPolicy(),
			waits:  []Wait{wait("k8s/p", WaitNoPreemptible), wait("yarn/b/1", WaitStale)},
		},
	})
}

func TestPlanReasonsNameTheNumbers(t *testing.T) {
	s := snap([]PoolState{cpuPool(), gpuPool(gtg, 0)}, nil, []Demand{pod("p1")})
	got := MakePlan(s, refPolicy())
	if len(got.Actions) != 1 {
		t.Fatalf("want one action, got %+v", got)
	}
	want := "scale pool gpu-training-group from 0 to 1 nodes (+4 GPUs of A100, max 5 nodes) for 1 pending demand needing 2 GPUs"
	if got.Actions[0].Reason != want {
		t.Errorf("reason = %q, want %q", got.Actions[0].Reason, want)
	}
	s = snap([]PoolState{gpuPool(gtg, 1)}, []Node{gpuNode("n1", gtg, OwnerK8s, 4, 0, underused(6*time.Minute))}, nil)
	got = MakePlan(s, refPolicy())
	if len(got.Actions) != 1 || !strings.Contains(got.Actions[0].Reason, "0 of 4 GPUs allocated, at or under 50% for 6m0s (threshold 5m0s)") {
		t.Errorf("scale-down reason: %+v", got.Actions)
	}
}
