package main

import (
	"strings"
	"testing"
)

// TestConfigPoolPartition: a pool names the YARN partition its
// NodeManagers join; a pool that serves only Kubernetes cannot.
func TestConfigPoolPartition(t *testing.T) {
	c, err := parseConfig("p.yaml", []byte(`
pools:
  - {name: fast, gpus_per_node: 4, max_nodes: 5, sides: yarn, partition: fast}
  - {name: plain, gpus_per_node: 4, max_nodes: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.pools) != 2 || c.pools[0].Partition != "fast" || c.pools[1].Partition != "" {
		t.Errorf("pools = %+v, want partitions fast and default", c.pools)
	}
	_, err = parseConfig("p.yaml", []byte("pools:\n  - {name: k, gpus_per_node: 4, max_nodes: 5, sides: k8s, partition: fast}\n"))
	if err == nil || !strings.Contains(err.Error(), "pools[0].partition") {
		t.Errorf("partition on a k8s-only pool: %v, want an error naming pools[0].partition", err)
	}
}
