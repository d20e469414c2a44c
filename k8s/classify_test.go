package k8s

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
)

func ownedBy(kind, name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: name, UID: types.UID("u-" + name), Controller: &yes})
	}
}

func annotated(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// TestClassifyRunningPods: the class comes from the controller, the
// training annotation makes a pod batch, the three do-not-disrupt
// annotations are honoured, and an annotated checkpoint time gives the age.
func TestClassifyRunningPods(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		opts  []func(*corev1.Pod)
		class broker.WorkClass
		app   string
		dnd   string
		age   time.Duration
	}{
		{"a Job's pod is batch", []func(*corev1.Pod){ownedBy("Job", "train")}, broker.WorkBatch, "Job/ml/train", "", -1},
		{"a ReplicaSet's pod is a service", []func(*corev1.Pod){ownedBy("ReplicaSet", "web-7f")}, broker.WorkService, "ReplicaSet/ml/web-7f", "", -1},
		{"a StatefulSet's pod is a service", []func(*corev1.Pod){ownedBy("StatefulSet", "db")}, broker.WorkService, "StatefulSet/ml/db", "", -1},
		{"a pod without a controller is bare", nil, broker.WorkBare, "", "", -1},
		{"another controller is unknown (costs as batch)", []func(*corev1.Pod){ownedBy("PyTorchJob", "pt")}, "", "PyTorchJob/ml/pt", "", -1},
		{"a bare training pod stays bare", []func(*corev1.Pod){annotated(TrainingAnnotation, "true")}, broker.WorkBare, "", "", -1},
		{"the training annotation makes any controlled pod batch", []func(*corev1.Pod){ownedBy("ReplicaSet", "r"), annotated(TrainingAnnotation, "true")}, broker.WorkBatch, "ReplicaSet/ml/r", "", -1},
		{"safe-to-evict false", []func(*corev1.Pod){ownedBy("ReplicaSet", "r"), annotated(SafeToEvictAnnotation, "false")}, broker.WorkService, "ReplicaSet/ml/r", "cluster-autoscaler.kubernetes.io/safe-to-evict=false", -1},
		{"safe-to-evict true is no opt-out", []func(*corev1.Pod){ownedBy("ReplicaSet", "r"), annotated(SafeToEvictAnnotation, "true")}, broker.WorkService, "ReplicaSet/ml/r", "", -1},
		{"karpenter do-not-disrupt", []func(*corev1.Pod){ownedBy("Job", "j"), annotated(KarpenterDoNotDisruptAnnotation, "true")}, broker.WorkBatch, "Job/ml/j", "karpenter.sh/do-not-disrupt=true", -1},
		{"gpubroker do-not-disrupt", []func(*corev1.Pod){ownedBy("Job", "j"), annotated(DoNotDisruptAnnotation, "")}, broker.WorkBatch, "Job/ml/j", "gpubroker.io/do-not-disrupt", -1},
		{"a checkpoint a minute old", []func(*corev1.Pod){ownedBy("Job", "j"), annotated(LastCheckpointAnnotation, now.Add(-time.Minute).Format(time.RFC3339))}, broker.WorkBatch, "Job/ml/j", "", time.Minute},
		{"an unreadable checkpoint time is unknown", []func(*corev1.Pod){ownedBy("Job", "j"), annotated(LastCheckpointAnnotation, "yesterday")}, broker.WorkBatch, "Job/ml/j", "", -1},
	}
	cfg := Config{}.Defaults()
	c := &classifier{cfg: &cfg, now: func() time.Time { return now }}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]func(*corev1.Pod){onNode("n1", corev1.PodRunning)}, tc.opts...)
			n, _ := c.buildNode(gpuNode("n1", 4, "A100"), []*corev1.Pod{gpuPod("ml", "p", 1, opts...)})
			if len(n.Work) != 1 {
				t.Fatalf("work %+v, want the pod", n.Work)
			}
			w := n.Work[0]
			if w.Class != tc.class || w.App != tc.app || w.DoNotDisrupt != tc.dnd || w.CheckpointAge != tc.age {
				t.Fatalf("class %q app %q do-not-disrupt %q checkpoint age %s; want %q %q %q %s",
					w.Class, w.App, w.DoNotDisrupt, w.CheckpointAge, tc.class, tc.app, tc.dnd, tc.age)
			}
		})
	}
}

// TestRunningPodConstraints: a running pod's workload carries what its
// replacement asks of a node (node selector, with the model label as its
// GPU model, and tolerations), so a migration may land it on another pool
// it matches; a pod with resource claims carries none (unknown: its own
// pool only).
func TestRunningPodConstraints(t *testing.T) {
	cfg := Config{}.Defaults()
	c := &classifier{cfg: &cfg}
	tol := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	pinned := func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{cfg.GPUModelLabel: "A100"}
		p.Spec.Tolerations = []corev1.Toleration{tol}
	}
	n, _ := c.buildNode(gpuNode("n1", 4, "A100"), []*corev1.Pod{gpuPod("ml", "p", 1, onNode("n1", corev1.PodRunning), pinned)})
	if len(n.Work) != 1 || n.Work[0].Constraints == nil {
		t.Fatalf("work %+v, want the pod with its constraints", n.Work)
	}
	cs := n.Work[0].Constraints
	if len(cs.GPUModels) != 1 || cs.GPUModels[0] != "A100" || cs.NodeSelector[cfg.GPUModelLabel] != "A100" || len(cs.Tolerations) != 1 {
		t.Fatalf("constraints %+v, want the A100 node selector and the GPU toleration", cs)
	}
	if !cs.Matches(broker.SourceK8s, map[string]string{cfg.GPUModelLabel: "A100"}, []broker.Taint{{Key: "nvidia.com/gpu", Effect: "NoSchedule"}}, "A100") ||
		cs.Matches(broker.SourceK8s, map[string]string{cfg.GPUModelLabel: "H100"}, nil, "H100") {
		t.Fatalf("constraints %+v should match an A100 node only", cs)
	}
	claimed := func(p *corev1.Pod) {
		tmpl := "one-gpu"
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	}
	n, _ = c.buildNode(gpuNode("n1", 4, "A100"), []*corev1.Pod{gpuPod("ml", "q", 1, onNode("n1", corev1.PodRunning), claimed)})
	if len(n.Work) != 1 || n.Work[0].Constraints != nil {
		t.Fatalf("work %+v, want the claiming pod with unknown constraints", n.Work)
	}
}
