package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

// variedCluster is a small cluster with every kind of pod Observe derives
// something from: pending pods with constraints, gates, other schedulers,
// nominations, MIG requests; running pods with controllers, annotations,
// DaemonSet owners, finished pods; pods on non-GPU nodes; PDBs. Every pod
// has a resourceVersion, as the API server gives it, so the observer's
// per-pod caches are used.
func variedCluster(now time.Time) []runtime.Object {
	yes := true
	never := corev1.PreemptNever
	ckpt := now.Add(-90 * time.Minute).Format(time.RFC3339)
	objs := []runtime.Object{
		gpuNode("n-b", 8, "H100", func(n *corev1.Node) { n.Spec.ProviderID = "aws:///us-east-1a/i-0b" }),
		gpuNode("n-a", 4, "A100", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
		}),
		gpuNode("n-c", 8, "H100", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		gpuNode("n-empty", 0, "H100"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1", UID: "uid-cpu-1"}},
	}
	pend := []*corev1.Pod{
		gpuPod("ml", "p-sel", 2, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{DefaultGPUModelLabel: "H100", "zone": "a"}
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
			p.Annotations = map[string]string{PreemptibleAnnotation: "True"}
		}),
		gpuPod("ml", "p-aff", 1, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"H100", "A100"}}}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"B200"}}},
						MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n-b"}}}},
				},
			}}}
			p.Spec.PreemptionPolicy = &never
		}),
		gpuPod("ml-x", "p-dash", 4, withPriority(2000)),
		gpuPod("ml", "p-gated", 1, func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "a"}, {Name: "b"}}
		}),
		gpuPod("ml", "p-volcano", 1, func(p *corev1.Pod) { p.Spec.SchedulerName = "volcano" }),
		gpuPod("ml", "p-nominated", 1, func(p *corev1.Pod) { p.Status.NominatedNodeName = "n-b" }),
		gpuPod("ml", "p-undecided", 1, func(p *corev1.Pod) { p.Status.Conditions = nil }),
		gpuPod("ml", "p-class", 1, func(p *corev1.Pod) { p.Spec.Priority = nil; p.Spec.PriorityClassName = "nope" }),
		gpuPod("ml", "p-mig", 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("2")}
		}),
		gpuPod("unmapped", "p-1", 1),
		gpuPod("ml", "p-zero", 0), // not a GPU pod
	}
	run := []*corev1.Pod{
		gpuPod("ml", "r-job", 2, onNode("n-b", corev1.PodRunning), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "train", Controller: &yes}}
			p.Annotations = map[string]string{LastCheckpointAnnotation: ckpt, CheckpointDirAnnotation: "hdfs://nn/ckpt"}
			p.Labels = map[string]string{"app": "train"}
			p.Status.StartTime = &metav1.Time{Time: now.Add(-3 * time.Hour)}
		}),
		gpuPod("ml", "r-svc", 1, onNode("n-b", corev1.PodRunning), withPriority(500), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", Controller: &yes}}
			p.Annotations = map[string]string{SafeToEvictAnnotation: "false", TrainingAnnotation: "true"}
			p.Labels = map[string]string{"app": "web"}
		}),
		gpuPod("ml", "a-bare", 1, onNode("n-b", corev1.PodRunning), func(p *corev1.Pod) {
			p.Annotations = map[string]string{DoNotDisruptAnnotation: "yes"}
			p.Labels = map[string]string{"app": "web"}
		}),
		gpuPod("kube-system", "dp", 0, onNode("n-b", corev1.PodRunning), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "nvidia", Controller: &yes}}
		}),
		gpuPod("ml", "r-done", 2, onNode("n-a", corev1.PodSucceeded)),
		gpuPod("ml", "r-cordoned", 1, onNode("n-c", corev1.PodRunning), func(p *corev1.Pod) {
			p.Annotations = map[string]string{KarpenterDoNotDisruptAnnotation: "true"}
		}),
		gpuPod("ml-x", "r-cpu", 0, onNode("cpu-1", corev1.PodRunning), func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "web"}
		}),
	}
	for i, p := range append(pend, run...) {
		p.ResourceVersion = fmt.Sprint(i + 1)
		p.CreationTimestamp = metav1.Time{Time: now.Add(-time.Duration(i) * time.Minute).Truncate(time.Second)}
		objs = append(objs, p)
	}
	one := intstr.FromInt32(1)
	objs = append(objs,
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "all"},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "none"}},
	)
	return objs
}

// observeFresh observes objs with an observer whose caches are empty.
func observeFresh(t *testing.T, ctx context.Context, objs []runtime.Object, now time.Time) Observation {
	t.Helper()
	return observeOnce(t, ctx, fake.NewClientset(objs...), Config{}, func() time.Time { return now })
}

// observeOnce starts an observer with cfg over client (its clock now,
// when set) and returns its first observation.
func observeOnce(t *testing.T, ctx context.Context, client *fake.Clientset, cfg Config, now func() time.Time) Observation {
	t.Helper()
	o, err := NewObserver(client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		o.now = now
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	obs, err := o.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// TestObserveCachedEqualsFresh: what Observe derives from a pod is cached
// by UID and resourceVersion. An observer that has seen the cluster before,
// and then sees pods change (a new resourceVersion each time, as the API
// server gives it), returns exactly what an observer seeing the changed
// cluster for the first time returns: no cached constraint, name, class or
// annotation outlives the version it was derived from.
func TestObserveCachedEqualsFresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	objs := variedCluster(now)
	client := fake.NewClientset(objs...)
	o, err := NewObserver(client, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.now = func() time.Time { return now }
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := o.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Demand) != 6 || len(first.Pods) != 10 || len(first.Nodes) != 4 || len(first.PDBs) != 3 {
		t.Fatalf("observed %d demand, %d pods, %d nodes, %d PDBs; want 6, 10, 4, 3", len(first.Demand), len(first.Pods), len(first.Nodes), len(first.PDBs))
	}
	if diff := cmp.Diff(observeFresh(t, ctx, objs, now), first); diff != "" {
		t.Fatalf("first observation differs from a fresh observer's (-fresh +cached):\n%s", diff)
	}

	// Change what every cached derivation depends on, each with a new
	// resourceVersion, and delete one pod.
	mutate := func(ns, name string, f func(*corev1.Pod)) {
		t.Helper()
		for i, obj := range objs {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Namespace != ns || p.Name != name {
				continue
			}
			p = p.DeepCopy()
			f(p)
			p.ResourceVersion += "0"
			objs[i] = p
			if _, err := client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("no pod %s/%s", ns, name)
	}
	mutate("ml", "p-sel", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{DefaultGPUModelLabel: "A100"}
		p.Spec.Tolerations = nil
		p.Annotations = nil
	})
	mutate("ml", "p-aff", func(p *corev1.Pod) {
		p.Spec.Affinity = nil
		p.Spec.Containers[0].Resources.Limits[ResourceGPU] = resource.MustParse("3")
	})
	mutate("ml", "p-gated", func(p *corev1.Pod) { p.Spec.SchedulingGates = nil })
	mutate("ml", "r-job", func(p *corev1.Pod) {
		p.Annotations[LastCheckpointAnnotation] = now.Add(-5 * time.Minute).Format(time.RFC3339)
		p.OwnerReferences[0].Kind = "StatefulSet"
		p.Labels["app"] = "web"
	})
	mutate("ml", "r-svc", func(p *corev1.Pod) { p.Annotations = nil; p.Status.Phase = corev1.PodFailed })
	mutate("ml", "a-bare", func(p *corev1.Pod) { p.Spec.NodeName = "n-a" })
	mutate("ml", "p-undecided", func(p *corev1.Pod) { onNode("n-c", corev1.PodRunning)(p) })
	for i, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && p.Name == "p-dash" {
			if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			objs = append(objs[:i], objs[i+1:]...)
			break
		}
	}
	want := observeFresh(t, ctx, objs, now)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := o.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		diff := cmp.Diff(want, got)
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the updates, the cached observer differs from a fresh one (-fresh +cached):\n%s", diff)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// MapTenants maps a copy and leaves the observation as it was; the
	// side's own mapping of an observation it owns gives the same answer.
	idx := broker.NewTenantIndex([]broker.Tenant{{Name: "research", Namespaces: []string{"ml", "ml-x", "kube-system"}}})
	before := observeFresh(t, ctx, objs, now)
	mapped := MapTenants(before, idx)
	if diff := cmp.Diff(want, before); diff != "" {
		t.Fatalf("MapTenants modified its input (-before +after):\n%s", diff)
	}
	inPlace := observeFresh(t, ctx, objs, now)
	mapTenantsOwned(&inPlace, idx)
	if diff := cmp.Diff(mapped, inPlace); diff != "" {
		t.Fatalf("mapping in place differs from MapTenants (-copy +in place):\n%s", diff)
	}
}
