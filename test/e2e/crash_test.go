package e2e

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpubroker/gpubroker/broker"
)

// TestCrashMidDrainAndScaleUp kills the broker while it drains a node (a
// PodDisruptionBudget holds the drain) and while a scale-up is journaled
// but not yet carried out. A new broker on the same database finishes
// both: the drained node is terminated once, and the pool is resized once.
func TestCrashMidDrainAndScaleUp(t *testing.T) {
	ensurePriorityClass(t, "high-priority-training", 1000000)
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Second, namespace: "crash", bootDelay: time.Second})
	ctx := w.ctx
	c := kubeEnv.Client

	// A GPU Job brings one node; it completes. A CPU-only pod guarded by
	// a PodDisruptionBudget stays on the node. It is a Deployment's pod:
	// consolidation never evicts a bare pod (nothing would recreate it).
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "warmup", Namespace: w.ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: gpuPodSpec(1, "high-priority-training")}}}
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	if _, err := c.BatchV1().Jobs(w.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the warm-up Job to complete", func() bool {
		j, err := c.BatchV1().Jobs(w.ns).Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && j.Status.Succeeded == 1
	})
	guardedSpec := gpuPodSpec(1, "")
	guardedSpec.Containers[0].Resources = corev1.ResourceRequirements{}
	replicas := int32(1)
	guardedLabels := map[string]string{"app": "guarded"}
	guarded := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: w.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: guardedLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: guardedLabels}, Spec: guardedSpec}}}
	if _, err := c.AppsV1().Deployments(w.ns).Create(ctx, guarded, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var guardedPod, x string
	w.eventually(60*time.Second, "the guarded pod to run", func() bool {
		pods, err := c.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
			return false
		}
		guardedPod, x = pods.Items[0].Name, pods.Items[0].Spec.NodeName
		return true
	})
	// The new demand below selects gpu.vendor=nvidia, a label of the
	// pool's nodes that x no longer has: a node still draining for a
	// scale-down is given back to demand that fits it (the placement
	// ladder's cancel rung), and this test needs the scale-up instead.
	unlabel := []byte(`{"metadata":{"labels":{"gpu.vendor":null}}}`)
	if _, err := c.CoreV1().Nodes().Patch(ctx, x, types.MergePatchType, unlabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The idle node is reclaimed; its drain blocks on a budget that comes
	// once the scale-down is journaled (the planner leaves a node whose
	// budget allows no disruption alone, so it must not be there before),
	// while the fence waits for a fresh observation.
	open := func(kind broker.ActionKind) []broker.Op {
		ops, err := w.st.OpenOps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []broker.Op
		for _, op := range ops {
			if op.Kind == kind {
				out = append(out, op)
			}
		}
		return out
	}
	w.eventually(60*time.Second, "a journaled scale-down", func() bool { return len(open(broker.ActScaleDown)) == 1 })
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guard", Namespace: w.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := c.PolicyV1().PodDisruptionBudgets(w.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "a scale-down stuck in its drain", func() bool {
		ops := open(broker.ActScaleDown)
		return len(ops) == 1 && ops[0].Step == "release" && containsBlocked(ops[0].Data)
	})
	// New demand: a 4-GPU pod. Its scale-up is journaled and waits for the
	// pool's removal to finish before resizing.
	big := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: w.ns}, Spec: gpuPodSpec(4, "high-priority-training")}
	big.Spec.NodeSelector["gpu.vendor"] = "nvidia"
	if _, err := c.CoreV1().Pods(w.ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "a journaled scale-up", func() bool { return len(open(broker.ActScaleUp)) == 1 })
	setBefore := w.aws.Operations("SetDesiredCapacity")

	// Crash. The budget is lifted while no broker runs.
	w.crash()
	if err := c.PolicyV1().PodDisruptionBudgets(w.ns).Delete(ctx, "guard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.start()

	w.eventually(90*time.Second, "the big pod to run on a new node", func() bool {
		p, ok := w.pod("big")
		return ok && p.Spec.NodeName != ""
	})
	if n := w.aws.Operations("TerminateInstanceInAutoScalingGroup"); n != 1 {
		t.Errorf("terminate operations: %d, want 1", n)
	}
	if n := w.aws.Operations("SetDesiredCapacity") - setBefore; n != 1 {
		t.Errorf("SetDesiredCapacity operations after the restart: %d, want exactly 1", n)
	}
	if _, left := w.pod(guardedPod); left {
		t.Error("the guarded pod must have been evicted before the node was terminated")
	}
	// The scale-up stays open until the broker has observed its node
	// gpu-ready (the pod may be scheduled a tick before that), then ends.
	w.eventually(30*time.Second, "the scale-down and scale-up ops to end", func() bool {
		return len(open(broker.ActScaleDown)) == 0 && len(open(broker.ActScaleUp)) == 0
	})
	// One node removed, one bought: not two (a target set before the
	// removal's decrement, or after it but planned as if before).
	g, _ := w.aws.Group(poolName)
	if g.Desired != 1 || len(g.Instances) != 1 {
		t.Errorf("after the restart: desired %d, instances %v; want exactly one node", g.Desired, g.Instances)
	}
}

func containsBlocked(data []byte) bool {
	return strings.Contains(string(data), "blocked_by") || strings.Contains(string(data), "remaining")
}
