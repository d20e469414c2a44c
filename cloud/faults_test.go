package cloud_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// fakeClock is the provider's clock: real time plus an offset the test
// moves forward.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func simBackend(t *testing.T, cfg awssim.Config) backend {
	sim, url := startSim(t, cfg)
	return backend{name: "awssim", endpoint: url, sim: sim}
}

func TestThrottlingBurstIsRetriedWithBackoff(t *testing.T) {
	b := simBackend(t, awssim.Config{})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
	p := newProvider(t, b, cloud.Config{Discover: true, MaxAttempts: 5, MaxBackoff: 40 * time.Millisecond})

	// A burst shorter than the retry budget is absorbed by the SDK.
	b.sim.Throttle("DescribeAutoScalingGroups", 3)
	start := time.Now()
	s := poolByName(t, p, "gpu-a")
	if !s.BackoffUntil.IsZero() {
		t.Errorf("absorbed burst put the pool into backoff: %s", s.BackoffReason)
	}
	if got, ops := b.sim.Calls("DescribeAutoScalingGroups"), b.sim.Operations("DescribeAutoScalingGroups"); got != 4 || ops != 1 {
		t.Errorf("DescribeAutoScalingGroups answered %d times in %d operations, want 3 throttled + 1 in one", got, ops)
	}
	// Retries wait between attempts (jittered exponential backoff), so
	// three retries cannot all be instant; this bounds the loop from
	// below without asserting on timing precision.
	t.Logf("burst of 3 absorbed in %s", time.Since(start))

	// Throttling that outlasts the retries backs the pool off, and the
	// next scale-up is refused without calling AWS: no tight loop.
	b.sim.Throttle("SetDesiredCapacity", -1)
	err := p.SetDesired(t.Context(), "gpu-a", 2)
	var be *broker.BackoffError
	if !errors.As(err, &be) || be.Pool != "gpu-a" || !strings.Contains(be.Reason, "throttled") {
		t.Fatalf("persistent throttling: got %v, want a BackoffError", err)
	}
	if got, ops := b.sim.Calls("SetDesiredCapacity"), b.sim.Operations("SetDesiredCapacity"); got != 5 || ops != 1 {
		t.Errorf("SetDesiredCapacity attempted %d times in %d operations, want MaxAttempts=5 in one", got, ops)
	}
	for range 3 {
		if err := p.SetDesired(t.Context(), "gpu-a", 2); !errors.As(err, &be) {
			t.Fatalf("scale-up during backoff: got %v, want a BackoffError", err)
		}
	}
	if got := b.sim.Calls("SetDesiredCapacity"); got != 5 {
		t.Errorf("scale-ups during backoff reached AWS: %d calls, want still 5", got)
	}
	s = poolByName(t, p, "gpu-a")
	if s.BackoffUntil.IsZero() || !strings.Contains(s.BackoffReason, "throttled") {
		t.Errorf("pool state does not show the backoff: until %s reason %q", s.BackoffUntil, s.BackoffReason)
	}
}

func TestInsufficientCapacityBacksOffOnePool(t *testing.T) {
	b := simBackend(t, awssim.Config{LaunchRetry: 50 * time.Millisecond})
	for _, n := range []string{"gpu-a", "gpu-b"} {
		createGroup(t, b, groupSpec{name: n, max: 5, tags: map[string]string{cloud.TagPool: n, cloud.TagGPUsPerNode: "4"}})
	}
	p := newProvider(t, b, cloud.Config{Discover: true, PoolBackoff: time.Hour})
	ctx := t.Context()

	b.sim.FailLaunches("gpu-a", -1, "")
	if err := p.SetDesired(ctx, "gpu-a", 1); err != nil {
		t.Fatal(err)
	}
	states, err := p.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, other := states[0], states[1]
	if a.BackoffUntil.IsZero() || !strings.Contains(a.BackoffReason, "do not have sufficient p3.8xlarge capacity") {
		t.Fatalf("pool gpu-a: backoff until %s reason %q, want insufficient capacity", a.BackoffUntil, a.BackoffReason)
	}
	if len(live(a)) != 0 {
		t.Errorf("gpu-a has %d instances although every launch fails", len(live(a)))
	}
	// The other pool is untouched, so the planner can pick it instead.
	if !other.BackoffUntil.IsZero() {
		t.Errorf("gpu-b backs off too: %s", other.BackoffReason)
	}
	var be *broker.BackoffError
	if err := p.SetDesired(ctx, "gpu-a", 2); !errors.As(err, &be) {
		t.Errorf("scale-up of a pool in backoff: got %v, want BackoffError", err)
	}
	if err := p.SetDesired(ctx, "gpu-b", 1); err != nil {
		t.Errorf("scale-up of the other pool: %v", err)
	}

	// Capacity returns: the group's own retry launches, and a newer
	// successful launch ends the backoff.
	b.sim.FailLaunches("gpu-a", 0, "")
	s := waitPool(t, p, "gpu-a", "a successful launch to end the backoff", func(s broker.PoolState) bool {
		return len(live(s)) == 1 && s.BackoffUntil.IsZero()
	})
	if s.BackoffReason != "" {
		t.Errorf("reason %q left after the backoff ended", s.BackoffReason)
	}
}

func TestPartialLaunchFailure(t *testing.T) {
	b := simBackend(t, awssim.Config{LaunchRetry: time.Hour})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
	p := newProvider(t, b, cloud.Config{Discover: true})
	// Two of three launches fail: one instance arrives, the pool backs off.
	b.sim.FailLaunches("gpu-a", 2, "")
	if err := p.SetDesired(t.Context(), "gpu-a", 3); err != nil {
		t.Fatal(err)
	}
	s := poolByName(t, p, "gpu-a")
	if s.Desired != 3 || len(live(s)) != 1 {
		t.Errorf("desired %d with %d live, want 3 with 1", s.Desired, len(live(s)))
	}
	if s.BackoffUntil.IsZero() {
		t.Errorf("partial failure left the pool without backoff")
	}
}

func TestInstanceThatNeverRegistersBacksOffAfterMaxProvisionTime(t *testing.T) {
	var (
		mu         sync.Mutex
		registered []string
	)
	b := simBackend(t, awssim.Config{BootHook: func(in awssim.Instance) {
		mu.Lock()
		registered = append(registered, in.PrivateDNSName)
		mu.Unlock()
	}})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
	clock := &fakeClock{}
	p := newProvider(t, b, cloud.Config{Discover: true, Now: clock.Now, MaxProvisionTime: 15 * time.Minute})
	b.sim.NeverRegister("gpu-a", 1)
	if err := p.SetDesired(t.Context(), "gpu-a", 2); err != nil {
		t.Fatal(err)
	}
	// The broker tells the provider what registered, every tick.
	observe := func() int {
		mu.Lock()
		defer mu.Unlock()
		p.ObserveRegistered(append([]string(nil), registered...))
		return len(registered)
	}
	deadline := time.Now().Add(10 * time.Second)
	for observe() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the healthy instance never booted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := poolByName(t, p, "gpu-a")
	if !s.BackoffUntil.IsZero() {
		t.Fatalf("backoff before max provision time: %s", s.BackoffReason)
	}
	var stuck string
	phases := map[broker.Phase]int{}
	for _, in := range s.Instances {
		phases[in.Phase]++
		if in.Phase == broker.PhaseBooting {
			stuck = in.ID
		}
	}
	if phases[broker.PhaseRegistered] != 1 || phases[broker.PhaseBooting] != 1 {
		t.Fatalf("phases %v, want one registered and one booting", phases)
	}

	clock.Advance(16 * time.Minute)
	observe()
	s = poolByName(t, p, "gpu-a")
	if s.BackoffUntil.IsZero() || !strings.Contains(s.BackoffReason, stuck) || !strings.Contains(s.BackoffReason, "did not register") {
		t.Errorf("after max provision time: until %s reason %q, want backoff naming %s", s.BackoffUntil, s.BackoffReason, stuck)
	}
	if until, reason, ok := p.Backoff("gpu-a"); !ok || until != s.BackoffUntil || reason != s.BackoffReason {
		t.Errorf("Backoff() = %s %q %v, want the pool state's", until, reason, ok)
	}
}

func TestSlowLaunchShowsPendingInstances(t *testing.T) {
	b := simBackend(t, awssim.Config{})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
	b.sim.SlowLaunches("gpu-a", 300*time.Millisecond)
	p := newProvider(t, b, cloud.Config{Discover: true})
	if err := p.SetDesired(t.Context(), "gpu-a", 1); err != nil {
		t.Fatal(err)
	}
	g, _ := b.sim.Group("gpu-a")
	if g.Pending != 1 {
		t.Fatalf("group right after scale-up: %+v, want 1 pending", g)
	}
	s := poolByName(t, p, "gpu-a")
	if len(s.Instances) != 1 || s.Instances[0].Phase != broker.PhaseBooting {
		t.Fatalf("instances %+v, want one booting", s.Instances)
	}
	waitPool(t, p, "gpu-a", "in service", func(broker.PoolState) bool {
		g, _ := b.sim.Group("gpu-a")
		return g.InService == 1
	})
}

func TestTerminateFailingHalfwayDecrementsOnce(t *testing.T) {
	for _, attempts := range []int{5, 1} {
		// With retries the SDK repeats the call; with one attempt the
		// provider's own re-check finds the termination took effect.
		t.Run(map[int]string{5: "sdk-retry", 1: "recheck"}[attempts], func(t *testing.T) {
			b := simBackend(t, awssim.Config{TerminateDelay: time.Hour})
			createGroup(t, b, groupSpec{name: "gpu-a", min: 0, max: 5, desired: 3, tags: map[string]string{cloud.TagPool: "gpu-a"}})
			p := newProvider(t, b, cloud.Config{Discover: true, MaxAttempts: attempts})
			s := waitPool(t, p, "gpu-a", "3 instances", func(s broker.PoolState) bool { return len(live(s)) == 3 })
			victim := s.Instances[0].ID

			b.sim.FailTerminateHalfway(1)
			if err := p.Terminate(t.Context(), "gpu-a", victim); err != nil {
				t.Fatalf("terminate that failed halfway: %v", err)
			}
			// The journal's executor retries the step; still one decrement.
			if err := p.Terminate(t.Context(), "gpu-a", victim); err != nil {
				t.Fatalf("retried terminate: %v", err)
			}
			g, _ := b.sim.Group("gpu-a")
			if g.Desired != 2 || g.Terminating != 1 || g.InService != 2 {
				t.Errorf("group %+v, want desired 2 with 1 terminating and 2 in service", g)
			}
			wantCalls := map[int]int{5: 2, 1: 1}[attempts]
			if got, ops := b.sim.Calls("TerminateInstanceInAutoScalingGroup"), b.sim.Operations("TerminateInstanceInAutoScalingGroup"); got != wantCalls || ops != 1 {
				t.Errorf("terminate: %d calls in %d operations, want %d in one", got, ops, wantCalls)
			}
			s = poolByName(t, p, "gpu-a")
			for _, in := range s.Instances {
				if in.ID == victim && in.Phase != broker.PhaseTerminating {
					t.Errorf("victim phase %s, want terminating", in.Phase)
				}
			}
		})
	}
}

// TestProvisionTimeFromItsOwner: with ProvisionTime set (the policy in the
// store), the provider's provision timeout is the owner's value, read on
// every observation, not the MaxProvisionTime it was built with.
func TestProvisionTimeFromItsOwner(t *testing.T) {
	var (
		mu         sync.Mutex
		registered []string
	)
	b := simBackend(t, awssim.Config{BootHook: func(in awssim.Instance) {
		mu.Lock()
		registered = append(registered, in.PrivateDNSName)
		mu.Unlock()
	}})
	createGroup(t, b, groupSpec{name: "gpu-a", max: 5, tags: map[string]string{cloud.TagPool: "gpu-a"}})
	clock := &fakeClock{}
	owner := 30 * time.Minute
	p := newProvider(t, b, cloud.Config{Discover: true, Now: clock.Now, MaxProvisionTime: 15 * time.Minute,
		ProvisionTime: func(context.Context) (time.Duration, error) { return owner, nil }})
	b.sim.NeverRegister("gpu-a", 1)
	if err := p.SetDesired(t.Context(), "gpu-a", 2); err != nil {
		t.Fatal(err)
	}
	observe := func() int {
		mu.Lock()
		defer mu.Unlock()
		p.ObserveRegistered(append([]string(nil), registered...))
		return len(registered)
	}
	deadline := time.Now().Add(10 * time.Second)
	for observe() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the healthy instance never booted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	poolByName(t, p, "gpu-a") // the first observation sees the instances launch
	clock.Advance(16 * time.Minute)
	observe()
	if s := poolByName(t, p, "gpu-a"); !s.BackoffUntil.IsZero() {
		t.Fatalf("backoff after 16m with the owner's 30m: %s", s.BackoffReason)
	}
	clock.Advance(15 * time.Minute)
	observe()
	if s := poolByName(t, p, "gpu-a"); s.BackoffUntil.IsZero() || !strings.Contains(s.BackoffReason, "within 30m0s") {
		t.Errorf("after 31m: until %s reason %q, want a backoff naming the owner's 30m0s", s.BackoffUntil, s.BackoffReason)
	}
}
