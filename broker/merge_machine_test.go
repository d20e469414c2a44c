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
