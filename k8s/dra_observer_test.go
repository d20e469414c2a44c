package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpubroker/gpubroker/broker"
)

// draPod is a pending, unschedulable pod that asks GPUs only through its
// claims: by name, or by template.
func draPod(ns, name string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	p := gpuPod(ns, name, 0)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	p.Spec.ResourceClaims = claims
	return p
}

func byName(ref, claim string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: ref, ResourceClaimName: &claim}
}

func resourceClaim(ns, name string, spec *resourcev1.ResourceClaimSpec) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: *spec}
}

// TestObserverDRADemand: with DRA on, a running pod's allocated GPU
// devices are GPUs allocated on its node (a claim two pods share once), a
// pending pod's unallocated GPU claims are its demand (the claim's product as its model), a claim three
// pods share counts once (for the first), a pod's template counts before
// its claim exists, an allocated claim and a NIC claim count nothing, and a
// selector the broker does not understand makes the demand unsatisfiable
// with the reason.
func TestObserverDRADemand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a10g := `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A10G"`
	allocated := resourceClaim("ml", "done", claimOf(exactly("g", DefaultGPUDeviceClass, "", 1)))
	allocated.Status.Allocation = &resourcev1.AllocationResult{}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "one-gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: *claimOf(exactly("g", DefaultGPUDeviceClass, "", 1))}}
	tmplName := "one-gpu"
	// A running pod holds 2 GPUs through its allocated claim, shared
	// with a second pod on the same node (counted once).
	running := resourceClaim("ml", "running", claimOf(exactly("g", DefaultGPUDeviceClass, "", 2)))
	running.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "g", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0"}, {Request: "g", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-1"}}}}
	runner := draPod("ml", "runner", byName("c", "running"))
	onNode("n1", corev1.PodRunning)(runner)
	sidecar := draPod("ml", "runner-2", byName("c", "running"))
	onNode("n1", corev1.PodRunning)(sidecar)
	// A node whose GPUs only DRA's driver publishes: 4 GPUs (its 2 MIG
	// devices are no whole GPUs), an older generation of its pool ignored.
	gpuType, migType := "gpu", "mig"
	slice := func(name string, gen int64, devices ...resourcev1.Device) *resourcev1.ResourceSlice {
		node := "n2"
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
			Driver: DefaultGPUDeviceClass, NodeName: &node, Pool: resourcev1.ResourcePool{Name: "n2", Generation: gen, ResourceSliceCount: 1}, Devices: devices}}
	}
	dev := func(name string, typ *string) resourcev1.Device {
		d := resourcev1.Device{Name: name}
		if typ != nil {
			d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: typ}}
		}
		return d
	}
	client := fake.NewClientset(
		gpuNode("n1", 4, "A10G"), running, runner, sidecar, gpuNode("n2", 0, "A10G"),
		slice("n2-old", 1, dev("gpu-0", &gpuType)),
		slice("n2-gpus", 2, dev("gpu-0", &gpuType), dev("gpu-1", &gpuType), dev("gpu-2", nil), dev("gpu-3", &gpuType),
			dev("mig-0", &migType), dev("mig-1", &migType)),
		resourceClaim("ml", "two-a10g", claimOf(exactly("gpus", DefaultGPUDeviceClass, "", 2, a10g))),
		resourceClaim("ml", "memory", claimOf(exactly("g", DefaultGPUDeviceClass, "", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`))),
		resourceClaim("ml", "nic", claimOf(exactly("n", "rdma.example.com", "", 1))),
		allocated, tmpl,
		draPod("ml", "shared-a", byName("c", "two-a10g")),
		draPod("ml", "shared-b", byName("c", "two-a10g")),
		draPod("ml", "shared-c", byName("c", "two-a10g")),
		draPod("ml", "templated", corev1.PodResourceClaim{Name: "c", ResourceClaimTemplateName: &tmplName}),
		draPod("ml", "memory", byName("c", "memory")),
		resourceClaim("ml", "h-only", claimOf(exactly("g", DefaultGPUDeviceClass, "", 1, `device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H")`))),
		draPod("ml", "h-only", byName("c", "h-only")),
		draPod("ml", "nic", byName("c", "nic")),
		draPod("ml", "allocated", byName("c", "done")),
	)
	obs := observeOnce(t, ctx, client, Config{DRA: "on"}, nil)
	if len(obs.Nodes) != 2 || obs.Nodes[0].GPUsAllocated != 2 || len(obs.Nodes[0].Work) != 2 {
		t.Errorf("nodes %+v, want n1 with 2 GPUs held through DRA (the shared claim once)", obs.Nodes)
	}
	if n2 := obs.Nodes[len(obs.Nodes)-1]; n2.Name != "n2" || n2.GPUsTotal != 4 || n2.Phase != broker.PhaseActive {
		t.Errorf("n2 %+v, want 4 GPUs from its ResourceSlices and active", n2)
	}
	got := map[string]broker.Demand{}
	for _, d := range obs.Demand {
		got[d.Name] = d
	}
	if len(got) != 4 {
		t.Fatalf("demand %+v, want ml/shared-a, ml/templated, ml/memory and ml/h-only", obs.Demand)
	}
	if d := got["ml/shared-a"]; d.GPUsPerUnit != 2 || len(d.Constraints.GPUModels) != 1 || d.Constraints.GPUModels[0] != "A10G" || d.Unsatisfiable != "" {
		t.Errorf("shared-a: %+v, want 2 GPUs of A10G", d)
	}
	if d := got["ml/templated"]; d.GPUsPerUnit != 1 || d.Unsatisfiable != "" {
		t.Errorf("templated: %+v, want 1 GPU from its template", d)
	}
	if d := got["ml/memory"]; d.Unsatisfiable != "" || d.GPUsPerUnit != 1 || d.Constraints.MinGPUMemoryMiB != 40<<10 {
		t.Errorf("memory: %+v, want 1 GPU of at least 40Gi", d)
	}
	// The planner buys for it only in a pool that says its GPUs have
	// the memory: a pool of unknown memory, or of 24Gi, never.
	planFor := func(pools ...broker.Pool) broker.Plan {
		var ps []broker.PoolState
		for _, p := range pools {
			ps = append(ps, broker.PoolState{Pool: p})
		}
		return broker.MakePlan(&broker.Snapshot{Now: obs.At, Demand: []broker.Demand{func() broker.Demand {
			d := got["ml/memory"]
			d.Tenant, d.FirstSeen = "research", obs.At
			return d
		}()}, Tenants: map[string]broker.Tenant{"research": {Name: "research", MaxGPUs: 8, Weight: 1}}, Pools: ps},
			broker.DefaultPolicy())
	}
	unknown := broker.Pool{Name: "unknown", Provider: "aws", GPUModel: "A100", GPUsPerNode: 8, MaxNodes: 4, Sides: broker.PoolShared}
	small := broker.Pool{Name: "small", Provider: "aws", GPUModel: "A10G", GPUsPerNode: 4, MaxNodes: 4, Sides: broker.PoolShared, GPUMemoryMiB: 24 << 10}
	big := broker.Pool{Name: "big", Provider: "aws", GPUModel: "A100", GPUsPerNode: 8, MaxNodes: 4, Sides: broker.PoolShared, GPUMemoryMiB: 80 << 10}
	if plan := planFor(unknown, small); len(plan.Actions) != 0 || len(plan.Waits) != 1 || plan.Waits[0].Reason != broker.WaitUnsatisfiable {
		t.Errorf("plan %+v, want the memory pod waiting unsatisfiable, nothing bought in pools of unknown or too little memory", plan)
	}
	if plan := planFor(unknown, small, big); len(plan.Actions) != 1 || plan.Actions[0].Pool != "big" || plan.Actions[0].Target != 1 {
		t.Errorf("plan %+v, want one node of pool big (80Gi GPUs)", plan)
	}
	// A selector the broker does not understand: the demand waits
	// unsatisfiable with the reason, and nothing is bought, though a pool
	// of H100s would fit.
	h := got["ml/h-only"]
	if !strings.Contains(h.Unsatisfiable, "selector not understood") || h.GPUsPerUnit != 1 {
		t.Fatalf("h-only: %+v, want unsatisfiable naming the selector", h)
	}
	h.Tenant, h.FirstSeen = "research", obs.At
	plan := broker.MakePlan(&broker.Snapshot{Now: obs.At, Demand: []broker.Demand{h},
		Tenants: map[string]broker.Tenant{"research": {Name: "research", MaxGPUs: 8, Weight: 1}},
		Pools:   []broker.PoolState{{Pool: broker.Pool{Name: "h", Provider: "aws", GPUModel: "H100", GPUsPerNode: 8, MaxNodes: 4, Sides: broker.PoolShared}}}},
		broker.DefaultPolicy())
	if len(plan.Actions) != 0 || len(plan.Waits) != 1 || plan.Waits[0].Reason != broker.WaitUnsatisfiable || plan.Waits[0].Detail != h.Unsatisfiable {
		t.Errorf("plan %+v, want the pod waiting unsatisfiable with its reason and nothing bought", plan)
	}
}
