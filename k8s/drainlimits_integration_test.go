package k8s

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// TestReleaseComparesLivePodsWithPlan: on the real API server, a drain
// given the plan's pods stops at a pod bound to the node that the plan did
// not see, evicting nothing; both pods keep running. The same drain of
// exactly the planned pods evicts them.
func TestReleaseComparesLivePodsWithPlan(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "plan-drain")
	a, err := NewActuator(env.Client, integrationConfig, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSide(env.Client, nil, a, 5*time.Second)
	// Other tests share the control plane: their pods must not land here.
	t.Cleanup(func() {
		env.Client.CoreV1().Nodes().Delete(context.Background(), "plan-drain-1", metav1.DeleteOptions{})
	})
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: "plan-drain-1", GPUs: 4, Model: "NVIDIA-A100-SXM4-80GB", Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
		t.Fatal(err)
	}
	planned, err := env.Client.CoreV1().Pods("plan-drain").Create(ctx, readyPod("plan-drain", "planned", "plan-drain-1", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("plan-drain").Create(ctx, readyPod("plan-drain", "late", "plan-drain-1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := s.ReleasePlanned(ctx, "plan-drain-1", time.Now().Add(time.Minute), []string{"k8s/" + string(planned.UID)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Drained || !slices.Equal(st.Unplanned, []string{"plan-drain/late"}) {
		t.Fatalf("release = %+v, want not drained, plan-drain/late unplanned", st)
	}
	for _, name := range []string{"planned", "late"} {
		p, err := env.Client.CoreV1().Pods("plan-drain").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("pod %s after the stopped drain: %v, deleting %v; want it untouched", name, err, p != nil && p.DeletionTimestamp != nil)
		}
	}
	late, err := env.Client.CoreV1().Pods("plan-drain").Get(ctx, "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the planned pods to be evicted", func() (bool, error) {
		st, err := s.ReleasePlanned(ctx, "plan-drain-1", time.Now().Add(time.Minute), []string{"k8s/" + string(planned.UID), "k8s/" + string(late.UID)})
		return st.Drained && len(st.Unplanned) == 0, err
	})
}

// TestObserverReadsWhatAnEvictionCosts: on the real API server, the
// observer marks a running Job pod whose Job has backoffLimit 0 as Fatal
// (its Job's start as FatalSince), a pod on a local PersistentVolume as
// Fatal, a pod with an emptyDir as keeping local storage, and attaches the
// budget that selects a pod.
func TestObserverReadsWhatAnEvictionCosts(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(t, ctx, env, "evict-cost")
	o := startObserver(t, ctx, env)
	// Other tests share the control plane: their pods must not land here.
	t.Cleanup(func() {
		env.Client.CoreV1().Nodes().Delete(context.Background(), "evict-cost-1", metav1.DeleteOptions{})
	})
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: "evict-cost-1", GPUs: 4, Model: "NVIDIA-A100-SXM4-80GB", Labels: map[string]string{"infra-type": "gpu"}}); err != nil {
		t.Fatal(err)
	}
	gpu := corev1.ResourceList{ResourceGPU: resource.MustParse("1")}
	container := []corev1.Container{{Name: "c", Image: "example.com/train:1", Resources: corev1.ResourceRequirements{Limits: gpu}}}
	// A Job with backoffLimit 0 whose pod stays running (KWOK).
	zero := int32(0)
	if _, err := env.Client.BatchV1().Jobs("evict-cost").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "evict-cost"},
		Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k8senv.KeepRunningAnnotation: "true"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{"kubernetes.io/hostname": "evict-cost-1"},
				Containers: container}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A local PersistentVolume bound to a claim, and a pod on it.
	fs := corev1.PersistentVolumeFilesystem
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "evict-cost-local"},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &fs, StorageClassName: "local",
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disk"}},
			ClaimRef:               &corev1.ObjectReference{Namespace: "evict-cost", Name: "data"},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"evict-cost-1"}}}}}}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := "local"
	if _, err := env.Client.CoreV1().PersistentVolumeClaims("evict-cost").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "evict-cost"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &local, VolumeName: "evict-cost-local",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	db := readyPod("evict-cost", "db-0", "evict-cost-1", nil)
	db.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	if _, err := env.Client.CoreV1().Pods("evict-cost").Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scratch := readyPod("evict-cost", "scratch", "evict-cost-1", map[string]string{"app": "scratch"})
	scratch.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := env.Client.CoreV1().Pods("evict-cost").Create(ctx, scratch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets("evict-cost").Create(ctx, pdb("evict-cost", "scratch", map[string]string{"app": "scratch"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var work map[string]broker.Workload
	waitFor(t, ctx, "the three pods running with the Job started and the budget observed", func() (bool, error) {
		obs, err := o.Observe(ctx)
		n, _ := findNode(obs, "evict-cost-1")
		work = map[string]broker.Workload{}
		for _, w := range n.Work {
			name := w.Name[strings.IndexByte(w.Name, '/')+1:]
			if strings.HasPrefix(name, "train-") {
				name = "train"
			}
			work[name] = w
		}
		return len(work) == 3 && !work["train"].FatalSince.IsZero() && len(work["scratch"].Budgets) == 1, err
	})
	if w := work["train"]; !strings.Contains(w.Fatal, "backoffLimit 0") {
		t.Errorf("Job pod: Fatal %q, want its backoffLimit 0 named", w.Fatal)
	}
	if w := work["db-0"]; !strings.Contains(w.Fatal, "PersistentVolume evict-cost-local") {
		t.Errorf("pod on a local volume: Fatal %q, want the volume named", w.Fatal)
	}
	if w := work["scratch"]; !strings.Contains(w.LocalStorage, "emptyDir tmp") || w.Fatal != "" || w.Budgets[0].Name != "evict-cost/scratch" {
		t.Errorf("pod with scratch: local storage %q, fatal %q, budgets %+v", w.LocalStorage, w.Fatal, w.Budgets)
	}
}

// pdb is a budget of minAvailable 1 over the pods with labels.
func pdb(ns, name string, labels map[string]string) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
}
