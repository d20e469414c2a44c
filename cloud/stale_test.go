package cloud_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

func statesByName(t *testing.T, p *cloud.Provider) map[string]broker.PoolState {
	t.Helper()
	states, err := p.Pools(t.Context())
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	out := map[string]broker.PoolState{}
	for _, s := range states {
		out[s.Pool.Name] = s
	}
	return out
}

// TestMissingGroupIsStaleOthersStillServed: a configured group the cloud
// no longer returns is reported stale with its last-known desired capacity
// and instances (its GPUs still count), a group that never existed is
// reported stale from its configuration, and the other pools are observed
// as usual: one missing group does not fail the whole call.
func TestMissingGroupIsStaleOthersStillServed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-a", max: 3, desired: 1})
		createGroup(t, b, groupSpec{name: "gpu-b", max: 3, desired: 1})
		p := newProvider(t, b, cloud.Config{Pools: []cloud.PoolConfig{
			{Name: "gpu-a", GPUsPerNode: 4}, {Name: "gpu-b", GPUsPerNode: 4},
			{Name: "gpu-c", Group: "never-created", GPUsPerNode: 8, MaxNodes: intp(2)},
		}})
		before := waitPool(t, p, "gpu-a", "one instance", func(s broker.PoolState) bool { return len(live(s)) == 1 })
		if _, err := client(b).DeleteAutoScalingGroup(t.Context(), &autoscaling.DeleteAutoScalingGroupInput{
			AutoScalingGroupName: aws.String("gpu-a"), ForceDelete: aws.Bool(true),
		}); err != nil {
			t.Fatal(err)
		}
		got := statesByName(t, p)
		if len(got) != 3 {
			t.Fatalf("%d pools, want every configured pool (3): %+v", len(got), got)
		}
		a := got["gpu-a"]
		if !strings.Contains(a.Stale, `"gpu-a" not found`) {
			t.Errorf("gpu-a stale %q, want the missing group named", a.Stale)
		}
		if a.Desired != 1 || len(a.Instances) != 1 || a.Instances[0].ID != before.Instances[0].ID || a.Pool.GPUsPerNode != 4 {
			t.Errorf("gpu-a = %+v; want its last-known desired 1 and instance %s", a, before.Instances[0].ID)
		}
		if s := got["gpu-b"]; s.Stale != "" || s.Desired != 1 {
			t.Errorf("gpu-b = %+v; want it observed as usual", s)
		}
		if c := got["gpu-c"]; !strings.Contains(c.Stale, "never-created") || c.Pool.GPUsPerNode != 8 || c.Pool.MaxNodes != 2 || c.Desired != 0 {
			t.Errorf("gpu-c = %+v; want it stale from its configuration", c)
		}
		// The other pools still act.
		if err := p.SetDesired(t.Context(), "gpu-b", 2); err != nil {
			t.Fatalf("scale the healthy pool: %v", err)
		}
		if err := p.SetDesired(t.Context(), "gpu-a", 2); !errors.Is(err, broker.ErrNotFound) {
			t.Errorf("scale the missing pool: %v, want ErrNotFound", err)
		}
	})
}

// TestDescribeFailureMarksOnlyThatPoolStale: when describing one group
// fails (an internal error outlasting the retries), that pool is stale
// with the error and its last-known state, the others are fresh; once the
// describe works again the pool is fresh too.
func TestDescribeFailureMarksOnlyThatPoolStale(t *testing.T) {
	b := simBackend(t, awssim.Config{})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 3, desired: 2})
	createGroup(t, b, groupSpec{name: "gpu-b", max: 3, desired: 1})
	p := newProvider(t, b, cloud.Config{MaxAttempts: 2, Pools: []cloud.PoolConfig{{Name: "gpu-a", GPUsPerNode: 4}, {Name: "gpu-b", GPUsPerNode: 4}}})
	waitPool(t, p, "gpu-a", "two instances", func(s broker.PoolState) bool { return len(live(s)) == 2 })

	b.sim.FailDescribe("gpu-a", -1)
	// Long enough for the failures to spend the SDK's retry quota: the
	// healthy group must stay fresh even then.
	for i := range 80 {
		got := statesByName(t, p)
		if a := got["gpu-a"]; !strings.Contains(a.Stale, `describe group "gpu-a"`) || a.Desired != 2 || len(a.Instances) != 2 {
			t.Fatalf("observation %d: gpu-a = %+v; want stale with the describe error and its last 2 instances", i, a)
		}
		if s := got["gpu-b"]; s.Stale != "" || s.Desired != 1 {
			t.Fatalf("observation %d: gpu-b = %+v; want fresh", i, s)
		}
	}
	b.sim.FailDescribe("gpu-a", 0)
	if a := poolByName(t, p, "gpu-a"); a.Stale != "" {
		t.Errorf("gpu-a still stale after recovery: %q", a.Stale)
	}
}

// storeBounds stands for the store: bounds an API call may change at any
// time.
type storeBounds struct {
	mu       sync.Mutex
	min, max int
}

func (s *storeBounds) set(minN, maxN int) { s.mu.Lock(); s.min, s.max = minN, maxN; s.mu.Unlock() }

func (s *storeBounds) get(_ context.Context, pool string) (int, int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.min, s.max, pool == "gpu-a", nil
}

// TestRaisedMaxNodesThroughAPIIsHonoured: the store's bounds, read on
// every call, win over the bounds the file gave at start: max_nodes raised
// through the API lets the next scale-up through, min_nodes lowered lets a
// terminate through; the group's own MaxSize still bounds what AWS accepts
// and the refusal says so.
func TestRaisedMaxNodesThroughAPIIsHonoured(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createGroup(t, b, groupSpec{name: "gpu-a", max: 6, desired: 2})
		bounds := &storeBounds{min: 2, max: 2}
		p := newProvider(t, b, cloud.Config{Bounds: bounds.get,
			Pools: []cloud.PoolConfig{{Name: "gpu-a", GPUsPerNode: 4, MinNodes: intp(2), MaxNodes: intp(2)}}})
		ctx := t.Context()
		var ve *broker.ValidationError
		if err := p.SetDesired(ctx, "gpu-a", 3); !errors.As(err, &ve) {
			t.Fatalf("above the store's max: %v, want a validation error", err)
		}
		bounds.set(1, 4) // PATCH /api/v1/pools/gpu-a {"min_nodes": 1, "max_nodes": 4}
		if err := p.SetDesired(ctx, "gpu-a", 4); err != nil {
			t.Fatalf("scale-up within the raised max: %v", err)
		}
		waitPool(t, p, "gpu-a", "4 instances", func(s broker.PoolState) bool { return len(live(s)) == 4 })
		bounds.set(1, 10)
		err := p.SetDesired(ctx, "gpu-a", 7)
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "MaxSize 6") {
			t.Fatalf("above the group's MaxSize: %v, want a validation error naming MaxSize 6", err)
		}
		// The file's min 2 no longer holds: the store says 1. (The broker
		// removes instances only by terminating them, never by a lower
		// desired capacity that lets AWS choose.)
		s := poolByName(t, p, "gpu-a")
		for _, in := range live(s)[:2] {
			if err := p.Terminate(ctx, "gpu-a", in.ID); err != nil {
				t.Fatal(err)
			}
		}
		s = waitPool(t, p, "gpu-a", "2 instances", func(s broker.PoolState) bool { return len(live(s)) == 2 && s.Desired == 2 })
		if err := p.Terminate(ctx, "gpu-a", live(s)[0].ID); err != nil {
			t.Fatalf("terminate to the store's min 1: %v", err)
		}
		s = waitPool(t, p, "gpu-a", "1 instance", func(s broker.PoolState) bool { return len(live(s)) == 1 })
		if err := p.Terminate(ctx, "gpu-a", live(s)[0].ID); !errors.Is(err, broker.ErrConflict) {
			t.Fatalf("terminate below the store's min: %v, want ErrConflict", err)
		}
	})
}
