package cloud_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// bigFleet creates groups × perGroup instances in awssim.
func bigFleet(tb testing.TB, groups, perGroup int) backend {
	sim := awssim.New(awssim.Config{})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sim.Close(tb.Context()) })
	for i := range groups {
		if err := sim.CreateGroup(awssim.GroupSpec{
			Name: fmt.Sprintf("asg-%02d", i), Max: perGroup, Desired: perGroup,
			Tags: map[string]string{cloud.TagPool: fmt.Sprintf("pool-%02d", i), cloud.TagGPUsPerNode: "8"},
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return backend{name: "awssim", endpoint: url, sim: sim}
}

func TestThousandsOfInstances(t *testing.T) {
	const groups, perGroup = 5, 500
	b := bigFleet(t, groups, perGroup)
	p := newProvider(t, b, cloud.Config{Discover: true})
	start := time.Now()
	states, err := p.Pools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("observed %d instances in %s", groups*perGroup, time.Since(start))
	if len(states) != groups {
		t.Fatalf("%d pools, want %d", len(states), groups)
	}
	hosts := map[string]bool{}
	for _, s := range states {
		if s.Desired != perGroup || len(s.Instances) != perGroup {
			t.Errorf("pool %s: desired %d, %d instances, want %d", s.Pool.Name, s.Desired, len(s.Instances), perGroup)
		}
		for _, in := range s.Instances {
			if in.Hostname == "" || hosts[in.Hostname] {
				t.Fatalf("instance %s: host name %q missing or repeated", in.ID, in.Hostname)
			}
			hosts[in.Hostname] = true
		}
	}
	// 2500 ids in batches of 200 is 13 DescribeInstances calls.
	if got := b.sim.Operations("DescribeInstances"); got != 13 {
		t.Errorf("DescribeInstances called %d times, want 13 batches", got)
	}
	// Host names are cached: a second look at a steady fleet describes
	// no instance, and a new instance is described alone.
	if err := p.SetDesired(t.Context(), "pool-00", perGroup-1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pools(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.sim.Operations("DescribeInstances"); got != 13 {
		t.Errorf("steady fleet: DescribeInstances called %d times in all, want still 13", got)
	}
}

// BenchmarkPools measures observations of 3000 instances in 10 groups
// through the real SDK clients and the simulator's HTTP server: the first
// (every instance described) and steady ones (host names cached).
func BenchmarkPools(b *testing.B) {
	const groups, perGroup = 10, 300
	be := bigFleet(b, groups, perGroup)
	p, err := cloud.New(b.Context(), cloud.Config{
		Region: "us-east-1", Endpoint: be.endpoint, Credentials: testCreds, Discover: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	first := time.Now()
	if _, err := p.Pools(b.Context()); err != nil {
		b.Fatal(err)
	}
	firstMS := float64(time.Since(first).Milliseconds())
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Pools(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(firstMS, "ms/first-observe")
	b.ReportMetric(float64(groups*perGroup), "instances")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/observe")
}
