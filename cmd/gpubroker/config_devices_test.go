package main

import (
	"strings"
	"testing"
)

// TestConfigPoolDevices: a pool states its GPUs' memory and its MIG
// layout, so a pool at zero is matched by them; each mistake names its
// field and the fix.
func TestConfigPoolDevices(t *testing.T) {
	c, err := parseConfig("p.yaml", []byte(`
pools:
  - {name: mig, gpu_model: A100, gpus_per_node: 8, max_nodes: 2, sides: k8s, gpu_memory: 80Gi, mig: {profile: 1g.10gb, per_gpu: 7}}
  - {name: big, gpu_model: H100, gpus_per_node: 8, max_nodes: 2, gpu_memory: 80Gi}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.pools[0]; p.MIGProfile != "1g.10gb" || p.MIGPerGPU != 7 || p.Units() != 56 || p.GPUMemoryMiB != 80<<10 || p.GPUsPerNode != 8 {
		t.Errorf("mig pool %+v, want 8 GPUs as 56 1g.10gb slices of 80Gi GPUs", p)
	}
	if p := c.pools[1]; p.MIGProfile != "" || p.Units() != 8 || p.GPUMemoryMiB != 80<<10 {
		t.Errorf("big pool %+v, want 8 whole GPUs of 80Gi", p)
	}
	for _, c := range []struct{ pool, field string }{
		{`{name: m, gpus_per_node: 4, max_nodes: 1, sides: k8s, mig: {profile: huge, per_gpu: 7}}`, "pools[0].mig.profile"},
		{`{name: m, gpus_per_node: 4, max_nodes: 1, sides: k8s, mig: {profile: 3g.40gb, per_gpu: 3}}`, "pools[0].mig.per_gpu"},
		{`{name: m, gpus_per_node: 4, max_nodes: 1, mig: {profile: 1g.10gb, per_gpu: 7}}`, "pools[0].sides"},
		{`{name: m, max_nodes: 1, sides: k8s, mig: {profile: 1g.10gb, per_gpu: 7}}`, "pools[0].gpus_per_node"},
		{`{name: m, gpus_per_node: 4, max_nodes: 1, gpu_memory: lots}`, "pools[0].gpu_memory"},
		{`{name: m, gpus_per_node: 4, max_nodes: 1, gpu_memory: 0}`, "pools[0].gpu_memory"},
	} {
		_, err := parseConfig("p.yaml", []byte("pools:\n  - "+c.pool+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.pool, err, c.field)
		}
	}
}
