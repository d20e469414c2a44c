package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMIGProfileNames(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		profile  int
		slices   uint32
		memMB    uint64
		totalMiB uint64
		want     string
	}{
		// Figures real GPUs report (nvidia-smi mig -lgip).
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 9856, 81559, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 9856, 81559, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 40192, 81559, "3g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 80896, 81559, "7g.80gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 4864, 40960, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 9856, 40960, "2g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 19968, 81559, "1g.20gb"},
		// Unknown total memory: the profile's own size, rounded up.
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 4, 40192, 0, "4g.40gb"},
	}
	for _, c := range cases {
		info := nvml.GpuInstanceProfileInfo{SliceCount: c.slices, MemorySizeMB: c.memMB}
		if got := migProfileName(c.profile, info, c.totalMiB*mib); got != c.want {
			t.Errorf("profile %d, %d MB of %d MiB: got %q, want %q", c.profile, c.memMB, c.totalMiB, got, c.want)
		}
	}
}
