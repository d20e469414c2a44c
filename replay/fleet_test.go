package replay

import (
	"errors"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// A fleet of two one-GPU nodes, one per side (the sides have equal work):
// two Kubernetes tasks of an hour arrive at once, the YARN task three hours
// later.
//   - static split: the second pod waits for the first (3600s) while the
//     YARN node idles;
//   - gpubroker hands the idle YARN node over (released 10s, scheduled 30s
//     later: 40s) and hands one back when the YARN task comes.
//
// Neither launches or terminates a node, and the fleet keeps its two.
func TestFleetHandsOverAndNeverBuys(t *testing.T) {
	y := nameOn(t, broker.SourceYARN, "y")
	k1, k2 := nameOn(t, broker.SourceK8s, "k1"), nameOn(t, broker.SourceK8s, "k2")
	tasks := []Task{
		{Name: k1, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: k2, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: y, Arrival: 3 * time.Hour, Run: 2 * time.Hour, GPUs: 1, QoS: QoSBE},
	}
	p := broker.DefaultPolicy()
	rep, err := Run(Config{Tasks: tasks, Pools: onePool(5), Policy: p, World: DefaultWorld(p), Policies: FleetPolicies,
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1, Fleet: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := map[string]Result{}
	for _, x := range rep.Policies {
		r[x.Name] = x
	}
	gb, st := r[PolicyBroker], r[PolicyStaticFleet]
	for _, x := range []Result{gb, st} {
		if x.Launches != 0 || x.Terminations != 0 || x.PeakNodes != 2 || x.Unserved != 0 {
			t.Errorf("%s: %d launches, %d terminations, %d nodes at peak, %d unserved; want 0, 0, 2, 0", x.Name, x.Launches, x.Terminations, x.PeakNodes, x.Unserved)
		}
	}
	if st.Handovers != 0 || st.WaitP95["k8s"] < 3500 {
		t.Errorf("static split: %d hand-overs, Kubernetes p95 wait %gs; want none, and the second pod waiting an hour", st.Handovers, st.WaitP95["k8s"])
	}
	if gb.Handovers < 2 || gb.WaitP95["k8s"] > 60 || gb.WaitP95["yarn"] > 60 {
		t.Errorf("gpubroker: %d hand-overs, p95 waits Kubernetes %gs, YARN %gs; want 2 or more, each under a minute", gb.Handovers, gb.WaitP95["k8s"], gb.WaitP95["yarn"])
	}
	if len(rep.Loads[0].Pools) != 1 || !rep.Loads[0].Pools[0].Fleet() || rep.Loads[0].Pools[0].MaxNodes != 2 {
		t.Errorf("pools %+v, want the one fleet pool of 2 nodes", rep.Loads[0].Pools)
	}
	if g := rep.Goals(); len(g) != 3 {
		t.Errorf("fleet comparison %q", g)
	}
}

// fleetPools scales the node list's mix to the fleet's size, every type a
// fleet pool whose min and max are its nodes.
func TestFleetPoolsScaleTheMix(t *testing.T) {
	c := Config{NodeTypes: []NodeType{{Model: "V100M16", GPUs: 8, Count: 30}, {Model: "T4", GPUs: 1, Count: 60}, {Model: "A10", GPUs: 1, Count: 10}}, Headroom: 1}
	pools := fleetPools(c, 10)
	total := 0
	for _, p := range pools {
		if !p.Fleet() || p.MinNodes != p.MaxNodes || p.Sides != broker.PoolShared {
			t.Errorf("pool %+v is not a shared fleet pool", p)
		}
		total += p.MaxNodes
	}
	if total != 10 || len(pools) != 3 || pools[0].MaxNodes != 3 || pools[1].MaxNodes != 6 || pools[2].MaxNodes != 1 {
		t.Errorf("pools %+v, want 3, 6 and 1 nodes", pools)
	}
}

// A fleet replay compares gpubroker with the static split only: a policy
// that buys is refused naming the field, and so is a negative fleet.
func TestFleetRefusesBuyingPolicies(t *testing.T) {
	p := broker.DefaultPolicy()
	base := Config{Tasks: []Task{{Name: "a", Run: time.Minute, GPUs: 1, QoS: QoSBE}}, Pools: onePool(2), Policy: p, World: DefaultWorld(p),
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1}
	for _, c := range []struct {
		fleet    int
		policies []string
		field    string
	}{
		{4, []string{PolicyBroker, PolicyPerSide}, "policies"},
		{4, []string{PolicyStaticPeak}, "policies"},
		{0, []string{PolicyStaticFleet}, "policies"},
		{-1, []string{PolicyBroker}, "fleet"},
	} {
		cfg := base
		cfg.Fleet, cfg.Policies = c.fleet, c.policies
		_, err := Run(cfg)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("fleet %d, policies %v: %v, want an error on %s", c.fleet, c.policies, err, c.field)
		}
	}
}
