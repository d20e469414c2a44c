package broker

import (
	"strings"
	"testing"
	"time"
)

// migPool is a Kubernetes pool of 4 A100s per node, each partitioned into
// seven 1g.10gb MIG devices: 28 slices per node.
func migPool(name string, desired int, opts ...func(*PoolState)) PoolState {
	return gpuPool(name, desired, append([]func(*PoolState){func(p *PoolState) {
		p.Pool.MIGProfile, p.Pool.MIGPerGPU, p.Pool.Sides = "1g.10gb", 7, PoolK8s
	}}, opts...)...)
}

// migPod asks for n MIG devices of profile.
func migPod(key, profile string, n int) Demand {
	return pod(key, perUnit(n), func(d *Demand) { d.Constraints.MIGProfile = profile })
}

func migNode(name, pool string, total, alloc int) Node {
	n := gpuNode(name, pool, OwnerK8s, total, alloc)
	n.MIGProfile = "1g.10gb"
	for i := range n.Work {
		n.Work[i].MIGProfile = "1g.10gb"
	}
	return n
}

func TestMIGComputeSlices(t *testing.T) {
	for _, c := range []struct {
		p  string
		n  int
		ok bool
	}{{"1g.10gb", 1, true}, {"3g.40gb", 3, true}, {"7g.80gb", 7, true}, {"1g.10gb+me", 1, true},
		{"8g.90gb", 0, false}, {"0g.5gb", 0, false}, {"1g", 0, false}, {"gpu", 0, false}, {"", 0, false}, {"1g.xgb", 0, false}} {
		if n, ok := MIGComputeSlices(c.p); n != c.n || ok != c.ok {
			t.Errorf("MIGComputeSlices(%q) = %d, %v; want %d, %v", c.p, n, ok, c.n, c.ok)
		}
	}
}

// A MIG pod at zero buys a node of the MIG pool, never of the whole-GPU
// pool beside it; a whole-GPU pod buys a whole-GPU node, never a MIG one.
// The scale-up counts the pool's GPUs (4), not its slices.
func TestMIGDemandBuysItsKindOfPool(t *testing.T) {
	p := refPolicy()
	for _, c := range []struct {
		name   string
		demand Demand
		pool   string
	}{
		{"a 1g.10gb slice", migPod("mig", "1g.10gb", 1), "mig"},
		{"two whole GPUs", pod("whole"), "whole"},
	} {
		s := snap([]PoolState{gpuPool("whole", 0, price(1)), migPool("mig", 0, price(100))}, nil, []Demand{c.demand})
		plan := MakePlan(s, p)
		if len(plan.Actions) != 1 || plan.Actions[0].Kind != ActScaleUp || plan.Actions[0].Pool != c.pool || plan.Actions[0].Target != 1 {
			t.Fatalf("%s: actions %+v, want pool %s to 1 node", c.name, plan.Actions, c.pool)
		}
		if c.pool == "mig" && !strings.Contains(plan.Actions[0].Reason, "+4 GPUs of A100, as 7 MIG 1g.10gb each") {
			t.Errorf("%s: reason %q, want the GPUs and their MIG layout", c.name, plan.Actions[0].Reason)
		}
	}
}

// Free slices of a MIG node never serve whole-GPU demand, nor free whole
// GPUs MIG demand, and a MIG pod of another profile does not fit either.
func TestMIGAndWholeGPUCapacityDoNotMix(t *testing.T) {
	pools := []PoolState{gpuPool("whole", 1, bounds(1, 1)), migPool("mig", 1, bounds(1, 1))}
	nodes := []Node{gpuNode("w1", "whole", OwnerK8s, 4, 0), migNode("m1", "mig", 28, 27)}
	for _, c := range []struct {
		name   string
		demand Demand
		want   WaitReason
		on     string // the node the scheduler should place it on
	}{
		{"one slice fits the MIG node's last free slice", migPod("a", "1g.10gb", 1), WaitScheduler, "m1"},
		{"two slices do not (the MIG pool is at max)", migPod("b", "1g.10gb", 2), WaitNoPreemptible, ""},
		{"a 3g.40gb slice does not fit 1g.10gb capacity", migPod("c", "3g.40gb", 1), WaitUnsatisfiable, ""},
		{"two whole GPUs fit the whole-GPU node", pod("d"), WaitScheduler, "w1"},
		{"five whole GPUs do not, though the MIG node has free slices", pod("e", perUnit(5)), WaitUnsatisfiable, ""},
	} {
		plan := MakePlan(snap(pools, nodes, []Demand{c.demand}), refPolicy())
		if len(plan.Actions) != 0 || len(plan.Waits) != 1 || plan.Waits[0].Reason != c.want || c.on != "" && !strings.Contains(plan.Waits[0].Detail, "first on "+c.on) {
			t.Errorf("%s: actions %+v, waits %+v; want %s (on %q)", c.name, plan.Actions, plan.Waits, c.want, c.on)
		}
	}
}

// The cluster GPU cap counts a MIG node as its GPUs: a cap of 4 GPUs
// admits one 4-GPU MIG node (28 slices), not 28 nodes' worth of nothing.
func TestMIGClusterCapCountsGPUs(t *testing.T) {
	p := refPolicy()
	p.ClusterMaxGPUs = 8
	demand := []Demand{}
	for _, k := range []string{"a", "b", "c"} {
		demand = append(demand, migPod(k, "1g.10gb", 20))
	}
	plan := MakePlan(snap([]PoolState{migPool("mig", 0)}, nil, demand), p)
	if len(plan.Actions) != 1 || plan.Actions[0].Target != 2 {
		t.Fatalf("actions %+v, want the MIG pool to 2 nodes (8 GPUs, 56 slices): the cap counts GPUs", plan.Actions)
	}
}

// Quotas count compute slices: seven 1g.10gb pods weigh one GPU, so a
// tenant with 1 GPU of quota runs all seven, and an eighth waits
// over-quota.
func TestMIGQuotaCountsComputeSlices(t *testing.T) {
	var demand []Demand
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		demand = append(demand, migPod(k, "1g.10gb", 1))
	}
	s := snap([]PoolState{migPool("mig", 0)}, nil, demand, tenants(Tenant{Name: "research", MaxGPUs: 1}))
	plan := MakePlan(s, refPolicy())
	over := 0
	for _, w := range plan.Waits {
		if w.Reason == WaitQuota {
			over++
		}
	}
	if over != 1 || len(plan.Actions) != 1 || plan.Actions[0].Target != 1 {
		t.Fatalf("actions %+v, waits %+v: want one node for seven slices and one pod over quota", plan.Actions, plan.Waits)
	}
	// Running slices count the same way: with seven running, the first
	// new one is over quota.
	n := migNode("m1", "mig", 28, 0)
	for i := range 7 {
		n.Work = append(n.Work, Workload{Source: SourceK8s, Key: "r" + string(rune('0'+i)), Tenant: "research", GPUs: 1, MIGProfile: "1g.10gb", CheckpointAge: -1})
	}
	n.GPUsAllocated = 7
	plan = MakePlan(snap([]PoolState{migPool("mig", 1)}, []Node{n}, demand[:1], tenants(Tenant{Name: "research", MaxGPUs: 1})), refPolicy())
	if len(plan.Waits) != 1 || plan.Waits[0].Reason != WaitQuota || !strings.Contains(plan.Waits[0].Detail, "uses 1 of its 1 GPUs") {
		t.Fatalf("waits %+v, want over quota: seven running 1g.10gb slices use the tenant's one GPU", plan.Waits)
	}
}

// A pod that selects GPUs by memory buys only in a pool that declares
// enough; a node of unknown memory in a pool that declares it counts
// with the pool's.
func TestGPUMemoryConstraint(t *testing.T) {
	mem := func(mib int) func(*PoolState) { return func(p *PoolState) { p.Pool.GPUMemoryMiB = mib } }
	d := pod("big", func(d *Demand) { d.Constraints.MinGPUMemoryMiB = 40 << 10 })
	// The price expander would pick the cheaper pools, and they come
	// first by name.
	plan := MakePlan(snap([]PoolState{gpuPool("a-unknown", 0, price(1)), gpuPool("b-small", 0, mem(24<<10), price(2)), gpuPool("z-large", 0, mem(80<<10), price(50))},
		nil, []Demand{d}), refPolicy(expander(ExpanderPrice)))
	if len(plan.Actions) != 1 || plan.Actions[0].Pool != "z-large" {
		t.Fatalf("actions %+v, want the 80Gi pool grown", plan.Actions)
	}
	// A free node of the 80Gi pool serves it (its scheduler should place
	// it there); a free node of the 24Gi pool does not.
	plan = MakePlan(snap([]PoolState{gpuPool("z-large", 1, mem(80<<10), bounds(1, 1)), gpuPool("b-small", 1, mem(24<<10), bounds(1, 1))},
		[]Node{gpuNode("a1", "b-small", OwnerK8s, 4, 0), gpuNode("z1", "z-large", OwnerK8s, 4, 0)}, []Demand{d}), refPolicy())
	if len(plan.Actions) != 0 || len(plan.Waits) != 1 || plan.Waits[0].Reason != WaitScheduler || !strings.Contains(plan.Waits[0].Detail, "first on z1") {
		t.Fatalf("actions %+v, waits %+v: want the pod placed on the 80Gi node z1", plan.Actions, plan.Waits)
	}
}

func TestPoolValidateMIG(t *testing.T) {
	base := migPool("mig", 0).Pool
	for _, c := range []struct {
		name  string
		edit  func(*Pool)
		field string
	}{
		{"a profile that is none", func(p *Pool) { p.MIGProfile = "big" }, "mig_profile"},
		{"eight 1g slices on a GPU", func(p *Pool) { p.MIGPerGPU = 8 }, "mig_per_gpu"},
		{"three 3g slices on a GPU", func(p *Pool) { p.MIGProfile, p.MIGPerGPU = "3g.40gb", 3 }, "mig_per_gpu"},
		{"a MIG pool YARN may use", func(p *Pool) { p.Sides = PoolShared }, "sides"},
		{"slices without a profile", func(p *Pool) { p.MIGProfile = "" }, "mig_per_gpu"},
		{"negative memory", func(p *Pool) { p.GPUMemoryMiB = -1 }, "gpu_memory_mib"},
	} {
		p := base
		c.edit(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
	if err := base.Validate(); err != nil || base.Units() != 28 {
		t.Errorf("valid MIG pool: %v, units %d; want nil, 28", err, base.Units())
	}
}

// A node whose devices do not say their memory learns it from its agent's
// NVML reading (the least of its GPUs); a GPU in MIG mode says nothing.
func TestNodeMemoryFromItsAgent(t *testing.T) {
	gib := uint64(1) << 30
	report := NodeReport{Node: "n1", At: t0, GPUs: []GPUReport{{Index: 0, MemoryTotal: 80 * gib}, {Index: 1, MemoryTotal: 79 * gib}}}
	if m := report.MinGPUMemoryMiB(); m != 79<<10 {
		t.Errorf("MinGPUMemoryMiB = %d, want %d", m, 79<<10)
	}
	n := gpuNode("n1", "p", OwnerK8s, 2, 0)
	nodes := mergeNodes(MergeInput{Now: t0, Policy: refPolicy(),
		Sides:   map[Source]SideObservation{SourceK8s: {Source: SourceK8s, At: t0, Nodes: []Node{n}}},
		Reports: map[string]NodeReport{"n1": report}})
	if len(nodes) != 1 || nodes[0].GPUMemoryMiB != 79<<10 {
		t.Fatalf("nodes %+v, want n1 with 79Gi GPUs from its agent", nodes)
	}
	report.GPUs[1].MIGEnabled = true
	if m := report.MinGPUMemoryMiB(); m != 0 {
		t.Errorf("MinGPUMemoryMiB with a GPU in MIG mode = %d, want 0", m)
	}
}

// The agent cross-checks a MIG node: a node that advertises more devices
// of its profile than its agent finds on its GPUs offers the planner only
// those that exist; a stale report or one without MIG changes nothing.
func TestMIGNodeCrossCheckedByItsAgent(t *testing.T) {
	n := migNode("m1", "mig", 28, 0)
	report := func(devices ...string) NodeReport {
		r := NodeReport{Node: "m1", At: t0, GPUs: []GPUReport{{Index: 0, MIGEnabled: true, MIGDevices: devices}}}
		return r
	}
	merge := func(r NodeReport, maxAge time.Duration) Node {
		nodes := mergeNodes(MergeInput{Now: t0, Policy: refPolicy(), ReportMaxAge: maxAge,
			Sides:   map[Source]SideObservation{SourceK8s: {Source: SourceK8s, At: t0, Nodes: []Node{n}}},
			Reports: map[string]NodeReport{"m1": r}})
		return nodes[0]
	}
	if got := merge(report("1g.10gb gi=7", "1g.10gb gi=8", "3g.40gb gi=1"), 0); got.GPUsTotal != 2 {
		t.Errorf("GPUsTotal %d, want the 2 1g.10gb devices the agent found", got.GPUsTotal)
	}
	stale := report("1g.10gb gi=7")
	stale.At = t0.Add(-time.Hour)
	if got := merge(stale, time.Minute); got.GPUsTotal != 28 {
		t.Errorf("stale report: GPUsTotal %d, want the advertised 28", got.GPUsTotal)
	}
	noMIG := NodeReport{Node: "m1", At: t0, GPUs: []GPUReport{{Index: 0}}}
	if got := merge(noMIG, 0); got.GPUsTotal != 28 {
		t.Errorf("no GPU in MIG mode: GPUsTotal %d, want the advertised 28", got.GPUsTotal)
	}
}
