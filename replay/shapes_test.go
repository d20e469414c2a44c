package replay

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestWithShape: a pool of larger nodes is also offered as nodes of the
// shape, as many GPUs at most, same model and sides; a pool of nodes no
// larger than the shape is not; the caller's pools are left as they are.
func TestWithShape(t *testing.T) {
	pools := []broker.Pool{
		{Name: "g2-8gpu", Provider: "replay", Group: "g2-8gpu", GPUModel: "G2", GPUsPerNode: 8, MinNodes: 1, MaxNodes: 3, Sides: broker.PoolShared},
		{Name: "t4-1gpu", Provider: "replay", Group: "t4-1gpu", GPUModel: "T4", GPUsPerNode: 1, MaxNodes: 4, Sides: broker.PoolYARN},
	}
	got := withShape(pools[:2:2], 2)
	if len(pools) != 2 || pools[0].GPUsPerNode != 8 {
		t.Fatalf("the caller's pools changed: %+v", pools)
	}
	if len(got) != 3 {
		t.Fatalf("pools %+v: want the two listed and g2 as 2-GPU nodes", got)
	}
	s := got[2]
	if s.Name != "g2-8gpu-as-2gpu" || s.GPUModel != "G2" || s.GPUsPerNode != 2 || s.MaxNodes != 12 || s.MinNodes != 0 || s.Sides != broker.PoolShared {
		t.Fatalf("shape pool %+v: want g2-8gpu-as-2gpu, G2, 2 GPUs, max 12 (24 GPUs), min 0, shared", s)
	}
	if got := withShape(pools, 0); len(got) != 2 {
		t.Fatalf("shape 0 gave %d pools, want the 2 listed", len(got))
	}
}

// TestShapeBuysTheSmallerNode, worked by hand: one LS task of an hour on
// an empty cluster of 4-GPU nodes (see TestOneTaskOnAnEmptyCluster: bought
// at 0, the task runs 210s..3810s, a node idle 5m is released 10s later
// and billed 1m more). A 1-GPU task as listed: a 4-GPU node, underused
// (25%) from the start, so it leaves as soon as the task ends: 4 GPUs for
// 3880s. Offered 1-GPU nodes too, the expander (least-waste) buys one of
// those: 1 GPU for 4180s. A 4-GPU task still takes the listed node, full,
// idle 5m after the task: 4 GPUs for 4180s.
func TestShapeBuysTheSmallerNode(t *testing.T) {
	pools := []broker.Pool{{Name: "a10-4gpu", Provider: "replay", Group: "a10", GPUModel: "A10", GPUsPerNode: 4, MaxNodes: 2, Sides: broker.PoolShared}}
	run := func(gpus, shape int) Result {
		t.Helper()
		p := broker.DefaultPolicy()
		tasks := []Task{{Name: nameOn(t, broker.SourceK8s, "solo"), Arrival: 0, Run: time.Hour, GPUs: gpus, QoS: QoSLS}}
		rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: DefaultWorld(p), Policies: []string{PolicyBroker},
			YARNShare: 0.5, Loads: []float64{1}, Headroom: 1, Shape: shape})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Policies[0]
	}
	for _, c := range []struct {
		gpus, shape int
		want        float64
	}{
		{1, 0, 4 * 3880.0 / 3600},
		{1, 1, 4180.0 / 3600},
		{4, 1, 4 * 4180.0 / 3600},
	} {
		if got := run(c.gpus, c.shape); got.GPUHours != c.want || got.Unserved != 0 {
			t.Errorf("%d-GPU task, shape %d: %v GPU-hours, %d unserved; want %v, 0", c.gpus, c.shape, got.GPUHours, got.Unserved, c.want)
		}
	}
}

// TestRunShapesReport: RunShapes replays gpubroker alone per shape, and
// the report prints the listed shape first at each load, then each shape.
func TestRunShapesReport(t *testing.T) {
	p := broker.DefaultPolicy()
	pools := []broker.Pool{{Name: "a10-4gpu", Provider: "replay", Group: "a10", GPUModel: "A10", GPUsPerNode: 4, MaxNodes: 2, Sides: broker.PoolShared}}
	tasks := []Task{{Name: nameOn(t, broker.SourceK8s, "solo"), Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSLS}}
	c := Config{Tasks: tasks, Pools: pools, Policy: p, World: DefaultWorld(p), Policies: Policies,
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1}
	rep, err := RunSeeds(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Shapes, err = RunShapes(c, 1, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	// gpubroker and the two autoscalers (the static splits are not
	// replayed per shape), shape 1, then 2.
	var got []string
	for _, s := range rep.Shapes {
		got = append(got, fmt.Sprintf("%d %s", s.Shape, s.Policy))
	}
	want := []string{"1 " + PolicyBroker, "1 " + PolicyPerSide, "1 " + PolicySafeSide, "2 " + PolicyBroker, "2 " + PolicyPerSide, "2 " + PolicySafeSide}
	if !slices.Equal(got, want) {
		t.Fatalf("shapes %q, want %q", got, want)
	}
	// Both gpubroker and the autoscaler buy the 1-GPU node for the 1-GPU task.
	for _, i := range []int{0, 1} {
		if got, want := rep.Shapes[i].GPUHours.Mean, 4180.0/3600; got != want {
			t.Errorf("shape 1, %s: %v GPU-hours, want %v", rep.Shapes[i].Policy, got, want)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	i, j, k := strings.Index(out, "as listed"), strings.Index(out, "also 1-GPU"), strings.Index(out, "also 2-GPU")
	if !strings.Contains(out, "WHAT-IF NODE SHAPES") || i < 0 || j < i || k < j {
		t.Fatalf("report lacks the shape rows in order:\n%s", out)
	}
	if _, err := RunShapes(c, 1, []int{0}); err == nil || !strings.Contains(err.Error(), "what-if-shapes") {
		t.Fatalf("shape 0: %v, want an error naming what-if-shapes", err)
	}
	c.Fleet, c.Shape, c.Policies = 2, 1, FleetPolicies
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "what-if-shapes") {
		t.Fatalf("a fleet with a shape: %v, want an error naming what-if-shapes", err)
	}
}
