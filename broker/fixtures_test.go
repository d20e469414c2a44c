package broker

import (
	"maps"
	"slices"
	"time"
)

// Small fixture builders for planner tests. Each returns a value with
// sensible defaults that options adjust.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// gpuPool is the reference scenario's gpu-training-group: 4 GPUs per node,
// 0 to 5 nodes, labelled infra-type=gpu and tainted for GPU work only.
func gpuPool(name string, desired int, opts ...func(*PoolState)) PoolState {
	ps := PoolState{
		Pool: Pool{
			Name: name, Provider: "aws", Group: name, GPUModel: "A100", GPUsPerNode: 4,
			MinNodes: 0, MaxNodes: 5, Sides: PoolShared, PricePerHour: 12,
			Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
			Taints: []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
		},
		Desired: desired,
	}
	for _, o := range opts {
		o(&ps)
	}
	return ps
}

func gpus(n int) func(*PoolState) { return func(p *PoolState) { p.Pool.GPUsPerNode = n } }
func bounds(lo, hi int) func(*PoolState) {
	return func(p *PoolState) { p.Pool.MinNodes, p.Pool.MaxNodes = lo, hi }
}
func model(m string) func(*PoolState)  { return func(p *PoolState) { p.Pool.GPUModel = m } }
func price(v float64) func(*PoolState) { return func(p *PoolState) { p.Pool.PricePerHour = v } }
func exprio(v int) func(*PoolState)    { return func(p *PoolState) { p.Pool.ExpanderPriority = v } }
func backoffFor(d time.Duration) func(*PoolState) {
	return func(p *PoolState) { p.BackoffUntil = t0.Add(d); p.BackoffReason = "InsufficientInstanceCapacity" }
}

// gpuNode is an active, healthy node of pool with total GPUs, alloc of them
// allocated (by one non-preemptible workload when alloc > 0).
func gpuNode(name, pool string, owner Owner, total, alloc int, opts ...func(*Node)) Node {
	n := Node{
		Name: name, InstanceID: "i-" + name, Pool: pool, Owner: owner, Phase: PhaseActive,
		PhaseSince: t0.Add(-time.Hour), GPUModel: "A100", GPUsTotal: total, GPUsAllocated: alloc,
		Labels:      map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
		Taints:      []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
		Utilisation: -1, Healthy: true,
	}
	if alloc > 0 {
		src, _ := owner.Side()
		n.Work = []Workload{{Source: src, Key: name + "-w", Tenant: "research", Priority: 0, GPUs: alloc,
			StartedAt: t0.Add(-time.Hour), CheckpointAge: -1}}
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func phase(p Phase, since time.Duration) func(*Node) {
	return func(n *Node) { n.Phase, n.PhaseSince = p, t0.Add(-since) }
}
func underused(d time.Duration) func(*Node) { return func(n *Node) { n.UnderusedSince = t0.Add(-d) } }
func protected(n *Node)                     { n.Protected = true }
func unhealthy(why string) func(*Node) {
	return func(n *Node) { n.Healthy, n.HealthReason = false, why }
}
func work(ws ...Workload) func(*Node) {
	return func(n *Node) {
		n.Work = ws
		n.GPUsAllocated = 0
		for _, w := range ws {
			n.GPUsAllocated += w.GPUs
		}
	}
}

// job is running work for work(...).
func job(key string, gpus int, prio int64, preemptible bool, opts ...func(*Workload)) Workload {
	w := Workload{Source: SourceK8s, Key: key, Name: key, Tenant: "research", Priority: prio, GPUs: gpus,
		Preemptible: preemptible, StartedAt: t0.Add(-2 * time.Hour), CheckpointAge: -1}
	for _, o := range opts {
		o(&w)
	}
	return w
}

func checkpoint(age time.Duration) func(*Workload) {
	return func(w *Workload) { w.CheckpointAge = age }
}
func started(ago time.Duration) func(*Workload) {
	return func(w *Workload) { w.StartedAt = t0.Add(-ago) }
}
func wtenant(t string) func(*Workload) { return func(w *Workload) { w.Tenant = t } }
func system(w *Workload)               { w.System = true }
func yarnWork(w *Workload)             { w.Source = SourceYARN }
func service(w *Workload)              { w.Class = WorkService }

// pod is the reference training pod: 2 GPUs, nodeSelector infra-type=gpu,
// tolerating the GPU taint, pending for a minute.
func pod(key string, opts ...func(*Demand)) Demand {
	d := Demand{
		Source: SourceK8s, Key: key, Name: "ml/" + key, Tenant: "research", Queue: "ml",
		GPUsPerUnit: 2, Units: 1,
		Constraints: Constraints{
			NodeSelector: map[string]string{"infra-type": "gpu"},
			Tolerations:  []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		},
		FirstSeen: t0.Add(-time.Minute), LastSeen: t0,
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

// yarnApp asks units containers of per GPUs each, as a gang.
func yarnApp(key string, units, per int, opts ...func(*Demand)) Demand {
	d := Demand{
		Source: SourceYARN, Key: key, Name: key, Tenant: "research", Queue: "root.research",
		GPUsPerUnit: per, Units: units, Gang: true,
		FirstSeen: t0.Add(-time.Minute), LastSeen: t0,
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func prio(p int64) func(*Demand)           { return func(d *Demand) { d.Priority = p } }
func tenant(t string) func(*Demand)        { return func(d *Demand) { d.Tenant = t } }
func perUnit(g int) func(*Demand)          { return func(d *Demand) { d.GPUsPerUnit = g } }
func notGang(d *Demand)                    { d.Gang = false }
func seen(ago time.Duration) func(*Demand) { return func(d *Demand) { d.FirstSeen = t0.Add(-ago) } }
func models(ms ...string) func(*Demand) {
	return func(d *Demand) { d.Constraints.GPUModels = ms }
}
func selector(kv ...string) func(*Demand) {
	return func(d *Demand) {
		d.Constraints.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Constraints.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}
func noTolerations(d *Demand) { d.Constraints.Tolerations = nil }

// snap assembles a snapshot at t0.
func snap(pools []PoolState, nodes []Node, demand []Demand, opts ...func(*Snapshot)) *Snapshot {
	s := &Snapshot{Now: t0, Pools: pools, Nodes: nodes, Demand: demand, Tenants: map[string]Tenant{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

func tenants(ts ...Tenant) func(*Snapshot) {
	return func(s *Snapshot) {
		for _, t := range ts {
			if t.Weight == 0 {
				t.Weight = 1
			}
			s.Tenants[t.Name] = t
		}
	}
}
func stale(src Source) func(*Snapshot) {
	return func(s *Snapshot) {
		if s.Stale == nil {
			s.Stale = map[Source]string{}
		}
		s.Stale[src] = "observation failed"
	}
}
func inflight(ops ...Op) func(*Snapshot) {
	return func(s *Snapshot) { s.InFlight = append(s.InFlight, ops...) }
}

// cloneSnapshot deep-copies a snapshot so a test can check that planning
// left the original untouched.
func cloneSnapshot(s *Snapshot) *Snapshot {
	c := *s
	c.Demand = slices.Clone(s.Demand)
	for i := range c.Demand {
		cs := &c.Demand[i].Constraints
		cs.GPUModels = slices.Clone(cs.GPUModels)
		cs.NodeSelector = maps.Clone(cs.NodeSelector)
		cs.Tolerations = slices.Clone(cs.Tolerations)
		cs.Affinity = slices.Clone(cs.Affinity)
		for j := range cs.Affinity {
			cs.Affinity[j].Requirements = slices.Clone(cs.Affinity[j].Requirements)
			for k := range cs.Affinity[j].Requirements {
				r := &cs.Affinity[j].Requirements[k]
				r.Values = slices.Clone(r.Values)
			}
		}
	}
	if s.Tenants != nil {
		c.Tenants = make(map[string]Tenant, len(s.Tenants))
		for k, t := range s.Tenants {
			t.YARNQueues = slices.Clone(t.YARNQueues)
			t.Namespaces = slices.Clone(t.Namespaces)
			t.Admins = slices.Clone(t.Admins)
			c.Tenants[k] = t
		}
	}
	c.Pools = slices.Clone(s.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		p.Pool.Labels = maps.Clone(p.Pool.Labels)
		p.Pool.Taints = slices.Clone(p.Pool.Taints)
		p.Instances = slices.Clone(p.Instances)
	}
	c.Nodes = slices.Clone(s.Nodes)
	for i := range c.Nodes {
		n := &c.Nodes[i]
		n.Labels = maps.Clone(n.Labels)
		n.Taints = slices.Clone(n.Taints)
		n.Work = slices.Clone(n.Work)
	}
	c.InFlight = slices.Clone(s.InFlight)
	for i := range c.InFlight {
		c.InFlight[i].Serves = slices.Clone(c.InFlight[i].Serves)
		c.InFlight[i].Data = slices.Clone(c.InFlight[i].Data)
	}
	c.Stale = maps.Clone(s.Stale)
	return &c
}
