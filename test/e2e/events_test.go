package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
)

// podEventsOf lists the Events regarding a pod as `kubectl describe pod`
// finds them (core/v1, by involvedObject.uid), "Reason: message".
func podEventsOf(t *testing.T, ctx context.Context, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	l, err := kubeEnv.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// countReason counts the Events of one reason (the scheduler writes its
// FailedScheduling too) and returns the last one's message.
func countReason(evs []corev1.Event, reason string) (int, string) {
	n, msg := 0, ""
	for _, e := range evs {
		if e.Reason == reason {
			n++
			msg = e.Message
		}
	}
	return n, msg
}

// TestPendingPodsGetWhyEvents: on the real control plane, a pod the broker
// buys a node for gets ScaleUpTriggered (pool and ETA), a pod no pool can
// serve gets Unsatisfiable (why), a pod of a tenant at its max gets
// WaitingForQuota (tenant and numbers), each from reportingController
// gpubroker.io/broker, visible as kubectl describe pod reads them; later
// ticks, which plan the same, add no second Event.
func TestPendingPodsGetWhyEvents(t *testing.T) {
	// The node takes long to boot, so the first pod stays pending.
	w := newWorld(t, worldOptions{maxNodes: 5, unneeded: time.Hour, namespace: "why-events", bootDelay: 10 * time.Minute})
	capped := "why-capped"
	if _, err := w.st.CreateTenant(w.ctx, broker.Tenant{Name: "capped", MaxGPUs: 1, Weight: 1, Namespaces: []string{capped}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeEnv.Client.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capped}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		kubeEnv.Client.CoreV1().Pods(capped).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		kubeEnv.Client.CoreV1().Namespaces().Delete(ctx, capped, metav1.DeleteOptions{})
	})
	mk := func(ns, name string, gpus int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: gpuPodSpec(gpus, "")}
		created, err := kubeEnv.Client.CoreV1().Pods(ns).Create(w.ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	fits := mk(w.ns, "fits", 2)      // a 4-GPU node is bought for it
	tooBig := mk(w.ns, "too-big", 8) // no pool has 8 GPUs on one node
	overQuota := mk(capped, "over-quota", 2)

	want := []struct {
		pod    *corev1.Pod
		reason string
		says   []string
	}{
		{fits, k8s.EventScaleUpTriggered, []string{"pool " + poolName, "to 1 nodes", "expected by", "max provision time 2m0s"}},
		{tooBig, k8s.EventUnsatisfiable, []string{"no gpubroker pool can ever serve this pod"}},
		{overQuota, k8s.EventWaitingForQuota, []string{"tenant capped", "of its 1 GPUs"}},
	}
	for _, c := range want {
		w.eventually(60*time.Second, fmt.Sprintf("event %s on pod %s/%s", c.reason, c.pod.Namespace, c.pod.Name), func() bool {
			n, _ := countReason(podEventsOf(t, w.ctx, c.pod), c.reason)
			return n > 0
		})
	}
	// Two more whole ticks: the same plan, so no new Events.
	seen := w.rt.Status().Tick
	w.eventually(60*time.Second, "two more ticks", func() bool { return w.rt.Status().Tick >= seen+3 })
	for _, c := range want {
		evs := podEventsOf(t, w.ctx, c.pod)
		n, msg := countReason(evs, c.reason)
		if n != 1 {
			t.Errorf("pod %s: %d %s events after more ticks, want exactly 1", c.pod.Name, n, c.reason)
		}
		for _, s := range c.says {
			if !strings.Contains(msg, s) {
				t.Errorf("pod %s: %s message %q does not say %q", c.pod.Name, c.reason, msg, s)
			}
		}
		for _, e := range evs {
			if e.Reason == c.reason && e.ReportingController != k8s.ReportingController {
				t.Errorf("pod %s: event %s reported by %q, want %q", c.pod.Name, e.Reason, e.ReportingController, k8s.ReportingController)
			}
		}
	}
	// events.k8s.io/v1 shows the same Events with their action.
	l, err := kubeEnv.Client.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range l.Items {
		if e.Regarding.UID == fits.UID && e.Reason == k8s.EventScaleUpTriggered {
			found = true
			if e.Action == "" || e.ReportingInstance == "" || e.EventTime.IsZero() {
				t.Errorf("events.k8s.io/v1 view of pod fits: %+v", e)
			}
		}
	}
	if !found {
		t.Errorf("events.k8s.io/v1 lists no ScaleUpTriggered regarding pod fits: %d events", len(l.Items))
	}
}
