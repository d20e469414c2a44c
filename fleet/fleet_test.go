package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

func fleetPool(name string, hosts ...string) Pool {
	return Pool{Pool: broker.Pool{Name: name, Provider: broker.ProviderFleet, GPUModel: "A100", GPUsPerNode: 8,
		Sides: broker.PoolShared}, Members: Members{Hosts: hosts}}
}

// TestMembers: a fleet pool's members are its hosts a side lists; its
// min, max and desired capacity are their count; before the sides were
// listed once every configured host is; it accepts only its own size and never
// terminates.
func TestMembers(t *testing.T) {
	ctx := context.Background()
	f, err := New([]Pool{fleetPool("b", "gpu-3"), fleetPool("a", "gpu-2", "gpu-1")})
	if err != nil {
		t.Fatal(err)
	}
	states, err := f.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[0].Stale != "" || len(states[0].Instances) != 2 || states[0].Pool.MaxNodes != 2 || states[0].Desired != 2 {
		t.Fatalf("before the sides were listed: %+v, want every configured host a member", states)
	}
	if states[0].Missing != nil {
		t.Errorf("missing before the sides were listed: %v", states[0].Missing)
	}

	f.ObserveRegistered([]string{"gpu-1", "gpu-3", "other", "i-123"})
	states, _ = f.Pools(ctx)
	a, b := states[0], states[1]
	if a.Pool.Name != "a" || a.Stale != "" || a.Desired != 1 || a.Pool.MinNodes != 1 || a.Pool.MaxNodes != 1 ||
		len(a.Instances) != 1 || a.Instances[0].Hostname != "gpu-1" || a.Instances[0].ID != "gpu-1" {
		t.Errorf("pool a: %+v, want gpu-1 alone (gpu-2 is listed by no side)", a)
	}
	if b.Desired != 1 || b.Instances[0].Hostname != "gpu-3" {
		t.Errorf("pool b: %+v", b)
	}
	if len(a.Missing) != 1 || a.Missing[0] != "gpu-2" || len(b.Missing) != 0 {
		t.Errorf("missing %v and %v, want a: [gpu-2]", a.Missing, b.Missing)
	}

	if err := f.SetDesired(ctx, "a", 1); err != nil {
		t.Errorf("set pool a to its own size: %v", err)
	}
	if err := f.SetDesired(ctx, "a", 2); err == nil || !strings.Contains(err.Error(), "fleet pool") {
		t.Errorf("grow a fleet pool: %v, want a refusal", err)
	}
	if err := f.Terminate(ctx, "a", "gpu-1"); err == nil || !strings.Contains(err.Error(), "never terminates") {
		t.Errorf("terminate a fleet host: %v, want a refusal", err)
	}
}

// TestNewRefuses: bad fleet definitions name the field and the fix.
func TestNewRefuses(t *testing.T) {
	cloudPool := fleetPool("c", "h")
	cloudPool.Provider = "aws"
	for _, c := range []struct {
		name  string
		pools []Pool
		field string
	}{
		{"no hosts", []Pool{fleetPool("a")}, "pools[0].hosts"},
		{"a host with a port", []Pool{fleetPool("a", "gpu-1:8042")}, "pools[0].hosts[0]"},
		{"a host in two pools", []Pool{fleetPool("a", "gpu-1"), fleetPool("b", "gpu-2", "gpu-1")}, "pools[1].hosts[1]"},
		{"a pool twice", []Pool{fleetPool("a", "gpu-1"), fleetPool("a", "gpu-2")}, "pools[1].name"},
		{"a cloud pool", []Pool{cloudPool}, "pools[0].provider"},
		{"a bad name", []Pool{fleetPool("A", "gpu-1")}, "pools[0].name"},
	} {
		_, err := New(c.pools)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: %v, want a validation error on %s", c.name, err, c.field)
		}
	}
}

// fakeCloud records the calls Combine routes to the cloud.
type fakeCloud struct{ calls []string }

func (c *fakeCloud) Pools(context.Context) ([]broker.PoolState, error) {
	return []broker.PoolState{
		{Pool: broker.Pool{Name: "burst", Provider: "aws", MaxNodes: 4}},
		{Pool: broker.Pool{Name: "a", Provider: "aws", MaxNodes: 4}}, // a group tagged with a fleet pool's name
	}, nil
}
func (c *fakeCloud) SetDesired(_ context.Context, pool string, _ int) error {
	c.calls = append(c.calls, "set "+pool)
	return nil
}
func (c *fakeCloud) Terminate(_ context.Context, pool, id string) error {
	c.calls = append(c.calls, "terminate "+pool+" "+id)
	return nil
}
func (c *fakeCloud) ObserveRegistered(names []string) { c.calls = append(c.calls, "registered") }

// TestCombine: the fleet's pools and the cloud's are one list; each call
// reaches its pool's owner, and nothing reaches the cloud for a fleet pool.
func TestCombine(t *testing.T) {
	ctx := context.Background()
	f, err := New([]Pool{fleetPool("a", "gpu-1")})
	if err != nil {
		t.Fatal(err)
	}
	cl := &fakeCloud{}
	np := Combine(f, cl)
	np.(interface{ ObserveRegistered([]string) }).ObserveRegistered([]string{"gpu-1"})
	states, err := np.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[0].Pool.Name != "a" || !states[0].Pool.Fleet() || states[1].Pool.Name != "burst" {
		t.Fatalf("pools %+v, want fleet a and cloud burst (the cloud's group named a dropped)", states)
	}
	if err := np.SetDesired(ctx, "burst", 1); err != nil {
		t.Fatal(err)
	}
	if err := np.Terminate(ctx, "a", "gpu-1"); err == nil {
		t.Error("terminate of a fleet host went through")
	}
	if err := np.SetDesired(ctx, "a", 5); err == nil {
		t.Error("growing the fleet pool went through")
	}
	if want := []string{"registered", "set burst"}; strings.Join(cl.calls, ",") != strings.Join(want, ",") {
		t.Errorf("cloud calls %v, want %v", cl.calls, want)
	}
	if _, err := Combine(f, nil).Pools(ctx); err != nil {
		t.Errorf("fleet alone: %v", err)
	}
}

// TestMembersBySides: a pool names members by Kubernetes labels and by
// YARN partition as well as by host; a node two pools name is the first
// pool's, and a host a pool names by name is never another's. On the first
// call the pool waits for the side it needs to be listed, and is stale
// when that never comes.
func TestMembersBySides(t *testing.T) {
	lab := Pool{Pool: broker.Pool{Name: "lab", Provider: broker.ProviderFleet, GPUModel: "A100", GPUsPerNode: 4, Sides: broker.PoolShared},
		Members: Members{Hosts: []string{"gpu-1"}, NodeSelector: map[string]string{"fleet": "lab"}, YARNPartition: "lab"}}
	other := Pool{Pool: broker.Pool{Name: "alpha", Provider: broker.ProviderFleet, GPUModel: "A100", GPUsPerNode: 4, Sides: broker.PoolShared},
		Members: Members{NodeSelector: map[string]string{"fleet": "lab"}}}
	f, err := New([]Pool{other, lab})
	if err != nil {
		t.Fatal(err)
	}
	// Never listed: the first call waits until ctx ends, then the pools
	// are stale; a later call does not wait again.
	never, err := New([]Pool{lab})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	states, err := never.Pools(ctx)
	if err != nil || states[0].Stale == "" {
		t.Fatalf("never listed: %+v, %v; want stale", states, err)
	}
	start := time.Now()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if states, _ = never.Pools(ctx2); states[0].Stale == "" || time.Since(start) > time.Second {
		t.Fatalf("a second call waited %s, or the pool is not stale: %+v", time.Since(start), states)
	}
	// The first call waits for the listing.
	done := make(chan []broker.PoolState)
	go func() {
		st, _ := f.Pools(context.Background())
		done <- st
	}()
	select {
	case st := <-done:
		t.Fatalf("Pools answered %+v before the sides were listed", st)
	case <-time.After(50 * time.Millisecond):
	}
	f.ObserveRegistered([]string{"gpu-1", "k-2", "y-3"})
	f.ObserveNodes(broker.SourceK8s, []broker.Node{
		{Name: "gpu-1", Labels: map[string]string{"fleet": "lab"}},
		{Name: "k-2", Labels: map[string]string{"fleet": "lab"}},
		{Name: "k-9", Labels: map[string]string{"fleet": "other"}},
	})
	f.ObserveNodes(broker.SourceYARN, []broker.Node{{Name: "y-3", Partition: "lab"}, {Name: "y-4"}})
	states = <-done
	members := func(st broker.PoolState) []string {
		var out []string
		for _, in := range st.Instances {
			out = append(out, in.Hostname)
		}
		return out
	}
	zooSt, labSt := states[0], states[1]
	if labSt.Stale != "" || strings.Join(members(labSt), ",") != "gpu-1,y-3" || labSt.Desired != 2 || labSt.Pool.MaxNodes != 2 {
		t.Errorf("lab: %+v, want gpu-1 (its host) and y-3 (its partition); k-2 is alpha's, the first pool naming it", labSt)
	}
	if strings.Join(members(zooSt), ",") != "k-2" {
		t.Errorf("alpha: members %v, want k-2 alone (gpu-1 is lab's host)", members(zooSt))
	}
}
