package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func ensurePriorityClass(t *testing.T, name string, value int32) {
	t.Helper()
	_, err := kubeEnv.Client.SchedulingV1().PriorityClasses().Create(context.Background(),
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// gpuPodSpec asks for gpus nvidia.com/gpu on a GPU node, as the reference
// scenario's training Job does.
func gpuPodSpec(gpus int64, class string) corev1.PodSpec {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return corev1.PodSpec{
		PriorityClassName: class,
		NodeSelector:      map[string]string{"infra-type": "gpu"},
		Tolerations:       []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "train", Image: "trainer:latest",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q}, Limits: corev1.ResourceList{"nvidia.com/gpu": q}}}},
	}
}

func (w *world) pod(name string) (*corev1.Pod, bool) {
	p, err := kubeEnv.Client.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return p, true
}

// TestReferenceScenario: the 2-GPU training Job with nodeSelector
// infra-type=gpu waits; the broker scales gpu-training-group (0:5, 4 GPUs a
// node) by one; the node joins; the pod runs and finishes; the node stays
// idle past the (shortened) unneeded time and is drained and terminated.
func TestReferenceScenario(t *testing.T) {
	ensurePriorityClass(t, "high-priority-training", 1000000)
	w := newWorld(t, worldOptions{maxNodes: 5, unneeded: 15 * time.Second, namespace: "reference", bootDelay: time.Second})
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "elastic-gpu-training", Namespace: w.ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: gpuPodSpec(2, "high-priority-training")}}}
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	if _, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Create(w.ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(30*time.Second, "the pool to grow by one", func() bool { return w.desired() == 1 })
	w.eventually(60*time.Second, "the Job to complete on the new node", func() bool {
		j, err := kubeEnv.Client.BatchV1().Jobs(w.ns).Get(w.ctx, job.Name, metav1.GetOptions{})
		return err == nil && j.Status.Succeeded == 1
	})
	if w.desired() != 1 {
		t.Fatalf("desired %d after the Job ran, want exactly one node bought", w.desired())
	}
	// Idle past the unneeded time: drained and terminated with decrement.
	w.eventually(90*time.Second, "the idle node to be reclaimed", func() bool {
		g, _ := w.aws.Group(poolName)
		return g.Desired == 0 && len(g.Instances) == 0
	})
	ds, err := w.st.ListDecisions(w.ctx, storeDecisions(string(broker.ActScaleDown)))
	if err != nil || len(ds) == 0 {
		t.Fatalf("no scale-down decision recorded: %v", err)
	}
	t.Logf("scale-down reason: %s", ds[0].Reason)
}

// TestPreemptionAndTransfer: with the pool at max, a high-priority Job
// preempts a low-priority pod; then, with the node idle, a YARN app asking
// 2 containers x 2 GPUs gets the Kubernetes node moved to YARN.
func TestPreemptionAndTransfer(t *testing.T) {
	ensurePriorityClass(t, "high-priority-training", 1000000)
	ensurePriorityClass(t, "low-priority", 0)
	w := newWorld(t, worldOptions{maxNodes: 1, unneeded: 10 * time.Minute, namespace: "contend", bootDelay: time.Second, preemption: true})

	low := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "low", Namespace: w.ns}, Spec: gpuPodSpec(4, "low-priority")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, low, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the low-priority pod to run", func() bool {
		p, ok := w.pod("low")
		return ok && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
	})
	high := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "high", Namespace: w.ns}, Spec: gpuPodSpec(4, "high-priority-training")}
	if _, err := kubeEnv.Client.CoreV1().Pods(w.ns).Create(w.ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "the high-priority pod to run in the low one's place", func() bool {
		p, ok := w.pod("high")
		_, lowLeft := w.pod("low")
		return ok && p.Spec.NodeName != "" && !lowLeft
	})
	if w.desired() != 1 {
		t.Fatalf("desired %d: preemption must not grow a pool at max", w.desired())
	}
	// Inside Kubernetes the scheduler preempts by itself (the pod carries a
	// nominated node, which the broker leaves alone); either way the
	// broker must not buy a node for it with the pool at max.
	preempted := "kube-scheduler"
	if ds, _ := w.st.ListDecisions(w.ctx, storeDecisions(string(broker.ActPreempt))); len(ds) > 0 {
		preempted = "gpubroker: " + ds[0].Reason
	}
	t.Logf("low-priority pod preempted by %s", preempted)

	// The node goes idle; a YARN gang of 2 x 2 GPUs arrives.
	if err := kubeEnv.Client.CoreV1().Pods(w.ns).Delete(w.ctx, "high", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	app, err := w.ysim.Submit(yarnsim.AppSpec{Name: "spark-train", Queue: "root.training", Tags: []string{"gpubroker.io/gang=true"},
		Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the YARN app to get its containers on the moved node", func() bool {
		obs, err := w.yclient.Observe(w.ctx)
		if err != nil {
			return false
		}
		a, ok := obs.App(app)
		return ok && a.PendingContainers() == 0 && a.RunningContainers == 2
	})
	nodes, _ := kubeEnv.Client.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "infra-type=gpu"})
	for _, n := range nodes.Items {
		if !n.Spec.Unschedulable {
			t.Errorf("node %s still schedulable by Kubernetes after moving to YARN", n.Name)
		}
	}
	if w.desired() != 1 {
		t.Fatalf("desired %d: the transfer must not buy a node", w.desired())
	}
}
