package broker

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchSnapshot builds a large, deterministic cluster: 24 pools of three GPU
// models in four zones serving YARN, Kubernetes or both; nodes mostly busy
// with a mix of preemptible and protected work, some idle and underused,
// some booting or unhealthy; pending demand from both sides in 16
// constraint classes, 40 tenants and four priority levels, YARN requests
// partly gangs; a few in-flight ops.
func benchSnapshot(nodes, demands int) (*Snapshot, Policy) {
	r := rand.New(rand.NewPCG(7, uint64(nodes)<<20|uint64(demands)))
	s := &Snapshot{Now: t0, Tenants: map[string]Tenant{}}
	type shape struct {
		model string
		gpus  int
		sides PoolSides
	}
	shapes := []shape{{"A100", 8, PoolShared}, {"H100", 8, PoolK8s}, {"L4", 4, PoolYARN}, {"A100", 4, PoolShared}, {"H100", 8, PoolShared}, {"L4", 2, PoolK8s}}
	zones := []string{"z0", "z1", "z2", "z3"}
	perPool := nodes/24 + 1
	for i := range 24 {
		sh := shapes[i%len(shapes)]
		p := Pool{
			Name: fmt.Sprintf("pool-%02d", i), Provider: "aws", GPUModel: sh.model, GPUsPerNode: sh.gpus,
			MinNodes: 1, MaxNodes: perPool + perPool/4*(i%3), Sides: sh.sides, PricePerHour: float64(sh.gpus) * (2 + float64(i%5)),
			ExpanderPriority: i % 4,
			Labels:           map[string]string{"infra-type": "gpu", "zone": zones[i%4], "gpu.vendor": "nvidia"},
			Taints:           []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
		}
		s.Pools = append(s.Pools, PoolState{Pool: p})
	}
	// Two "cold" pools of T4 nodes that only a little YARN demand asks for:
	// their idle nodes are scaled down or handed to YARN.
	for i := range 2 {
		s.Pools = append(s.Pools, PoolState{Pool: Pool{
			Name: fmt.Sprintf("pool-cold-%d", i), Provider: "aws", GPUModel: "T4", GPUsPerNode: 4,
			MinNodes: 1, MaxNodes: perPool, Sides: PoolShared, PricePerHour: 2,
			Labels: map[string]string{"tier": "cold"},
		}})
	}
	if nodes > 0 {
		s.Pools[5].BackoffUntil, s.Pools[5].BackoffReason = t0.Add(5*time.Minute), "InsufficientInstanceCapacity"
	}
	tenantName := func(i int) string { return fmt.Sprintf("team-%02d", i) }
	for i := range 40 {
		s.Tenants[tenantName(i)] = Tenant{Name: tenantName(i), GuaranteedGPUs: 8 * (i % 3), MaxGPUs: 8*(i%3) + demands/20 + 64, Weight: float64(1 + i%4)}
	}
	prios := []int64{0, 100, 1000, 10000}
	key := 0
	for i := range nodes {
		pi := i % len(s.Pools)
		ps := &s.Pools[pi]
		p := &ps.Pool
		ps.Desired++
		n := Node{
			Name: fmt.Sprintf("node-%05d", i), InstanceID: fmt.Sprintf("i-%05d", i), Pool: p.Name, GPUModel: p.GPUModel,
			GPUsTotal: p.GPUsPerNode, Labels: p.Labels, Taints: p.Taints, Utilisation: -1, Healthy: true,
			Phase: PhaseActive, PhaseSince: t0.Add(-time.Duration(r.IntN(600)) * time.Minute),
		}
		switch {
		case p.Sides == PoolYARN:
			n.Owner = OwnerYARN
		case p.Sides == PoolK8s:
			n.Owner = OwnerK8s
		case r.IntN(10) < 4:
			n.Owner = OwnerYARN
		default:
			n.Owner = OwnerK8s
		}
		src, _ := n.Owner.Side()
		switch x := r.IntN(100); {
		case x < 2:
			n.Phase, n.Owner, n.GPUsTotal, n.PhaseSince = PhaseBooting, OwnerNone, 0, t0.Add(-time.Duration(r.IntN(20))*time.Minute)
		case x < 3:
			n.Healthy, n.HealthReason = false, "XID 79"
		case x < 4:
			n.Protected = true
		}
		if n.Phase == PhaseActive {
			// Most nodes are full; some are idle or lightly used.
			load := n.GPUsTotal
			switch x := r.IntN(100); {
			case x < 8, p.GPUModel == "T4" && x < 70:
				load = 0
			case x < 20:
				load = r.IntN(n.GPUsTotal + 1)
			}
			for load > 0 {
				g := min(load, 1<<r.IntN(4))
				load -= g
				key++
				n.Work = append(n.Work, Workload{
					Source: src, Key: fmt.Sprintf("run-%d", key), Tenant: tenantName(r.IntN(40)), Priority: prios[r.IntN(3)],
					GPUs: g, Preemptible: r.IntN(10) < 4, StartedAt: t0.Add(-time.Duration(1+r.IntN(300)) * time.Minute),
					CheckpointAge: time.Duration(r.IntN(90)-10) * time.Minute,
				})
				n.GPUsAllocated += g
			}
			n.Work = append(n.Work, Workload{Source: src, Key: fmt.Sprintf("ds-%d", i), System: true, CheckpointAge: -1})
			if float64(n.GPUsAllocated) <= 0.5*float64(n.GPUsTotal) {
				n.UnderusedSince = t0.Add(-time.Duration(r.IntN(15)) * time.Minute)
			}
		}
		s.Nodes = append(s.Nodes, n)
	}
	type class struct {
		src Source
		c   Constraints
	}
	tol := []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}
	var classes []class
	for i := range 16 {
		src := SourceK8s
		if i%3 == 2 {
			src = SourceYARN
		}
		c := Constraints{Tolerations: tol}
		switch i % 4 {
		case 0:
			c.NodeSelector = map[string]string{"infra-type": "gpu"}
		case 1:
			c.GPUModels = []string{shapes[i%len(shapes)].model}
		case 2:
			c.Affinity = []AffinityTerm{{Requirements: []LabelRequirement{{Key: "zone", Operator: "In", Values: []string{zones[i%4], zones[(i+1)%4]}}}}}
		case 3:
			c.NodeSelector = map[string]string{"zone": zones[i%4]}
			c.GPUModels = []string{"A100", "H100"}
		}
		classes = append(classes, class{src, c})
	}
	cold := class{SourceYARN, Constraints{GPUModels: []string{"T4"}}}
	for i := range demands {
		cl := classes[r.IntN(len(classes))]
		if r.IntN(200) == 0 {
			cl = cold
		}
		d := Demand{
			Source: cl.src, Key: fmt.Sprintf("d-%06d", i), Tenant: tenantName(r.IntN(40)),
			Priority: prios[r.IntN(len(prios))], GPUsPerUnit: 1 << r.IntN(4), Units: 1,
			Constraints: cl.c, Preemptible: r.IntN(2) == 0,
			FirstSeen: t0.Add(-time.Duration(r.IntN(3600)) * time.Second), LastSeen: t0,
		}
		if d.Source == SourceYARN {
			d.Key = fmt.Sprintf("application_1_%06d/1", i)
			d.Units = 1 + r.IntN(4)
			d.Gang = r.IntN(2) == 0
		}
		s.Demand = append(s.Demand, d)
	}
	for i := range min(50, len(s.Pools)+len(s.Nodes)) {
		op := Op{ID: int64(i + 1), State: OpRunning}
		if i%2 == 0 {
			ps := s.Pools[i%len(s.Pools)]
			op.Kind, op.Pool, op.Target = ActScaleUp, ps.Pool.Name, ps.Desired+1
			if len(s.Demand) > 0 {
				op.Serves = []string{s.Demand[r.IntN(len(s.Demand))].ID()}
			}
		} else if len(s.Nodes) > 0 {
			n := s.Nodes[r.IntN(len(s.Nodes))]
			op.Kind, op.Pool, op.Node = ActScaleDown, n.Pool, n.Name
		}
		s.InFlight = append(s.InFlight, op)
	}
	p := DefaultPolicy()
	p.ClusterMaxGPUs = nodes * 8
	p.ModelMaxGPUs = map[string]int{"L4": nodes * 2}
	return s, p
}

func BenchmarkPlan5000Nodes50000Demands(b *testing.B) {
	s, p := benchSnapshot(5000, 50000)
	b.ReportAllocs()
	var plan Plan
	cpu := processCPU()
	for b.Loop() {
		plan = MakePlan(s, p)
	}
	cpu = processCPU() - cpu
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/plan")
	// CPU time includes the garbage collector's; wall time on a shared
	// machine also counts waiting for a core.
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/plan")
	b.ReportMetric(float64(len(plan.Actions)), "actions")
	b.ReportMetric(float64(len(plan.Waits)), "waits")
}

func BenchmarkPlan500Nodes5000Demands(b *testing.B) {
	s, p := benchSnapshot(500, 5000)
	b.ReportAllocs()
	for b.Loop() {
		MakePlan(s, p)
	}
}

// TestInvariantsAtScale checks every safety invariant on the benchmark's
// cluster, whose plans use every kind of action, and that the plan does not
// depend on the order of the input.
func TestInvariantsAtScale(t *testing.T) {
	s, p := benchSnapshot(500, 5000)
	before := cloneSnapshot(s)
	plan := MakePlan(s, p)
	kinds := map[ActionKind]int{}
	for _, a := range plan.Actions {
		kinds[a.Kind]++
	}
	reasons := map[WaitReason]int{}
	for _, w := range plan.Waits {
		reasons[w.Reason]++
	}
	t.Logf("%d actions %v, %d waits %v", len(plan.Actions), kinds, len(plan.Waits), reasons)
	for _, k := range []ActionKind{ActScaleUp, ActScaleDown, ActTransfer, ActPreempt, ActReplace} {
		if kinds[k] == 0 {
			t.Errorf("the benchmark cluster plans no %s; make it exercise the planner", k)
		}
	}
	v := newView(s)
	for name, check := range invariants {
		t.Run(name, func(t *testing.T) { check(t, v, p, plan) })
	}
	if d := cmpDiff(before, s); d != "" {
		t.Fatalf("planning modified the snapshot:\n%s", d)
	}
	rev := cloneSnapshot(s)
	for i, j := 0, len(rev.Demand)-1; i < j; i, j = i+1, j-1 {
		rev.Demand[i], rev.Demand[j] = rev.Demand[j], rev.Demand[i]
	}
	for i, j := 0, len(rev.Nodes)-1; i < j; i, j = i+1, j-1 {
		rev.Nodes[i], rev.Nodes[j] = rev.Nodes[j], rev.Nodes[i]
	}
	if d := cmpDiff(plan, MakePlan(rev, p)); d != "" {
		t.Fatalf("reversed input, different plan:\n%s", d)
	}
}
