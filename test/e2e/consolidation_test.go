package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/k8senv"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// Consolidation on the real control plane: idle reclaim drains a node only
// if its pods lose at most consolidation.max_work_lost (10 min by default)
// and none is bare or marked do-not-disrupt.
//
// A batch pod without a checkpoint costs its whole run time; a pod here
// has run for seconds, so the test of that rule lowers max_work_lost to 5 s
// and waits 8 s of underuse (the pod has run longer than that), as the
// reference test shortens the unneeded time.
//
// The batch pod is a real batch/v1 Job's pod (owned by the Job, so
// k8s.classifyWork makes it batch work). KWOK completes Job pods at once;
// the Job's pod template carries k8senv.KeepRunningAnnotation so that its
// pod stays Running, as a long training Job's would.

// consolidationWorld builds two GPU nodes through the broker: the one the
// workload under test runs on (1 of 4 GPUs: underused), and another with
// 3 of 4 GPUs held by a bare pod, whose free GPU could take the workload.
// It returns the node of the workload and the other node. maxWorkLost,
// when set, replaces the policy's consolidation.max_work_lost.
func consolidationWorld(t *testing.T, ns string, unneeded, maxWorkLost time.Duration, kind workKind, annotations map[string]string) (w *world, x, y string) {
	t.Helper()
	w = newWorld(t, worldOptions{maxNodes: 2, unneeded: unneeded, namespace: ns, bootDelay: time.Second})
	if maxWorkLost > 0 {
		pol, err := w.st.GetPolicy(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		pol.MaxWorkLost = broker.Duration(maxWorkLost)
		if _, err := w.st.UpdatePolicy(w.ctx, pol); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(name string) string {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: gpuPodSpec(3, "")}
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
	n1 := hold("hold-a")
	n2 := hold("hold-b")
	if n1 == n2 {
		t.Fatalf("both 3-GPU pods on node %s", n1)
	}
	createWork(t, w, kind, annotations)
	w.eventually(60*time.Second, "the workload to run", func() bool {
		p, ok := w.workPod()
		if ok {
			x = p.Spec.NodeName
		}
		return ok
	})
	// Free the workload's node of its hold pod: it is now at 1 of 4 GPUs.
	gone, y := "hold-a", n2
	if x == n2 {
		gone, y = "hold-b", n1
	}
	zero := int64(0)
	if err := kubeEnv.Client.CoreV1().Pods(w.ns).Delete(w.ctx, gone, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	return w, x, y
}

// workKind is the controller of the workload under test.
type workKind int

const (
	deploymentWork workKind = iota // a Deployment of one replica
	jobWork                        // a batch/v1 Job whose pod keeps running
	noRetryJobWork                 // the same Job with backoffLimit 0 (drainlimits_test.go)
	scratchWork                    // the Deployment with an emptyDir on disk (drainlimits_test.go)
)

// createWork creates the workload "work" of one 1-GPU pod labelled
// app=work, with annotations on its pod template.
func createWork(t *testing.T, w *world, kind workKind, annotations map[string]string) {
	t.Helper()
	labels := map[string]string{"app": "work"}
	spec := gpuPodSpec(1, "")
	switch kind {
	case jobWork, noRetryJobWork:
		a := map[string]string{k8senv.KeepRunningAnnotation: "true"}
		for k, v := range annotations {
			a[k] = v
		}
		spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: w.ns},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: a}, Spec: spec}}}
		if kind == noRetryJobWork {
			j.Spec.BackoffLimit = new(int32)
		}
		if _, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Create(w.ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	default:
		if kind == scratchWork {
			spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		one := int32(1)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: w.ns},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec}}}
		if _, err := kubeEnv.Client.AppsV1().Deployments(w.ns).Create(w.ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// assertJobPod fails unless the running work pod belongs to the Job
// "work" and the Job has neither succeeded nor failed.
func assertJobPod(t *testing.T, w *world) {
	t.Helper()
	p, ok := w.workPod()
	if !ok {
		t.Fatal("no running pod of the Job")
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "Job" || ref.Name != "work" {
		t.Fatalf("pod %s is controlled by %+v, want the Job work", p.Name, ref)
	}
	j, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Get(w.ctx, "work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Succeeded != 0 {
		t.Fatalf("the Job completed (%+v): its pod did not keep running", j.Status)
	}
}

// workPod returns the running pod of the workload "work".
func (w *world) workPod() (*corev1.Pod, bool) {
	pods, err := kubeEnv.Client.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: "app=work"})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			return p, true
		}
	}
	return nil, false
}

// decisions lists the decisions of kind on node, newest first.
func (w *world) decisions(kind, node string) []broker.Decision {
	ds, err := w.st.ListDecisions(w.ctx, store.DecisionFilter{Kind: kind, Node: node, Limit: 20})
	if err != nil {
		w.t.Fatal(err)
	}
	return ds
}

// assertKept waits for the planner's note that node x is kept for its
// work, then checks that nothing drained it.
func assertKept(t *testing.T, w *world, x, phrase string) {
	t.Helper()
	var note string
	w.eventually(60*time.Second, "a note that node "+x+" is kept", func() bool {
		if ds := w.decisions("kept", x); len(ds) > 0 {
			note = ds[0].Reason
			return true
		}
		return false
	})
	t.Logf("kept: %s", note)
	if !strings.Contains(note, phrase) {
		t.Fatalf("note %q does not say %q", note, phrase)
	}
	// The plan that wrote the note ran its actions before: none drains x.
	if ds := w.decisions(string(broker.ActScaleDown), x); len(ds) > 0 {
		t.Fatalf("node %s was scaled down: %s", x, ds[0].Reason)
	}
	n, err := kubeEnv.Client.CoreV1().Nodes().Get(w.ctx, x, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		t.Fatalf("node %s was cordoned", x)
	}
	if p, ok := w.workPod(); !ok || p.Spec.NodeName != x {
		t.Fatalf("the workload left node %s", x)
	}
}

// assertDrained waits until node x is reclaimed and the workload runs on y.
func assertDrained(t *testing.T, w *world, x, y string) {
	t.Helper()
	w.eventually(90*time.Second, "node "+x+" to be drained and terminated", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 1 && len(g.Instances) == 1 && len(w.decisions(string(broker.ActScaleDown), x)) > 0
	})
	t.Logf("scale-down: %s", w.decisions(string(broker.ActScaleDown), x)[0].Reason)
	w.eventually(60*time.Second, "the workload to run again on "+y, func() bool {
		p, ok := w.workPod()
		return ok && p.Spec.NodeName == y
	})
}

// TestConsolidationKeepsJobPodWithoutCheckpoint: a node running a Job's
// pod with no checkpoint is not drained by idle reclaim, and the decision
// "kept" says why.
func TestConsolidationKeepsJobPodWithoutCheckpoint(t *testing.T) {
	w, x, _ := consolidationWorld(t, "consolidate-nockpt", 8*time.Second, 5*time.Second, jobWork, nil)
	assertJobPod(t, w)
	assertKept(t, w, x, "no known checkpoint")
	assertJobPod(t, w)
}

// TestConsolidationDrainsJobPodWithFreshCheckpoint: the same Job's pod
// with a checkpoint 1 min old (gpubroker.io/last-checkpoint) is drained;
// the Job controller recreates it on the other node.
func TestConsolidationDrainsJobPodWithFreshCheckpoint(t *testing.T) {
	w, x, y := consolidationWorld(t, "consolidate-ckpt", 3*time.Second, 0, jobWork,
		map[string]string{k8s.LastCheckpointAnnotation: time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	first, _ := w.workPod()
	assertJobPod(t, w)
	assertDrained(t, w, x, y)
	assertJobPod(t, w)
	if p, _ := w.workPod(); p.UID == first.UID {
		t.Fatalf("pod %s was not recreated", p.Name)
	}
}

// TestConsolidationKeepsTrainingPodWithoutCheckpoint: a Deployment's pod
// marked gpubroker.io/training: "true" is batch work too.
func TestConsolidationKeepsTrainingPodWithoutCheckpoint(t *testing.T) {
	w, x, _ := consolidationWorld(t, "consolidate-training", 8*time.Second, 5*time.Second, deploymentWork, map[string]string{k8s.TrainingAnnotation: "true"})
	assertKept(t, w, x, "no known checkpoint")
}

// TestConsolidationMovesDeploymentPod: a Deployment's pod costs nothing to move.
func TestConsolidationMovesDeploymentPod(t *testing.T) {
	w, x, y := consolidationWorld(t, "consolidate-svc", 3*time.Second, 0, deploymentWork, nil)
	assertDrained(t, w, x, y)
}

// TestConsolidationLeavesAnnotatedPods: pods annotated do-not-disrupt (the
// cluster autoscaler's, Karpenter's or gpubroker's annotation) are left,
// even a Job's pod whose fresh checkpoint would otherwise let it move.
func TestConsolidationLeavesAnnotatedPods(t *testing.T) {
	fresh := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for _, a := range []struct {
		ns   string
		kind workKind
		ann  map[string]string
	}{
		{"consolidate-ca", deploymentWork, map[string]string{k8s.SafeToEvictAnnotation: "false"}},
		{"consolidate-karpenter", deploymentWork, map[string]string{k8s.KarpenterDoNotDisruptAnnotation: "true"}},
		{"consolidate-gpubroker", jobWork, map[string]string{k8s.DoNotDisruptAnnotation: "true", k8s.LastCheckpointAnnotation: fresh}},
	} {
		t.Run(a.ns, func(t *testing.T) {
			w, x, _ := consolidationWorld(t, a.ns, 3*time.Second, 0, a.kind, a.ann)
			assertKept(t, w, x, "do-not-disrupt")
		})
	}
}

// TestPreemptionByPodRecordsWorkLost: with the pool at max (one node), a
// Kubernetes pod of PriorityClass high-priority-training (1000000) needs the
// GPUs of a YARN container at priority 0. kube-scheduler cannot preempt
// there (the node is YARN's, cordoned in Kubernetes, and holds no pods), so
// the broker does: one preemption evicts the container, releases the node
// from YARN and hands it to Kubernetes, the pod runs on it, and the
// decision records the GPU-hours of work lost.
func TestPreemptionByPodRecordsWorkLost(t *testing.T) {
	ensurePriorityClass(t, "high-priority-training", 1000000)
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 10 * time.Minute, namespace: "preempt-pod", bootDelay: time.Second, preemption: true})
	app, err := w.ysim.Submit(yarnsim.AppSpec{Name: "etl-train", Queue: "root.training",
		Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	node := w.runsOn(app, "the YARN container to run on a node of the pool")
	urgent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "urgent", Namespace: w.ns}, Spec: gpuPodSpec(4, "high-priority-training")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, urgent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the priority-1000000 pod to run on the node taken from YARN", func() bool {
		p, ok := w.pod("urgent")
		return ok && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
	})
	if p, _ := w.pod("urgent"); p.Spec.Priority == nil || *p.Spec.Priority != 1000000 {
		t.Fatalf("pod priority %v, want 1000000", p.Spec.Priority)
	}
	obs, err := w.yclient.Observe(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := obs.App(app); ok && a.RunningContainers > 0 {
		t.Fatalf("the YARN app still runs %d containers", a.RunningContainers)
	}
	ds := w.decisions(string(broker.ActPreempt), node)
	if len(ds) == 0 {
		t.Fatal("no preemption decision recorded")
	}
	var a broker.Action
	if err := json.Unmarshal(ds[0].Detail, &a); err != nil {
		t.Fatal(err)
	}
	t.Logf("preemption: %s (%.4f GPU-hours)", ds[0].Reason, a.GPUHoursLost)
	if a.GPUHoursLost <= 0 || !strings.Contains(ds[0].Reason, "GPU-hours of work") || a.From != broker.OwnerYARN || a.To != broker.OwnerK8s {
		t.Fatalf("preemption decision %+v does not record the work lost and the hand-over", a)
	}
	if len(a.Victims) != 1 || a.Victims[0].Source != broker.SourceYARN || a.Victims[0].App != app || a.Victims[0].GPUs != 4 {
		t.Fatalf("victims %+v, want the YARN app's one 4-GPU container", a.Victims)
	}
	if w.desired() != 1 {
		t.Fatalf("desired %d: preemption must not grow a pool at max", w.desired())
	}
}

// TestPreemptionByYARNRecordsWorkLost: with the pool at max, a YARN
// application at priority 1000000 (its tenant's base priority) takes the
// GPUs of a Kubernetes pod at priority 0: one preemption evicts the pod,
// releases the node from Kubernetes and hands it to YARN, and its decision
// records the GPU-hours lost.
func TestPreemptionByYARNRecordsWorkLost(t *testing.T) {
	ensurePriorityClass(t, "low-priority", 0)
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 10 * time.Minute, namespace: "preempt-cost", bootDelay: time.Second, preemption: true})
	tn, err := w.st.GetTenant(w.ctx, "training")
	if err != nil {
		t.Fatal(err)
	}
	tn.BasePriority = 1000000
	if _, err := w.st.UpdateTenant(w.ctx, tn); err != nil {
		t.Fatal(err)
	}
	low := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "low", Namespace: w.ns}, Spec: gpuPodSpec(4, "low-priority")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, low, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the low-priority pod to run", func() bool {
		p, ok := w.pod("low")
		return ok && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
	})
	app, err := w.ysim.Submit(yarnsim.AppSpec{Name: "urgent-train", Queue: "root.training",
		Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the YARN app to run on the node taken from Kubernetes", func() bool {
		obs, err := w.yclient.Observe(w.ctx)
		if err != nil {
			return false
		}
		a, ok := obs.App(app)
		return ok && a.PendingContainers() == 0 && a.RunningContainers == 1
	})
	if _, ok := w.pod("low"); ok {
		t.Fatal("the low-priority pod still exists")
	}
	ds := w.decisions(string(broker.ActPreempt), "")
	if len(ds) == 0 {
		t.Fatal("no preemption decision recorded")
	}
	var a broker.Action
	if err := json.Unmarshal(ds[0].Detail, &a); err != nil {
		t.Fatal(err)
	}
	t.Logf("preemption: %s (%.4f GPU-hours)", ds[0].Reason, a.GPUHoursLost)
	if a.GPUHoursLost <= 0 || !strings.Contains(ds[0].Reason, "GPU-hours of work") || a.To != broker.OwnerYARN || len(a.Victims) != 1 {
		t.Fatalf("preemption decision %+v does not record the work lost and the hand-over", a)
	}
	if w.desired() != 1 {
		t.Fatalf("desired %d: preemption must not grow a pool at max", w.desired())
	}
}
