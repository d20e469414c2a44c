package k8s

import (
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Resource names the adapter understands.
const (
	// ResourceGPU is the NVIDIA device plugin's whole-GPU resource.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// MIGPrefix starts every MIG slice resource, e.g. nvidia.com/mig-1g.10gb.
	MIGPrefix = "nvidia.com/mig-"
	// migSlicesPerGPU is the number of compute slices of a MIG-capable GPU
	// (A100/H100: 7), used to express MIG requests in whole GPUs.
	migSlicesPerGPU = 7
)

// GPURequest is what one pod asks of a node's GPUs, computed the way the
// scheduler computes a pod's effective request.
type GPURequest struct {
	// GPUs is the effective nvidia.com/gpu request.
	GPUs int64 `json:"gpus"`
	// MIG is the effective request per MIG resource name (without zeros).
	MIG map[string]int64 `json:"mig,omitempty"`
}

// IsZero reports whether the pod asks for no GPU resource at all.
func (r GPURequest) IsZero() bool { return r.GPUs == 0 && len(r.MIG) == 0 }

// WholeGPUs returns the request in whole GPUs for the planner: the
// nvidia.com/gpu count, or, for MIG slices, the GPUs their compute slices
// fill (a "3g" slice is 3/7 of a GPU), rounded up, whichever is larger. A
// pod needing both whole GPUs and slices needs their sum.
func (r GPURequest) WholeGPUs() int {
	if len(r.MIG) == 0 {
		return int(r.GPUs)
	}
	slices := int64(0)
	for name, n := range r.MIG {
		slices += n * migComputeSlices(name)
	}
	return int(r.GPUs) + int((slices+migSlicesPerGPU-1)/migSlicesPerGPU)
}

// PlanUnits returns the request as the planner places it: whole GPUs
// (profile empty), or slices of its one MIG profile ("1g.10gb"). A pod
// that asks for whole GPUs and MIG slices, or slices of two profiles, is
// not planned (why says so): a node offers one kind, and buying the wrong
// one on a guess is worse than waiting.
func (r GPURequest) PlanUnits() (units int, profile, why string) {
	if len(r.MIG) == 0 {
		return int(r.GPUs), "", ""
	}
	if r.GPUs > 0 || len(r.MIG) > 1 {
		return r.WholeGPUs(), "", "it asks for " + r.String() +
			": whole GPUs and MIG slices, or slices of several MIG profiles, in one pod; the broker plans one kind of GPU device per pod"
	}
	for name, n := range r.MIG {
		units, profile = int(n), strings.TrimPrefix(name, MIGPrefix)
	}
	return units, profile, ""
}

// NodeUnits returns what a node offers the planner: its whole GPUs, or
// where it advertises none (every GPU partitioned, the device plugin's
// mixed strategy) the MIG devices of its most numerous profile (ties: the
// first by name). Slices of the node's other profiles are not planned.
func (r GPURequest) NodeUnits() (units int, profile string) {
	if r.GPUs > 0 || len(r.MIG) == 0 {
		return int(r.GPUs), ""
	}
	for name, n := range r.MIG {
		p := strings.TrimPrefix(name, MIGPrefix)
		if int(n) > units || int(n) == units && p < profile {
			units, profile = int(n), p
		}
	}
	return units, profile
}

// String formats the request as "2" or "1+mig-1g.10gb=2".
func (r GPURequest) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(r.GPUs, 10))
	names := make([]string, 0, len(r.MIG))
	for n := range r.MIG {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString("+" + strings.TrimPrefix(n, "nvidia.com/") + "=" + strconv.FormatInt(r.MIG[n], 10))
	}
	return b.String()
}

// migComputeSlices parses the compute slices of a MIG profile resource name
// ("nvidia.com/mig-3g.40gb" → 3). Unknown shapes count as a whole GPU, the
// safe side for capacity planning.
func migComputeSlices(name string) int64 {
	p := strings.TrimPrefix(name, MIGPrefix)
	i := strings.IndexByte(p, 'g')
	if i <= 0 {
		return migSlicesPerGPU
	}
	n, err := strconv.ParseInt(p[:i], 10, 64)
	if err != nil || n <= 0 || n > migSlicesPerGPU {
		return migSlicesPerGPU
	}
	return n
}

// isGPUResource reports whether name is a whole-GPU or MIG resource.
func isGPUResource(name corev1.ResourceName) bool {
	return name == ResourceGPU || strings.HasPrefix(string(name), MIGPrefix)
}

// PodGPURequest returns the pod's effective GPU request, with the
// scheduler's arithmetic: the larger of (the sum over app containers plus
// restartable init containers, i.e. sidecars) and (the largest init
// container, plus the sidecars started before it), plus the pod overhead.
//
// Extended resources cannot be overcommitted, so a container's limit stands
// in for a missing request (the API server defaults it that way too).
func PodGPURequest(pod *corev1.Pod) GPURequest {
	var sum gpuAcc
	for i := range pod.Spec.Containers {
		sum.addContainer(&pod.Spec.Containers[i])
	}
	if len(pod.Spec.InitContainers) > 0 {
		var initMax, sidecars gpuAcc
		for i := range pod.Spec.InitContainers {
			c := &pod.Spec.InitContainers[i]
			var req gpuAcc
			req.addContainer(c)
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				// A sidecar keeps running: it adds to everything after it.
				sidecars.add(req)
				initMax.maxWith(sidecars)
			} else {
				req.add(sidecars)
				initMax.maxWith(req)
			}
		}
		sum.add(sidecars)
		sum.maxWith(initMax)
	}
	for n, q := range pod.Spec.Overhead {
		sum.addResource(n, quantityValue(q))
	}
	r := GPURequest{GPUs: sum.gpu}
	for n, v := range sum.mig {
		if v <= 0 {
			continue
		}
		if r.MIG == nil {
			r.MIG = map[string]int64{}
		}
		r.MIG[string(n)] = v
	}
	if r.GPUs < 0 {
		r.GPUs = 0
	}
	return r
}

// gpuAcc accumulates GPU resources; the MIG map is only allocated for pods
// that use MIG, so the common case allocates nothing.
type gpuAcc struct {
	gpu int64
	mig map[corev1.ResourceName]int64
}

func (a *gpuAcc) addResource(n corev1.ResourceName, v int64) {
	switch {
	case n == ResourceGPU:
		a.gpu += v
	case strings.HasPrefix(string(n), MIGPrefix):
		if a.mig == nil {
			a.mig = map[corev1.ResourceName]int64{}
		}
		a.mig[n] += v
	}
}

func (a *gpuAcc) add(b gpuAcc) {
	a.gpu += b.gpu
	for n, v := range b.mig {
		a.addResource(n, v)
	}
}

func (a *gpuAcc) maxWith(b gpuAcc) {
	a.gpu = max(a.gpu, b.gpu)
	for n, v := range b.mig {
		if a.mig == nil {
			a.mig = map[corev1.ResourceName]int64{}
		}
		a.mig[n] = max(a.mig[n], v)
	}
}

// addContainer adds container c's GPU requests (or limits, where no request
// is given).
func (a *gpuAcc) addContainer(c *corev1.Container) {
	for n, q := range c.Resources.Requests {
		if isGPUResource(n) {
			a.addResource(n, quantityValue(q))
		}
	}
	for n, q := range c.Resources.Limits {
		if !isGPUResource(n) {
			continue
		}
		if _, ok := c.Resources.Requests[n]; !ok {
			a.addResource(n, quantityValue(q))
		}
	}
}

// quantityValue returns q as a whole number, rounding fractions up (GPUs
// are integral; a fractional value is rejected by the API server anyway).
func quantityValue(q resource.Quantity) int64 {
	v := q.Value()
	if v == math.MaxInt64 || v < 0 {
		return 0
	}
	return v
}

// nodeGPUs returns what a node offers: whole GPUs plus MIG slices.
func nodeGPUs(list corev1.ResourceList) GPURequest {
	var r GPURequest
	for n, q := range list {
		v := quantityValue(q)
		if v <= 0 {
			continue
		}
		switch {
		case n == ResourceGPU:
			r.GPUs = v
		case strings.HasPrefix(string(n), MIGPrefix):
			if r.MIG == nil {
				r.MIG = map[string]int64{}
			}
			r.MIG[string(n)] = v
		}
	}
	return r
}
