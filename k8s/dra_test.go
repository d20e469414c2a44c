package k8s

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourcev1 "k8s.io/api/resource/v1"
)

func exactly(name, class string, mode resourcev1.DeviceAllocationMode, count int64, cel ...string) resourcev1.DeviceRequest {
	r := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
	for _, c := range cel {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: c}})
	}
	return r
}

func claimOf(reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaimSpec {
	return &resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}
}

// TestClaimGPURequest: every allocation mode, the CEL forms the broker
// understands, the ones it does not (unsatisfiable, naming the
// expression), other device classes, and prioritized lists.
func TestClaimGPURequest(t *testing.T) {
	const gpu, mig = DefaultGPUDeviceClass, DefaultMIGDeviceClass
	product := `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A10G"`
	for _, c := range []struct {
		name string
		spec *resourcev1.ResourceClaimSpec
		want ClaimRequest
		bad  string // part of NotUnderstood
	}{
		{"exact count of 2 A10G", claimOf(exactly("gpus", gpu, resourcev1.DeviceAllocationModeExactCount, 2, product)),
			ClaimRequest{GPUs: 2, Models: []string{"A10G"}}, ""},
		{"count defaults to 1, mode to ExactCount", claimOf(exactly("gpu", gpu, "", 0)), ClaimRequest{GPUs: 1}, ""},
		{"all of a node's GPUs", claimOf(exactly("all", gpu, resourcev1.DeviceAllocationModeAll, 0)), ClaimRequest{AllGPUs: true}, ""},
		{"two requests add up", claimOf(exactly("a", gpu, "", 1), exactly("b", gpu, "", 3)), ClaimRequest{GPUs: 4}, ""},
		{"a NIC is no GPU demand", claimOf(exactly("nic", "rdma.example.com", "", 2)), ClaimRequest{}, ""},
		{"driver equality and a product list, spaces anywhere",
			claimOf(exactly("g", gpu, "", 1, `device.driver == "gpu.nvidia.com" &&  device.attributes["gpu.nvidia.com"].productName  in  ["NVIDIA A100", "NVIDIA H100"]`)),
			ClaimRequest{GPUs: 1, Models: []string{"A100", "H100"}}, ""},
		{"two selectors intersect", claimOf(exactly("g", gpu, "", 1,
			`device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100", "NVIDIA H100"]`,
			`device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"`)), ClaimRequest{GPUs: 1, Models: []string{"H100"}}, ""},
		{"a MIG slice of a profile", claimOf(exactly("m", mig, "", 2, `device.attributes["mig.nvidia.com"].profile == "1g.10gb"`)),
			ClaimRequest{MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 2}}, ""},
		{"a prioritized list is planned by its first GPU alternative", &resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "pick", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "nic", DeviceClassName: "rdma.example.com"},
				{Name: "big", DeviceClassName: gpu, Count: 2, Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: product}}}},
				{Name: "small", DeviceClassName: gpu, Count: 4}}}}}},
			ClaimRequest{GPUs: 2, Models: []string{"A10G"}}, ""},
		{"memory at least 40Gi", claimOf(exactly("g", gpu, "", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`)),
			ClaimRequest{GPUs: 1, MinMemoryMiB: 40 << 10}, ""},
		{"memory greater than 40Gi, with a product", claimOf(exactly("g", gpu, "", 2, product+` && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) > 0`)),
			ClaimRequest{GPUs: 2, Models: []string{"A10G"}, MinMemoryMiB: 40<<10 + 1}, ""},
		{"isGreaterThan, two requests: the larger bound", claimOf(
			exactly("a", gpu, "", 1, `device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("24G"))`),
			exactly("b", gpu, "", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0`)),
			ClaimRequest{GPUs: 2, MinMemoryMiB: 80 << 10}, ""},
		{"memory at most is not understood", claimOf(exactly("g", gpu, "", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) <= 0`)),
			ClaimRequest{}, `selector not understood: "device.capacity`},
		{"a bad quantity is not understood", claimOf(exactly("g", gpu, "", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("lots")) >= 0`)),
			ClaimRequest{}, `memory quantity "lots"`},
		{"MIG by memory is not understood", claimOf(exactly("m", mig, "", 1, `device.attributes["mig.nvidia.com"].profile == "1g.10gb" && device.capacity["mig.nvidia.com"].memory.compareTo(quantity("10Gi")) >= 0`)),
			ClaimRequest{}, "MIG devices by memory"},
		{"a disjunction is not understood", claimOf(exactly("g", gpu, "", 1, product+` || device.driver == "x"`)), ClaimRequest{}, "selector not understood"},
		{"products that exclude each other", claimOf(exactly("g", gpu, "", 1, product, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA T4"`)),
			ClaimRequest{}, "no GPU product"},
		{"requests of different products", claimOf(exactly("a", gpu, "", 1, product), exactly("b", gpu, "", 1, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA T4"`)),
			ClaimRequest{GPUs: 1, Models: []string{"A10G"}}, "another GPU product"},
		{"MIG without a profile", claimOf(exactly("m", mig, "", 1)), ClaimRequest{}, "without a profile selector"},
		{"all MIG devices", claimOf(exactly("m", mig, resourcev1.DeviceAllocationModeAll, 0, `device.attributes["mig.nvidia.com"].profile == "1g.10gb"`)),
			ClaimRequest{}, "all MIG devices"},
	} {
		got := ClaimGPURequest(c.spec, DefaultDeviceClasses())
		if c.bad != "" {
			if !strings.Contains(got.NotUnderstood, c.bad) {
				t.Errorf("%s: not understood %q, want it to say %q", c.name, got.NotUnderstood, c.bad)
			}
			got.NotUnderstood = ""
		}
		if d := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, d)
		}
	}
}

// FuzzClaimGPURequest: any expression and counts map without a panic; a
// claim is either understood (no NotUnderstood) with non-negative counts
// within the bound, or unsatisfiable naming why.
func FuzzClaimGPURequest(f *testing.F) {
	f.Add(`device.attributes["gpu.nvidia.com"].productName == "NVIDIA A10G"`, int64(2), false, false)
	f.Add(`device.attributes["mig.nvidia.com"].profile == "3g.40gb"`, int64(1), true, false)
	f.Add(`device.driver == "gpu.nvidia.com" && device.attributes["x"].productName in ["A", "B"]`, int64(-3), false, true)
	f.Add(`"unterminated`, int64(1000), false, false)
	f.Fuzz(func(t *testing.T, expr string, count int64, isMIG, all bool) {
		class := DefaultGPUDeviceClass
		if isMIG {
			class = DefaultMIGDeviceClass
		}
		mode := resourcev1.DeviceAllocationModeExactCount
		if all {
			mode = resourcev1.DeviceAllocationModeAll
		}
		r := ClaimGPURequest(claimOf(exactly("r", class, mode, count, expr)), DefaultDeviceClasses())
		if r.GPUs < 0 || r.GPUs > MaxDeviceCount {
			t.Fatalf("GPUs %d out of bounds", r.GPUs)
		}
		for name, n := range r.MIG {
			if n <= 0 || n > MaxDeviceCount || !strings.HasPrefix(name, MIGPrefix) {
				t.Fatalf("MIG %s=%d", name, n)
			}
		}
		if r.NotUnderstood == "" && r.IsZero() {
			t.Fatalf("a GPU request of %q mapped to nothing without a reason", expr)
		}
		for _, m := range r.Models {
			if m == "" {
				t.Fatalf("an empty model from %q", expr)
			}
		}
	})
}
