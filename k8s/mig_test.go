package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

func TestPlanUnits(t *testing.T) {
	for _, c := range []struct {
		req     GPURequest
		units   int
		profile string
		mixed   bool
	}{
		{GPURequest{GPUs: 2}, 2, "", false},
		{GPURequest{MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 3}}, 3, "1g.10gb", false},
		{GPURequest{GPUs: 1, MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 3}}, 2, "", true},
		{GPURequest{MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-3g.40gb": 1}}, 1, "", true},
	} {
		u, p, why := c.req.PlanUnits()
		if u != c.units || p != c.profile || (why != "") != c.mixed {
			t.Errorf("%s: PlanUnits = %d, %q, %q; want %d, %q, mixed %v", c.req, u, p, why, c.units, c.profile, c.mixed)
		}
	}
	for _, c := range []struct {
		node    GPURequest
		units   int
		profile string
	}{
		{GPURequest{GPUs: 8}, 8, ""},
		{GPURequest{GPUs: 4, MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 14}}, 4, ""},
		{GPURequest{MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}}, 14, "1g.10gb"},
		{GPURequest{MIG: map[string]int64{"nvidia.com/mig-3g.40gb": 4, "nvidia.com/mig-2g.20gb": 4}}, 4, "2g.20gb"},
	} {
		if u, p := c.node.NodeUnits(); u != c.units || p != c.profile {
			t.Errorf("%s: NodeUnits = %d, %q; want %d, %q", c.node, u, p, c.units, c.profile)
		}
	}
}

func migResources(profile string, n int64) corev1.ResourceList {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return corev1.ResourceList{corev1.ResourceName(MIGPrefix + profile): q}
}

// TestObserverMIG: a node whose GPUs are all partitioned (the device
// plugin's mixed strategy) offers the planner slices of its profile, and
// a running MIG pod holds slices of it; a pending MIG pod is demand in
// slices of its profile; a pod asking two kinds waits unsatisfiable with
// the reason. With DRA, a node that publishes MIG devices offers them by
// profile, a node's GPU memory comes from its devices' memory capacity,
// and a claim for a MIG device of a profile is demand for it.
func TestObserverMIG(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m1 := gpuNode("m1", 0, "A100", func(n *corev1.Node) {
		for k, v := range migResources("1g.10gb", 28) {
			n.Status.Allocatable[k], n.Status.Capacity[k] = v, v
		}
	})
	migPod := func(name string, reqs corev1.ResourceList, opts ...func(*corev1.Pod)) *corev1.Pod {
		p := gpuPod("ml", name, 0, opts...)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: reqs, Limits: reqs}
		return p
	}
	running := migPod("runs", migResources("1g.10gb", 2), onNode("m1", corev1.PodRunning))
	two := migResources("1g.10gb", 1)
	for k, v := range migResources("3g.40gb", 1) {
		two[k] = v
	}
	// m2 publishes two 3g.40gb MIG devices through DRA, one held by a
	// running pod's claim; g3 publishes two 80Gi GPUs.
	migType, gpuType, p3g := "mig", "gpu", "3g.40gb"
	slice := func(node string, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-devs"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: DefaultGPUDeviceClass, NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: devs}}
	}
	migDev := func(name string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: &migType}, "profile": {StringValue: &p3g}}}
	}
	gpuDev := func(name, mem string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: &gpuType}},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(mem)}}}
	}
	profile3g := `device.attributes["mig.nvidia.com"].profile == "3g.40gb"`
	held := resourceClaim("ml", "held", claimOf(exactly("m", DefaultMIGDeviceClass, "", 1, profile3g)))
	held.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "m", Driver: "gpu.nvidia.com", Pool: "m2", Device: "mig-0"}}}}
	holder := draPod("ml", "holder", byName("c", "held"))
	onNode("m2", corev1.PodRunning)(holder)
	client := fake.NewClientset(m1, running,
		migPod("one-slice", migResources("1g.10gb", 1)),
		migPod("two-kinds", two),
		gpuNode("m2", 0, "A100"), slice("m2", migDev("mig-0"), migDev("mig-1")), held, holder,
		gpuNode("g3", 0, "H100"), slice("g3", gpuDev("gpu-0", "80Gi"), gpuDev("gpu-1", "81Gi")),
		resourceClaim("ml", "want-3g", claimOf(exactly("m", DefaultMIGDeviceClass, "", 1, profile3g))),
		draPod("ml", "dra-mig", byName("c", "want-3g")),
	)
	obs := observeOnce(t, ctx, client, Config{DRA: "on"}, nil)
	nodes := map[string]broker.Node{}
	for _, n := range obs.Nodes {
		nodes[n.Name] = n
	}
	if n := nodes["m1"]; n.GPUsTotal != 28 || n.MIGProfile != "1g.10gb" || n.GPUsAllocated != 2 ||
		len(n.Work) != 1 || n.Work[0].MIGProfile != "1g.10gb" || n.Work[0].GPUs != 2 {
		t.Errorf("m1 %+v, want 28 1g.10gb slices, 2 held by its MIG pod", n)
	}
	if n := nodes["m2"]; n.GPUsTotal != 2 || n.MIGProfile != "3g.40gb" || n.GPUsAllocated != 1 || n.Phase != broker.PhaseActive {
		t.Errorf("m2 %+v, want 2 3g.40gb slices published through DRA, 1 held by a claim, active", n)
	}
	if n := nodes["g3"]; n.GPUsTotal != 2 || n.MIGProfile != "" || n.GPUMemoryMiB != 80<<10 {
		t.Errorf("g3 %+v, want 2 whole GPUs of 80Gi (the least of its devices)", n)
	}
	got := map[string]broker.Demand{}
	for _, d := range obs.Demand {
		got[d.Name] = d
	}
	if d := got["ml/one-slice"]; d.GPUsPerUnit != 1 || d.Constraints.MIGProfile != "1g.10gb" || d.Unsatisfiable != "" {
		t.Errorf("one-slice %+v, want 1 slice of 1g.10gb", d)
	}
	if d := got["ml/two-kinds"]; !strings.Contains(d.Unsatisfiable, "one kind of GPU device per pod") {
		t.Errorf("two-kinds %+v, want unsatisfiable: one kind of device per pod", d)
	}
	if d := got["ml/dra-mig"]; d.GPUsPerUnit != 1 || d.Constraints.MIGProfile != "3g.40gb" || d.Unsatisfiable != "" {
		t.Errorf("dra-mig %+v, want 1 slice of 3g.40gb", d)
	}
}
