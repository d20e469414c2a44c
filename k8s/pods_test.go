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
	c := testClassifier(Config{})
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
		{"any namespace counts (tenants are MapTenants's)", gpuPod("unmapped", "a", 2), true, ReasonUnschedulable},
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

// TestMapTenants: tenants come only from the broker's tenant index. A pod
// of a mapped namespace is demand of its tenant; one of a namespace no
// tenant claims (even one named like a tenant) is not demand and waits as
// unmapped; running pods are charged to their namespace's tenant or none;
// the observation given is not modified.
func TestMapTenants(t *testing.T) {
	c := testClassifier(Config{GPUNodeLabels: map[string]string{"infra-type": "gpu"}})
	at := time.Unix(1000, 0)
	var o Observation
	for _, p := range []*corev1.Pod{gpuPod("ml", "a", 1), gpuPod("team-a", "b", 2), gpuPod("research", "c", 1)} {
		req, _ := pendingGPUPod(p)
		r := c.classify(p, req)
		if !r.Counted || r.Tenant != "" {
			t.Fatalf("observer's report of %s/%s = %+v, want counted and no tenant", p.Namespace, p.Name, r)
		}
		o.Pods = append(o.Pods, r)
		o.Demand = append(o.Demand, c.demand(p, r, at))
	}
	n, _ := c.buildNode(gpuNode("n1", 4, "H100"), []*corev1.Pod{
		gpuPod("ml", "run", 1, onNode("n1", corev1.PodRunning)), gpuPod("team-a", "run", 1, onNode("n1", corev1.PodRunning))})
	o.Nodes = []broker.Node{n}
	idx := broker.NewTenantIndex([]broker.Tenant{{Name: "research", Namespaces: []string{"ml"}}})

	got := MapTenants(o, idx)
	if len(got.Demand) != 1 || got.Demand[0].Name != "ml/a" || got.Demand[0].Tenant != "research" {
		t.Errorf("demand = %+v, want ml/a of research only", got.Demand)
	}
	for _, p := range got.Pods {
		want := ReasonNoTenant
		if p.Namespace == "ml" {
			want = ReasonUnschedulable
		}
		if p.Reason != want || p.Counted != (want == ReasonUnschedulable) {
			t.Errorf("pod %s/%s = counted %v reason %q, want reason %q", p.Namespace, p.Name, p.Counted, p.Reason, want)
		}
		if p.Namespace == "ml" && p.Tenant != "research" || p.Namespace != "ml" && p.Tenant != "" {
			t.Errorf("pod %s/%s tenant %q", p.Namespace, p.Name, p.Tenant)
		}
	}
	if w := got.Nodes[0].Work; len(w) != 2 || w[0].Tenant != "research" || w[1].Tenant != "" {
		t.Errorf("work = %+v, want ml/run charged to research, team-a/run to none", w)
	}
	if o.Demand[0].Tenant != "" || !o.Pods[1].Counted || o.Nodes[0].Work[0].Tenant != "" {
		t.Error("MapTenants modified the observation it was given")
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
	c := testClassifier(Config{})
	p := referencePod()
	req, _ := pendingGPUPod(p)
	r := c.classify(p, req)
	now := time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	got := MapTenants(Observation{Demand: []broker.Demand{c.demand(p, r, now)}},
		broker.NewTenantIndex([]broker.Tenant{{Name: "research", Namespaces: []string{"ml"}}})).Demand[0]
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
	c := testClassifier(Config{GPUNodeLabels: map[string]string{"infra-type": "gpu"}})
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
	if len(n.Work) != 2 || !n.Work[0].System || n.Work[1].System || n.Work[1].Tenant != "" {
		t.Errorf("work = %+v, want the DaemonSet pod (system) and the training pod, no tenant (MapTenants charges it)", n.Work)
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
