package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// The fixes that make the replay's figures trustworthy (issue 27), each on
// a small trace worked by hand.

func runLoadWith(t *testing.T, tasks []Task, pools []broker.Pool, w World, policies ...string) LoadResult {
	t.Helper()
	p := broker.DefaultPolicy()
	w.DrainTimeout = p.DrainTimeout.D()
	rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: w, Policies: policies,
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Loads[0]
}

func byName(lr LoadResult) map[string]Result {
	out := map[string]Result{}
	for _, r := range lr.Policies {
		out[r.Name] = r
	}
	return out
}

// A task evicted and re-queued waits again, and that wait counts. All on
// Kubernetes, one node at most (TestKubePreemptionInsideKubernetes): the
// per-side autoscaler places the BE pod at 240s; the LS pod arriving at
// 20m preempts it, and the BE pod, pending again at 20m30s, waits for the
// LS pod's hour to end (80m30s): 240s + 3600s = 3840s in all.
func TestRequeueWaitsCount(t *testing.T) {
	be := nameOn(t, broker.SourceK8s, "be")
	ls := nameOn(t, broker.SourceK8s, "ls")
	tasks := []Task{
		{Name: be, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: ls, Arrival: 20 * time.Minute, Run: time.Hour, GPUs: 1, QoS: QoSLS},
	}
	ca := byName(runLoadWith(t, tasks, onePool(1), DefaultWorld(broker.DefaultPolicy()), PolicyPerSide))[PolicyPerSide]
	if ca.Restarts != 1 || ca.WaitP50["BE"] != 3840 || ca.WaitP50["LS"] != 30 {
		t.Errorf("per-side: %d restarts, BE wait %gs, LS wait %gs; want 1, 3840s (240s + the 3600s re-queued), 30s",
			ca.Restarts, ca.WaitP50["BE"], ca.WaitP50["LS"])
	}
	// The BE pod ran 16 minutes past no checkpoint (30 min interval): a
	// work-losing kill, by a preemption, of BE work.
	if ca.Kills != 1 || ca.KillsNotPreemption != 0 || ca.LSKills != 0 || ca.Migrations != 0 {
		t.Errorf("per-side: %d kills, %d not preemptions, %d LS kills, %d migrations; want 1, 0, 0, 0", ca.Kills, ca.KillsNotPreemption, ca.LSKills, ca.Migrations)
	}
}

// Static splits are sized at the demand's p95 and peak, and the one sized
// at gpubroker's average says so. All on Kubernetes, 1-GPU nodes, max 4:
// A (96h), B and C (4h each), 1 GPU each, from 0: demand 3 GPUs for 4h,
// then 1 for 92h: peak 3, time-weighted p95 1 (92h of 96h at 1 or less).
// static-p95 holds 4 x 1/4 = 1 node, static-peak 4 x 3/4 = 3.
func TestStaticSplitSizes(t *testing.T) {
	a := nameOn(t, broker.SourceK8s, "a")
	b := nameOn(t, broker.SourceK8s, "b")
	c := nameOn(t, broker.SourceK8s, "c")
	tasks := []Task{
		{Name: a, Arrival: 0, Run: 96 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: b, Arrival: 0, Run: 4 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: c, Arrival: 0, Run: 4 * time.Hour, GPUs: 1, QoS: QoSBE},
	}
	lr := runLoadWith(t, tasks, onePool(4), DefaultWorld(broker.DefaultPolicy()), Policies...)
	if lr.PeakDemandGPUs != 3 || lr.P95DemandGPUs != 1 {
		t.Fatalf("demand peak %d, p95 %d; want 3, 1", lr.PeakDemandGPUs, lr.P95DemandGPUs)
	}
	nodes := map[string]int{}
	for _, st := range lr.Static {
		nodes[st.Policy] += st.Nodes
	}
	if nodes[PolicyStaticP95] != 1 || nodes[PolicyStaticPeak] != 3 {
		t.Errorf("static nodes %v; want static-p95 1, static-peak 3", nodes)
	}
	r := byName(lr)
	// One node: A runs 96h, then B and C 4h each: 104h, all of it work.
	p95 := r[PolicyStaticP95]
	if p95.GPUHours != 104 || p95.CompletedWorkGPUHours != 104 || p95.WaitP99["BE"] != 100*3600 {
		t.Errorf("static-p95: %g GPU-h, %g completed, BE p99 wait %gs; want 104, 104, 360000s", p95.GPUHours, p95.CompletedWorkGPUHours, p95.WaitP99["BE"])
	}
	// Three nodes from the start: both run at once, for 3 GPUs x 4h + 3
	// x 92h provisioned (the nodes stay) per 104 GPU-h of work.
	peak := r[PolicyStaticPeak]
	if peak.Unserved != 0 || peak.CompletedWorkGPUHours != 104 || peak.GPUHours != 288 || peak.ProvisionedPerWork != 288.0/104 {
		t.Errorf("static-peak: %d unserved, %g completed, %g GPU-h, %g per work; want 0, 104, 288, %g",
			peak.Unserved, peak.CompletedWorkGPUHours, peak.GPUHours, peak.ProvisionedPerWork, 288.0/104)
	}
	if !strings.Contains(r[PolicyStaticAvg].Note, "gpubroker's average") || !strings.Contains(r[PolicyPerSide].Note, "KILLS WORK") {
		t.Errorf("notes: %q, %q; the equal-average split and the killing autoscaler must say what they are", r[PolicyStaticAvg].Note, r[PolicyPerSide].Note)
	}
}

// The schedulers spread by default and pack when told. Two 2-GPU nodes
// (static-peak at a 4-GPU peak): tasks of 1, 1 and 2 GPUs at 0s, 1s and 2s.
// Spread puts the first two on different nodes, so the 2-GPU task waits
// for the first to end (1h - 2s = 3598s); pack puts them on one node and
// the 2-GPU task starts at once.
func TestSpreadAndPack(t *testing.T) {
	var tasks []Task
	for i, g := range []int{1, 1, 2} {
		tasks = append(tasks, Task{Name: nameOn(t, broker.SourceK8s, "t"+string(rune('a'+i))), Arrival: time.Duration(i) * time.Second,
			Run: time.Hour, GPUs: g, QoS: QoSBE})
	}
	pools := []broker.Pool{{Name: "t4-2gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 2, MaxNodes: 2, Sides: broker.PoolShared}}
	for _, c := range []struct {
		placement string
		wait      float64
	}{{PlacementSpread, 3598}, {PlacementPack, 0}} {
		w := DefaultWorld(broker.DefaultPolicy())
		w.Placement = c.placement
		got := byName(runLoadWith(t, tasks, pools, w, PolicyStaticPeak))[PolicyStaticPeak]
		if got.WaitP99["BE"] != c.wait {
			t.Errorf("%s: the 2-GPU task waits %gs, want %gs", c.placement, got.WaitP99["BE"], c.wait)
		}
	}
	if DefaultWorld(broker.DefaultPolicy()).Placement != PlacementSpread {
		t.Error("the default placement is not spread, the schedulers' default")
	}
}

// The safe per-side autoscaler never drains a busy YARN node; the one
// operators run does, and its RM kills the container at the drain timeout.
// All on YARN, 2-GPU nodes: A (1 GPU) on one node, X (2 GPUs, 30 min) on
// another; B (1 GPU) arrives once X is done and spreads onto X's empty
// node: two half-used nodes, either's work fits on the other.
func TestSafeAutoscalerKillsNothing(t *testing.T) {
	a := nameOn(t, broker.SourceYARN, "a")
	x := nameOn(t, broker.SourceYARN, "x")
	b := nameOn(t, broker.SourceYARN, "b")
	tasks := []Task{
		{Name: a, Arrival: 0, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: x, Arrival: 0, Run: 30 * time.Minute, GPUs: 2, QoS: QoSBE},
		{Name: b, Arrival: 35 * time.Minute, Run: 10 * time.Hour, GPUs: 1, QoS: QoSLS},
	}
	pools := []broker.Pool{{Name: "t4-2gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 2, MaxNodes: 4, Sides: broker.PoolShared}}
	r := byName(runLoadWith(t, tasks, pools, DefaultWorld(broker.DefaultPolicy()), PolicyPerSide, PolicySafeSide))
	ca, safe := r[PolicyPerSide], r[PolicySafeSide]
	if ca.KillsNotPreemption == 0 || ca.KillsNotPreemptionGPUHours <= 0 {
		t.Errorf("per-side: %d kills outside preemption (%g GPU-h); the trace should make it drain a busy YARN node", ca.KillsNotPreemption, ca.KillsNotPreemptionGPUHours)
	}
	if safe.Restarts != 0 || safe.Unserved+safe.Unfinished != 0 {
		t.Errorf("safe per-side: %d restarts, %d unserved, %d unfinished; want none", safe.Restarts, safe.Unserved, safe.Unfinished)
	}
}

// Work left undone at the end is reported: a 2-GPU task never fits the
// 1-GPU nodes of static-peak (peak demand 3 GPUs: 3 nodes), so it is
// unserved, its 2 GPU-hours not done and out of the completed work; the
// 1-GPU task completes.
func TestUnservedWorkIsReported(t *testing.T) {
	tasks := []Task{
		{Name: nameOn(t, broker.SourceK8s, "small"), Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: nameOn(t, broker.SourceK8s, "big"), Arrival: 0, Run: time.Hour, GPUs: 2, QoS: QoSBE},
	}
	got := byName(runLoadWith(t, tasks, onePool(3), DefaultWorld(broker.DefaultPolicy()), PolicyStaticPeak))[PolicyStaticPeak]
	if got.Unserved != 1 || got.Unfinished != 0 || got.NotDoneGPUHours != 2 || got.CompletedWorkGPUHours != 1 || got.ProvisionedPerWork != got.GPUHours {
		t.Errorf("%d unserved, %d unfinished, %g GPU-h not done, %g completed, %g per work (%g GPU-h); want 1, 0, 2, 1, GPU-h / 1",
			got.Unserved, got.Unfinished, got.NotDoneGPUHours, got.CompletedWorkGPUHours, got.ProvisionedPerWork, got.GPUHours)
	}
}
