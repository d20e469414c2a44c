package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// The policies a replay compares.
const (
	PolicyBroker = "gpubroker"
	// PolicyPerSide is the cluster autoscaler on each side as operators
	// run it: it drains busy nodes whatever they run, killing work.
	PolicyPerSide = "per-side-autoscaler"
	// PolicySafeSide is the same autoscaler held to gpubroker's
	// consolidation rule: never a busy YARN node, Kubernetes nodes only
	// within consolidation.max_work_lost.
	PolicySafeSide = "safe-per-side-autoscaler"
	// PolicyStaticP95 and PolicyStaticPeak are fixed splits sized at the
	// demand's time-weighted p95 and its peak concurrent GPUs.
	PolicyStaticP95  = "static-p95"
	PolicyStaticPeak = "static-peak"
	// PolicyStaticAvg is a fixed split sized at the average GPUs the
	// gpubroker run provisioned: equal average capacity, a strawman no
	// operator would run (it queues every burst).
	PolicyStaticAvg = "static-gpubroker-avg"
	// PolicyStaticFleet is a fleet of owned hosts (replay --fleet) split
	// between the sides by their work shares and never moved: what an
	// operator without the broker runs on the same machines.
	PolicyStaticFleet = "static-fleet"
)

// FleetPolicies are the policies a fleet replay compares (Config.Fleet):
// gpubroker handing the hosts between the sides, and the static split of
// the same hosts. Nothing is bought in either.
var FleetPolicies = []string{PolicyBroker, PolicyStaticFleet}

// Policies lists the known policy names in report order.
var Policies = []string{PolicyBroker, PolicyPerSide, PolicySafeSide, PolicyStaticP95, PolicyStaticPeak, PolicyStaticAvg}

// policyNotes says in each row what sets a baseline apart.
var policyNotes = map[string]string{
	PolicyBroker:     "the planner serve runs",
	PolicyPerSide:    "KILLS WORK: drains busy nodes, YARN containers killed at the drain timeout",
	PolicySafeSide:   "never drains a busy YARN node; Kubernetes only within max_work_lost",
	PolicyStaticP95:  "fixed nodes at the demand's p95 GPUs",
	PolicyStaticPeak: "fixed nodes at the demand's peak GPUs",
	PolicyStaticAvg:  "fixed nodes at gpubroker's average GPUs (equal average; a strawman)",
}

// fleetNotes are the policy notes of a fleet replay.
var fleetNotes = map[string]string{
	PolicyBroker:      "the fleet's hosts handed between the sides; nothing bought",
	PolicyStaticFleet: "the same hosts split by the sides' work shares, never moved",
}

// Config is one replay: the trace, the world, the pools and policy, and
// which comparisons to run.
type Config struct {
	// Tasks and Stats come from ReadTrace.
	Tasks []Task
	Stats TraceStats
	// NodeTypes (from ReadNodes) become shared pools, one per GPU model and
	// node size, their counts the pools' max; ignored when Pools is set.
	NodeTypes []NodeType
	// Pools, from a configuration file, are used as they are.
	Pools []broker.Pool
	// Policy is gpubroker's policy; the baselines use its scale-down
	// unneeded time and threshold too.
	Policy broker.Policy
	World  World
	// Policies to report (gpubroker runs too when static-gpubroker-avg
	// is asked for, as that split is sized from its run).
	Policies []string
	// YARNShare is the share of tasks hashed to YARN.
	YARNShare float64
	// Loads are the arrival-rate factors to replay, in order; the last is
	// the headline.
	Loads []float64
	// Seed salts the task-to-side hash.
	Seed int64
	// Headroom sizes node-list pools from demand: when the node list's
	// GPUs exceed Headroom x the peak concurrent GPU demand at a load, each
	// pool's max is scaled down to bring the cluster to about that.
	Headroom float64
	// Fleet, when positive, replays a fleet of that many owned nodes
	// instead of pools that grow and shrink: the node list's (or the
	// pools') mix scaled to Fleet nodes, every node up from the start and
	// split between the sides by their work shares, compared under
	// FleetPolicies.
	Fleet int
	// Shape, when positive, also offers every pool of nodes with more
	// than Shape GPUs as Shape-GPU nodes of the same model (withShape):
	// the what-if of smaller nodes (RunShapes).
	Shape int
	// RuleOff also replays gpubroker with the consolidation rule off
	// (consolidation.max_work_lost unbounded: idle reclaim drains a
	// Kubernetes node whatever its pods would lose), to report the work
	// the rule saves and what it costs.
	RuleOff bool
}

// Validate checks the configuration; errors name the field.
func (c *Config) Validate() error {
	if len(c.Tasks) == 0 {
		return broker.Invalid("trace", "has no GPU task to replay")
	}
	if len(c.Pools) == 0 && len(c.NodeTypes) == 0 {
		return broker.Invalid("nodes", "no pools: give a node list or a configuration with pools")
	}
	known := Policies
	if c.Fleet > 0 {
		known = FleetPolicies
	}
	for _, p := range c.Policies {
		if !slices.Contains(known, p) {
			if c.Fleet > 0 {
				return broker.Invalid("policies", "policy %q does not apply to a fleet (nothing is bought there); a fleet replay compares %s", p, strings.Join(FleetPolicies, ", "))
			}
			return broker.Invalid("policies", "unknown policy %q; known: %s", p, strings.Join(Policies, ", "))
		}
	}
	if c.Shape < 0 {
		return broker.Invalid("what-if-shapes", "a node shape is a number of GPUs of at least 1, got %d", c.Shape)
	}
	if c.Shape > 0 && c.Fleet > 0 {
		return broker.Invalid("what-if-shapes", "a fleet's nodes are the ones it owns: replay shapes without --fleet")
	}
	if c.Fleet < 0 {
		return broker.Invalid("fleet", "must be 0 (pools that grow and shrink) or a number of nodes, got %d", c.Fleet)
	}
	if len(c.Policies) == 0 {
		return broker.Invalid("policies", "name at least one of %s", strings.Join(Policies, ", "))
	}
	if !(c.YARNShare >= 0 && c.YARNShare <= 1) {
		return broker.Invalid("yarn-share", "must be between 0 and 1, got %g", c.YARNShare)
	}
	if len(c.Loads) == 0 {
		return broker.Invalid("load", "name at least one load")
	}
	for _, l := range c.Loads {
		if !(l > 0) || math.IsInf(l, 0) {
			return broker.Invalid("load", "must be positive, got %g", l)
		}
	}
	if !(c.Headroom > 0) {
		return broker.Invalid("headroom", "must be positive, got %g", c.Headroom)
	}
	if err := c.Policy.Validate(); err != nil {
		return broker.WithPrefix("policy", err)
	}
	return c.World.Validate()
}

// Report is a replay's outcome.
type Report struct {
	Trace TraceInfo `json:"trace"`
	World WorldInfo `json:"world"`
	// Headline is the load the top-level Policies are for.
	Headline float64 `json:"headline_load"`
	// Policies are the results at the headline load.
	Policies []Result `json:"policies"`
	// Loads is the curve: every load replayed, in order.
	Loads []LoadResult `json:"loads"`
	// Summary is every load and policy over the seeds RunSeeds replayed;
	// empty after Run alone.
	Summary []Summary `json:"summary,omitempty"`
	// Fleet is the fleet's nodes in a fleet replay (Config.Fleet), else 0.
	Fleet int `json:"fleet,omitempty"`
	// Shapes is gpubroker with what-if node shapes (RunShapes), when
	// asked for.
	Shapes []ShapeSummary `json:"what_if_shapes,omitempty"`
}

// TraceInfo is what the report says about the trace and how it was read.
type TraceInfo struct {
	TraceStats
	YARNShare float64 `json:"yarn_share"`
	Seed      int64   `json:"seed"`
	// Seeds is how many seeds from Seed on the Summary covers (RunSeeds).
	Seeds     int `json:"seeds,omitempty"`
	YARNTasks int `json:"yarn_tasks"`
	K8sTasks  int `json:"k8s_tasks"`
	// YARNGPUShare is the YARN side's share of the work (GPU-hours).
	YARNGPUShare float64  `json:"yarn_gpu_share"`
	Choices      []string `json:"choices"`
}

// WorldInfo is the world model and the policy, as the report prints them.
type WorldInfo struct {
	World
	Policy broker.Policy `json:"policy"`
	// PolicyChanges names each policy value that differs from serve's
	// defaults (broker.DefaultPolicy), as "field value (default value)";
	// empty when the replay ran serve's defaults.
	PolicyChanges []string `json:"policy_changes"`
	Rules         []string `json:"rules"`
}

// LoadResult is every policy at one load.
type LoadResult struct {
	Load float64 `json:"load"`
	// PeakDemandGPUs, P95DemandGPUs and MeanDemandGPUs are the trace's
	// concurrent GPU demand at this load if every task started on arrival
	// (the p95 and mean weighted by time).
	PeakDemandGPUs int     `json:"peak_demand_gpus"`
	P95DemandGPUs  int     `json:"p95_demand_gpus"`
	MeanDemandGPUs float64 `json:"mean_demand_gpus"`
	// CapacityGPUs is all pools at their max.
	CapacityGPUs int           `json:"capacity_gpus"`
	Pools        []broker.Pool `json:"pools"`
	// Static is the static splits' nodes per pool and side.
	Static   []StaticNodes `json:"static_split,omitempty"`
	Policies []Result      `json:"policies"`
	// RuleOff is gpubroker with consolidation.max_work_lost unbounded
	// (Config.RuleOff); nil when not replayed.
	RuleOff *Result `json:"gpubroker_rule_off,omitempty"`
}

// StaticNodes is a static split's nodes of one pool on one side.
type StaticNodes struct {
	Policy string        `json:"policy"`
	Pool   string        `json:"pool"`
	Side   broker.Source `json:"side"`
	Nodes  int           `json:"nodes"`
}

// Run replays the trace at every load under every policy.
func Run(c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sides := make([]broker.Source, len(c.Tasks))
	var work [2]float64
	info := TraceInfo{TraceStats: c.Stats, YARNShare: c.YARNShare, Seed: c.Seed}
	for i, t := range c.Tasks {
		sides[i] = sideOf(t.Name, c.Seed, c.YARNShare)
		work[sideIdx(sides[i])] += float64(t.GPUs) * t.Run.Hours()
		if sides[i] == broker.SourceYARN {
			info.YARNTasks++
		} else {
			info.K8sTasks++
		}
	}
	if work[0]+work[1] > 0 {
		info.YARNGPUShare = work[0] / (work[0] + work[1])
	}
	info.Choices = choices(c, info)
	rep := &Report{Fleet: c.Fleet, Trace: info, World: WorldInfo{World: c.World, Policy: c.Policy, PolicyChanges: PolicyChanges(c.Policy), Rules: strings.Split(strings.TrimSpace(c.World.Describe()), "\n")}}
	for _, load := range c.Loads {
		lr, err := runLoad(c, sides, info.YARNGPUShare, load)
		if err != nil {
			return nil, err
		}
		rep.Loads = append(rep.Loads, lr)
	}
	last := rep.Loads[len(rep.Loads)-1]
	rep.Headline, rep.Policies = last.Load, last.Policies
	return rep, nil
}

func choices(c Config, info TraceInfo) []string {
	st := c.Stats
	var derived []string
	if st.Derived != "" {
		derived = []string{st.Derived}
	}
	return append(derived,
		fmt.Sprintf("%d rows read; %d CPU-only tasks skipped; %d GPU tasks never scheduled in the trace skipped (no run time to replay)", st.Rows, st.CPUOnly, st.NeverRan),
		fmt.Sprintf("%d GPU tasks replayed, %.0f GPU-hours of work; run time = deletion_time - scheduled_time, kept at every load", st.Tasks, st.GPUHours),
		fmt.Sprintf("%d tasks were still running at the trace's end (deletion_time is its last): their run time is a lower bound", st.Censored),
		fmt.Sprintf("%d fractional tasks (gpu_milli < 1000) each take one whole GPU; num_gpu gives the GPUs otherwise", st.Fractional),
		"gpu_spec lists the allowed GPU models (empty: any)",
		fmt.Sprintf("side: FNV-1a hash of seed %d and the task name; %d tasks to YARN, %d to Kubernetes (--yarn-share %.2f); YARN has %.0f%% of the GPU-hours", c.Seed, info.YARNTasks, info.K8sTasks, c.YARNShare, 100*info.YARNGPUShare),
		fmt.Sprintf("QoS to priority: Guaranteed 1000000 and LS 10000, not preemptible; Burstable 1000 and BE 0, preemptible (%s)", qosCounts(st)),
		"--load X divides every arrival time by X (arrival rate times X); run times stay as they are",
		fmt.Sprintf("pools: %s", poolSource(c)),
		"a task's wait is all its time pending: from its arrival to its first placement, and after every eviction from its re-queue to its next placement; work pending at the end counts its wait until then",
		"GPU-h per work GPU-h: GPU-hours provisioned / GPU-hours of the tasks that finished (their trace run time); work left undone at the end is reported apart",
	)
}

func qosCounts(st TraceStats) string {
	var parts []string
	for _, q := range QoSClasses {
		parts = append(parts, fmt.Sprintf("%s %d", q, st.ByQoS[string(q)]))
	}
	return strings.Join(parts, ", ")
}

func poolSource(c Config) string {
	if c.Fleet > 0 {
		return fmt.Sprintf("a fleet of %d owned nodes: the mix of node types of the %s scaled to %d nodes, all up from the start and split between the sides by their shares of the work; nothing is bought or terminated (--fleet)",
			c.Fleet, map[bool]string{true: "configuration's pools", false: "node list"}[len(c.Pools) > 0], c.Fleet)
	}
	if len(c.Pools) > 0 {
		return fmt.Sprintf("%d from the configuration, as they are", len(c.Pools))
	}
	total := 0
	for _, n := range c.NodeTypes {
		total += n.GPUs * n.Count
	}
	return fmt.Sprintf("one shared pool per GPU model and node size of the node list (%d types, %d GPUs), min 0, max its count; when the list has more than %.2fx the peak concurrent demand of a load, every max is scaled down to about that", len(c.NodeTypes), total, c.Headroom)
}

// demandCurve is the trace's concurrent GPU demand at a load if every task
// started on arrival: its peak, and its mean and p95 weighted by time over
// the arrivals' span to the end.
func demandCurve(tasks []Task, load float64) (peak int, mean float64) {
	d := demandOf(tasks, load)
	return d.peak, d.mean
}

type demand struct {
	peak, p95 int
	mean      float64
}

func demandOf(tasks []Task, load float64) demand {
	type ev struct {
		at time.Duration
		d  int
	}
	evs := make([]ev, 0, 2*len(tasks))
	for _, t := range tasks {
		a := time.Duration(float64(t.Arrival) / load).Round(time.Second)
		evs = append(evs, ev{a, t.GPUs}, ev{a + t.Run, -t.GPUs})
	}
	var out demand
	if len(evs) == 0 {
		return out
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.d, b.d)) })
	cur := 0
	var area float64
	held := map[int]float64{} // seconds at each level
	for i, e := range evs {
		if i > 0 {
			dt := (e.at - evs[i-1].at).Seconds()
			area += float64(cur) * dt
			held[cur] += dt
		}
		cur += e.d
		out.peak = max(out.peak, cur)
	}
	span := (evs[len(evs)-1].at - evs[0].at).Seconds()
	if span <= 0 {
		out.p95 = out.peak
		return out
	}
	out.mean = area / span
	levels := make([]int, 0, len(held))
	for l := range held {
		levels = append(levels, l)
	}
	slices.Sort(levels)
	acc := 0.0
	for _, l := range levels {
		acc += held[l]
		if acc >= 0.95*span {
			out.p95 = l
			break
		}
	}
	return out
}

// poolsFor builds the shared pools at a load.
func poolsFor(c Config, peak int) []broker.Pool {
	if len(c.Pools) > 0 {
		return withShape(slices.Clone(c.Pools), c.Shape)
	}
	total := 0
	for _, n := range c.NodeTypes {
		total += n.GPUs * n.Count
	}
	f := 1.0
	if want := c.Headroom * float64(peak); float64(total) > want {
		f = want / float64(total)
	}
	var out []broker.Pool
	for _, n := range c.NodeTypes {
		name := fmt.Sprintf("%s-%dgpu", strings.ToLower(n.Model), n.GPUs)
		out = append(out, broker.Pool{
			Name: sanitize(name), Provider: "replay", Group: name, GPUModel: n.Model, GPUsPerNode: n.GPUs,
			MinNodes: 0, MaxNodes: max(1, int(math.Round(float64(n.Count)*f))), Sides: broker.PoolShared,
		})
	}
	return withShape(out, c.Shape)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

// perSide splits every shared pool into a YARN and a Kubernetes pool, the
// max (and min) split by the side's share of the work; a pool that serves
// one side only stays whole on that side. origin is each copy's pool.
func perSide(pools []broker.Pool, yarnShare float64) (out []broker.Pool, owner []broker.Source, origin []int) {
	for i, p := range pools {
		switch p.Sides {
		case broker.PoolYARN, broker.PoolK8s:
			out = append(out, p)
			owner = append(owner, broker.Source(p.Sides))
			origin = append(origin, i)
			continue
		}
		ymax := int(math.Round(float64(p.MaxNodes) * yarnShare))
		ymin := int(math.Round(float64(p.MinNodes) * yarnShare))
		y, k := p, p
		y.Name, y.Sides, y.MaxNodes, y.MinNodes = p.Name+"-yarn", broker.PoolYARN, ymax, ymin
		k.Name, k.Sides, k.MaxNodes, k.MinNodes = p.Name+"-k8s", broker.PoolK8s, p.MaxNodes-ymax, p.MinNodes-ymin
		out = append(out, y, k)
		owner = append(owner, broker.SourceYARN, broker.SourceK8s)
		origin = append(origin, i, i)
	}
	return out, owner, origin
}

func runLoad(c Config, sides []broker.Source, yshare float64, load float64) (LoadResult, error) {
	if c.Fleet > 0 {
		return runFleet(c, sides, yshare, load), nil
	}
	dem := demandOf(c.Tasks, load)
	pools := poolsFor(c, dem.peak)
	lr := LoadResult{Load: load, PeakDemandGPUs: dem.peak, P95DemandGPUs: dem.p95, MeanDemandGPUs: dem.mean, Pools: pools}
	for _, p := range pools {
		lr.CapacityGPUs += p.GPUsPerNode * p.MaxNodes
	}
	want := map[string]bool{}
	for _, p := range c.Policies {
		want[p] = true
	}
	shared := make([]broker.Source, len(pools))
	for i, p := range pools {
		if p.Sides != broker.PoolShared {
			shared[i] = broker.Source(p.Sides)
		}
	}
	res := map[string]Result{}
	var mu sync.Mutex
	var off Result
	var wg sync.WaitGroup
	goRun := func(name string, f func() Result) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f()
			mu.Lock()
			res[name] = r
			mu.Unlock()
		}()
	}
	if c.RuleOff && want[PolicyBroker] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := c.Policy
			p.MaxWorkLost = broker.Duration(math.MaxInt64)
			s := newSim(c.World, p, pools, shared, c.Tasks, sides, load)
			s.run(&brokerCtl{})
			off = s.result(PolicyBroker + " (rule off)")
		}()
	}
	if want[PolicyBroker] || want[PolicyStaticAvg] {
		goRun(PolicyBroker, func() Result {
			s := newSim(c.World, c.Policy, pools, shared, c.Tasks, sides, load)
			s.run(&brokerCtl{})
			return s.result(PolicyBroker)
		})
	}
	for _, name := range []string{PolicyPerSide, PolicySafeSide} {
		if !want[name] {
			continue
		}
		goRun(name, func() Result {
			sp, owner, _ := perSide(pools, yshare)
			s := newSim(c.World, c.Policy, sp, owner, c.Tasks, sides, load)
			s.run(&autoscalerCtl{safe: name == PolicySafeSide})
			return s.result(name)
		})
	}
	wg.Wait()
	capacity := float64(lr.CapacityGPUs)
	for _, st := range []struct {
		name string
		gpus float64 // the GPUs to hold, in all
	}{
		{PolicyStaticP95, float64(dem.p95)},
		{PolicyStaticPeak, float64(dem.peak)},
		{PolicyStaticAvg, -1},
	} {
		if !want[st.name] {
			continue
		}
		// Nodes of each shared pool before the split by side: the demand
		// sizes spread over the pools in proportion to their max; the
		// equal-average one takes gpubroker's average of each pool.
		avg := make([]float64, len(pools))
		for pi, p := range pools {
			switch {
			case st.gpus < 0:
				if gb := res[PolicyBroker]; gb.EndS > 0 && p.GPUsPerNode > 0 {
					avg[pi] = gb.poolGS[pi] / gb.EndS / float64(p.GPUsPerNode)
				}
			case capacity > 0:
				avg[pi] = float64(p.MaxNodes) * st.gpus / capacity
			}
		}
		sp, owner, nodes := staticSplit(pools, avg, yshare)
		for i := range nodes {
			nodes[i].Policy = st.name
		}
		lr.Static = append(lr.Static, nodes...)
		s := newSim(c.World, c.Policy, sp, owner, c.Tasks, sides, load)
		for pi := range sp {
			for range nodes[pi].Nodes {
				s.place(pi, owner[pi])
			}
		}
		s.run(staticCtl{})
		res[st.name] = s.result(st.name)
	}
	// The baselines have no such rule: their work lost is the same with
	// it on and off.
	for name, r := range res {
		r.WorkLostRuleOff = r.WorkLostGPUHours
		if name == PolicyBroker && c.RuleOff {
			r.WorkLostRuleOff = off.WorkLostGPUHours
		}
		r.Note = policyNotes[name]
		res[name] = r
	}
	if c.RuleOff && want[PolicyBroker] {
		off.WorkLostRuleOff = off.WorkLostGPUHours
		off.Note = "consolidation.max_work_lost unbounded"
		lr.RuleOff = &off
	}
	for _, p := range c.Policies {
		lr.Policies = append(lr.Policies, res[p])
	}
	return lr, nil
}

// staticSplit sizes fixed nodes per pool and side: nodes[i] of each shared
// pool i (fractional), split by the sides' work shares, rounding by largest
// remainder so the total stays as close as whole nodes allow.
func staticSplit(pools []broker.Pool, nodesOf []float64, yshare float64) ([]broker.Pool, []broker.Source, []StaticNodes) {
	sp, owner, origin := perSide(pools, yshare)
	type want struct {
		i    int
		x    float64
		gpus int
	}
	var ws []want
	target := 0.0
	for i, p := range sp {
		pi := origin[i]
		share := 1.0
		if pools[pi].Sides == broker.PoolShared {
			share = yshare
			if owner[i] == broker.SourceK8s {
				share = 1 - yshare
			}
		}
		x := nodesOf[pi] * share
		ws = append(ws, want{i: i, x: x, gpus: p.GPUsPerNode})
		target += x * float64(p.GPUsPerNode)
	}
	nodes := make([]StaticNodes, len(sp))
	got := 0.0
	for _, w := range ws {
		n := int(math.Floor(w.x))
		nodes[w.i] = StaticNodes{Pool: sp[w.i].Name, Side: owner[w.i], Nodes: n}
		got += float64(n * w.gpus)
	}
	slices.SortStableFunc(ws, func(a, b want) int {
		return cmp.Compare(b.x-math.Floor(b.x), a.x-math.Floor(a.x))
	})
	for _, w := range ws {
		if got+float64(w.gpus)/2 > target {
			continue
		}
		nodes[w.i].Nodes++
		got += float64(w.gpus)
	}
	for i := range sp {
		sp[i].MaxNodes = max(sp[i].MaxNodes, nodes[i].Nodes)
	}
	return sp, owner, nodes
}

// fleetPools is a fleet of n owned nodes: the node list's (or the
// configured pools') mix of node types scaled to n nodes by largest
// remainder, each type a shared fleet pool whose size is its nodes.
func fleetPools(c Config, n int) []broker.Pool {
	base := poolsFor(c, math.MaxInt32)
	total := 0
	for _, p := range base {
		total += p.MaxNodes
	}
	type share struct {
		i int
		x float64
	}
	counts := make([]int, len(base))
	var shares []share
	got := 0
	for i, p := range base {
		x := 0.0
		if total > 0 {
			x = float64(n) * float64(p.MaxNodes) / float64(total)
		}
		counts[i] = int(math.Floor(x))
		got += counts[i]
		shares = append(shares, share{i, x - math.Floor(x)})
	}
	slices.SortStableFunc(shares, func(a, b share) int { return cmp.Compare(b.x, a.x) })
	for k := 0; got < n && k < len(shares); k++ {
		counts[shares[k].i]++
		got++
	}
	var out []broker.Pool
	for i, p := range base {
		if counts[i] == 0 {
			continue
		}
		p.Provider, p.Group, p.MinNodes, p.MaxNodes, p.Sides = broker.ProviderFleet, "", counts[i], counts[i], broker.PoolShared
		out = append(out, p)
	}
	return out
}

// runFleet replays a fleet of c.Fleet owned nodes at load: gpubroker hands
// them between the sides, the static split keeps each where it started.
// Both start from the same split by the sides' work shares.
func runFleet(c Config, sides []broker.Source, yshare, load float64) LoadResult {
	dem := demandOf(c.Tasks, load)
	pools := fleetPools(c, c.Fleet)
	lr := LoadResult{Load: load, PeakDemandGPUs: dem.peak, P95DemandGPUs: dem.p95, MeanDemandGPUs: dem.mean, Pools: pools}
	counts := make([]float64, len(pools))
	for i, p := range pools {
		lr.CapacityGPUs += p.GPUsPerNode * p.MaxNodes
		counts[i] = float64(p.MaxNodes)
	}
	sp, owner, nodes := staticSplit(pools, counts, yshare)
	_, _, origin := perSide(pools, yshare)
	for i := range nodes {
		nodes[i].Policy = PolicyStaticFleet
	}
	lr.Static = nodes
	want := map[string]bool{}
	for _, p := range c.Policies {
		want[p] = true
	}
	res := map[string]Result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	replayOn := func(name string, ps []broker.Pool, poolFor []broker.Source, poolOf func(i int) int, ctl controller) {
		if !want[name] {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSim(c.World, c.Policy, ps, poolFor, c.Tasks, sides, load)
			for i := range sp {
				for range nodes[i].Nodes {
					s.place(poolOf(i), owner[i])
				}
			}
			s.run(ctl)
			r := s.result(name)
			r.Note = fleetNotes[name]
			r.WorkLostRuleOff = r.WorkLostGPUHours
			mu.Lock()
			res[name] = r
			mu.Unlock()
		}()
	}
	// gpubroker sees the fleet's shared pools; each node starts on the
	// side the split gives it.
	replayOn(PolicyBroker, pools, make([]broker.Source, len(pools)), func(i int) int { return origin[i] }, &brokerCtl{})
	replayOn(PolicyStaticFleet, sp, owner, func(i int) int { return i }, staticCtl{})
	wg.Wait()
	for _, p := range c.Policies {
		lr.Policies = append(lr.Policies, res[p])
	}
	return lr
}
