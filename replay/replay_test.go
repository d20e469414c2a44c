package replay

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// tracePath finds the openb trace: GPUBROKER_OPENB, or shared/ beside the
// repository or a directory above it (where CI and developers have it; a
// git worktree sits a level deeper).
func tracePath(t testing.TB) string {
	if p := os.Getenv("GPUBROKER_OPENB"); p != "" {
		return p
	}
	for _, up := range []string{"../../shared", "../../../shared"} {
		p, _ := filepath.Abs(up + "/data/openb/openb_pod_list_default.csv")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("the openb trace is needed: not in ../shared/data/openb beside the repository or above it; set GPUBROKER_OPENB to openb_pod_list_default.csv")
	return ""
}

func readOpenB(t testing.TB) ([]Task, TraceStats, []NodeType) {
	p := tracePath(t)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, st, err := ReadTrace(p, f)
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(filepath.Join(filepath.Dir(p), "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	nt, err := ReadNodes("nodes", g)
	if err != nil {
		t.Fatal(err)
	}
	return tasks, st, nt
}

// nameOn returns a task name that the hash puts on side, so synthetic
// traces can place tasks where the hand-worked answers need them.
func nameOn(t *testing.T, side broker.Source, prefix string) string {
	for i := range 1000 {
		n := fmt.Sprintf("%s-%d", prefix, i)
		if sideOf(n, 0, 0.5) == side {
			return n
		}
	}
	t.Fatal("no name hashes to", side)
	return ""
}

func onePool(maxNodes int) []broker.Pool {
	return []broker.Pool{{Name: "t4-1gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 1, MaxNodes: maxNodes, Sides: broker.PoolShared}}
}

func runSynthetic(t *testing.T, tasks []Task, pools []broker.Pool) map[string]Result {
	t.Helper()
	p := broker.DefaultPolicy()
	rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: DefaultWorld(p), Policies: Policies,
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Result{}
	for _, r := range rep.Policies {
		out[r.Name] = r
	}
	return out
}

// One LS task of one GPU on an empty cluster, worked by hand with the
// default world (launch 3m, device-plugin lag 30s, autoscaler hold 30s on
// a 10s scan):
//   - per-side autoscaler: the pod is held 30s, the scan at 30s launches a
//     node, registered at 3m30s, GPUs at 4m: it waits 240s;
//   - gpubroker: the planner buys at the arrival: it waits 210s;
//   - static split: one node (the gpubroker run's average: one node for
//     the whole run) is there from the start: it waits 0s and never launches.
func TestOneTaskOnAnEmptyCluster(t *testing.T) {
	name := nameOn(t, broker.SourceK8s, "solo")
	tasks := []Task{{Name: name, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSLS}}
	r := runSynthetic(t, tasks, onePool(2))
	for _, c := range []struct {
		policy   string
		wait     float64
		launches int
	}{
		{PolicyPerSide, 240, 1},
		{PolicyBroker, 210, 1},
		{PolicyStaticAvg, 0, 0},
	} {
		got := r[c.policy]
		if got.WaitP50["LS"] != c.wait || got.Launches != c.launches || got.Unserved != 0 {
			t.Errorf("%s: LS wait %gs, %d launches, %d unserved; want %gs, %d, 0", c.policy, got.WaitP50["LS"], got.Launches, got.Unserved, c.wait, c.launches)
		}
	}
	// gpubroker: launch at 0, task 210s..3810s, node idle 5m, released
	// 10s later, billed 1m more: gone at 4180s, one GPU all along.
	if got := r[PolicyBroker].GPUHours; got != 4180.0/3600 {
		t.Errorf("gpubroker GPU-hours %v, want %v", got, 4180.0/3600)
	}
}

// A YARN task holds a node from 3m30s to 13m30s; a Kubernetes task arrives
// at 14m, while that node idles on YARN (its scale-down is due at 18m30s).
//   - gpubroker hands the idle node over: YARN releases it (10s), Kubernetes
//     schedules on it 30s later: the pod waits 40s, no new node;
//   - the per-side autoscaler cannot move it: the scan at 14m30s launches a
//     Kubernetes node, ready 3m30s later: the pod waits 240s.
func TestIdleNodeOnTheOtherSideServesSooner(t *testing.T) {
	y := nameOn(t, broker.SourceYARN, "y")
	k := nameOn(t, broker.SourceK8s, "k")
	tasks := []Task{
		{Name: y, Arrival: 0, Run: 10 * time.Minute, GPUs: 1, QoS: QoSLS},
		{Name: k, Arrival: 14 * time.Minute, Run: 10 * time.Minute, GPUs: 1, QoS: QoSLS},
	}
	r := runSynthetic(t, tasks, onePool(2))
	gb, ca := r[PolicyBroker], r[PolicyPerSide]
	if gb.WaitP50["k8s"] != 40 || gb.Handovers != 1 || gb.Launches != 1 {
		t.Errorf("gpubroker: Kubernetes wait %gs, %d hand-overs, %d launches; want 40s, 1, 1", gb.WaitP50["k8s"], gb.Handovers, gb.Launches)
	}
	if ca.WaitP50["k8s"] != 240 || ca.Handovers != 0 || ca.Launches != 2 {
		t.Errorf("per-side: Kubernetes wait %gs, %d hand-overs, %d launches; want 240s, 0, 2", ca.WaitP50["k8s"], ca.Handovers, ca.Launches)
	}
	if gb.GPUHours >= ca.GPUHours {
		t.Errorf("gpubroker provisioned %.3f GPU-hours, the per-side autoscaler %.3f: the hand-over should save a node", gb.GPUHours, ca.GPUHours)
	}
}

// A static split never resizes: with demand beyond its nodes the work
// queues, and it launches and terminates nothing.
func TestStaticSplitNeverLaunches(t *testing.T) {
	var tasks []Task
	for i := range 6 {
		tasks = append(tasks, Task{Name: fmt.Sprintf("burst-%d", i), Arrival: time.Duration(i) * time.Second, Run: 30 * time.Minute, GPUs: 1, QoS: QoSBE})
	}
	r := runSynthetic(t, tasks, onePool(8))
	st := r[PolicyStaticAvg]
	if st.Launches != 0 || st.Terminations != 0 || st.Handovers != 0 {
		t.Errorf("static split: %d launches, %d terminations, %d hand-overs; want none", st.Launches, st.Terminations, st.Handovers)
	}
	if st.PeakNodes == 0 || st.PeakNodes >= 6 {
		t.Errorf("static split has %d nodes; want some, fewer than the burst (sized to gpubroker's average)", st.PeakNodes)
	}
	// Arrivals are at 0..5s: a task that waits for a whole run waits at
	// least 1800s - 5s.
	if st.WaitP95["BE"] < 30*60-5 {
		t.Errorf("static split BE p95 wait %gs; with fewer nodes than tasks some must wait a whole run (1795s or more)", st.WaitP95["BE"])
	}
}

// kube-scheduler preempts a BE pod for an LS pod on a full Kubernetes
// node under the per-side autoscaler; the BE pod loses the work since it
// started (no checkpoints known).
func TestKubePreemptionInsideKubernetes(t *testing.T) {
	be := nameOn(t, broker.SourceK8s, "be")
	ls := nameOn(t, broker.SourceK8s, "ls")
	tasks := []Task{
		{Name: be, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: ls, Arrival: 20 * time.Minute, Run: time.Hour, GPUs: 1, QoS: QoSLS},
	}
	// Max one node: the per-side split gives Kubernetes it (all work is
	// on Kubernetes), so the LS pod can only get room by preemption.
	r := runSynthetic(t, tasks, onePool(1))
	ca := r[PolicyPerSide]
	if ca.Preemptions != 1 {
		t.Fatalf("per-side: %d preemptions, want 1", ca.Preemptions)
	}
	// The BE pod ran from 4m to 20m: 16 minutes of one GPU lost.
	if want := 16.0 / 60; ca.WorkLostGPUHours != want {
		t.Errorf("per-side: %.4f GPU-hours lost, want %.4f", ca.WorkLostGPUHours, want)
	}
	// The LS pod waits the 30s grace.
	if ca.WaitP50["LS"] != 30 {
		t.Errorf("per-side: LS wait %gs, want 30s (the grace period)", ca.WaitP50["LS"])
	}
}

// The same seed gives the same report, byte for byte; another seed
// assigns sides differently and changes it.
func TestSameSeedSameOutput(t *testing.T) {
	tasks, st, nt := readOpenB(t)
	tasks = tasks[:600]
	report := func(seed int64) string {
		p := broker.DefaultPolicy()
		rep, err := Run(Config{Tasks: tasks, Stats: st, NodeTypes: nt, Policy: p, World: DefaultWorld(p),
			Policies: Policies, YARNShare: 0.5, Loads: []float64{100}, Seed: seed, Headroom: 1})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	a, b, c := report(7), report(7), report(8)
	if a != b {
		t.Fatal("two replays with seed 7 differ")
	}
	if a == c {
		t.Fatal("seeds 7 and 8 gave the same report: the seed does nothing")
	}
}

func TestMalformedRowNamesLineAndColumn(t *testing.T) {
	csv := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"a,1000,1024,1,1000,,LS,Running,0,100,0\n" +
		"b,1000,1024,two,1000,,LS,Running,0,100,0\n"
	_, _, err := ReadTrace("t.csv", strings.NewReader(csv))
	var te *TraceError
	if !errors.As(err, &te) || te.Line != 3 || te.Column != "num_gpu" {
		t.Fatalf("got %v, want a TraceError at line 3 column num_gpu", err)
	}
	if !strings.Contains(err.Error(), `t.csv line 3 column "num_gpu"`) {
		t.Errorf("message %q does not name the file, line and column", err)
	}
	bad := strings.Replace(csv, "b,1000,1024,two,1000,,LS", "b,1000,1024,1,1000,,Gold", 1)
	if _, _, err := ReadTrace("t.csv", strings.NewReader(bad)); !errors.As(err, &te) || te.Column != "qos" {
		t.Errorf("unknown QoS: got %v, want a TraceError in column qos", err)
	}
	short := "name,num_gpu\n"
	if _, _, err := ReadTrace("t.csv", strings.NewReader(short)); !errors.As(err, &te) || te.Line != 1 {
		t.Errorf("missing columns: got %v, want a TraceError at line 1", err)
	}
}

func TestReadTraceChoices(t *testing.T) {
	csv := "name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time,scheduled_time\n" +
		"cpu,0,0,,LS,0,10,0\n" + // CPU-only: skipped
		"frac,1,300,,BE,5,100,10\n" + // a 30% share: one GPU, 90s
		"never,1,1000,,LS,5,50,\n" + // never scheduled: skipped
		"multi,8,1000,V100M32|A10,Burstable,0,200,0\n" // still running at the end
	tasks, st, err := ReadTrace("t.csv", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUOnly != 1 || st.NeverRan != 1 || st.Fractional != 1 || st.Censored != 1 || len(tasks) != 2 {
		t.Fatalf("stats %+v, %d tasks", st, len(tasks))
	}
	if tasks[0].Name != "multi" || tasks[0].GPUs != 8 || strings.Join(tasks[0].Models, ",") != "V100M32,A10" || !tasks[0].Censored {
		t.Errorf("first task %+v", tasks[0])
	}
	if tasks[1].Name != "frac" || tasks[1].GPUs != 1 || tasks[1].Run != 90*time.Second || tasks[1].Arrival != 5*time.Second {
		t.Errorf("second task %+v", tasks[1])
	}
}

func TestUnknownPolicyListsTheKnownOnes(t *testing.T) {
	p := broker.DefaultPolicy()
	_, err := Run(Config{Tasks: []Task{{Name: "a", Run: time.Second, GPUs: 1, QoS: QoSLS}}, Pools: onePool(1),
		Policy: p, World: DefaultWorld(p), Policies: []string{"karpenter"}, YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
	var ve *broker.ValidationError
	if !errors.As(err, &ve) || ve.Field != "policies" {
		t.Fatalf("got %v, want a validation error on policies", err)
	}
	for _, n := range Policies {
		if !strings.Contains(ve.Problem, n) {
			t.Errorf("%q does not list %s", ve.Problem, n)
		}
	}
}

// The openb trace read as the README describes it.
func TestOpenBTrace(t *testing.T) {
	tasks, st, nt := readOpenB(t)
	if st.Rows != 8152 || st.CPUOnly != 1088 || st.NeverRan != 861 || len(tasks) != 6203 {
		t.Errorf("rows %d, CPU-only %d, never scheduled %d, replayed %d; want 8152, 1088, 861, 6203", st.Rows, st.CPUOnly, st.NeverRan, len(tasks))
	}
	gpus := 0
	for _, n := range nt {
		gpus += n.GPUs * n.Count
	}
	if len(nt) != 12 || gpus != 6212 {
		t.Errorf("node list: %d types, %d GPUs; want 12, 6212", len(nt), gpus)
	}
	// The README's figures: peak ~70 GPUs as is, ~225 at 10x, ~920 at 100x.
	for _, c := range []struct {
		load     float64
		lo, high int
	}{{1, 60, 80}, {10, 200, 250}, {100, 850, 1000}} {
		if peak, _ := demandCurve(tasks, c.load); peak < c.lo || peak > c.high {
			t.Errorf("peak demand at %gx: %d GPUs, want %d..%d", c.load, peak, c.lo, c.high)
		}
	}
}

// BenchmarkReplayOpenB replays the whole default trace, three policies, at
// the command's default loads (1, 10, 100 and 1000x), and prints the
// seconds one such replay takes, and those of each load alone.
func BenchmarkReplayOpenB(b *testing.B) {
	tasks, st, nt := readOpenB(b)
	run := func(b *testing.B, loads []float64) {
		for range b.N {
			p := broker.DefaultPolicy()
			t0 := time.Now()
			rep, err := Run(Config{Tasks: tasks, Stats: st, NodeTypes: nt, Policy: p, World: DefaultWorld(p),
				Policies: Policies, YARNShare: 0.5, Loads: loads, Headroom: 1})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(time.Since(t0).Seconds(), "s/replay")
			plans := 0
			for _, lr := range rep.Loads {
				plans += lr.Policies[0].Plans
			}
			b.ReportMetric(float64(plans), "plans")
		}
	}
	b.Run("default-loads", func(b *testing.B) { run(b, []float64{1, 10, 100, 1000}) })
	for _, load := range []float64{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("load=%g", load), func(b *testing.B) { run(b, []float64{load}) })
	}
}

// Ticking only at events and planner deadlines decides exactly what ticking
// every 5 seconds (as serve does) decides: the planner reads the clock only
// through those deadlines. A slice of the real trace, compressed so that
// demand presses on the pools.
func TestEventTickingMatchesPeriodicTicking(t *testing.T) {
	tasks, _, nt := readOpenB(t)
	tasks = tasks[3000:3400]
	p := broker.DefaultPolicy()
	peak, _ := demandCurve(tasks, 200)
	pools := poolsFor(Config{NodeTypes: nt, Headroom: 1}, peak)
	sides := make([]broker.Source, len(tasks))
	for i, tk := range tasks {
		sides[i] = sideOf(tk.Name, 0, 0.5)
	}
	shared := make([]broker.Source, len(pools))
	run := func(every time.Duration) Result {
		s := newSim(DefaultWorld(p), p, pools, shared, tasks, sides, 200)
		s.run(&brokerCtl{every: every})
		r := s.result(PolicyBroker)
		r.Ticks, r.Plans, r.series = 0, 0, nil
		return r
	}
	ev, per := run(0), run(5*time.Second)
	if ev.Launches == 0 || ev.Handovers+ev.Preemptions == 0 {
		t.Fatalf("the slice exercises too little: %+v", ev)
	}
	a, _ := json.Marshal(ev)
	b, _ := json.Marshal(per)
	if string(a) != string(b) {
		t.Errorf("event ticking:\n%s\nevery 5s:\n%s", a, b)
	}
}

func runWith(t *testing.T, tasks []Task, pools []broker.Pool, p broker.Policy, policies ...string) map[string]Result {
	t.Helper()
	rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: DefaultWorld(p), Policies: policies,
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Result{}
	for _, r := range rep.Policies {
		out[r.Name] = r
	}
	return out
}

// The planner's policy decides, not the replay: with ownership transfer
// off, the Kubernetes task of TestIdleNodeOnTheOtherSideServesSooner gets
// a new node (210s) instead of the idle YARN one.
func TestPlannerPolicyDecides(t *testing.T) {
	y := nameOn(t, broker.SourceYARN, "y")
	k := nameOn(t, broker.SourceK8s, "k")
	tasks := []Task{
		{Name: y, Arrival: 0, Run: 10 * time.Minute, GPUs: 1, QoS: QoSLS},
		{Name: k, Arrival: 14 * time.Minute, Run: 10 * time.Minute, GPUs: 1, QoS: QoSLS},
	}
	p := broker.DefaultPolicy()
	p.OwnershipTransfer = false
	gb := runWith(t, tasks, onePool(2), p, PolicyBroker)[PolicyBroker]
	if gb.WaitP50["k8s"] != 210 || gb.Handovers != 0 || gb.Launches != 2 {
		t.Errorf("transfer off: Kubernetes wait %gs, %d hand-overs, %d launches; want 210s, 0, 2", gb.WaitP50["k8s"], gb.Handovers, gb.Launches)
	}
}

// On a full cluster at its max, an LS container on YARN gets room only by
// preemption. gpubroker's planner preempts the BE container (30s grace);
// under the per-side autoscaler YARN does not preempt and the LS container
// waits for the BE one to finish: it started at 240s (hold, launch, lag)
// and ends at 3840s, 2640s after the LS arrival at 1200s.
func TestPlannerPreemptsOnYARN(t *testing.T) {
	be := nameOn(t, broker.SourceYARN, "be")
	ls := nameOn(t, broker.SourceYARN, "ls")
	tasks := []Task{
		{Name: be, Arrival: 0, Run: time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: ls, Arrival: 20 * time.Minute, Run: time.Hour, GPUs: 1, QoS: QoSLS},
	}
	r := runWith(t, tasks, onePool(1), broker.DefaultPolicy(), PolicyBroker, PolicyPerSide)
	gb, ca := r[PolicyBroker], r[PolicyPerSide]
	if gb.Preemptions != 1 || gb.WaitP50["LS"] != 30 {
		t.Errorf("gpubroker: %d preemptions, LS wait %gs; want 1, 30s", gb.Preemptions, gb.WaitP50["LS"])
	}
	// The BE container ran from 210s to 1200s: 990s of one GPU lost.
	if want := 990.0 / 3600; gb.WorkLostGPUHours != want {
		t.Errorf("gpubroker: %.4f GPU-hours lost, want %.4f", gb.WorkLostGPUHours, want)
	}
	if ca.Preemptions != 0 || ca.WaitP50["LS"] != 2640 {
		t.Errorf("per-side: %d preemptions, LS wait %gs; want 0, 2640s", ca.Preemptions, ca.WaitP50["LS"])
	}
}

// A YARN graceful decommission lets containers finish and kills what still
// runs at the drain timeout; a Kubernetes release evicts at once.
func TestReleaseStepModel(t *testing.T) {
	p := broker.DefaultPolicy()
	w := DefaultWorld(p)
	for _, c := range []struct {
		side    broker.Source
		evicted int
		goneAt  time.Duration
	}{
		// YARN: the container is killed at the 10m timeout, gone after the
		// 30s grace; confirmed 10s later; billed 1m more.
		{broker.SourceYARN, 1, 10*time.Minute + 30*time.Second + 10*time.Second + time.Minute},
		// Kubernetes: evicted at once, gone after 30s, confirmed, billed.
		{broker.SourceK8s, 1, 30*time.Second + 10*time.Second + time.Minute},
	} {
		tasks := []Task{{Name: "long", Run: 24 * time.Hour, GPUs: 1, QoS: QoSBE}}
		s := newSim(w, p, onePool(1), []broker.Source{""}, tasks, []broker.Source{c.side}, 1)
		n := s.place(0, c.side)
		s.advance(0)
		s.next = 1
		tk := s.tasks[0]
		tk.state = taskPending
		s.pending[sideIdx(c.side)] = []*task{tk}
		s.schedule()
		if tk.state != taskRunning {
			t.Fatalf("%s: task not placed", c.side)
		}
		s.release(n, broker.ActScaleDown, broker.OwnerNone, nil)
		for len(s.events) > 0 && n.phase != broker.PhaseGone {
			e := heap.Pop(&s.events).(event)
			s.advance(e.at)
			s.handle(e)
		}
		if n.phase != broker.PhaseGone || s.now != c.goneAt || s.m.drainEvictions != c.evicted || s.m.terminations != 1 {
			t.Errorf("%s: node %s at %s, %d evictions, %d terminations; want gone at %s, %d, 1",
				c.side, n.phase, s.now, s.m.drainEvictions, s.m.terminations, c.goneAt, c.evicted)
		}
	}
}

// The snapshot the planner reads carries the running work honestly: batch
// class, start time, and the checkpoint age (-1 when unknown, else the
// time since the last modelled checkpoint).
func TestSnapshotWorkloads(t *testing.T) {
	p := broker.DefaultPolicy()
	for _, c := range []struct {
		interval time.Duration
		age      time.Duration
	}{{0, -1}, {30 * time.Minute, 10 * time.Minute}} {
		w := DefaultWorld(p)
		w.CheckpointInterval = c.interval
		tasks := []Task{{Name: "job", Run: 24 * time.Hour, GPUs: 1, QoS: QoSBE}}
		s := newSim(w, p, onePool(1), []broker.Source{""}, tasks, []broker.Source{broker.SourceK8s}, 1)
		s.place(0, broker.SourceK8s)
		tk := s.tasks[0]
		tk.state = taskPending
		s.next = 1
		s.pending[1] = []*task{tk}
		s.schedule()
		s.advance(70 * time.Minute)
		snap := (&brokerCtl{}).snapshot(s)
		if len(snap.Nodes) != 1 || len(snap.Nodes[0].Work) != 1 {
			t.Fatalf("snapshot nodes %+v", snap.Nodes)
		}
		wl := snap.Nodes[0].Work[0]
		if wl.Class != broker.WorkBatch || !wl.StartedAt.Equal(epoch) || wl.CheckpointAge != c.age || !wl.Preemptible || wl.Source != broker.SourceK8s {
			t.Errorf("interval %s: workload %+v; want batch, started at the epoch, checkpoint age %s, preemptible", c.interval, wl, c.age)
		}
		if got := snap.Nodes[0].GPUsAllocated; got != 1 {
			t.Errorf("allocated %d, want 1", got)
		}
	}
}

// As in the executor (engine's setDesired), a scale-up planned as if the
// pool's pending removals had terminated sets the desired capacity to its
// target plus those removals at once, and waits for them only when that
// would pass the pool's max. Worked by hand: two nodes, one draining, a
// target of 2 (the kept node and one new): 2+1 = 3 nodes; with a max of 3
// one node launches at once, with a max of 2 none until the removal is
// done.
func TestScaleUpWaitsForPendingRemovals(t *testing.T) {
	p := broker.DefaultPolicy()
	for _, c := range []struct {
		max, atOnce int
	}{{3, 1}, {2, 0}} {
		s := newSim(DefaultWorld(p), p, onePool(c.max), []broker.Source{""}, nil, nil, 1)
		a := s.place(0, broker.SourceYARN)
		s.place(0, broker.SourceYARN)
		s.release(a, broker.ActScaleDown, broker.OwnerNone, nil) // YARN, empty: confirmed after 10s
		up := s.newOp(broker.ActScaleUp, nil, nil)
		up.pool, up.target = 0, 2 // one kept node plus one new
		s.startScaleUps()
		if s.m.launches != c.atOnce {
			t.Fatalf("max %d: launched %d nodes while a removal was pending, want %d", c.max, s.m.launches, c.atOnce)
		}
		drainEvents(s, func() bool { return a.op == nil })
		s.startScaleUps()
		if s.m.launches != 1 || len(s.ops) != 0 {
			t.Errorf("max %d: after the removal: %d launches, %d open ops; want 1, 0", c.max, s.m.launches, len(s.ops))
		}
	}
}

// An attrition scale-down is no pending removal (engine's pendingRemovals
// skips it): a scale-up of the same pool sets its target at once instead of
// waiting days for the attrited node's work to end. Worked by hand: one
// node under attrition running a 2-day task, max 2, target 2 (the planner
// counts the attrited node in the pool's size): one node launches at once.
func TestAttritionIsNoPendingRemoval(t *testing.T) {
	s, n, _ := oneRunning(t, broker.SourceYARN, 48*time.Hour, QoSBE)
	s.pools[0].MaxNodes = 2
	s.attrit(n)
	up := s.newOp(broker.ActScaleUp, nil, nil)
	up.pool, up.target = 0, 2
	s.startScaleUps()
	if s.m.launches != 1 || len(s.ops) != 1 {
		t.Errorf("%d launches, %d open ops (the attrition alone); want 1, 1", s.m.launches, len(s.ops))
	}
}

// The per-side baseline splits a shared pool's max by the work shares and
// keeps a one-side pool whole on its side.
func TestPerSidePools(t *testing.T) {
	pools := []broker.Pool{
		{Name: "shared", GPUsPerNode: 8, MinNodes: 2, MaxNodes: 10, Sides: broker.PoolShared},
		{Name: "kube", GPUsPerNode: 4, MaxNodes: 3, Sides: broker.PoolK8s},
	}
	sp, owner, origin := perSide(pools, 0.7)
	got := strings.TrimSpace(fmt.Sprintln(len(sp), sp[0].Name, sp[0].MaxNodes, sp[0].MinNodes, owner[0], sp[1].Name, sp[1].MaxNodes, sp[1].MinNodes, owner[1], sp[2].Name, sp[2].MaxNodes, owner[2], origin))
	if want := "3 shared-yarn 7 1 yarn shared-k8s 3 1 k8s kube 3 k8s [0 0 1]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestMalformedCSVShapes(t *testing.T) {
	head := "name,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time\n"
	var te *TraceError
	_, _, err := ReadTrace("t.csv", strings.NewReader(head+"a,1,1000,LS,0,10,0\nb,1,1000,LS,0,10\n"))
	if !errors.As(err, &te) || te.Line != 3 || !strings.Contains(te.Problem, "has 6 fields, the header has 7") {
		t.Errorf("short row: %v", err)
	}
	_, _, err = ReadTrace("t.csv", strings.NewReader(head+"a,1,1000,\"LS,0,10,0\n"))
	if !errors.As(err, &te) || te.Line != 2 || !strings.Contains(te.Problem, "at character") {
		t.Errorf("bad quote: %v", err)
	}
}

// oneRunning is a sim with one placed node on side and one running task of
// run time run on it.
func oneRunning(t *testing.T, side broker.Source, run time.Duration, qos QoS) (*sim, *node, *task) {
	t.Helper()
	p := broker.DefaultPolicy()
	tasks := []Task{{Name: "long", Run: run, GPUs: 1, QoS: qos}}
	s := newSim(DefaultWorld(p), p, onePool(1), []broker.Source{""}, tasks, []broker.Source{side}, 1)
	n := s.place(0, side)
	s.advance(0)
	s.next = 1
	tk := s.tasks[0]
	tk.state = taskPending
	s.pending[sideIdx(side)] = []*task{tk}
	s.schedule()
	if tk.state != taskRunning {
		t.Fatalf("%s: task not placed", side)
	}
	return s, n, tk
}

// drainEvents handles queued events until stop says so or none are left.
func drainEvents(s *sim, stop func() bool) {
	for len(s.events) > 0 && !stop() {
		e := heap.Pop(&s.events).(event)
		s.advance(e.at)
		s.handle(e)
	}
}

// An attrition scale-down (YARN decommission with an infinite timeout,
// Kubernetes cordon-and-wait) evicts nothing: the node takes no new work,
// its task runs to its end, and the node is terminated after it. The
// planner sees the op as an attrition in flight (its step data).
func TestAttritionEvictsNothing(t *testing.T) {
	for _, side := range broker.Sources {
		s, n, tk := oneRunning(t, side, 2*time.Hour, QoSBE)
		c := &brokerCtl{}
		c.snapshot(s)
		if !c.apply(s, broker.Action{Kind: broker.ActScaleDown, Node: n.name, Attrition: true}) {
			t.Fatalf("%s: attrition not applied", side)
		}
		if n.schedulable() {
			t.Errorf("%s: a node under attrition is schedulable", side)
		}
		snap := c.snapshot(s)
		if len(snap.InFlight) != 1 || !strings.Contains(string(snap.InFlight[0].Data), `"attrition":true`) {
			t.Errorf("%s: in flight %+v, want one attrition op", side, snap.InFlight)
		}
		drainEvents(s, func() bool { return n.phase == broker.PhaseGone })
		want := 2*time.Hour + 10*time.Second + time.Minute // ends, confirmed, billed
		if s.m.drainEvictions != 0 || tk.restarts != 0 || n.phase != broker.PhaseGone || s.now != want || s.m.attritions != 1 {
			t.Errorf("%s: %d evictions, %d restarts, node %s at %s, %d attritions; want 0, 0, gone at %s, 1",
				side, s.m.drainEvictions, tk.restarts, n.phase, s.now, s.m.attritions, want)
		}
	}
}

// A recommission cancels the attrition: the node is schedulable again and
// nothing is terminated.
func TestRecommissionGivesTheNodeBack(t *testing.T) {
	s, n, _ := oneRunning(t, broker.SourceK8s, 2*time.Hour, QoSBE)
	c := &brokerCtl{}
	c.snapshot(s)
	c.apply(s, broker.Action{Kind: broker.ActScaleDown, Node: n.name, Attrition: true})
	c.snapshot(s)
	if !c.apply(s, broker.Action{Kind: broker.ActRecommission, Node: n.name, From: broker.OwnerNone, To: broker.OwnerK8s}) {
		t.Fatal("recommission not applied")
	}
	if n.op != nil || !n.schedulable() || len(s.ops) != 0 || s.m.recommissions != 1 {
		t.Errorf("after recommission: op %v, schedulable %v, %d ops, %d recommissions; want none, true, 0, 1",
			n.op, n.schedulable(), len(s.ops), s.m.recommissions)
	}
	drainEvents(s, func() bool { return false })
	if s.m.terminations != 0 || n.phase != broker.PhaseActive {
		t.Errorf("recommissioned node: %d terminations, phase %s; want 0, active", s.m.terminations, n.phase)
	}
}

// A preemption across sides (ActPreempt with From and To) evicts the
// victims, then releases the node and hands it to the other side; one on
// the node's own side leaves it where it is.
func TestCrossSidePreemptionHandsTheNodeOver(t *testing.T) {
	for _, c := range []struct {
		to       broker.Owner
		side     broker.Source
		handover int
	}{
		{broker.OwnerK8s, broker.SourceK8s, 1},
		{broker.OwnerNone, broker.SourceYARN, 0},
	} {
		s, n, tk := oneRunning(t, broker.SourceYARN, 2*time.Hour, QoSBE)
		ctl := &brokerCtl{}
		ctl.snapshot(s)
		a := broker.Action{Kind: broker.ActPreempt, Node: n.name, From: broker.OwnerYARN, To: c.to,
			Victims: []broker.Workload{{Source: broker.SourceYARN, Key: tk.key()}}}
		if !ctl.apply(s, a) {
			t.Fatalf("to %s: preemption not applied", c.to)
		}
		if c.handover == 1 && n.schedulable() {
			t.Errorf("to %s: the node stays schedulable on YARN while it is taken across", c.to)
		}
		drainEvents(s, func() bool { return len(s.ops) == 0 })
		// Evicted at 0, gone after the 30s grace; across sides, confirmed
		// 10s later and admitted after the 30s hand-over.
		want := 30 * time.Second
		if c.handover == 1 {
			want += 10*time.Second + 30*time.Second
		}
		if s.m.preemptions != 1 || s.m.handovers != c.handover || n.side != c.side || n.phase != broker.PhaseActive || s.now != want {
			t.Errorf("to %s: %d preemptions, %d hand-overs, node on %s (%s) at %s; want 1, %d, %s (active) at %s",
				c.to, s.m.preemptions, s.m.handovers, n.side, n.phase, s.now, c.handover, c.side, want)
		}
	}
}

// With Config.RuleOff the report has gpubroker again with
// consolidation.max_work_lost unbounded. Two 2-GPU Kubernetes nodes end up
// each half used by a 10 h task without checkpoints once b ends (c has run
// 30 min by then): with the rule on neither is drained (its task's work
// exceeds 10 min) and nothing is lost;
// with it off one is drained and its task redone. The per-side autoscaler
// has no such rule: its figure is the same on and off.
func TestWorkLostRuleOnAndOff(t *testing.T) {
	a, b, c := nameOn(t, broker.SourceK8s, "a"), nameOn(t, broker.SourceK8s, "b"), nameOn(t, broker.SourceK8s, "c")
	tasks := []Task{
		{Name: a, Arrival: 0, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: b, Arrival: 0, Run: 40 * time.Minute, GPUs: 1, QoS: QoSBE},
		{Name: c, Arrival: 10 * time.Minute, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
	}
	pools := []broker.Pool{{Name: "t4-2gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 2, MaxNodes: 3, Sides: broker.PoolShared}}
	p := broker.DefaultPolicy()
	rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: DefaultWorld(p), Policies: []string{PolicyBroker, PolicyPerSide},
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1, RuleOff: true})
	if err != nil {
		t.Fatal(err)
	}
	lr := rep.Loads[0]
	gb, ca := lr.Policies[0], lr.Policies[1]
	if lr.RuleOff == nil {
		t.Fatal("no rule-off result")
	}
	if gb.WorkLostGPUHours != 0 || gb.WorkLostRuleOff <= 0 || gb.WorkLostRuleOff != lr.RuleOff.WorkLostGPUHours {
		t.Errorf("gpubroker: %.3f GPU-hours lost on, %.3f off (rule-off run %.3f); want 0, more than 0, equal",
			gb.WorkLostGPUHours, gb.WorkLostRuleOff, lr.RuleOff.WorkLostGPUHours)
	}
	if ca.WorkLostRuleOff != ca.WorkLostGPUHours {
		t.Errorf("per-side: %.3f lost on, %.3f off; want equal", ca.WorkLostGPUHours, ca.WorkLostRuleOff)
	}
}

// A node kept for the work it would lose is moved right after its work
// checkpoints (the replay looks then, as serve's periodic tick would).
// With checkpoints every 30 min: a and b start at 210s, c at 810s; b ends
// at 3300s, when c's work since its checkpoint is 11.5 min, and a's node
// reaches its unneeded time at 3600s with 26.5 min: both over 10 min, so
// both half-used nodes are kept; at 3810s a checkpoints and its node is
// drained onto c's with nothing lost.
func TestKeptNodeMovesAtItsCheckpoint(t *testing.T) {
	a, b, c := nameOn(t, broker.SourceK8s, "a"), nameOn(t, broker.SourceK8s, "b"), nameOn(t, broker.SourceK8s, "c")
	tasks := []Task{
		{Name: a, Arrival: 0, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: b, Arrival: 0, Run: 3090 * time.Second, GPUs: 1, QoS: QoSBE},
		{Name: c, Arrival: 10 * time.Minute, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
	}
	pools := []broker.Pool{{Name: "t4-2gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 2, MaxNodes: 3, Sides: broker.PoolShared}}
	p := broker.DefaultPolicy()
	w := DefaultWorld(p)
	w.CheckpointInterval = 30 * time.Minute
	rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: w, Policies: []string{PolicyBroker},
		YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	gb := rep.Policies[0]
	if gb.DrainEvictions != 1 || gb.WorkLostGPUHours != 0 || gb.Terminations != 2 {
		t.Errorf("%d drain evictions, %.3f GPU-hours lost, %d terminations; want 1, 0, 2", gb.DrainEvictions, gb.WorkLostGPUHours, gb.Terminations)
	}
}

// TestMigrationMovesAtTheCheckpoint: two YARN nodes each half used by a
// 10-hour task. Without migration both run to the end (a busy YARN node
// is never drained); with consolidation.migrate checkpointed one node is
// cordoned, its task stopped right at its next checkpoint (nothing lost,
// no kill) and restarted on the other node, and the emptied node leaves:
// fewer GPU-hours for the same work.
func TestMigrationMovesAtTheCheckpoint(t *testing.T) {
	a, b, c := nameOn(t, broker.SourceYARN, "a"), nameOn(t, broker.SourceYARN, "b"), nameOn(t, broker.SourceYARN, "c")
	tasks := []Task{
		{Name: a, Arrival: 0, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
		{Name: b, Arrival: 0, Run: 3090 * time.Second, GPUs: 1, QoS: QoSBE},
		{Name: c, Arrival: 10 * time.Minute, Run: 10 * time.Hour, GPUs: 1, QoS: QoSBE},
	}
	pools := []broker.Pool{{Name: "t4-2gpu", Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: 2, MaxNodes: 3, Sides: broker.PoolShared}}
	run := func(p broker.Policy) Result {
		w := DefaultWorld(p)
		w.CheckpointInterval = 30 * time.Minute
		rep, err := Run(Config{Tasks: tasks, Pools: pools, Policy: p, World: w, Policies: []string{PolicyBroker},
			YARNShare: 0.5, Loads: []float64{1}, Headroom: 1})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Policies[0]
	}
	off := run(broker.DefaultPolicy())
	p := broker.DefaultPolicy()
	p.Migrate = broker.MigrateCheckpointed
	on := run(p)
	if off.Migrations != 0 || off.Restarts != 0 {
		t.Fatalf("without migration: %d migrations, %d restarts; want none", off.Migrations, off.Restarts)
	}
	if on.Migrations != 1 || on.Kills != 0 || on.WorkLostGPUHours != 0 || on.Restarts != 1 {
		t.Fatalf("with migration: %d migrations, %d kills, %.3f GPU-hours lost, %d restarts; want 1 zero-loss move",
			on.Migrations, on.Kills, on.WorkLostGPUHours, on.Restarts)
	}
	if on.GPUHours >= off.GPUHours-5 {
		t.Fatalf("with migration %.1f GPU-hours, without %.1f: want the emptied node's hours saved", on.GPUHours, off.GPUHours)
	}
	if on.MigrationKills != 0 {
		t.Fatalf("with migration: %d migration kills, want none", on.MigrationKills)
	}
	// Even a window as long as the checkpoint interval does not stop the
	// task at once, some way past its checkpoint (which would lose the
	// work since): it still waits for its next checkpoint.
	p.MigrateWindow = broker.Duration(30 * time.Minute)
	wide := run(p)
	if wide.MigrationKills != 0 || wide.KillsNotPreemption != 0 || wide.Migrations != 1 || wide.WorkLostGPUHours != 0 {
		t.Fatalf("window 30m: %d migration kills, %d kills not preemption, %d zero-loss migrations, %.3f GPU-hours lost; want 0, 0, 1 and nothing lost",
			wide.MigrationKills, wide.KillsNotPreemption, wide.Migrations, wide.WorkLostGPUHours)
	}
}

// migrationSim is a replay with migration on, work checkpointing every 30
// minutes, one running Kubernetes node of gpus GPUs (room for one more in
// its pool) and the two tasks, arrived (none started yet).
func migrationSim(gpus int, tasks []Task) (*sim, *node) {
	p := broker.DefaultPolicy()
	p.Migrate = broker.MigrateCheckpointed
	w := DefaultWorld(p)
	w.CheckpointInterval = 30 * time.Minute
	pools := []broker.Pool{{Name: fmt.Sprintf("t4-%dgpu", gpus), Provider: "replay", Group: "t4", GPUModel: "T4", GPUsPerNode: gpus, MaxNodes: 2, Sides: broker.PoolShared}}
	s := newSim(w, p, pools, []broker.Source{""}, tasks, []broker.Source{broker.SourceK8s, broker.SourceK8s}, 1)
	n := s.place(0, broker.SourceK8s)
	s.next = len(tasks)
	return s, n
}

// TestOnlyItsVictimsEndAMigrationsWait: a Kubernetes node runs a task a
// migration waits on (its next checkpoint is 20 minutes away) and a pod
// kube-scheduler evicted just before the migration began. That pod leaving
// after its grace is no victim of the migration: the op keeps waiting and
// the task is stopped at its checkpoint, losing nothing, not drained
// (killed) when the other pod leaves.
func TestOnlyItsVictimsEndAMigrationsWait(t *testing.T) {
	s, n := migrationSim(2, []Task{{Name: "mover", Run: 24 * time.Hour, GPUs: 1, QoS: QoSBE}, {Name: "preempted", Run: 24 * time.Hour, GPUs: 1, QoS: QoSBE}})
	mover, other := s.tasks[0], s.tasks[1]
	for _, tk := range []*task{mover, other} {
		tk.state = taskPending
		s.pending[sideIdx(broker.SourceK8s)] = append(s.pending[sideIdx(broker.SourceK8s)], tk)
	}
	s.schedule()
	if mover.state != taskRunning || other.state != taskRunning || mover.node != n || other.node != n {
		t.Fatalf("tasks not both on the node")
	}
	s.advance(10 * time.Minute)
	s.evict(other, "preempt") // kube-scheduler's, before the op: no victim of it
	c := &brokerCtl{nodeByID: map[string]*node{n.name: n}}
	if !c.migrate(s, broker.Action{Kind: broker.ActMigrate, Node: n.name, Victims: []broker.Workload{{Key: mover.key()}}}) {
		t.Fatal("migration not started")
	}
	for len(s.events) > 0 && n.phase != broker.PhaseGone && s.now < 2*time.Hour {
		e := heap.Pop(&s.events).(event)
		s.advance(e.at)
		s.handle(e)
	}
	if s.m.drainKills != 0 || s.m.migrations != 1 || s.m.kills != 1 {
		t.Fatalf("%d drain kills, %d zero-loss migrations, %d kills; want the task moved at its checkpoint, no kill but kube-scheduler's",
			s.m.drainKills, s.m.migrations, s.m.kills)
	}
	if mover.state != taskPending {
		t.Fatalf("the migrated task is %v, want pending again (re-queued)", mover.state)
	}
}

// TestAMigrationYieldsItsNodeToLSDemand: a migration waits for its task's
// next checkpoint on a cordoned node with free GPUs when LS work arrives
// that fits them. The planner cancels the migration rather than buy a
// node: the node schedules again, the LS task starts on it at once, and
// the task the migration waited on runs on past its checkpoint, never
// stopped.
func TestAMigrationYieldsItsNodeToLSDemand(t *testing.T) {
	s, n := migrationSim(4, []Task{{Name: "mover", Run: 24 * time.Hour, GPUs: 1, QoS: QoSBE}, {Name: "ls", Run: 24 * time.Hour, GPUs: 2, QoS: QoSLS}})
	mover, ls := s.tasks[0], s.tasks[1]
	mover.state = taskPending
	s.pending[sideIdx(broker.SourceK8s)] = append(s.pending[sideIdx(broker.SourceK8s)], mover)
	s.schedule()
	if mover.state != taskRunning || mover.node != n {
		t.Fatal("mover not running on the node")
	}
	s.advance(10 * time.Minute)
	c := &brokerCtl{nodeByID: map[string]*node{n.name: n}}
	if !c.migrate(s, broker.Action{Kind: broker.ActMigrate, Node: n.name, Victims: []broker.Workload{{Key: mover.key()}}}) {
		t.Fatal("migration not started")
	}
	s.advance(12 * time.Minute)
	ls.state, ls.since = taskPending, s.now
	s.pending[sideIdx(broker.SourceK8s)] = append(s.pending[sideIdx(broker.SourceK8s)], ls)
	s.schedule()
	if ls.state != taskPending {
		t.Fatal("the LS task started on the cordoned node")
	}
	c.tick(s)
	if n.op != nil || s.m.migrationsCancelled != 1 || s.m.launches != 0 {
		t.Fatalf("op %+v, %d migrations cancelled, %d launches: want the migration cancelled and nothing bought", n.op, s.m.migrationsCancelled, s.m.launches)
	}
	s.schedule()
	if ls.state != taskRunning || ls.node != n {
		t.Fatalf("the LS task is %v, want it running on the node given back", ls.state)
	}
	for len(s.events) > 0 && s.events[0].at < 45*time.Minute { // past its checkpoint at 30 min
		e := heap.Pop(&s.events).(event)
		s.advance(e.at)
		s.handle(e)
	}
	if mover.state != taskRunning || mover.restarts != 0 || s.m.migrations != 0 {
		t.Fatalf("mover is %v after %d restarts (%d migrations): want it running on, never stopped", mover.state, mover.restarts, s.m.migrations)
	}
}
