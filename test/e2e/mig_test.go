package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpubroker/gpubroker/k8s"
)

// publishMIGSlice publishes node's n MIG devices of profile as a
// ResourceSlice of driver gpu.nvidia.com, as NVIDIA's DRA driver does for
// a node whose GPUs are partitioned (type "mig", the profile attribute).
func publishMIGSlice(ctx context.Context, t *testing.T, node, profile string, n int) {
	typ := "mig"
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-mig", Labels: map[string]string{"gpubroker.io/e2e-slice": "true"}},
		Spec: resourcev1.ResourceSliceSpec{Driver: k8s.DefaultGPUDeviceClass, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	for i := range n {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("mig-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: &typ}, "profile": {StringValue: &profile}}})
	}
	if _, err := kubeEnv.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		t.Errorf("publish the MIG devices of %s: %v", node, err)
	}
}

// migSlicesHeld reports whether the broker's store counts node in its 28
// 1g.10gb MIG devices, held of them.
func migSlicesHeld(w *world, node string, held int) func() bool {
	return func() bool {
		n, ok := w.storedNode(node)
		return ok && n.MIGProfile == e2eMIGProfile && n.GPUsTotal == 4*e2eMIGPerGPU && n.GPUsAllocated == held
	}
}

// ensureMIGDeviceClass creates NVIDIA's DeviceClass mig.nvidia.com: the
// driver's devices of type mig.
func ensureMIGDeviceClass(t *testing.T) {
	t.Helper()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: k8s.DefaultMIGDeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"`}}}}}
	if _, err := kubeEnv.Client.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// migPodSpec is a training pod that asks for n MIG devices of profile
// (the device plugin's mixed strategy: nvidia.com/mig-<profile>).
func migPodSpec(profile string, n int64) corev1.PodSpec {
	spec := gpuPodSpec(0, "")
	q := *resource.NewQuantity(n, resource.DecimalSI)
	name := corev1.ResourceName("nvidia.com/mig-" + profile)
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{name: q}, Limits: corev1.ResourceList{name: q}}
	return spec
}

// TestMIGPoolGrowsFromZero: on the real control plane, a pod asking for
// one MIG 1g.10gb device, with the MIG pool (4 A100s a node, seven
// 1g.10gb each) and the whole-GPU pool both at zero, makes the broker
// grow the MIG pool — never the whole-GPU pool — and the scheduler binds
// the pod to the new node, which advertises 28 slices. A second MIG pod
// lands on the same node without a purchase; a whole-GPU pod then buys a
// whole-GPU node, not a place on the MIG node's free slices. What no
// autoscaler on AWS does today: the node group is at zero, so nothing
// but the pool's declared layout says it offers MIG devices.
func TestMIGPoolGrowsFromZero(t *testing.T) {
	const migPoolName = "gpu-mig"
	w := newWorld(t, worldOptions{maxNodes: 2, unneeded: 10 * time.Minute, namespace: "mig", bootDelay: time.Second,
		extra: safetyOptions{pools: []extraPool{{name: migPoolName, create: true, mig: true}}}})
	cs := kubeEnv.Client
	calls := func() []desiredCall {
		w.calls.mu.Lock()
		defer w.calls.mu.Unlock()
		return append([]desiredCall(nil), w.calls.calls...)
	}
	create := func(name string, spec corev1.PodSpec) {
		t.Helper()
		if _, err := cs.CoreV1().Pods(w.ns).Create(w.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound := func(name string) string {
		p, ok := w.pod(name)
		if !ok {
			return ""
		}
		return p.Spec.NodeName
	}

	create("slice-1", migPodSpec("1g.10gb", 1))
	w.eventually(90*time.Second, "the MIG pod to be bound on a node of the MIG pool", func() bool { return bound("slice-1") != "" })
	migNode := bound("slice-1")
	if c := calls(); len(c) != 1 || c[0].Pool != migPoolName || c[0].Target != 1 {
		t.Fatalf("SetDesired calls %+v, want one: the MIG pool %s to 1 node", c, migPoolName)
	}
	n, err := cs.CoreV1().Nodes().Get(w.ctx, migNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Allocatable["nvidia.com/mig-1g.10gb"]; q.Value() != 28 {
		t.Fatalf("node %s allocatable %v, want 28 nvidia.com/mig-1g.10gb", migNode, n.Status.Allocatable)
	}
	// The broker counts the node in slices of its profile.
	w.eventually(30*time.Second, "the broker to count the MIG node's slices", migSlicesHeld(w, migNode, 1))

	// Three more slices fit the node's free ones: nothing is bought.
	create("slice-3", migPodSpec("1g.10gb", 3))
	w.eventually(60*time.Second, "the second MIG pod on the same node", func() bool { return bound("slice-3") == migNode })

	// A whole-GPU pod: 25 free slices do not serve it; a whole-GPU node
	// is bought.
	create("whole", gpuPodSpec(2, ""))
	w.eventually(90*time.Second, "the whole-GPU pod to be bound on a whole-GPU node", func() bool {
		b := bound("whole")
		return b != "" && b != migNode
	})
	c := calls()
	if len(c) != 2 || c[1].Pool != poolName || c[1].Target != 1 {
		t.Fatalf("SetDesired calls %+v, want the MIG pool to 1, then %s to 1", c, poolName)
	}
	time.Sleep(3 * time.Second) // a few more ticks: nothing else bought
	if n := len(calls()); n != 2 {
		t.Fatalf("%d SetDesired calls, want still 2", n)
	}
}

// TestDRAMIGClaimGrowsTheMIGPoolFromZero: the same from zero through DRA.
// A pod whose claim asks for two MIG devices of profile 1g.10gb (DeviceClass
// mig.nvidia.com), with both pools at zero, makes the broker grow the MIG
// pool; the node publishes its 28 MIG devices as a ResourceSlice; the
// scheduler allocates two of them to the claim and binds the pod; the
// broker counts 2 of the node's 28 slices held.
func TestDRAMIGClaimGrowsTheMIGPoolFromZero(t *testing.T) {
	const migPoolName = "gpu-mig-dra"
	ensureMIGDeviceClass(t)
	w := newWorld(t, worldOptions{maxNodes: 2, unneeded: 10 * time.Minute, namespace: "mig-dra", bootDelay: time.Second,
		extra: safetyOptions{pools: []extraPool{{name: migPoolName, create: true, mig: true}}}})
	w.draSlices.Store(true)
	cs := kubeEnv.Client
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-slices", Namespace: w.ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "mig",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: k8s.DefaultMIGDeviceClass, Count: 2,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: `device.attributes["gpu.nvidia.com"].profile == "1g.10gb"`}}}}}}}}}
	if _, err := cs.ResourceV1().ResourceClaims(w.ns).Create(w.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(w.ns).Create(w.ctx, claimPod(w.ns, "mig-train", "two-slices"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	w.eventually(90*time.Second, "the DRA MIG pod to be bound on a node of the MIG pool", func() bool {
		p, ok := w.pod("mig-train")
		if ok {
			node = p.Spec.NodeName
		}
		return node != ""
	})
	w.calls.mu.Lock()
	calls := append([]desiredCall(nil), w.calls.calls...)
	w.calls.mu.Unlock()
	if len(calls) != 1 || calls[0].Pool != migPoolName || calls[0].Target != 1 {
		t.Fatalf("SetDesired calls %+v, want one: the MIG pool %s to 1 node", calls, migPoolName)
	}
	c, err := cs.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, "two-slices", metav1.GetOptions{})
	if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 2 {
		t.Fatalf("claim status %+v, %v: want 2 MIG devices allocated", c.Status, err)
	}
	w.eventually(30*time.Second, "the broker to count 2 of the node's 28 slices held", migSlicesHeld(w, node, 2))
}
