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
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.pools) != 2 || !c.pools[0].Fleet() || c.pools[0].MaxNodes != 2 || c.pools[1].Fleet() || c.pools[1].Provider != "aws" {
		t.Fatalf("pools = %+v, want the fleet of 2 hosts and the aws pool", c.pools)
	}
	if h := c.fleetHosts["owned"]; len(h) != 2 || h[0] != "gpu-01" {
		t.Errorf("fleet hosts = %v", c.fleetHosts)
	}
	for _, bad := range []struct{ yaml, field, fix string }{
		{"{name: f, provider: fleet, gpus_per_node: 8}", "pools[0].hosts", "names its hosts"},
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
	if len(ac.FleetHosts["owned"]) != 2 || ac.Pools[0].Provider != broker.ProviderFleet {
		t.Errorf("app config fleet hosts %v, pools %+v", ac.FleetHosts, ac.Pools)
	}
}
