package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// Kubernetes drains that know their limits, on the real control plane:
// the planner never chooses a node whose drain would fail a Job for good,
// throw away local data or wait on a PodDisruptionBudget, and a drain a
// budget holds gives its node back.

// TestConsolidationMovesTheDeploymentNotTheJobAtItsBackoffLimit is the
// reported case: one node runs the pod of a training Job with
// backoffLimit 0 (1 of 4 GPUs, started seconds ago), the other a
// Deployment's pod (2 of 4 GPUs); both are at or under 50%. Evicting the
// Job's pod fails the Job for good, moving the Deployment's pod costs
// nothing: the broker keeps the Job's node, drains the other, and the
// Job never fails.
func TestConsolidationMovesTheDeploymentNotTheJobAtItsBackoffLimit(t *testing.T) {
	w := newWorld(t, worldOptions{maxNodes: 2, unneeded: 3 * time.Second, namespace: "limits-job", bootDelay: time.Second})
	hold := func(name string, gpus int64) string {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: gpuPodSpec(gpus, "")}
		if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var node string
		w.eventually(60*time.Second, "pod "+name+" to run", func() bool {
			p, ok := w.pod(name)
			if ok && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				node = p.Spec.NodeName
				return true
			}
			return false
		})
		return node
	}
	// 3 and 2 GPUs held: the Deployment's 2-GPU pod fits only beside the
	// 2, the Job's 1-GPU pod then only beside the 3.
	jobNode := hold("hold-a", 3)
	svcNode := hold("hold-b", 2)
	if jobNode == svcNode {
		t.Fatalf("both hold pods on node %s", jobNode)
	}
	one := int32(1)
	svcLabels := map[string]string{"app": "svc"}
	if _, err := kubeEnv.Client.AppsV1().Deployments(w.ns).Create(w.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: w.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: svcLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: svcLabels}, Spec: gpuPodSpec(2, "")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the Deployment's pod to run on "+svcNode, func() bool {
		p, ok := w.runningPrefix("svc-")
		return ok && p == svcNode
	})
	jobSpec := gpuPodSpec(1, "")
	jobSpec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Create(w.ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: w.ns},
		Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "work"}, Annotations: map[string]string{k8senv.KeepRunningAnnotation: "true"}},
			Spec:       jobSpec}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var jobPod *corev1.Pod
	w.eventually(60*time.Second, "the Job's pod to run on "+jobNode, func() bool {
		p, ok := w.workPod()
		jobPod = p
		return ok && p.Spec.NodeName == jobNode
	})
	zero := int64(0)
	for _, name := range []string{"hold-a", "hold-b"} {
		if err := kubeEnv.Client.CoreV1().Pods(w.ns).Delete(w.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	w.eventually(120*time.Second, "node "+svcNode+" to be drained and terminated", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 1 && len(g.Instances) == 1 && len(w.decisions(string(broker.ActScaleDown), svcNode)) > 0
	})
	t.Logf("scale-down: %s", w.decisions(string(broker.ActScaleDown), svcNode)[0].Reason)
	if ds := w.decisions(string(broker.ActScaleDown), jobNode); len(ds) > 0 {
		t.Fatalf("the Job's node %s was scaled down: %s", jobNode, ds[0].Reason)
	}
	kept := w.decisions("kept", jobNode)
	if len(kept) == 0 || !strings.Contains(kept[0].Reason, "would fail it for good") || !strings.Contains(kept[0].Reason, "backoffLimit 0") {
		t.Fatalf("notes on %s: %+v; want it kept because evicting the Job's pod fails the Job for good", jobNode, kept)
	}
	w.eventually(60*time.Second, "the Deployment's pod to run again on "+jobNode, func() bool {
		p, ok := w.runningPrefix("svc-")
		return ok && p == jobNode
	})
	j, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Get(w.ctx, "work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := w.workPod(); !ok || p.UID != jobPod.UID || j.Status.Failed != 0 {
		t.Fatalf("the Job's pod %v (running %v), Job status %+v: want the same pod running and no failure", p, ok, j.Status)
	}
}

// runningPrefix reports the node of a running pod whose name starts with
// prefix (a Deployment's pod).
func (w *world) runningPrefix(prefix string) (string, bool) {
	pods, err := kubeEnv.Client.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, prefix) && p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			return p.Spec.NodeName, true
		}
	}
	return "", false
}

// TestConsolidationKeepsPodWithLocalScratch: a Deployment's pod with an
// emptyDir on disk keeps data on its node; as the cluster autoscaler does,
// the broker does not move it (it would drain the node otherwise: the
// same pod without the volume is moved, TestConsolidationMovesDeploymentPod).
func TestConsolidationKeepsPodWithLocalScratch(t *testing.T) {
	w, x, _ := consolidationWorld(t, "limits-scratch", 3*time.Second, 0, scratchWork, nil)
	assertKept(t, w, x, "keeps data on the node (emptyDir scratch")
}

// workPDB makes a budget of minAvailable 1 over the workload "work": with
// one replica it allows no disruption.
func workPDB(t *testing.T, w *world) {
	t.Helper()
	one := intstr.FromInt32(1)
	if _, err := kubeEnv.Client.PolicyV1().PodDisruptionBudgets(w.ns).Create(w.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: w.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "work"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConsolidationKeepsNodeWhosePDBAllowsNoDisruption: the planner sees
// the budget's disruptionsAllowed (0) and does not choose a node whose
// drain would only wait on it.
func TestConsolidationKeepsNodeWhosePDBAllowsNoDisruption(t *testing.T) {
	w, x, _ := consolidationWorld(t, "limits-pdb", 8*time.Second, 0, deploymentWork, nil)
	workPDB(t, w)
	assertKept(t, w, x, "PodDisruptionBudget "+w.ns+"/work allows no disruption")
}

// TestPDBBlockedScaleDownGivesNodeBack: a budget that appears after the
// plan chose the node (here: once the node is cordoned) holds the drain
// past the drain timeout; the scale-down gives the node back — uncordoned,
// without the owner taint — and fails naming the budget, instead of
// leaving it cordoned and owned by nobody. The pod keeps running there.
func TestPDBBlockedScaleDownGivesNodeBack(t *testing.T) {
	w, x, _ := consolidationWorld(t, "limits-giveback", 3*time.Second, 0, deploymentWork, nil)
	pol, err := w.st.GetPolicy(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.DrainTimeout = broker.Duration(10 * time.Second)
	if _, err := w.st.UpdatePolicy(w.ctx, pol); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "node "+x+" to be cordoned for its scale-down", func() bool {
		n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, x, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	})
	workPDB(t, w)
	var op broker.Op
	w.eventually(90*time.Second, "the scale-down of "+x+" to end", func() bool {
		ops, err := w.st.ListOps(w.ctx, store.OpFilter{Node: x})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ops, func(o broker.Op) bool { return o.Kind == broker.ActScaleDown })
		if i < 0 || !ops[i].State.Terminal() {
			return false
		}
		op = ops[i]
		return true
	})
	t.Logf("scale-down %s: %s", op.State, op.LastError)
	if op.State != broker.OpFailed || !strings.Contains(op.LastError, "given back") || !strings.Contains(op.LastError, "PodDisruptionBudget "+w.ns+"/work") {
		t.Fatalf("scale-down %s: %q; want failed, the node given back, the budget named", op.State, op.LastError)
	}
	n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, x, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k8s.OwnerTaintKey }) {
		t.Fatalf("node %s after the give-back: unschedulable %v, taints %v; want it Kubernetes' again", x, n.Spec.Unschedulable, n.Spec.Taints)
	}
	if p, ok := w.workPod(); !ok || p.Spec.NodeName != x {
		t.Fatalf("the workload left node %s", x)
	}
	if g, _ := w.aws.Group(poolName); g.Desired != 2 {
		t.Fatalf("group desired %d, want 2: nothing terminated", g.Desired)
	}
}
