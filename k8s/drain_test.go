package k8s

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// drainFixture is a node with a DaemonSet pod, a mirror pod, a finished
// pod and two workload pods, on a fake clientset whose eviction reactor
// the test supplies. The real Eviction API and PDBs are covered by
// TestDrainHonoursPDB on a real control plane; this covers the outcomes
// that are hard to provoke there.
func drainFixture(t *testing.T, evict func(client *fake.Clientset, ev *policyv1.Eviction) error) *fake.Clientset {
	t.Helper()
	ctrl := true
	ds := gpuPod("sys", "ds", 0, onNode("n1", corev1.PodRunning), func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: &ctrl}}
	})
	mirror := gpuPod("sys", "static", 0, onNode("n1", corev1.PodRunning), func(p *corev1.Pod) {
		p.Annotations = map[string]string{mirrorPodAnnotation: "x"}
	})
	done := gpuPod("ml", "done", 1, onNode("n1", corev1.PodSucceeded))
	w1 := gpuPod("ml", "w1", 1, onNode("n1", corev1.PodRunning))
	w2 := gpuPod("ml", "w2", 1, onNode("n1", corev1.PodRunning))
	client := fake.NewClientset(gpuNode("n1", 4, "H100"), ds, mirror, done, w1, w2)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, evict(client, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction))
	})
	return client
}

func TestDrainTimesOutWithTerminatingPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var graces []int64
	evictions := 0
	client := drainFixture(t, func(client *fake.Clientset, ev *policyv1.Eviction) error {
		mu.Lock()
		defer mu.Unlock()
		evictions++
		if ev.Name == "w2" {
			return apierrors.NewInternalError(errString("etcd is sad"))
		}
		// Reactors run under the fake's lock: use the tracker directly.
		obj, err := client.Tracker().Get(podsGVR, ev.Namespace, ev.Name)
		if err != nil {
			return err
		}
		p := obj.(*corev1.Pod)
		if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || *ev.DeleteOptions.Preconditions.UID != p.UID {
			t.Errorf("eviction of %s without the pod's UID precondition", ev.Name)
		}
		if g := ev.DeleteOptions.GracePeriodSeconds; g != nil {
			graces = append(graces, *g)
		}
		// Accepted: the pod terminates within its grace period, slowly.
		now := metav1.Now()
		p.DeletionTimestamp = &now
		return client.Tracker().Update(podsGVR, p, ev.Namespace)
	})
	a, err := NewActuator(client, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(7)
	res, err := a.Drain(ctx, "n1", DrainOptions{Timeout: 400 * time.Millisecond, GracePeriod: &grace, RetryInitial: 20 * time.Millisecond, RetryMax: 40 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != DrainTimedOut || len(res.PDBs) != 0 {
		t.Errorf("outcome = %s (pdbs %v), want %s", res.Outcome, res.PDBs, DrainTimedOut)
	}
	if !slices.Equal(res.PodsLeft, []string{"ml/w1", "ml/w2"}) || !slices.Equal(res.Evicted, []string{"ml/w1"}) || !slices.Equal(res.Skipped, []string{"sys/ds", "sys/static"}) {
		t.Errorf("left %v evicted %v skipped %v", res.PodsLeft, res.Evicted, res.Skipped)
	}
	if !strings.Contains(res.Message, "etcd is sad") {
		t.Errorf("message %q does not carry the eviction error", res.Message)
	}
	mu.Lock()
	if !slices.Equal(graces, []int64{7}) {
		t.Errorf("grace periods sent = %v, want [7] (one accepted eviction, never repeated)", graces)
	}
	if evictions < 3 {
		t.Errorf("%d evictions, want the failing one retried with backoff", evictions)
	}
	mu.Unlock()
	n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Errorf("node not cordoned by the drain: %v", err)
	}
	evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(evs.Items) != 1 || evs.Items[0].Reason != EventDrainTimeout || evs.Items[0].Type != corev1.EventTypeWarning {
		t.Errorf("node events = %+v (%v), want one %s warning", evs, err, EventDrainTimeout)
	}
}

func TestDrainRetriesTooManyRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refusals := map[string]int{}
	client := drainFixture(t, func(client *fake.Clientset, ev *policyv1.Eviction) error {
		if refusals[ev.Name] < 2 {
			refusals[ev.Name]++
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return client.Tracker().Delete(podsGVR, ev.Namespace, ev.Name)
	})
	a, err := NewActuator(client, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Drain(ctx, "n1", DrainOptions{Timeout: 5 * time.Second, RetryInitial: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != DrainDrained || !slices.Equal(res.Evicted, []string{"ml/w1", "ml/w2"}) || refusals["w1"] != 2 {
		t.Errorf("result %+v after refusals %v, want drained after two 429s each", res, refusals)
	}
	pods, _ := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 3 {
		t.Errorf("%d pods left, want the DaemonSet, mirror and finished pods", len(pods.Items))
	}
}

func TestCordonUncordonIdempotent(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(gpuNode("n1", 4, "H100", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	}))
	a, err := NewActuator(client, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Cordon(ctx, "n1", "yarn"); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if !n.Spec.Unschedulable || len(n.Spec.Taints) != 2 || n.Spec.Taints[1] != (corev1.Taint{Key: OwnerTaintKey, Value: "yarn", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("after cordon: unschedulable %v taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if err := a.Cordon(ctx, "n1", "none"); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[1].Value != "none" {
		t.Errorf("re-cordon for another owner: taints %v", n.Spec.Taints)
	}
	for range 2 {
		if err := a.Uncordon(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("after uncordon: unschedulable %v taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	evs, _ := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	var reasons []string
	for _, e := range evs.Items {
		reasons = append(reasons, e.Reason)
	}
	slices.Sort(reasons)
	// Only changes are announced: cordon, re-cordon for another owner, uncordon.
	if want := []string{EventCordoned, EventCordoned, EventUncordoned}; !slices.Equal(reasons, want) {
		t.Errorf("node events = %v, want %v", reasons, want)
	}
	if err := a.Cordon(ctx, "missing", "yarn"); !errorsIsNotFound(err) {
		t.Errorf("cordon of a missing node: %v, want ErrNotFound", err)
	}
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

type errString string

func (e errString) Error() string { return string(e) }
