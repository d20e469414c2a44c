package main

import (
	"flag"
	"fmt"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/fleet"
)

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

// The demo fleet (demo --fleet): owned 8-GPU hosts, as the openb trace's
// G2 nodes, so every task of the workload fits one.
const (
	demoFleet     = "demo-fleet"
	demoFleetGPUs = 8
)

// atFleet replaces the demo's cloud pools with a fleet of n owned 8-GPU
// hosts (demo --fleet): the cluster maximum is the fleet, and the tenants'
// quotas and guarantees grow with it.
func atFleet(c *config, n int) {
	pool := c.pools[1]
	pool.Name, pool.Provider, pool.Group, pool.GPUModel, pool.GPUsPerNode = demoFleet, broker.ProviderFleet, "", "A100", demoFleetGPUs
	pool.MinNodes, pool.MaxNodes, pool.PricePerHour = n, n, 0
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("fleet-%02d.demo", i)
	}
	c.pools, c.fleet = []broker.Pool{pool}, map[string]fleet.Members{demoFleet: {Hosts: hosts}}
	gpus := n * demoFleetGPUs
	c.policy.ClusterMaxGPUs = gpus
	for i := range c.tenants {
		c.tenants[i].MaxGPUs = gpus
		c.tenants[i].GuaranteedGPUs *= max(1, gpus/50)
	}
}

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
