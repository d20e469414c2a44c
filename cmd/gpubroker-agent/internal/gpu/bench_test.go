package gpu_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cmd/gpubroker-agent/internal/gpu"
)

// BenchmarkSampleDGXH100 measures one sample of an 8-GPU node, two GPUs in
// MIG mode, and reports the size of the JSON report the agent pushes.
func BenchmarkSampleDGXH100(b *testing.B) {
	m := make([]metrics, 8)
	for i := range m {
		m[i] = metrics{util: uint32(10 * i), memUsed: uint64(i) * gib, tempC: 40, powerMW: 300000}
	}
	r := newRig(b, dgxh100.New(), m)
	for _, d := range r.srv.Devices[:2] {
		d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
		info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
		d.CreateGpuInstance(&info)
		d.CreateGpuInstance(&info)
	}
	rd, err := gpu.Open(context.Background(), gpu.Config{NVML: r.srv})
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	ctx := context.Background()
	var gs []broker.GPUReport
	b.ReportAllocs()
	for b.Loop() {
		if gs, err = rd.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	body, err := json.Marshal(broker.NodeReport{Node: "ip-10-0-1-7.ec2.internal", At: time.Now(), AgentVersion: "dev",
		DriverVersion: rd.DriverVersion(), GPUs: gs})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(body)), "report_bytes")
}
