package broker

import (
	"fmt"
	"sort"
	"time"
)

// MergeInput is everything observed in one tick, before it becomes a snapshot.
type MergeInput struct {
	Now time.Time
	// Policy has its defaults applied (Policy.WithDefaults): the tick
	// applies them once, where the policy enters.
	Policy  Policy
	Sides   map[Source]SideObservation
	Pools   []PoolState
	Stored  map[string]Node
	Reports map[string]NodeReport
	Ops     []Op
	// ReportMaxAge bounds how long ago (by the server's receive time) an
	// agent report may have arrived to count as fresh.
	ReportMaxAge time.Duration
	// XIDs classifies the XID codes agents report (nil: the defaults).
	XIDs XIDClasses
}

// mergeReport applies node n's latest agent report r. Freshness is judged
// by when the server received the report, never by the agent's "at".
//
// IMPORTANT: one report is never enough to condemn a node. A fault makes it
// unhealthy only when the report before it showed a fault too (two
// consecutive reports), or when the faulty report has stood for the
// unhealthy node timeout with no newer report to contradict it (the agent
// went silent after reporting it). A single report is a transient or a
// false alarm until then, and the node keeps serving.
func mergeReport(n *Node, r NodeReport, in MergeInput) {
	received := r.ReceivedAt
	if received.IsZero() {
		// A ledger that does not stamp receive times (a test fake): the
		// store always does.
		received = r.At
	}
	age := in.Now.Sub(received)
	fresh := in.ReportMaxAge <= 0 || age <= in.ReportMaxAge
	util, class, why := r.Assess(in.XIDs)
	if fresh {
		n.Utilisation = util
	}
	if c, reported := r.MIGDevices(n.MIGProfile); fresh && n.MIGProfile != "" && reported && c < n.GPUsTotal {
		// IMPORTANT: the node advertises MIG devices its GPUs do not hold
		// (the device plugin has not caught up with a new layout): plan on
		// the ones that exist, never on slices a pod could not start on.
		n.GPUsTotal = c
	}
	if n.GPUMemoryMiB == 0 {
		// What NVML says each GPU has, as NVIDIA's DRA driver publishes it:
		// a node whose devices do not say learns it from its agent.
		n.GPUMemoryMiB = r.MinGPUMemoryMiB()
	}
	if class == "" {
		return
	}
	timeout := in.Policy.UnhealthyNodeTimeout.D()
	prevBad := false
	if p := r.Previous; p != nil {
		_, pc, _ := p.Assess(in.XIDs)
		prevBad = pc != ""
	}
	switch {
	case fresh && prevBad:
		n.HealthReason = why + "; confirmed by two consecutive reports"
	case age >= timeout:
		n.HealthReason = fmt.Sprintf("%s; reported %s ago and not contradicted by a newer report, past the unhealthy node timeout of %s",
			why, age.Round(time.Second), timeout)
	default:
		return // a single report: wait for the next one
	}
	n.Healthy, n.NeedsReset = false, class == XIDNeedsReset
}

// ClaimConflict is a node that both sides list as schedulable for
// themselves (a misconfigured bootstrap): Keep stays its owner, Release is
// cordoned, and Reason says why in a sentence.
type ClaimConflict struct {
	Node          string
	Keep, Release Owner
	Reason        string
}

// gpuWork sums the GPUs and counts the non-system workloads on a node.
func gpuWork(n *Node) (gpus, items int) {
	for _, w := range n.Work {
		if !w.System {
			gpus += w.GPUs
			items++
		}
	}
	return gpus, items
}

// resolveClaim decides which side keeps a node both claim: the side with
// running GPU work, then with more running work, then Kubernetes (whose
// device plugin reports allocation per pod).
func resolveClaim(y, k *Node) ClaimConflict {
	yg, yi := gpuWork(y)
	kg, ki := gpuWork(k)
	c := ClaimConflict{Node: y.Name, Keep: OwnerK8s, Release: OwnerYARN}
	if yg > kg || (yg == kg && yi > ki) {
		c.Keep, c.Release = OwnerYARN, OwnerK8s
	}
	c.Reason = fmt.Sprintf("both sides claim node %s (YARN runs %d workloads on %d GPUs, Kubernetes %d on %d): keep it with %s and cordon it on %s",
		y.Name, yi, yg, ki, kg, c.Keep, c.Release)
	return c
}

// fillMachine copies into n what only other's side reports about the
// machine: YARN lists no labels, taints or GPU model, so a node
// YARN owns keeps its Kubernetes Node's, which Kubernetes demand is matched
// against when the node would be handed over (or preempted across sides).
func fillMachine(n, other *Node) {
	if len(n.Labels) == 0 {
		n.Labels = other.Labels
	}
	if len(n.Taints) == 0 {
		n.Taints = other.Taints
	}
	if n.GPUModel == "" {
		n.GPUModel = other.GPUModel
	}
}

// placeholderOf reports whether n, a view no side owns, is only a
// placeholder of the machine sn shows, also owned by no side: n lists no
// GPUs (YARN: an excluded NodeManager) where sn lists the machine's (a
// Kubernetes Node cordoned by an op that is taking it from Kubernetes).
// The merged node keeps sn's view, so a node leaving a side keeps its
// capacity in the plan: an op still draining it may be cancelled for
// demand that fits (the placement ladder's cancel rung).
func placeholderOf(n, sn *Node) bool {
	return n.Owner == OwnerNone && sn.Owner == OwnerNone && n.GPUsTotal == 0 && sn.GPUsTotal > 0
}

// mergeNodes joins the sides' nodes, the pools' instances, what the store
// remembers and the agents' reports into one list of nodes, by name.
//
//lint:ignore U1000 the tests' entry point (h/jobe2e's merge_machine_test.go); drop this line once a caller lands
func mergeNodes(in MergeInput) []Node {
	nodes, _ := MergeNodesClaims(in)
	return nodes
}

// MergeNodesClaims is mergeNodes that also reports nodes both sides claim.
func MergeNodesClaims(in MergeInput) ([]Node, []ClaimConflict) {
	var conflicts []ClaimConflict
	byName := map[string]*Node{}
	var order []string
	get := func(name string) (*Node, bool) {
		n, ok := byName[name]
		if !ok {
			n = &Node{Name: name, Owner: OwnerNone, Utilisation: -1, Healthy: true}
			byName[name] = n
			order = append(order, name)
		}
		return n, ok
	}
	// Sides in a fixed order so the merge is deterministic.
	for _, src := range Sources {
		obs, ok := in.Sides[src]
		if !ok {
			continue
		}
		for _, sn := range obs.Nodes {
			n, existed := get(sn.Name)
			if !existed || (n.Owner == OwnerNone && sn.Owner != OwnerNone) || placeholderOf(n, &sn) {
				prev := *n
				*n = sn
				n.Work = append(append([]Workload(nil), sn.Work...), prev.Work...)
				if n.Utilisation == 0 && !existed {
					n.Utilisation = -1
				}
				n.Healthy = true
				if existed {
					fillMachine(n, &prev)
				}
				continue
			}
			if n.Owner != OwnerNone && sn.Owner != OwnerNone && n.Owner != sn.Owner {
				// IMPORTANT: both sides may schedule on it. Keep one owner
				// by policy (the runtime cordons the other) and every
				// side's work, so nothing is terminated under either.
				c := resolveClaim(n, &sn)
				conflicts = append(conflicts, c)
				if c.Keep == sn.Owner {
					other := *n
					*n = sn
					n.Healthy = other.Healthy
					n.Work = append(append([]Workload(nil), sn.Work...), other.Work...)
					n.GPUsAllocated = max(other.GPUsAllocated, sn.GPUsAllocated)
					fillMachine(n, &other)
					continue
				}
			}
			// The other side also knows the machine: keep the owner's view
			// and add the work still running on this side (a drain in
			// progress), so nothing is terminated under it.
			n.Work = append(n.Work, sn.Work...)
			n.GPUsAllocated = max(n.GPUsAllocated, sn.GPUsAllocated)
			fillMachine(n, &sn)
		}
	}
	// Pool membership comes from the cloud alone: a side may remember a
	// node whose instance is gone (a Kubernetes Node object outlives its
	// machine), and such a node must not count as pool capacity.
	byInstance := map[string]string{}
	for _, name := range order {
		n := byName[name]
		if n.InstanceID != "" {
			byInstance[n.InstanceID] = name
		}
		n.Pool = ""
	}
	// Pool instances: matched by instance id (the side's provider id),
	// then by hostname; unmatched instances are capacity on its way (or
	// machines that never joined).
	for _, ps := range in.Pools {
		for _, inst := range ps.Instances {
			name, ok := byInstance[inst.ID]
			if !ok {
				name = inst.Hostname
			}
			if name == "" {
				name = inst.ID
			}
			n, existed := get(name)
			n.InstanceID, n.Pool = inst.ID, ps.Pool.Name
			if !existed {
				n.Phase = inst.Phase
				if inst.Phase == "" {
					n.Phase = PhaseBooting
				}
				n.PhaseSince = inst.LaunchedAt
				n.GPUModel = ps.Pool.GPUModel
				n.GPUsTotal, n.MIGProfile = ps.Pool.Units(), ps.Pool.MIGProfile
				n.Labels, n.Taints = ps.Pool.Labels, ps.Pool.Taints
			}
			if inst.Phase == PhaseTerminating || inst.Phase == PhaseGone {
				n.Phase = inst.Phase
			}
		}
	}
	draining := map[string]bool{}
	for _, op := range in.Ops {
		if op.Node != "" && !op.State.Terminal() && (op.Kind == ActScaleDown || op.Kind == ActTransfer || op.Kind == ActReplace) {
			draining[op.Node] = true
		}
	}
	sort.Strings(order)
	out := make([]Node, 0, len(order))
	for _, name := range order {
		n := byName[name]
		if st, ok := in.Stored[name]; ok {
			n.Protected = st.Protected
			n.UnderusedSince = st.UnderusedSince
			if st.Phase == n.Phase && !st.PhaseSince.IsZero() {
				n.PhaseSince = st.PhaseSince
			}
		}
		if n.PhaseSince.IsZero() {
			n.PhaseSince = in.Now
		}
		if draining[name] && (n.Phase == PhaseActive || n.Phase == PhaseGPUReady) {
			n.Phase = PhaseDraining
		}
		if r, ok := in.Reports[name]; ok {
			mergeReport(n, r, in)
		}
		// Underused: GPU usage (allocation, or measured utilisation when
		// the policy says so) at or under the threshold. GPU use decides;
		// CPU-only work does not keep a GPU node.
		if n.GPUsTotal > 0 && n.Phase == PhaseActive && in.Policy.Usage(n) <= in.Policy.ScaleDownUtilisation {
			if n.UnderusedSince.IsZero() {
				n.UnderusedSince = in.Now
			}
		} else {
			n.UnderusedSince = time.Time{}
		}
		out = append(out, *n)
	}
	return out, conflicts
}
