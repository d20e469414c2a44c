package cloud

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpubroker/gpubroker/broker"
)

func TestPoolFromTags(t *testing.T) {
	tests := []struct {
		name     string
		tags     map[string]string
		conf     *PoolConfig
		want     broker.Pool
		warnings int
	}{
		{
			name: "cluster autoscaler node template",
			tags: map[string]string{
				TagCAGPU:                              "4",
				TagCALabel + "infra-type":             "gpu",
				TagCALabel + "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
				TagCATaint + "nvidia.com/gpu":         "present:NoSchedule",
				TagCATaint + "dedicated":              ":NoExecute",
			},
			want: broker.Pool{
				Name: "p", Provider: "aws", Group: "g", GPUsPerNode: 4, GPUModel: "NVIDIA-A100-SXM4-40GB",
				Sides:  broker.PoolShared,
				Labels: map[string]string{"infra-type": "gpu", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
				Taints: []broker.Taint{{Key: "dedicated", Effect: "NoExecute"}, {Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
			},
		},
		{
			name: "gpubroker tags win over the cluster autoscaler's",
			tags: map[string]string{
				TagCAGPU: "4", TagGPUsPerNode: "8", TagGPUModel: "H100", TagSides: "yarn",
				TagPrice: "98.32", TagPriority: "10",
			},
			want: broker.Pool{
				Name: "p", Provider: "aws", Group: "g", GPUsPerNode: 8, GPUModel: "H100",
				Sides: broker.PoolYARN, PricePerHour: 98.32, ExpanderPriority: 10,
			},
		},
		{
			name: "configuration wins over tags",
			tags: map[string]string{TagGPUsPerNode: "8", TagGPUModel: "H100", TagCALabel + "a": "1", TagCATaint + "k": "v:NoSchedule"},
			conf: &PoolConfig{GPUsPerNode: 4, GPUModel: "A100", Sides: broker.PoolK8s,
				Labels: map[string]string{"b": "2"}, Taints: []broker.Taint{{Key: "k", Value: "w", Effect: "NoSchedule"}}},
			want: broker.Pool{
				Name: "p", Provider: "aws", Group: "g", GPUsPerNode: 4, GPUModel: "A100", Sides: broker.PoolK8s,
				Labels: map[string]string{"a": "1", "b": "2"},
				Taints: []broker.Taint{{Key: "k", Value: "w", Effect: "NoSchedule"}},
			},
		},
		{
			name: "bad tags are ignored with warnings",
			tags: map[string]string{TagGPUsPerNode: "eight", TagCAGPU: "-1", TagSides: "both", TagCATaint + "x": "NoSchedule", TagPrice: "cheap"},
			want: broker.Pool{Name: "p", Provider: "aws", Group: "g", Sides: broker.PoolShared},
			// gpus-per-node, the CA GPU count, sides, taint and price.
			warnings: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warns := poolFromTags("p", "g", tt.tags, tt.conf)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pool (-want +got):\n%s", diff)
			}
			if len(warns) != tt.warnings {
				t.Errorf("warnings %q, want %d", warns, tt.warnings)
			}
		})
	}
}

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		lifecycle, ec2 string
		want           broker.Phase
	}{
		{"Pending", "pending", broker.PhaseBooting},
		{"Pending:Wait", "running", broker.PhaseBooting},
		{"InService", "running", broker.PhaseBooting},
		{"InService", "", broker.PhaseBooting},
		{"Terminating", "shutting-down", broker.PhaseTerminating},
		{"Terminating:Wait", "running", broker.PhaseTerminating},
		{"Terminated", "terminated", broker.PhaseGone},
		{"Detaching", "running", broker.PhaseTerminating},
		{"Detached", "running", broker.PhaseGone},
		{"Standby", "running", broker.PhaseDrained},
		{"InService", "stopped", broker.PhaseTerminating},
		{"InService", "terminated", broker.PhaseGone},
	}
	for _, tt := range tests {
		if got := phaseOf(tt.lifecycle, tt.ec2); got != tt.want {
			t.Errorf("phaseOf(%q, %q) = %s, want %s", tt.lifecycle, tt.ec2, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	two, one := 2, 1
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no pools and no discovery", Config{}, "pools"},
		{"bad endpoint", Config{Discover: true, Endpoint: "localhost:5000"}, "endpoint"},
		{"bad pool name", Config{Pools: []PoolConfig{{Name: "GPU_A"}}}, "pools[0].name"},
		{"duplicate pool", Config{Pools: []PoolConfig{{Name: "a"}, {Name: "a", Group: "b"}}}, "pools[1].name"},
		{"duplicate group", Config{Pools: []PoolConfig{{Name: "a", Group: "g"}, {Name: "b", Group: "g"}}}, "pools[1].group"},
		{"min above max", Config{Pools: []PoolConfig{{Name: "a", MinNodes: &two, MaxNodes: &one}}}, "pools[0].max_nodes"},
		{"bad sides", Config{Pools: []PoolConfig{{Name: "a", Sides: "both"}}}, "pools[0].sides"},
		{"page size", Config{Discover: true, PageSize: 101}, "page_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.setDefaults()
			err := cfg.Validate()
			ve, ok := err.(*broker.ValidationError)
			if !ok || ve.Field != tt.field {
				t.Errorf("Validate() = %v, want a validation error for %s", err, tt.field)
			}
		})
	}
	ok := Config{Pools: []PoolConfig{{Name: "gpu-a"}}}
	ok.setDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
