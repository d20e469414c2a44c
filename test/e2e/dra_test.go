package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
)

// e2eSliceLabel marks the ResourceSlices the tests publish, for cleanup.
const e2eSliceLabel = "gpubroker.io/e2e-slice=true"

// publishGPUSlice publishes node's four GPUs of product model as a
// ResourceSlice of driver gpu.nvidia.com, as NVIDIA's DRA driver does when
// the node comes up.
func publishGPUSlice(ctx context.Context, t *testing.T, node, model string) {
	product := "NVIDIA " + model
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus", Labels: map[string]string{"gpubroker.io/e2e-slice": "true"}},
		Spec: resourcev1.ResourceSliceSpec{Driver: k8s.DefaultGPUDeviceClass, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	for _, d := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"} {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: d,
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"productName": {StringValue: &product}}})
	}
	if _, err := kubeEnv.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		t.Errorf("publish the GPUs of %s: %v", node, err)
	}
}

// ensureGPUDeviceClass creates NVIDIA's DeviceClass gpu.nvidia.com.
func ensureGPUDeviceClass(t *testing.T) {
	t.Helper()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: k8s.DefaultGPUDeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "gpu.nvidia.com"`}}}}}
	if _, err := kubeEnv.Client.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// claimPod is a training pod that asks its GPUs through the claim named
// claim only (no nvidia.com/gpu in its requests).
func claimPod(ns, name, claim string) *corev1.Pod {
	spec := gpuPodSpec(0, "")
	spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: &claim}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func gpuClaim(ns, name string, count int64, cel string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: k8s.DefaultGPUDeviceClass, Count: count,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}}}}}}}
}

// TestDRAClaimBuysANode: on the real control plane (scheduler with DRA),
// a pod whose claim asks 2 GPUs of product A100 — and no nvidia.com/gpu —
// makes the broker grow the pool by one node; the node boots and
// publishes its GPUs as a ResourceSlice; the scheduler allocates the claim
// and binds the pod there. A claim whose selector the broker does not
// understand (a function call) waits unsatisfiable with the reason and
// buys nothing. A plain nvidia.com/gpu pod comes first (its node publishes
// no slice: a node offers its GPUs one way), and its decision latency is
// logged beside the DRA pod's.
func TestDRAClaimBuysANode(t *testing.T) {
	ensureGPUDeviceClass(t)
	w := newWorld(t, worldOptions{maxNodes: 3, unneeded: 10 * time.Minute, namespace: "dra", bootDelay: time.Second})
	cs := kubeEnv.Client
	calls := func() []desiredCall {
		w.calls.mu.Lock()
		defer w.calls.mu.Unlock()
		return append([]desiredCall(nil), w.calls.calls...)
	}

	// A plain nvidia.com/gpu pod: one node bought for it.
	created := time.Now()
	if _, err := cs.CoreV1().Pods(w.ns).Create(w.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: w.ns},
		Spec: gpuPodSpec(4, "")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the plain pod to be bound on a node bought for it", func() bool {
		p, ok := w.pod("plain")
		return ok && p.Spec.NodeName != ""
	})
	pp, _ := w.pod("plain")
	plain := unschedulableToCall(pp, calls()[0].At, created)

	// The DRA pod: the first node is full, a second is bought, and it
	// publishes its GPUs as a ResourceSlice.
	w.draSlices.Store(true)
	for _, c := range []*resourcev1.ResourceClaim{
		gpuClaim(w.ns, "two-a100", 2, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100"`),
		gpuClaim(w.ns, "h-only", 1, `device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H")`),
	} {
		if _, err := cs.ResourceV1().ResourceClaims(w.ns).Create(w.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	created = time.Now()
	if _, err := cs.CoreV1().Pods(w.ns).Create(w.ctx, claimPod(w.ns, "dra-train", "two-a100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "the DRA pod to be bound on a second node bought for it", func() bool {
		p, ok := w.pod("dra-train")
		return ok && p.Spec.NodeName != "" && p.Spec.NodeName != pp.Spec.NodeName
	})
	cs2 := calls()
	if len(cs2) != 2 || cs2[0].Target != 1 || cs2[1].Target != 2 {
		t.Fatalf("SetDesired calls %+v, want to 1 node, then to 2", cs2)
	}
	claim, err := cs.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, "two-a100", metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 2 {
		t.Fatalf("claim status %+v, %v: want 2 devices allocated", claim.Status, err)
	}
	p, _ := w.pod("dra-train")
	dra := unschedulableToCall(p, cs2[1].At, created)
	// Its node is busy with the 2 GPUs the claim holds, not idle.
	w.eventually(30*time.Second, "the broker to count the claim's GPUs on their node", func() bool {
		nodes, err := w.st.ListNodes(w.ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.Name == p.Spec.NodeName {
				return n.GPUsAllocated == 2
			}
		}
		return false
	})

	// A selector the broker does not understand: a reason, no purchase.
	if _, err := cs.CoreV1().Pods(w.ns).Create(w.ctx, claimPod(w.ns, "dra-h-only", "h-only"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var reason string
	w.eventually(60*time.Second, "the pod with a selector the broker does not understand to wait unsatisfiable", func() bool {
		rows, err := w.st.ListDecisions(w.ctx, store.DecisionFilter{Kind: broker.DecisionWait, Limit: 50})
		if err != nil {
			return false
		}
		for _, d := range rows {
			if strings.Contains(d.Reason, "unsatisfiable") && strings.Contains(d.Reason, "selector not understood") {
				reason = d.Reason
				return true
			}
		}
		return false
	})
	time.Sleep(3 * time.Second) // a few more ticks: still nothing bought
	if n := len(calls()); n != 2 {
		t.Fatalf("%d SetDesired calls, want still 2: nothing is bought for a selector not understood", n)
	}
	t.Logf("selector not understood: %s", reason)
	t.Logf("decision latency, unschedulable to scale-up call (the condition's time has 1 s resolution): DRA pod %s, nvidia.com/gpu pod %s",
		dra.Round(time.Millisecond), plain.Round(time.Millisecond))
}

// unschedulableToCall is how long after the pod was marked unschedulable
// (or, when the condition is gone, created) the scale-up call came.
func unschedulableToCall(p *corev1.Pod, call, created time.Time) time.Duration {
	since := created
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.Time
		}
	}
	return call.Sub(since)
}
