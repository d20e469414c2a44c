package broker

import (
	"slices"
	"testing"
	"time"
)

// TestMergeKeepsKubernetesLabelsOfYARNNode: a node YARN owns, which
// Kubernetes lists as released (cordoned), keeps the Kubernetes Node's
// labels, taints and GPU model in the merged view, so that Kubernetes
// demand with a node selector can be matched against it for a hand-over or
// a preemption across sides. Without them no pod with a nodeSelector could
// ever take a YARN node.
func TestMergeKeepsKubernetesLabelsOfYARNNode(t *testing.T) {
	labels := map[string]string{"infra-type": "gpu"}
	taints := []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}, {Key: TaintUnschedulable, Effect: "NoSchedule"}}
	y := Node{Name: "n1", Owner: OwnerYARN, Phase: PhaseActive, GPUsTotal: 4, GPUsAllocated: 4,
		Work: []Workload{{Source: SourceYARN, Key: "c1", GPUs: 4, Preemptible: true}}}
	k := Node{Name: "n1", Owner: OwnerNone, Phase: PhaseDrained, GPUsTotal: 4, GPUModel: "A100", Labels: labels, Taints: taints}
	nodes := mergeNodes(MergeInput{Now: time.Now(), Sides: map[Source]SideObservation{
		SourceYARN: {Source: SourceYARN, Nodes: []Node{y}},
		SourceK8s:  {Source: SourceK8s, Nodes: []Node{k}},
	}})
	if len(nodes) != 1 {
		t.Fatalf("merged %d nodes, want 1", len(nodes))
	}
	n := nodes[0]
	if n.Owner != OwnerYARN || len(n.Work) != 1 {
		t.Fatalf("merged node owner %s work %+v, want YARN's view", n.Owner, n.Work)
	}
	if n.Labels["infra-type"] != "gpu" || !slices.Equal(n.Taints, taints) || n.GPUModel != "A100" {
		t.Fatalf("merged node labels %v taints %v model %q, want the Kubernetes Node's", n.Labels, n.Taints, n.GPUModel)
	}
	c := Constraints{NodeSelector: labels, Tolerations: []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}}
	if !c.matches(SourceK8s, target{labels: n.Labels, taints: n.Taints, model: n.GPUModel}) {
		t.Fatal("a pod selecting infra-type=gpu does not match the YARN node")
	}
}

// TestMergeKeepsTheCapacityOfANodeLeavingASide: a machine of a shared pool
// is a Kubernetes Node and an excluded NodeManager (YARN's placeholder: no
// owner, no GPUs). An op taking it from Kubernetes cordons it, so neither
// side owns it. The merged node keeps the Kubernetes view, its 4 GPUs and
// the pod still running, not the placeholder's none: otherwise the planner
// sees no room on it and can never give it back to pending demand that
// fits (found on the real control plane: a migration never yielded).
func TestMergeKeepsTheCapacityOfANodeLeavingASide(t *testing.T) {
	y := Node{Name: "n1", Owner: OwnerNone, Phase: PhaseDrained}
	k := Node{Name: "n1", Owner: OwnerNone, Phase: PhaseDraining, GPUsTotal: 4, GPUsAllocated: 1, GPUModel: "A100",
		Work: []Workload{{Source: SourceK8s, Key: "ml/p", GPUs: 1}}}
	nodes := mergeNodes(MergeInput{Now: time.Now(), Policy: DefaultPolicy(), Sides: map[Source]SideObservation{
		SourceYARN: {Source: SourceYARN, Nodes: []Node{y}},
		SourceK8s:  {Source: SourceK8s, Nodes: []Node{k}},
	}})
	if len(nodes) != 1 {
		t.Fatalf("merged %d nodes, want 1", len(nodes))
	}
	n := nodes[0]
	if n.GPUsTotal != 4 || n.GPUsAllocated != 1 || n.FreeGPUs() != 3 || n.Phase != PhaseDraining || len(n.Work) != 1 {
		t.Fatalf("merged node %d of %d GPUs allocated (%d free), phase %s, work %+v: want the Kubernetes view, 1 of 4, draining, its pod",
			n.GPUsAllocated, n.GPUsTotal, n.FreeGPUs(), n.Phase, n.Work)
	}
}
