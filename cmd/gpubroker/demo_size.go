package main

import "github.com/gpubroker/gpubroker/cloud/awssim"

// atSize scales the demo scenario to a pool of up to nodes 4-GPU nodes
// (demo --nodes): the group starts with all of them booting and the pool
// keeps at least half, so the dashboard shows a cluster of that size at
// once; the tenants' quotas and the cluster maximum grow with it.
func atSize(c *config, group *awssim.GroupSpec, nodes int) {
	gpus := 4 * nodes
	c.policy.ClusterMaxGPUs = gpus
	c.pools[0].MinNodes, c.pools[0].MaxNodes = nodes/2, nodes
	group.Min, group.Max, group.Desired = nodes/2, nodes, nodes
	for i := range c.tenants {
		c.tenants[i].MaxGPUs = gpus
		c.tenants[i].GuaranteedGPUs *= max(1, nodes/10)
	}
}
