package k8s

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
)

func testClassifier(cfg Config) *classifier {
	cfg = cfg.Defaults()
	classes := map[string]int64{"high-priority-training": 1000000}
	return &classifier{cfg: &cfg, classes: func(name string) (int64, bool) {
		v, ok := classes[name]
		return v, ok
	}}
}

func TestClassify(t *testing.T) {
	c := testClassifier(Config{NamespaceTenants: map[string]string{"ml": "research"}})
	now := metav1.Now()
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantCounted bool
		wantReason  string
	}{
		{"unschedulable counts", gpuPod("ml", "a", 2), true, ReasonUnschedulable},
		{"gated", gpuPod("ml", "a", 2, func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
			p.Status.Conditions[0].Reason = corev1.PodReasonSchedulingGated
		}), false, ReasonGated},
		{"nominated", gpuPod("ml", "a", 2, func(p *corev1.Pod) { p.Status.NominatedNodeName = "n1" }), false, ReasonNominated},
		{"other scheduler", gpuPod("ml", "a", 2, func(p *corev1.Pod) { p.Spec.SchedulerName = "volcano" }), false, ReasonOtherScheduler},
		{"no tenant", gpuPod("unmapped", "a", 2), false, ReasonNoTenant},
		{"not yet unschedulable", gpuPod("ml", "a", 2, func(p *corev1.Pod) { p.Status.Conditions = nil }), false, ReasonNotYetDecided},
		{"scheduler error is not unschedulable", gpuPod("ml", "a", 2, func(p *corev1.Pod) { p.Status.Conditions[0].Reason = "SchedulerError" }), false, ReasonNotYetDecided},
		{"terminating", gpuPod("ml", "a", 2, func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false, ReasonTerminating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, ok := pendingGPUPod(tt.pod)
			if !ok {
				t.Fatal("pendingGPUPod = false for a pending GPU pod")
			}
			r := c.classify(tt.pod, req)
			if r.Counted != tt.wantCounted || r.Reason != tt.wantReason {
				t.Errorf("classify = counted %v reason %q (%s), want %v %q", r.Counted, r.Reason, r.Detail, tt.wantCounted, tt.wantReason)
			}
		})
	}
}

func TestPendingGPUPodFilters(t *testing.T) {
	if _, ok := pendingGPUPod(gpuPod("ml", "a", 2, onNode("n1", corev1.PodRunning))); ok {
		t.Error("a bound running pod is not pending")
	}
	if _, ok := pendingGPUPod(gpuPod("ml", "a", 0)); ok {
		t.Error("a pod without GPUs is not a pending GPU pod")
	}
}

func TestNamespaceIsTenant(t *testing.T) {
	c := testClassifier(Config{NamespaceIsTenant: true, NamespaceTenants: map[string]string{"ml": "research"}})
	for ns, want := range map[string]string{"ml": "research", "team-a": "team-a"} {
		p := gpuPod(ns, "a", 1)
		req, _ := pendingGPUPod(p)
		if r := c.classify(p, req); !r.Counted || r.Tenant != want {
			t.Errorf("namespace %s: counted %v tenant %q, want tenant %q", ns, r.Counted, r.Tenant, want)
		}
	}
}

// The reference scenario's training Job pod.
func referencePod() *corev1.Pod {
	return gpuPod("ml", "elastic-gpu-training-x7k2p", 2, func(p *corev1.Pod) {
		p.Spec.Priority = nil
		p.Spec.PriorityClassName = "high-priority-training"
		p.Spec.NodeSelector = map[string]string{"infra-type": "gpu"}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"}}},
			}}},
		}}
		p.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	})
}

func TestDemandFromReferencePod(t *testing.T) {
	c := testClassifier(Config{NamespaceTenants: map[string]string{"ml": "research"}})
	p := referencePod()
	req, _ := pendingGPUPod(p)
	r := c.classify(p, req)
	now := time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	got := c.demand(p, r, now)
	want := broker.Demand{
		Source: broker.SourceK8s, Key: "uid-ml-elastic-gpu-training-x7k2p", Name: "ml/elastic-gpu-training-x7k2p",
		Tenant: "research", Queue: "ml", Priority: 1000000, GPUsPerUnit: 2, Units: 1,
		Constraints: broker.Constraints{
			GPUModels:    []string{"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"},
			NodeSelector: map[string]string{"infra-type": "gpu"},
			Affinity: []broker.AffinityTerm{{Requirements: []broker.LabelRequirement{{
				Key: DefaultGPUModelLabel, Operator: "In", Values: []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"},
			}}}},
			Tolerations: []broker.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		},
		Preemptible:     true,
		SchedulerReason: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
		LastSeen:        now,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestPreemptible(t *testing.T) {
	c := testClassifier(Config{NonPreemptiblePriority: 2000})
	for _, tt := range []struct {
		prio  int64
		annot string
		want  bool
	}{
		{1000, "", true},
		{2000, "", false},
		{1000, "false", false},
		{5000, "true", true},
	} {
		p := gpuPod("ml", "a", 1)
		if tt.annot != "" {
			p.Annotations = map[string]string{PreemptibleAnnotation: tt.annot}
		}
		if got := c.preemptible(p, tt.prio); got != tt.want {
			t.Errorf("preemptible(priority %d, annotation %q) = %v, want %v", tt.prio, tt.annot, got, tt.want)
		}
	}
}

func TestBuildNode(t *testing.T) {
	c := testClassifier(Config{NamespaceTenants: map[string]string{"ml": "research"}, GPUNodeLabels: map[string]string{"infra-type": "gpu"}})
	ds := true
	daemon := gpuPod("kube-system", "dcgm", 0, onNode("n1", corev1.PodRunning), func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: &ds}}
	})
	work := gpuPod("ml", "train", 2, onNode("n1", corev1.PodRunning))
	done := gpuPod("ml", "old", 2, onNode("n1", corev1.PodSucceeded))

	n, d := c.buildNode(gpuNode("n1", 4, "H100"), []*corev1.Pod{daemon, work, done})
	if n.Phase != broker.PhaseActive || n.GPUsTotal != 4 || n.GPUsAllocated != 2 || n.GPUModel != "H100" || n.Owner != broker.OwnerK8s {
		t.Errorf("active node = phase %s total %d allocated %d model %q owner %s", n.Phase, n.GPUsTotal, n.GPUsAllocated, n.GPUModel, n.Owner)
	}
	if len(n.Work) != 2 || !n.Work[0].System || n.Work[1].System || n.Work[1].Tenant != "research" {
		t.Errorf("work = %+v, want the DaemonSet pod (system) and the training pod", n.Work)
	}
	if !d.Ready || !d.GPUsAdvertised {
		t.Errorf("detail = %+v", d)
	}

	// A new node whose device plugin has not reported is in flight.
	n, d = c.buildNode(gpuNode("n2", 0, "H100"), nil)
	if n.Phase != broker.PhaseRegistered || d.Reason != NodeGPUNotAdvertised || !c.cfg.isGPUNode(gpuNode("n2", 0, "")) {
		t.Errorf("unadvertised node = phase %s reason %q", n.Phase, d.Reason)
	}

	cordoned := gpuNode("n3", 4, "H100", func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = []corev1.Taint{{Key: OwnerTaintKey, Value: "yarn", Effect: corev1.TaintEffectNoSchedule}}
	})
	if n, _ := c.buildNode(cordoned, []*corev1.Pod{work}); n.Phase != broker.PhaseDraining || n.Owner != broker.OwnerYARN {
		t.Errorf("cordoned busy node = phase %s owner %s, want draining yarn", n.Phase, n.Owner)
	}
	if n, _ := c.buildNode(cordoned, []*corev1.Pod{daemon}); n.Phase != broker.PhaseDrained {
		t.Errorf("cordoned node with only system pods = phase %s, want drained", n.Phase)
	}
	notReady := gpuNode("n4", 4, "", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse })
	if n, d := c.buildNode(notReady, nil); n.Phase != broker.PhaseRegistered || d.Reason != NodeNotReady {
		t.Errorf("not ready node = phase %s reason %q", n.Phase, d.Reason)
	}
	cpu := gpuNode("cpu", 0, "")
	cpu.Labels = map[string]string{"infra-type": "cpu"}
	if c.cfg.isGPUNode(cpu) {
		t.Error("a CPU node without GPU labels is not a GPU node")
	}
}
