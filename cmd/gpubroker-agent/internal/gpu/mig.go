package gpu

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubroker/gpubroker/broker"
)

// migProfileSuffix names the variants of a slice count, as nvidia-smi does.
var migProfileSuffix = map[int]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:  "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:  "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:   "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:   "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:   "+gfx",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: "-me",
}

type migInstance struct {
	id   uint32
	name string
}

// migDevices lists the GPU instances of a MIG-enabled GPU as
// "<profile> gi=<id>" (for example "1g.10gb gi=3"), ordered by instance id.
// Profiles the GPU does not offer are skipped.
func (r *Reader) migDevices(ctx context.Context, d nvml.Device, g *broker.GPUReport) []string {
	var found []migInstance
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			r.warnOnce(ctx, fmt.Sprintf("%d/mig/%d", g.Index, p), "list MIG instances", "gpu", g.Index, "profile", p, "error", ret.Error())
			continue
		}
		name := migProfileName(p, info, g.MemoryTotal)
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				continue
			}
			found = append(found, migInstance{id: gii.Id, name: name})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].id < found[j].id })
	out := make([]string, 0, len(found))
	for _, m := range found {
		out = append(out, fmt.Sprintf("%s gi=%d", m.name, m.id))
	}
	return out
}

// migProfileName names a GPU instance profile the way nvidia-smi and the
// Kubernetes device plugin do ("3g.40gb"): the memory is the profile's
// share of the whole GPU rounded up to an eighth, times the GPU's memory
// in whole GB.
func migProfileName(profile int, info nvml.GpuInstanceProfileInfo, totalBytes uint64) string {
	const gib = 1 << 30
	memGB := uint64(math.Ceil(float64(info.MemorySizeMB) / 1024))
	if totalBytes > 0 {
		frac := float64(info.MemorySizeMB) * (1 << 20) / float64(totalBytes)
		frac = math.Ceil(frac*8) / 8
		totalGB := float64((totalBytes + gib - 1) / gib)
		memGB = uint64(math.Round(frac * totalGB))
	}
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, memGB, migProfileSuffix[profile])
}
