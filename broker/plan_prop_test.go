package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Property tests for the safety invariants of docs/design.md, on random small
// clusters: pools of random sizes and sides, nodes in every phase with
// random work, demand with random constraints, in-flight ops, stale sides
// and random policies.

var (
	propModels   = []string{"A100", "H100"}
	propTenants  = []string{"a", "b", "c"}
	propPrios    = []int64{0, 10, 100, 1000}
	propPerUnit  = []int{1, 2, 4, 8}
	propGPUs     = []int{0, 1, 2, 4, 4, 8, 8}
	propPhases   = []Phase{PhaseRequested, PhaseBooting, PhaseRegistered, PhaseGPUReady, PhaseActive, PhaseActive, PhaseActive, PhaseActive, PhaseActive, PhaseActive, PhaseActive, PhaseActive, PhaseDraining, PhaseDrained, PhaseTerminating, PhaseGone}
	propOwners   = []Owner{OwnerK8s, OwnerK8s, OwnerYARN, OwnerYARN, OwnerNone}
	propSides    = []PoolSides{PoolShared, PoolShared, PoolK8s, PoolYARN}
	propTaint    = Taint{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}
	propExpander = []Expander{ExpanderLeastWaste, ExpanderMostPods, ExpanderPriority, ExpanderPrice}
	propClasses  = []WorkClass{WorkService, WorkService, WorkService, WorkBatch, WorkBare, ""}
)

func minutes(t *rapid.T, label string, hi int) time.Duration {
	return time.Duration(rapid.IntRange(0, hi).Draw(t, label)) * time.Minute
}

// genMode steers the generator: "mixed" draws everything freely,
// "reclaim" makes idle, long-underused nodes and little demand (scale-down
// and transfers), "contend" fills pools to max with preemptible work and
// sends high-priority demand (preemption).
type genMode string

const (
	modeMixed   genMode = "mixed"
	modeReclaim genMode = "reclaim"
	modeContend genMode = "contend"
)

// allModes weighs the modes for most properties.
var allModes = []genMode{modeMixed, modeMixed, modeReclaim, modeContend}

// genCase draws a mode from modes, a snapshot and a policy.
func genCase(t *rapid.T, modes ...genMode) (*Snapshot, Policy) {
	if len(modes) == 0 {
		modes = allModes
	}
	mode := rapid.SampledFrom(modes).Draw(t, "mode")
	return genSnapshot(t, mode), genPolicy(t, mode)
}

func genSnapshot(t *rapid.T, mode genMode) *Snapshot {
	s := &Snapshot{Now: t0, Tenants: map[string]Tenant{}}
	npools := rapid.IntRange(1, 4).Draw(t, "pools")
	for i := range npools {
		lo := rapid.IntRange(0, 2).Draw(t, "min")
		if mode == modeReclaim {
			lo = 0
		}
		hi := lo + rapid.IntRange(0, 4).Draw(t, "span")
		p := Pool{
			Name: fmt.Sprintf("p%d", i), Provider: "aws", GPUModel: rapid.SampledFrom(propModels).Draw(t, "model"),
			GPUsPerNode: rapid.SampledFrom(propGPUs).Draw(t, "gpn"), MinNodes: lo, MaxNodes: hi + 1,
			Labels: map[string]string{"infra-type": "gpu", "zone": rapid.SampledFrom([]string{"a", "b"}).Draw(t, "zone")},
			Sides:  rapid.SampledFrom(propSides).Draw(t, "sides"), PricePerHour: float64(rapid.IntRange(1, 20).Draw(t, "price")),
			ExpanderPriority: rapid.IntRange(0, 3).Draw(t, "exprio"),
		}
		if rapid.Bool().Draw(t, "tainted") {
			p.Taints = []Taint{propTaint}
		}
		if mode == modeMixed && rapid.IntRange(0, 5).Draw(t, "fast") == 0 {
			p.Partition = "fast"
		}
		st := PoolState{Pool: p, Desired: max(0, rapid.IntRange(lo-1, hi+1).Draw(t, "desired"))}
		if mode != modeMixed {
			st.Desired = hi + 1
			st.Pool.GPUsPerNode = rapid.SampledFrom([]int{2, 4, 8}).Draw(t, "gpn_busy")
			st.Pool.Sides = PoolShared
		}
		if rapid.IntRange(0, 4).Draw(t, "backoff") == 0 {
			st.BackoffUntil = t0.Add(minutes(t, "backoff_for", 10) - 2*time.Minute)
			st.BackoffReason = "InsufficientInstanceCapacity"
		}
		s.Pools = append(s.Pools, st)
	}
	key := 0
	nnodes := rapid.IntRange(0, 12).Draw(t, "nodes")
	if mode != modeMixed {
		nnodes = rapid.IntRange(4, 12).Draw(t, "nodes")
	}
	for i := range nnodes {
		pi := rapid.IntRange(-1, npools-1).Draw(t, "node_pool")
		n := Node{Name: fmt.Sprintf("n%02d", i), InstanceID: fmt.Sprintf("i-%02d", i), Owner: rapid.SampledFrom(propOwners).Draw(t, "owner"),
			Phase: rapid.SampledFrom(propPhases).Draw(t, "phase"), PhaseSince: t0.Add(-minutes(t, "phase_since", 30)),
			Utilisation: -1, Healthy: true}
		if mode != modeMixed && rapid.IntRange(0, 4).Draw(t, "force_active") > 0 {
			n.Phase = PhaseActive
		}
		if mode == modeReclaim { // mostly Kubernetes nodes, mostly YARN demand: transfers
			n.Owner = rapid.SampledFrom([]Owner{OwnerK8s, OwnerK8s, OwnerK8s, OwnerYARN}).Draw(t, "owner_k8s")
		}
		if pi >= 0 {
			p := s.Pools[pi].Pool
			n.Pool, n.GPUModel, n.GPUsTotal, n.Taints = p.Name, p.GPUModel, p.GPUsPerNode, slices.Clone(p.Taints)
			n.Labels = map[string]string{}
			for k, v := range p.Labels {
				n.Labels[k] = v
			}
		} else {
			n.GPUModel, n.GPUsTotal = rapid.SampledFrom(propModels).Draw(t, "node_model"), rapid.SampledFrom(propGPUs).Draw(t, "node_gpus")
			n.Labels = map[string]string{"infra-type": "gpu"}
		}
		src, owned := n.Owner.Side()
		if !owned {
			src = rapid.SampledFrom(Sources[:]).Draw(t, "work_src")
		}
		left := n.GPUsTotal
		nwork := max(0, rapid.IntRange(-2, 3).Draw(t, "work"))
		switch mode {
		case modeReclaim:
			nwork = max(0, rapid.IntRange(-4, 1).Draw(t, "work"))
		case modeContend:
			nwork = rapid.IntRange(1, 3).Draw(t, "work")
		}
		for k := range nwork {
			g := rapid.IntRange(0, left).Draw(t, "work_gpus")
			if mode == modeContend && k == nwork-1 {
				g = left // full nodes
			}
			left -= g
			key++
			w := Workload{Source: src, Key: fmt.Sprintf("w%d", key), Tenant: rapid.SampledFrom(propTenants).Draw(t, "work_tenant"),
				Priority: rapid.SampledFrom(propPrios).Draw(t, "work_prio"), GPUs: g, Preemptible: rapid.Bool().Draw(t, "preemptible"),
				StartedAt: t0.Add(-minutes(t, "started", 120)), CheckpointAge: -1, System: g == 0 && rapid.Bool().Draw(t, "system")}
			if rapid.Bool().Draw(t, "has_checkpoint") {
				w.CheckpointAge = minutes(t, "checkpoint", 60)
			}
			w.Class = rapid.SampledFrom(propClasses).Draw(t, "work_class")
			if rapid.IntRange(0, 5).Draw(t, "do_not_disrupt") == 0 {
				w.DoNotDisrupt = "karpenter.sh/do-not-disrupt"
			}
			if rapid.Bool().Draw(t, "has_app") {
				w.App = fmt.Sprintf("app%d", rapid.IntRange(0, 3).Draw(t, "app"))
				w.AM = src == SourceYARN && rapid.IntRange(0, 2).Draw(t, "am") == 0
			}
			n.Work = append(n.Work, w)
			n.GPUsAllocated += g
		}
		switch {
		case mode == modeReclaim:
			n.UnderusedSince = t0.Add(-10*time.Minute - minutes(t, "underused_for", 20))
		case rapid.Bool().Draw(t, "underused"):
			n.UnderusedSince = t0.Add(-minutes(t, "underused_for", 20))
		}
		switch rapid.IntRange(0, 9).Draw(t, "health") {
		case 0:
			n.Healthy, n.HealthReason = false, "XID 79"
		case 1:
			n.Healthy = false // never reported on
		}
		n.Protected = rapid.IntRange(0, 9).Draw(t, "protected") == 0
		s.Nodes = append(s.Nodes, n)
	}
	if mode != modeMixed { // no capacity in flight: the pools hold what they have
		for i := range s.Pools {
			s.Pools[i].Desired = 0
			for _, n := range s.Nodes {
				if n.Pool == s.Pools[i].Pool.Name && n.Phase != PhaseTerminating && n.Phase != PhaseGone {
					s.Pools[i].Desired++
				}
			}
		}
	}
	// Little demand leaves nodes untouched for scale-down and transfers.
	ndemand := rapid.SampledFrom([]int{0, 1, 2, 3, 15}).Draw(t, "demand_size")
	if mode == modeContend {
		ndemand = 15
	}
	ndemand = rapid.IntRange(0, ndemand).Draw(t, "demand")
	for i := range ndemand {
		src := rapid.SampledFrom(Sources[:]).Draw(t, "src")
		if mode == modeReclaim {
			src = rapid.SampledFrom([]Source{SourceYARN, SourceYARN, SourceYARN, SourceK8s}).Draw(t, "src_yarn")
		}
		d := Demand{Source: src, Key: fmt.Sprintf("d%02d", i), Tenant: rapid.SampledFrom(propTenants).Draw(t, "tenant"),
			Priority: rapid.SampledFrom(propPrios).Draw(t, "prio"), GPUsPerUnit: rapid.SampledFrom(propPerUnit).Draw(t, "per_unit"),
			Units: rapid.IntRange(1, 3).Draw(t, "units"), Gang: rapid.Bool().Draw(t, "gang"),
			Preemptible: rapid.Bool().Draw(t, "d_preemptible"), NoPreempt: rapid.IntRange(0, 5).Draw(t, "no_preempt") == 0,
			FirstSeen: t0.Add(-minutes(t, "first_seen", 60)), LastSeen: t0}
		if rapid.IntRange(0, 3).Draw(t, "has_models") == 0 {
			d.Constraints.GPUModels = []string{rapid.SampledFrom(propModels).Draw(t, "d_model")}
		}
		if rapid.Bool().Draw(t, "has_selector") {
			d.Constraints.NodeSelector = map[string]string{"infra-type": "gpu"}
		}
		if mode == modeMixed && rapid.IntRange(0, 3).Draw(t, "has_affinity") == 0 {
			d.Constraints.Affinity = []AffinityTerm{{Requirements: []LabelRequirement{{Key: "zone", Operator: rapid.SampledFrom([]string{"In", "NotIn"}).Draw(t, "op"), Values: []string{"a"}}}}}
		}
		if mode != modeMixed || rapid.IntRange(0, 3).Draw(t, "untolerant") != 0 {
			d.Constraints.Tolerations = []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}
		}
		if mode == modeMixed && src == SourceYARN && rapid.IntRange(0, 5).Draw(t, "d_fast") == 0 {
			d.Constraints.NodeLabel = "fast"
		}
		if mode == modeContend && rapid.Bool().Draw(t, "urgent") {
			d.Priority = 10000
		}
		s.Demand = append(s.Demand, d)
	}
	for _, name := range propTenants {
		if rapid.Bool().Draw(t, "tenant_configured") {
			g := rapid.IntRange(0, 8).Draw(t, "guaranteed")
			s.Tenants[name] = Tenant{Name: name, GuaranteedGPUs: g, MaxGPUs: g + rapid.IntRange(0, 16).Draw(t, "max_extra"),
				Weight: float64(rapid.IntRange(1, 4).Draw(t, "weight"))}
		}
	}
	for i := range rapid.IntRange(0, 3).Draw(t, "ops") {
		op := Op{ID: int64(i + 1), State: rapid.SampledFrom([]OpState{OpPending, OpRunning, OpDone}).Draw(t, "op_state")}
		op.Kind = rapid.SampledFrom([]ActionKind{ActScaleUp, ActScaleDown, ActTransfer, ActPreempt, ActReplace}).Draw(t, "op_kind")
		switch op.Kind {
		case ActScaleUp:
			op.Step = rapid.SampledFrom([]string{StepSetDesired, StepAwaitReady}).Draw(t, "op_step")
		case ActScaleDown:
			op.Step = rapid.SampledFrom([]string{StepRelease, StepTerminate}).Draw(t, "op_step")
			op.Data = []byte(`{"from":"` + rapid.SampledFrom([]string{"k8s", "yarn", "none"}).Draw(t, "op_from") + `"}`)
		}
		switch {
		case op.Kind == ActScaleUp:
			p := rapid.SampledFrom(s.Pools).Draw(t, "op_pool")
			op.Pool, op.Target = p.Pool.Name, rapid.IntRange(0, p.Pool.MaxNodes).Draw(t, "op_target")
		case len(s.Nodes) > 0:
			n := rapid.SampledFrom(s.Nodes).Draw(t, "op_node")
			op.Pool, op.Node = n.Pool, n.Name
		default:
			continue
		}
		if op.Kind == ActScaleDown && op.State != OpDone && rapid.Bool().Draw(t, "op_attrition") {
			op.Step, op.Data = StepRelease, []byte(`{"attrition":true}`)
		}
		if len(s.Demand) > 0 && rapid.Bool().Draw(t, "op_serves") {
			op.Serves = []string{rapid.SampledFrom(s.Demand).Draw(t, "op_demand").ID()}
		}
		s.InFlight = append(s.InFlight, op)
	}
	for _, src := range Sources {
		if rapid.IntRange(0, 7).Draw(t, "stale") == 0 && (mode == modeMixed || rapid.Bool().Draw(t, "stale_too")) {
			if s.Stale == nil {
				s.Stale = map[Source]string{}
			}
			s.Stale[src] = "timed out"
		}
	}
	return s
}

func genPolicy(t *rapid.T, mode genMode) Policy {
	p := DefaultPolicy()
	p.ClusterMinGPUs = rapid.IntRange(0, 8).Draw(t, "cluster_min")
	p.ClusterMaxGPUs = p.ClusterMinGPUs + rapid.IntRange(0, 64).Draw(t, "cluster_max_extra")
	if rapid.Bool().Draw(t, "model_max") {
		p.ModelMaxGPUs = map[string]int{rapid.SampledFrom(propModels).Draw(t, "max_model"): rapid.IntRange(0, 32).Draw(t, "model_max_gpus")}
	}
	p.ScaleDownUnneeded = Duration(minutes(t, "unneeded", 10))
	if mode == modeReclaim {
		p.ClusterMinGPUs, p.ClusterMaxGPUs = 0, rapid.IntRange(0, 64).Draw(t, "cluster_max")
	}
	p.ScaleDownUtilisation = rapid.SampledFrom([]float64{0, 0.25, 0.5, 1}).Draw(t, "threshold")
	p.Expander = rapid.SampledFrom(propExpander).Draw(t, "expander")
	p.Preemption = mode == modeContend || rapid.Bool().Draw(t, "preemption")
	p.OwnershipTransfer = rapid.Bool().Draw(t, "transfer") || (mode == modeReclaim && rapid.Bool().Draw(t, "transfer_too"))
	return p
}

// view answers questions about a snapshot independently of the planner.
type view struct {
	s     *Snapshot
	pools map[string]*PoolState
	nodes map[string]*Node
	busy  map[string]bool
}

func newView(s *Snapshot) *view {
	v := &view{s: s, pools: map[string]*PoolState{}, nodes: map[string]*Node{}, busy: map[string]bool{}}
	for i := range s.Pools {
		v.pools[s.Pools[i].Pool.Name] = &s.Pools[i]
	}
	for i := range s.Nodes {
		v.nodes[s.Nodes[i].Name] = &s.Nodes[i]
	}
	for _, op := range s.InFlight {
		if !op.State.Terminal() && op.Node != "" {
			v.busy[op.Node] = true
		}
	}
	return v
}

// size is the pool's desired capacity, or more when an in-flight scale-up
// already asked for more.
func (v *view) size(pool string) int {
	n := v.pools[pool].Desired
	for _, op := range v.s.InFlight {
		if !op.State.Terminal() && op.Kind == ActScaleUp && op.Step != StepAwaitReady && op.Pool == pool && op.Target > n {
			n = op.Target
		}
	}
	return n
}

// pendingDown counts in-flight removals of the pool's nodes that have not
// reached the cloud yet.
func (v *view) pendingDown(pool string) int {
	k := 0
	for _, op := range v.s.InFlight {
		if op.State.Terminal() || (op.Kind != ActScaleDown && op.Kind != ActReplace) {
			continue
		}
		// A replacement keeps the desired capacity unless it raised it
		// by one first (surge), which its terminate takes back.
		if op.Kind == ActReplace && OpDataOf(&op).SurgeTo == 0 {
			continue
		}
		if n := v.nodes[op.Node]; n != nil && n.Pool == pool && n.Phase != PhaseTerminating && n.Phase != PhaseGone {
			k++
		}
	}
	// Removals beyond the pool's size (an inconsistent observation) cannot
	// take it below zero.
	return min(k, v.size(pool))
}

// pendingLeft is pendingDown less the scale-downs the plan cancels.
func (v *view) pendingLeft(plan Plan, pool string) int {
	k := v.pendingDown(pool)
	for _, a := range plan.Actions {
		if a.Kind == ActCancelScaleDown && a.Pool == pool && k > 0 {
			k-- // as the planner: a cancel takes back only a removal counted
		}
	}
	return k
}

// onlyScaleDown reports whether the one in-flight op on node is one a
// cancellation ends (OpSteps' interrupts): a scale-down that has not
// reached the cloud, or a migration still waiting for checkpoints.
func (v *view) onlyScaleDown(node string) bool {
	k := 0
	ok := false
	for _, op := range v.s.InFlight {
		if op.State.Terminal() || op.Node != node {
			continue
		}
		k++
		_, ok = InterruptTo(op.Kind, ActCancelScaleDown, op.Step)
	}
	return k == 1 && ok
}

// fataler is what invariant checks need from *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// invariants are the safety invariants of docs/design.md as plan checks.
var invariants = map[string]func(fataler, *view, Policy, Plan){
	"max": checkMax, "min": checkMin, "up-and-down": checkUpDown, "scale-down": checkScaleDown,
	"transfer": checkTransfer, "stale": checkStale, "sound": checkSound, "consolidation": checkConsolidation,
}

func checkPlan(t *rapid.T, check func(fataler, *view, Policy, Plan), modes ...genMode) {
	s, p := genCase(t, modes...)
	check(t, newView(s), p, MakePlan(s, p))
}

func countKinds(plan Plan) (ups, downs map[string]int) {
	ups, downs = map[string]int{}, map[string]int{}
	for _, a := range plan.Actions {
		switch a.Kind {
		case ActScaleUp:
			ups[a.Pool]++
		case ActScaleDown:
			downs[a.Pool]++
		}
	}
	return ups, downs
}

func TestPropNeverAbovePoolOrClusterMax(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkMax) })
}

func checkMax(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	target := map[string]int{}
	for _, a := range plan.Actions {
		if a.Kind != ActScaleUp {
			continue
		}
		ps := v.pools[a.Pool]
		if ps == nil {
			t.Fatalf("scale-up of unknown pool %q", a.Pool)
		}
		if a.Target > ps.Pool.MaxNodes {
			t.Fatalf("pool %s scaled to %d above its max %d", a.Pool, a.Target, ps.Pool.MaxNodes)
		}
		// The target is the size after the pool's pending removals, which
		// the executor lets terminate first.
		if base := v.size(a.Pool) - v.pendingLeft(plan, a.Pool); a.Target <= base {
			t.Fatalf("scale-up of %s to %d does not grow it from %d (size %d, pendingLeft %d; actions %+v; inflight %+v)", a.Pool, a.Target, base, v.size(a.Pool), v.pendingLeft(plan, a.Pool), plan.Actions, v.s.InFlight)
		}
		if _, dup := target[a.Pool]; dup {
			t.Fatalf("two scale-ups of pool %s", a.Pool)
		}
		target[a.Pool] = a.Target
	}
	if len(target) == 0 {
		return
	}
	// Only growth in GPUs is bounded: a zero-GPU pool may grow in a
	// cluster already over its GPU max.
	total, byModel := 0, map[string]int{}
	grown := map[string]bool{}
	added := 0
	for name, ps := range v.pools {
		n := v.size(name)
		if tg, ok := target[name]; ok {
			n = tg
			if ps.Pool.GPUsPerNode > 0 {
				grown[ps.Pool.GPUModel] = true
				added += (tg - (v.size(name) - v.pendingLeft(plan, name))) * ps.Pool.GPUsPerNode
			}
		}
		total += n * ps.Pool.GPUsPerNode
		byModel[ps.Pool.GPUModel] += n * ps.Pool.GPUsPerNode
	}
	if added > 0 && total > p.ClusterMaxGPUs {
		t.Fatalf("cluster GPUs after the plan %d exceed the max %d", total, p.ClusterMaxGPUs)
	}
	for m, mx := range p.ModelMaxGPUs {
		if grown[m] && byModel[m] > mx {
			t.Fatalf("%s GPUs after the plan %d exceed the model max %d", m, byModel[m], mx)
		}
	}
}

func TestPropNeverBelowPoolOrClusterMin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkMin) })
}

func checkMin(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	_, downs := countKinds(plan)
	if len(downs) == 0 {
		return
	}
	total := 0
	for name, ps := range v.pools {
		after := v.size(name) - v.pendingLeft(plan, name) - downs[name]
		if downs[name] > 0 && after < ps.Pool.MinNodes {
			t.Fatalf("pool %s goes to %d nodes, below its min %d (size %d, pending %d, downs %d; actions %+v; inflight %+v)", name, after, ps.Pool.MinNodes, v.size(name), v.pendingLeft(plan, name), downs[name], plan.Actions, v.s.InFlight)
		}
		total += after * ps.Pool.GPUsPerNode
	}
	for _, a := range plan.Actions {
		if a.Kind == ActScaleUp {
			// A scale-up's target is net of the pool's pending removals
			// (the executor adds them back), as checkMax reads it: the
			// pool ends at the target.
			total += (a.Target - (v.size(a.Pool) - v.pendingLeft(plan, a.Pool))) * v.pools[a.Pool].Pool.GPUsPerNode
		}
	}
	if total < p.ClusterMinGPUs {
		t.Fatalf("cluster goes to %d GPUs, below its min %d (actions %+v; inflight %+v)", total, p.ClusterMinGPUs, plan.Actions, v.s.InFlight)
	}
}

func TestPropNeverUpAndDownInOnePlan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkUpDown) })
}

func checkUpDown(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	ups, downs := countKinds(plan)
	for pool := range ups {
		if downs[pool] > 0 {
			t.Fatalf("pool %s is scaled up and down in one plan: %+v", pool, plan.Actions)
		}
	}
}

// Scale-down and reclaiming transfers act only on nodes whose non-system
// GPU work fits on the free GPUs of other nodes of the same pool and side,
// which the plan leaves in place; the executor drains before terminating.
func TestPropScaleDownOnlyWhenWorkFitsElsewhere(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkScaleDown, modeReclaim, modeReclaim, modeMixed) })
}

func checkScaleDown(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	acted := map[string]bool{}
	for _, a := range plan.Actions {
		if a.Node != "" {
			acted[a.Node] = true
		}
	}
	type key struct {
		pool string
		side Owner
	}
	need := map[key]int{}
	for _, a := range plan.Actions {
		if a.Kind == ActTransfer {
			// A transfer drains the node too: its work must fit elsewhere.
			if n := v.nodes[a.Node]; n != nil {
				for _, w := range n.Work {
					if !w.System {
						need[key{n.Pool, n.Owner}] += w.GPUs
					}
				}
			}
		}
		if a.Kind != ActScaleDown || a.Attrition {
			continue // attrition moves no work: it waits for it to end (checkConsolidation)
		}
		n := v.nodes[a.Node]
		if n != nil && n.Phase.InFlight() && !n.PhaseSince.IsZero() && t0.Sub(n.PhaseSince) > p.MaxProvisionTime.D() {
			// An instance that never became gpu-ready in time is removed
			// (the cluster autoscaler's rule); it runs no work.
			if hasWork(n) {
				t.Fatalf("scale-down of overdue node %s that runs work", n.Name)
			}
			continue
		}
		if n != nil && n.Owner == OwnerNone && a.From == OwnerNone &&
			(n.Phase == PhaseActive || n.Phase == PhaseGPUReady || n.Phase == PhaseDrained) {
			// A stranded node (the broker left it cordoned on both sides)
			// is removed once unneeded; it must run nothing.
			if hasWork(n) || n.GPUsAllocated > 0 {
				t.Fatalf("scale-down of stranded node %s that runs work", n.Name)
			}
			continue
		}
		switch {
		case n == nil:
			t.Fatalf("scale-down of unknown node %s", a.Node)
		case n.Phase != PhaseActive:
			t.Fatalf("scale-down of node %s in phase %s", n.Name, n.Phase)
		case n.Protected:
			t.Fatalf("scale-down of protected node %s", n.Name)
		case !n.Healthy && n.HealthReason != "":
			t.Fatalf("scale-down of unhealthy node %s instead of a replacement", n.Name)
		case n.UnderusedSince.IsZero() || t0.Sub(n.UnderusedSince) < p.ScaleDownUnneeded.D():
			t.Fatalf("scale-down of node %s underused since %s, unneeded time %s", n.Name, n.UnderusedSince, p.ScaleDownUnneeded)
		case float64(n.GPUsAllocated) > p.ScaleDownUtilisation*float64(n.GPUsTotal):
			t.Fatalf("scale-down of node %s with %d of %d GPUs allocated, threshold %g", n.Name, n.GPUsAllocated, n.GPUsTotal, p.ScaleDownUtilisation)
		case a.Pool != n.Pool || a.From != n.Owner:
			t.Fatalf("scale-down action %+v does not describe node %+v", a, n)
		}
		for _, w := range n.Work {
			if !w.System {
				need[key{n.Pool, n.Owner}] += w.GPUs
			}
		}
	}
	for k, gpus := range need {
		room := 0
		for _, n := range v.nodes {
			if n.Pool == k.pool && n.Owner == k.side && !acted[n.Name] && !v.busy[n.Name] &&
				(n.Phase == PhaseActive || n.Phase == PhaseGPUReady) && (n.Healthy || n.HealthReason == "") {
				room += n.FreeGPUs()
			}
		}
		if gpus > room {
			t.Fatalf("pool %s side %s: scale-downs move %d GPUs of work but only %d GPUs are free elsewhere", k.pool, k.side, gpus, room)
		}
	}
}

func TestPropNeverHandOverBeforeRelease(t *testing.T) {
	// Mostly the reclaim mode, where transfers happen.
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkTransfer, modeReclaim, modeReclaim, modeReclaim, modeMixed) })
}

func checkTransfer(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	for _, a := range plan.Actions {
		if a.Kind != ActTransfer {
			continue
		}
		n := v.nodes[a.Node]
		if n == nil {
			t.Fatalf("transfer of unknown node %s", a.Node)
		}
		from, owned := n.Owner.Side()
		if a.From != n.Owner || !owned && n.Owner != OwnerNone {
			t.Fatalf("transfer of %s from %q, but the node is owned by %q", a.Node, a.From, n.Owner)
		}
		if !owned && (hasWork(n) || n.GPUsAllocated > 0 || len(v.s.Stale) > 0) {
			// A stranded node (nobody owns it) is handed over only empty
			// and while both sides are fresh.
			t.Fatalf("transfer of stranded node %s (work %v, allocated %d, stale %v)", a.Node, n.Work, n.GPUsAllocated, v.s.Stale)
		}
		to, ok := a.To.Side()
		if !ok || owned && to == from {
			t.Fatalf("transfer of %s to %q from %q", a.Node, a.To, a.From)
		}
		if !p.OwnershipTransfer {
			t.Fatalf("transfer of %s although the policy forbids transfers", a.Node)
		}
		if ps := v.pools[n.Pool]; ps == nil || !ps.Pool.Sides.Serves(to) {
			t.Fatalf("transfer of %s to %s, which its pool %q may not serve", a.Node, to, n.Pool)
		}
		if n.Protected || (n.Phase != PhaseActive && n.Phase != PhaseGPUReady && (owned || n.Phase != PhaseDrained)) {
			t.Fatalf("transfer of node %s (protected %v, phase %s)", a.Node, n.Protected, n.Phase)
		}
		if len(a.Serves) == 0 {
			t.Fatalf("transfer of %s serves no demand", a.Node)
		}
		if !a.Kind.Destructive() {
			t.Fatalf("a transfer must be destructive so the executor releases the node first")
		}
	}
}

func TestPropNothingDestructiveOnAStaleSide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkStale, modeMixed, modeReclaim, modeContend) })
}

func checkStale(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	for _, a := range plan.Actions {
		if !a.Kind.Destructive() || a.Kind == ActCancelScaleDown {
			// A cancellation gives a node back to the side it was
			// leaving: nothing is stopped.
			continue
		}
		n := v.nodes[a.Node]
		if n == nil {
			t.Fatalf("%s of unknown node %q", a.Kind, a.Node)
		}
		side, ok := n.Owner.Side()
		if !ok {
			// A node no side owns (an instance that registered nowhere,
			// or a node the broker left cordoned on both sides) may be
			// removed or handed over only while both sides are fresh:
			// either may still list work there.
			if len(v.s.Stale) > 0 {
				t.Fatalf("%s of node %s that no side owns while %v is stale", a.Kind, n.Name, v.s.Stale)
			}
			continue
		}
		if v.s.IsStale(side) {
			t.Fatalf("%s of node %s on stale side %s", a.Kind, n.Name, side)
		}
		if to, ok := a.To.Side(); ok && v.s.IsStale(to) {
			t.Fatalf("transfer of node %s to stale side %s", n.Name, to)
		}
		for _, w := range a.Victims {
			if v.s.IsStale(w.Source) {
				t.Fatalf("preemption of %s on stale side %s", w.Key, w.Source)
			}
		}
	}
}

func TestPropActionsAreSound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlan(t, checkSound) })
}

func checkSound(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	demand := map[string]*Demand{}
	for i := range v.s.Demand {
		demand[v.s.Demand[i].ID()] = &v.s.Demand[i]
	}
	onNode := map[string]ActionKind{}
	served := map[string]bool{}
	for _, a := range plan.Actions {
		if a.Reason == "" {
			t.Fatalf("action without a reason: %+v", a)
		}
		if a.Node != "" {
			// Several demands may each preempt work on one node;
			// any other action is the node's only one.
			if k, dup := onNode[a.Node]; dup && !(k == ActPreempt && a.Kind == ActPreempt) {
				t.Fatalf("node %s gets a %s and a %s in one plan", a.Node, k, a.Kind)
			}
			onNode[a.Node] = a.Kind
			if v.busy[a.Node] && a.Kind != ActRecommission && !(a.Kind == ActCancelScaleDown && v.onlyScaleDown(a.Node)) {
				t.Fatalf("%s of node %s, which an in-flight op already acts on", a.Kind, a.Node)
			}
		}
		for _, id := range a.Serves {
			d := demand[id]
			if d == nil {
				t.Fatalf("action serves unknown demand %s", id)
			}
			served[id] = true
			if v.s.IsStale(d.Source) {
				t.Fatalf("action serves %s from stale side", id)
			}
		}
		if a.Kind == ActPreempt {
			if !p.Preemption {
				t.Fatalf("preemption although the policy forbids it")
			}
			n := v.nodes[a.Node]
			if len(a.Victims) == 0 || len(a.Serves) == 0 {
				t.Fatalf("preemption without victims or demand: %+v", a)
			}
			d := demand[a.Serves[0]]
			side, _ := n.Owner.Side()
			switch to, _ := a.To.Side(); {
			case side == d.Source && len(a.Serves) != 1:
				t.Fatalf("preemption on its own side serves %d demands: %+v", len(a.Serves), a)
			case side != d.Source && (to != d.Source || a.From != n.Owner || !p.OwnershipTransfer):
				t.Fatalf("demand %s preempts on node %s of the other side without handing it over: %+v", d.ID(), n.Name, a)
			case side != d.Source:
				// The node leaves its side: all its work must be a victim.
				for _, w := range n.Work {
					if !w.System && !slices.ContainsFunc(a.Victims, func(x Workload) bool { return x.Key == w.Key }) {
						t.Fatalf("node %s is handed over by preemption but %s keeps running on it", n.Name, w.Key)
					}
				}
			}
			for _, id := range a.Serves {
				if demand[id].NoPreempt {
					t.Fatalf("demand %s may not preempt", id)
				}
			}
			victims := map[string]bool{}
			for _, w := range a.Victims {
				victims[w.Key] = true
			}
			for _, w := range a.Victims {
				i := slices.IndexFunc(n.Work, func(x Workload) bool { return x.Key == w.Key })
				if i < 0 {
					t.Fatalf("victim %s is not on node %s", w.Key, n.Name)
				}
				for _, id := range a.Serves {
					if !w.Preemptible || w.System || w.Priority >= demand[id].Priority {
						t.Fatalf("victim %+v may not be preempted for demand at priority %d", w, demand[id].Priority)
					}
				}
				if !w.AM {
					continue
				}
				// Never an AM unless its whole application is the victim.
				for _, m := range v.s.Nodes {
					for _, x := range m.Work {
						if x.App == w.App && !victims[x.Key] {
							t.Fatalf("AM %s preempted but %s of its application %s keeps running on %s", w.Key, x.Key, w.App, m.Name)
						}
					}
				}
			}
		}
	}
	// Every pending demand: served by an action, or exactly one wait.
	waits := map[string]int{}
	for _, w := range plan.Waits {
		if demand[w.Demand] == nil {
			t.Fatalf("wait for unknown demand %s", w.Demand)
		}
		if w.Reason == "" || w.Detail == "" {
			t.Fatalf("wait without reason or detail: %+v", w)
		}
		waits[w.Demand]++
	}
	for id := range demand {
		switch {
		case served[id] && waits[id] > 0:
			t.Fatalf("demand %s is served and waits", id)
		case !served[id] && waits[id] != 1:
			t.Fatalf("demand %s has %d waits and no action", id, waits[id])
		}
	}
	// A tenant already at its max gets nothing new.
	usage := map[string]int{}
	for _, n := range v.s.Nodes {
		if n.Phase == PhaseGone {
			continue
		}
		for _, w := range n.Work {
			if !w.System {
				usage[w.Tenant] += w.GPUs
			}
		}
	}
	for id := range served {
		d := demand[id]
		if tn, ok := v.s.Tenants[d.Tenant]; ok && usage[d.Tenant]+d.GPUsPerUnit > tn.MaxGPUs {
			t.Fatalf("demand %s of tenant %s (using %d of %d GPUs) is served beyond quota", id, d.Tenant, usage[d.Tenant], tn.MaxGPUs)
		}
	}
}

// shuffled returns a deep copy of s with every slice in another order.
func shuffled(t *rapid.T, s *Snapshot) *Snapshot {
	c := cloneSnapshot(s)
	c.Demand = rapid.Permutation(c.Demand).Draw(t, "demand_order")
	c.Nodes = rapid.Permutation(c.Nodes).Draw(t, "node_order")
	c.Pools = rapid.Permutation(c.Pools).Draw(t, "pool_order")
	c.InFlight = rapid.Permutation(c.InFlight).Draw(t, "op_order")
	for i := range c.Nodes {
		c.Nodes[i].Work = rapid.Permutation(c.Nodes[i].Work).Draw(t, "work_order")
	}
	return c
}

func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, p := genCase(t)
		first := MakePlan(s, p)
		if d := cmp.Diff(first, MakePlan(s, p)); d != "" {
			t.Fatalf("same input, different plan:\n%s", d)
		}
		if d := cmp.Diff(first, MakePlan(shuffled(t, s), p)); d != "" {
			t.Fatalf("shuffled input, different plan:\n%s", d)
		}
	})
}

func TestPropSnapshotNotModified(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, p := genCase(t)
		before := cloneSnapshot(s)
		pBefore := p
		pBefore.ModelMaxGPUs = cloneMap(p.ModelMaxGPUs)
		MakePlan(s, p)
		if d := cmp.Diff(before, s); d != "" {
			t.Fatalf("planning modified the snapshot (-before +after):\n%s", d)
		}
		if d := cmp.Diff(pBefore, p); d != "" {
			t.Fatalf("planning modified the policy:\n%s", d)
		}
	})
}

func cloneMap(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func cmpDiff(a, b any) string { return cmp.Diff(a, b) }

func TestPropConsolidationNeverThrowsAwayWork(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, p := genCase(t, modeReclaim, modeReclaim, modeMixed)
		p.MaxWorkLost = Duration(minutes(t, "max_work_lost", 30))
		if rapid.Bool().Draw(t, "unbounded_work_lost") {
			// No bound on work lost still never lets idle reclaim drain
			// YARN GPU containers: the RM kills them at a finite timeout.
			p.MaxWorkLost = Duration(100 * time.Hour)
		}
		p.YARNDrainByAttrition = rapid.Bool().Draw(t, "attrition")
		p.CordonAndWait = rapid.Bool().Draw(t, "cordon_and_wait")
		checkConsolidation(t, newView(s), p, MakePlan(s, p))
	})
}

// TestPropIdleReclaimNeverDrainsBusyYARNNodes: with every node on YARN
// and no bound on the work consolidation may lose, idle reclaim still
// never drains a YARN node running any container (GPU or CPU, an
// ApplicationMaster of 0 GPUs too) with a finite timeout (the RM kills
// them when it runs out), whatever their checkpoint ages.
func TestPropIdleReclaimNeverDrainsBusyYARNNodes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, p := genCase(t, modeReclaim)
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if n.Owner == OwnerK8s {
				n.Owner = OwnerYARN
			}
			if n.Owner == OwnerYARN {
				for j := range n.Work {
					n.Work[j].Source = SourceYARN
				}
			}
		}
		p.MaxWorkLost = Duration(100 * time.Hour)
		p.YARNDrainByAttrition = false
		checkConsolidation(t, newView(s), p, MakePlan(s, p))
	})
}

// checkConsolidation: idle reclaim (scale-down, and transfers of nodes
// with work) never drains a node with a bare pod, work marked
// do-not-disrupt, any YARN container, or work that would lose more than
// MaxWorkLost; such a node leaves only by attrition, which the policy of
// its side must allow.
func checkConsolidation(t fataler, v *view, p Policy, plan Plan) {
	t.Helper()
	for _, a := range plan.Actions {
		if a.Kind != ActScaleDown && a.Kind != ActTransfer {
			continue
		}
		n := v.nodes[a.Node]
		if n == nil {
			t.Fatalf("%s of unknown node %s", a.Kind, a.Node)
		}
		side, _ := n.Owner.Side()
		if a.Attrition {
			if a.Kind != ActScaleDown || (side == SourceYARN && !p.YARNDrainByAttrition) || (side == SourceK8s && !p.CordonAndWait) {
				t.Fatalf("%s of node %s by attrition, which the policy does not allow for %s", a.Kind, n.Name, side)
			}
			continue
		}
		var lost time.Duration
		for i := range n.Work {
			w := &n.Work[i]
			if w.System {
				continue
			}
			c := w.Cost(t0)
			switch {
			case c.Never != "":
				t.Fatalf("%s of node %s drains %s: %s", a.Kind, n.Name, w.Key, c.Never)
			case side == SourceYARN:
				// Every YARN container counts: a CPU executor or a 0-GPU
				// ApplicationMaster dies at a finite timeout as surely.
				t.Fatalf("%s of YARN node %s drains container %s (%d GPUs, AM %v)", a.Kind, n.Name, w.Key, w.GPUs, w.AM)
			}
			lost = addLost(lost, c.Lost)
		}
		if lost > p.MaxWorkLost.D() {
			t.Fatalf("%s of node %s loses %s of work, more than %s", a.Kind, n.Name, lost, p.MaxWorkLost)
		}
	}
}

// TestPropNeverBuysTwiceForOneDemand: demand that an open scale-up serves
// is served by no scale-up of another pool in the plan (mayBuyIn): one
// demand is never served by two open scale-ups (the executor supersedes a
// pool's open scale-up with the new one, so growing the same pool is one).
// The generated snapshot gets an open scale-up, awaiting its nodes, that
// serves every demand, in a pool without one (the store's rule).
func TestPropNeverBuysTwiceForOneDemand(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, p := genCase(t)
		if len(s.Demand) > 0 && len(s.Pools) > 0 {
			ps := rapid.SampledFrom(s.Pools).Draw(t, "order_pool")
			free := true
			for _, op := range s.InFlight {
				free = free && !(op.Kind == ActScaleUp && !op.State.Terminal() && op.Pool == ps.Pool.Name)
			}
			if free {
				order := Op{ID: 99, Kind: ActScaleUp, State: OpRunning, Step: StepAwaitReady, Pool: ps.Pool.Name, Target: ps.Desired}
				for _, d := range s.Demand {
					order.Serves = append(order.Serves, d.ID())
				}
				s.InFlight = append(s.InFlight, order)
			}
		}
		checkBuysOnce(t, newView(s), p, MakePlan(s, p))
	})
}

func checkBuysOnce(t fataler, v *view, _ Policy, plan Plan) {
	t.Helper()
	open := map[string]map[string]bool{} // demand -> pools of open scale-ups serving it
	for _, op := range v.s.InFlight {
		if op.Kind != ActScaleUp || op.State.Terminal() || v.pools[op.Pool] == nil {
			continue
		}
		for _, id := range op.Serves {
			if open[id] == nil {
				open[id] = map[string]bool{}
			}
			open[id][op.Pool] = true
		}
	}
	for _, a := range plan.Actions {
		if a.Kind != ActScaleUp {
			continue
		}
		for _, id := range a.Serves {
			if pools := open[id]; len(pools) > 0 && !pools[a.Pool] {
				t.Fatalf("scale-up of %s serves %s, which an open scale-up of %v serves: %+v", a.Pool, id, pools, a)
			}
		}
	}
}
