package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// TestDemoAtSize: --nodes N makes a pool of up to N nodes, all booting at
// the start and at least N/2 kept, with the cluster maximum and quotas
// grown to match.
func TestDemoAtSize(t *testing.T) {
	c := demoConfig()
	g, g8 := awssim.GroupSpec{Max: 10}, awssim.GroupSpec{Max: 4}
	atSize(c, &g, &g8, 5000)
	p := c.pools[0]
	if p.MinNodes != 2500 || p.MaxNodes != 5000 || g.Min != 2500 || g.Max != 5000 || g.Desired != 5000 {
		t.Fatalf("pool %d..%d, group %d..%d desired %d; want 2500..5000 and desired 5000", p.MinNodes, p.MaxNodes, g.Min, g.Max, g.Desired)
	}
	if p8 := c.pools[1]; p8.GPUsPerNode != 8 || p8.MinNodes != 0 || p8.MaxNodes != 1250 || g8.Max != 1250 || g8.Desired != 0 {
		t.Fatalf("8-GPU pool %d..%d of %d GPUs, group max %d desired %d; want 0..1250 of 8, empty", p8.MinNodes, p8.MaxNodes, p8.GPUsPerNode, g8.Max, g8.Desired)
	}
	if c.policy.ClusterMaxGPUs != 30000 {
		t.Fatalf("cluster max %d GPUs, want 30000", c.policy.ClusterMaxGPUs)
	}
	for _, tn := range c.tenants {
		if tn.MaxGPUs != 30000 || tn.GuaranteedGPUs > tn.MaxGPUs || tn.GuaranteedGPUs < 2000 {
			t.Fatalf("tenant %s: guaranteed %d, max %d", tn.Name, tn.GuaranteedGPUs, tn.MaxGPUs)
		}
	}
}

// TestDemoSizeFlags: a negative --nodes or --fleet, a --load that is not
// positive, or --nodes with --fleet is refused naming the flag, before
// anything starts.
func TestDemoSizeFlags(t *testing.T) {
	for _, args := range [][]string{{"--nodes", "-1"}, {"--load", "0"}, {"--fleet", "-2"}, {"--fleet", "3", "--nodes", "4"}} {
		var errOut strings.Builder
		e := env{stdout: io.Discard, stderr: &errOut, getenv: func(string) string { return "" }}
		if code := run(context.Background(), e, append([]string{"demo"}, args...)); code != 2 {
			t.Fatalf("demo %v: exit %d, want 2; stderr %s", args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), args[0]) {
			t.Fatalf("demo %v: the message does not name %s: %s", args, args[0], errOut.String())
		}
	}
}

// TestDemoAtFleet: --fleet N replaces the cloud pools with one fleet of N
// owned 8-GPU hosts; the cluster maximum is the fleet and the quotas grow
// with it.
func TestDemoAtFleet(t *testing.T) {
	c := demoConfig()
	atFleet(c, 40)
	if len(c.pools) != 1 || !c.pools[0].Fleet() || c.pools[0].GPUsPerNode != 8 || c.pools[0].MaxNodes != 40 || len(c.fleet[demoFleet].Hosts) != 40 {
		t.Fatalf("pools %+v, hosts %v: want one fleet of 40 8-GPU hosts", c.pools, c.fleet)
	}
	if c.policy.ClusterMaxGPUs != 320 || c.tenants[0].MaxGPUs != 320 || c.tenants[0].GuaranteedGPUs != 8*6 {
		t.Fatalf("cluster max %d, tenant %+v", c.policy.ClusterMaxGPUs, c.tenants[0])
	}
	if err := checkFleet(c.pools, c.fleet); err != nil {
		t.Fatal(err)
	}
}
