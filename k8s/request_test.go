package k8s

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func ctr(name string, req, lim map[string]string) corev1.Container {
	c := corev1.Container{Name: name}
	if req != nil {
		c.Resources.Requests = corev1.ResourceList{}
		for k, v := range req {
			c.Resources.Requests[corev1.ResourceName(k)] = resource.MustParse(v)
		}
	}
	if lim != nil {
		c.Resources.Limits = corev1.ResourceList{}
		for k, v := range lim {
			c.Resources.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
		}
	}
	return c
}

func gpus(n string) map[string]string { return map[string]string{"nvidia.com/gpu": n} }

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestPodGPURequest(t *testing.T) {
	tests := []struct {
		name      string
		spec      corev1.PodSpec
		want      GPURequest
		wantWhole int
	}{
		{
			name: "no gpus",
			spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"cpu": "2"}, nil)}},
			want: GPURequest{},
		},
		{
			name:      "reference job: requests and limits 2, counted once",
			spec:      corev1.PodSpec{Containers: []corev1.Container{ctr("train", gpus("2"), gpus("2"))}},
			want:      GPURequest{GPUs: 2},
			wantWhole: 2,
		},
		{
			name:      "limit only stands in for the request",
			spec:      corev1.PodSpec{Containers: []corev1.Container{ctr("a", nil, gpus("3"))}},
			want:      GPURequest{GPUs: 3},
			wantWhole: 3,
		},
		{
			name:      "containers add up",
			spec:      corev1.PodSpec{Containers: []corev1.Container{ctr("a", gpus("1"), nil), ctr("b", gpus("2"), nil), ctr("c", nil, nil)}},
			want:      GPURequest{GPUs: 3},
			wantWhole: 3,
		},
		{
			name: "largest init container wins over a smaller sum",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("i1", gpus("1"), nil), ctr("i2", gpus("4"), nil)},
				Containers:     []corev1.Container{ctr("a", gpus("2"), nil)},
			},
			want:      GPURequest{GPUs: 4},
			wantWhole: 4,
		},
		{
			name: "init containers do not add up",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("i1", gpus("1"), nil), ctr("i2", gpus("1"), nil)},
				Containers:     []corev1.Container{ctr("a", gpus("3"), nil)},
			},
			want:      GPURequest{GPUs: 3},
			wantWhole: 3,
		},
		{
			name: "overhead adds to the effective request",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("i", gpus("4"), nil)},
				Containers:     []corev1.Container{ctr("a", gpus("2"), nil)},
				Overhead:       corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "cpu": resource.MustParse("250m")},
			},
			want:      GPURequest{GPUs: 5},
			wantWhole: 5,
		},
		{
			name: "sidecar runs alongside the app and later init containers",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{sidecar(ctr("side", gpus("1"), nil)), ctr("i", gpus("3"), nil)},
				Containers:     []corev1.Container{ctr("a", gpus("2"), nil)},
			},
			// max(2 + 1 sidecar, 3 + 1 sidecar started before it) = 4
			want:      GPURequest{GPUs: 4},
			wantWhole: 4,
		},
		{
			name: "init before the sidecar does not see it",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("i", gpus("3"), nil), sidecar(ctr("side", gpus("1"), nil))},
				Containers:     []corev1.Container{ctr("a", gpus("1"), nil)},
			},
			want:      GPURequest{GPUs: 3},
			wantWhole: 3,
		},
		{
			name:      "MIG slices round up to whole GPUs by compute slices",
			spec:      corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/mig-1g.10gb": "2"}, nil)}},
			want:      GPURequest{MIG: map[string]int64{"nvidia.com/mig-1g.10gb": 2}},
			wantWhole: 1,
		},
		{
			name: "MIG 3g slices: 3x3g = 9/7 -> 2 GPUs, plus whole GPUs",
			spec: corev1.PodSpec{Containers: []corev1.Container{
				ctr("a", map[string]string{"nvidia.com/mig-3g.40gb": "3"}, nil),
				ctr("b", gpus("1"), nil),
			}},
			want:      GPURequest{GPUs: 1, MIG: map[string]int64{"nvidia.com/mig-3g.40gb": 3}},
			wantWhole: 3,
		},
		{
			name: "MIG init container max and overhead",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("i", map[string]string{"nvidia.com/mig-2g.20gb": "3"}, nil)},
				Containers:     []corev1.Container{ctr("a", map[string]string{"nvidia.com/mig-2g.20gb": "1"}, nil)},
				Overhead:       corev1.ResourceList{"nvidia.com/mig-2g.20gb": resource.MustParse("1")},
			},
			want:      GPURequest{MIG: map[string]int64{"nvidia.com/mig-2g.20gb": 4}},
			wantWhole: 2,
		},
		{
			name:      "unknown MIG profile counts as a whole GPU",
			spec:      corev1.PodSpec{Containers: []corev1.Container{ctr("a", map[string]string{"nvidia.com/mig-weird": "1"}, nil)}},
			want:      GPURequest{MIG: map[string]int64{"nvidia.com/mig-weird": 1}},
			wantWhole: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodGPURequest(&corev1.Pod{Spec: tt.spec})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("PodGPURequest (-want +got):\n%s", diff)
			}
			if w := got.WholeGPUs(); w != tt.wantWhole {
				t.Errorf("WholeGPUs = %d, want %d", w, tt.wantWhole)
			}
			if got.IsZero() != (tt.wantWhole == 0) {
				t.Errorf("IsZero = %v with %d whole GPUs", got.IsZero(), tt.wantWhole)
			}
		})
	}
}

func TestGPURequestString(t *testing.T) {
	r := GPURequest{GPUs: 1, MIG: map[string]int64{"nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-1g.10gb": 1}}
	if got, want := r.String(), "1+mig-1g.10gb=1+mig-2g.20gb=2"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
