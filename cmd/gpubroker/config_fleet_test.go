package main

import (
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
)

// TestConfigFleetPool: a fleet pool names its hosts and no cloud group nor
// bounds; mistakes name the field and the fix; a config of fleet pools
// needs no cloud section.
func TestConfigFleetPool(t *testing.T) {
	c, err := parseConfig("f.yaml", []byte(`
pools:
  - {name: owned, provider: fleet, gpus_per_node: 8, gpu_model: A100, hosts: [gpu-01, gpu-02]}
  - {name: burst, gpus_per_node: 8, max_nodes: 4}
  - {name: lab, provider: fleet, gpus_per_node: 4, node_selector: {gpubroker.io/fleet: lab}, yarn_partition: lab}
`))
	if err != nil {
		t.Fatal(err)
	}
	if lab := c.fleet["lab"]; lab.NodeSelector["gpubroker.io/fleet"] != "lab" || lab.YARNPartition != "lab" || len(lab.Hosts) != 0 {
		t.Errorf("fleet lab members = %+v, want the node selector and the partition", lab)
	}
	if len(c.pools) != 3 || !c.pools[0].Fleet() || c.pools[0].MaxNodes != 2 || c.pools[1].Fleet() || c.pools[1].Provider != "aws" {
		t.Fatalf("pools = %+v, want the fleet of 2 hosts and the aws pool", c.pools)
	}
	if h := c.fleet["owned"].Hosts; len(h) != 2 || h[0] != "gpu-01" {
		t.Errorf("fleet members = %v", c.fleet)
	}
	for _, bad := range []struct{ yaml, field, fix string }{
		{"{name: f, provider: fleet, gpus_per_node: 8}", "pools[0].hosts", "names its members"},
		{"{name: f, gpus_per_node: 8, max_nodes: 3, node_selector: {a: b}}", "pools[0].node_selector", "provider: fleet"},
		{"{name: f, provider: fleet, gpus_per_node: 8, max_nodes: 3, hosts: [a]}", "pools[0].max_nodes", "size is its hosts"},
		{"{name: f, provider: fleet, gpus_per_node: 8, group: asg, hosts: [a]}", "pools[0].group", "remove group"},
		{"{name: f, gpus_per_node: 8, max_nodes: 3, hosts: [a]}", "pools[0].hosts", "provider: fleet"},
		{"{name: f, provider: gcp, gpus_per_node: 8}", "pools[0].provider", "aws"},
		{"{name: f, provider: fleet, gpus_per_node: 8, hosts: [a, a]}", "pools[0].hosts[1]", "one pool"},
	} {
		_, err := parseConfig("f.yaml", []byte("pools:\n  - "+bad.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), bad.field) || !strings.Contains(err.Error(), bad.fix) {
			t.Errorf("%s: %v, want an error naming %s and %q", bad.yaml, err, bad.field, bad.fix)
		}
	}
	// The fleet's hosts reach the assembly.
	ac, err := appConfig(c, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if len(ac.FleetMembers["owned"].Hosts) != 2 || ac.Pools[0].Provider != broker.ProviderFleet {
		t.Errorf("app config fleet members %v, pools %+v", ac.FleetMembers, ac.Pools)
	}
}
