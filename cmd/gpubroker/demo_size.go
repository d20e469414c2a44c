package main

import "github.com/gpubroker/gpubroker/cloud/awssim"

// atSize scales the demo scenario to a pool of up to nodes 4-GPU nodes
// (demo --nodes): the group starts with all of them booting and the pool
// keeps at least half, so the dashboard shows a cluster of that size at
// once; the 8-GPU pool may grow to a quarter of that many nodes (empty at
// first: the workload's 8-GPU tasks buy them); the tenants' quotas and the
// cluster maximum grow with both.
func atSize(c *config, group, group8 *awssim.GroupSpec, nodes int) {
	gpus := 4*nodes + 8*(nodes/4)
	c.policy.ClusterMaxGPUs = gpus
	c.pools[0].MinNodes, c.pools[0].MaxNodes = nodes/2, nodes
	group.Min, group.Max, group.Desired = nodes/2, nodes, nodes
	c.pools[1].MinNodes, c.pools[1].MaxNodes = 0, max(c.pools[1].MaxNodes, nodes/4)
	group8.Min, group8.Max = 0, c.pools[1].MaxNodes
	for i := range c.tenants {
		c.tenants[i].MaxGPUs = gpus
		c.tenants[i].GuaranteedGPUs *= max(1, nodes/10)
	}
}
