package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

const rtPool = "gpu-training-group"

// rtWorld is the tick-loop harness: a ledger, a cloud and two sides, and a
// fake clock. Runtimes built on it share all of them, so a "restart" is a
// new Runtime on the same world.
type rtWorld struct {
	t      *testing.T
	clock  *rtClock
	ledger *rtLedger
	cloud  *rtCloud
	k8s    *rtSide
	yarn   *rtSide
}

func rtPolicy() broker.Policy {
	p := broker.DefaultPolicy()
	p.ClusterMaxGPUs = 50
	p.ScaleDownUnneeded = broker.Duration(5 * time.Minute)
	p.DrainTimeout = broker.Duration(time.Minute)
	return p
}

func newRTWorld(t *testing.T, maxNodes int) *rtWorld {
	pool := broker.PoolState{Pool: broker.Pool{Name: rtPool, Provider: "aws", Group: rtPool, GPUModel: "A100", GPUsPerNode: 4,
		MinNodes: 0, MaxNodes: maxNodes, Sides: broker.PoolShared,
		Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
		Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}}}
	training := broker.Tenant{Name: "training", MaxGPUs: 50, Weight: 1, Namespaces: []string{"default"}, YARNQueues: []string{"root.training"}}
	w := &rtWorld{t: t, clock: &rtClock{now: t0},
		ledger: newRTLedger(rtPolicy(), []broker.PoolState{pool}, training),
		cloud:  newRTCloud(pool), k8s: newRTSide(broker.SourceK8s), yarn: newRTSide(broker.SourceYARN)}
	w.ledger.now = w.clock.Now
	return w
}

func (w *rtWorld) runtime() *Runtime {
	w.t.Helper()
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := NewRuntime(RuntimeConfig{
		Observers: []SideObserver{w.yarn, w.k8s}, Actions: []SideActions{w.yarn, w.k8s},
		Pools: w.cloud, Ledger: w.ledger, Now: w.clock.Now, Logger: log,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *rtWorld) tick(r *Runtime) *TickReport {
	w.t.Helper()
	rep, err := r.Tick(context.Background())
	if err != nil {
		w.t.Fatalf("tick: %v", err)
	}
	return rep
}

// boot turns every booting instance into a node of side.
func (w *rtWorld) boot(side *rtSide) {
	ps, _ := w.cloud.Pools(context.Background())
	for _, p := range ps {
		for _, in := range p.Instances {
			if _, ok := side.nodes[in.Hostname]; !ok {
				side.join(in.Hostname, p.Pool.Name, p.Pool.GPUsPerNode, p.Pool.Labels, p.Pool.Taints)
			}
		}
	}
}

func trainingPod(key string, gpus int, priority int64) broker.Demand {
	return broker.Demand{Source: broker.SourceK8s, Key: key, Name: "default/" + key, Tenant: "training", Queue: "default",
		Priority: priority, GPUsPerUnit: gpus, Units: 1, Preemptible: true,
		Constraints: broker.Constraints{NodeSelector: map[string]string{"infra-type": "gpu"},
			Tolerations: []broker.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}}}
}

// TestRuntimeReferenceScenario plays docs/design.md's story: the Job waits, one
// node is bought (and only one while it boots), it joins, the pod runs and
// finishes, and the idle node is drained and terminated after the
// unneeded time.
func TestRuntimeReferenceScenario(t *testing.T) {
	w := newRTWorld(t, 5)
	r := w.runtime()
	w.k8s.submit(trainingPod("elastic-gpu-training", 2, 1000000))

	rep := w.tick(r)
	if len(rep.Journaled) != 1 || rep.Journaled[0].Kind != broker.ActScaleUp || rep.Journaled[0].Target != 1 {
		t.Fatalf("first tick journaled %+v, want one scale-up to 1", rep.Journaled)
	}
	if fmt.Sprint(w.cloud.setCalls) != "[1]" {
		t.Fatalf("SetDesired calls %v, want [1]", w.cloud.setCalls)
	}
	// While the node boots, further ticks must not buy another one.
	for i := 0; i < 5; i++ {
		w.clock.Add(5 * time.Second)
		w.tick(r)
	}
	if fmt.Sprint(w.cloud.setCalls) != "[1]" {
		t.Fatalf("SetDesired calls while booting %v, want only [1]", w.cloud.setCalls)
	}
	// The op stays open, linked to its demand, until the node is gpu-ready.
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 1 || ups[0].State.Terminal() || ups[0].Step != broker.StepAwaitReady {
		t.Fatalf("scale-up op: %+v", ups)
	}
	// The node joins; the scheduler places the pod; the demand closes.
	w.boot(w.k8s)
	w.clock.Add(5 * time.Second)
	w.tick(r)
	if reason := w.ledger.closed["k8s/elastic-gpu-training"]; reason != "scheduled" {
		t.Fatalf("ledger closed the demand as %q, want scheduled", reason)
	}
	// The pod finishes; the node idles past the unneeded time.
	w.k8s.finish("elastic-gpu-training")
	for i := 0; i < 4; i++ {
		w.clock.Add(2 * time.Minute)
		w.tick(r)
	}
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State != broker.OpDone {
		t.Fatalf("scale-down ops: %+v", downs)
	}
	if fmt.Sprint(w.cloud.terminated) != "[i-0001]" {
		t.Fatalf("terminated %v, want [i-0001]", w.cloud.terminated)
	}
	if !w.k8s.released["node-i-0001"] {
		t.Fatal("the node was terminated without being drained first")
	}
	var waits, actions int
	for _, d := range w.ledger.decisions {
		if d.Kind == "wait" {
			waits++
		} else {
			actions++
		}
	}
	if actions < 2 || waits == 0 {
		t.Fatalf("decisions: %d actions, %d waits; want both recorded", actions, waits)
	}
}

// TestRuntimeCrashResumesFromJournal kills the broker (drops its Runtime)
// in the middle of a drain and right after journaling a scale-up; a new
// Runtime on the same state finishes both without a second scale-up.
func TestRuntimeCrashResumesFromJournal(t *testing.T) {
	w := newRTWorld(t, 5)
	// A busy node whose drain will take a while (blocked by a PDB), and an
	// idle one to be reclaimed.
	w.k8s.join("busy", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-busy", Hostname: "busy", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	w.k8s.submit(trainingPod("web", 1, 0))
	r1 := w.runtime()
	w.tick(r1) // places "web" on busy
	w.k8s.finish("web")
	// Only a CPU pod is left: GPU use decides, so the node is reclaimable,
	// but a PodDisruptionBudget holds the drain.
	w.k8s.nodes["busy"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "cpu-only", Name: "default/cpu-only", GPUs: 0, CheckpointAge: -1, Class: broker.WorkService}}
	w.k8s.drainBlocked = true
	w.clock.Add(6 * time.Minute)
	w.tick(r1) // underused since the first tick: journals the scale-down, the drain starts
	downs := w.ledger.opsOf(broker.ActScaleDown)
	if len(downs) != 1 || downs[0].State.Terminal() || downs[0].Step != broker.StepRelease {
		t.Fatalf("want one scale-down in its drain, got %+v", downs)
	}

	// Now demand arrives and a scale-up is journaled; the broker dies before
	// the executor runs it: simulate by journaling through a tick whose
	// SetDesired fails, so the op stays open.
	w.cloud.failSet = errors.New("connection reset")
	// YARN demand: Kubernetes demand would cancel the pending scale-down
	// and take its node back instead of buying one.
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0002/1", Tenant: "training", Queue: "root.training",
		Priority: 1000000, GPUsPerUnit: 4, Units: 1})
	w.clock.Add(5 * time.Second)
	w.tick(r1)
	ups := w.ledger.opsOf(broker.ActScaleUp)
	if len(ups) != 1 || ups[0].State.Terminal() {
		t.Fatalf("want one open scale-up, got %+v", ups)
	}
	// Crash: r1 is gone. The cloud recovers, the PDB lets the drain finish.
	w.cloud.failSet = nil
	w.k8s.drainBlocked = false
	r2 := w.runtime()
	for i := 0; i < 4; i++ {
		w.clock.Add(5 * time.Second)
		w.tick(r2)
	}
	if fmt.Sprint(w.cloud.setCalls) != fmt.Sprint([]int{ups[0].Target}) {
		t.Fatalf("SetDesired calls after restart %v, want exactly one to %d", w.cloud.setCalls, ups[0].Target)
	}
	if got := w.ledger.opsOf(broker.ActScaleUp); len(got) != 1 || (got[0].State != broker.OpDone && got[0].Step != broker.StepAwaitReady) {
		t.Fatalf("scale-up after restart: %+v", got)
	}
	if got := w.ledger.opsOf(broker.ActScaleDown); len(got) != 1 || got[0].State != broker.OpDone || fmt.Sprint(w.cloud.terminated) != "[i-busy]" {
		t.Fatalf("scale-down after restart: %+v, terminated %v", got, w.cloud.terminated)
	}
}

func TestRuntimeStaleSideBlocksDestruction(t *testing.T) {
	w := newRTWorld(t, 5)
	w.k8s.join("idle", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-idle", Hostname: "idle", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	r := w.runtime()
	w.tick(r)
	w.k8s.err = fmt.Errorf("list pods: %w", broker.ErrStale)
	for i := 0; i < 4; i++ {
		w.clock.Add(3 * time.Minute)
		w.tick(r)
	}
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 0 {
		t.Fatalf("scaled down a node of a stale side: %+v", downs)
	}
	if st := r.Status(); st.Stale[broker.SourceK8s] == "" {
		t.Fatalf("status must report the stale side: %+v", st)
	}
	// Fresh again: the idle node is reclaimed.
	w.k8s.err = nil
	w.clock.Add(time.Second)
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	w.tick(r)
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 {
		t.Fatalf("after recovery: %+v", downs)
	}
}

func transferWorld(t *testing.T) (*rtWorld, *Runtime, *TickReport) {
	w := newRTWorld(t, 1)
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "ds", GPUs: 0, System: true}}
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-n1", Hostname: "n1", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	r := w.runtime()
	w.tick(r)
	// A YARN gang needs the whole node; the pool is at max, and the
	// Kubernetes node runs only a DaemonSet pod.
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 2, Units: 2, Gang: true})
	w.clock.Add(time.Second)
	rep := w.tick(r)
	return w, r, rep
}

func TestRuntimeTransfer(t *testing.T) {
	w, r, rep := transferWorld(t)
	if len(rep.Journaled) != 1 || rep.Journaled[0].Kind != broker.ActTransfer {
		t.Fatalf("want a transfer journaled, got %+v (waits %+v)", rep.Journaled, rep.Plan.Waits)
	}
	if !w.k8s.released["n1"] || len(w.yarn.admitted) != 0 {
		t.Fatalf("after the plan's tick: k8s released %v, YARN admitted %v; want n1 fenced only", w.k8s.released, w.yarn.admitted)
	}
	w.ticks(r, 1, 5*time.Second) // an observation after the fence
	if fmt.Sprint(w.yarn.admitted) != "[n1]" || !w.k8s.released["n1"] {
		t.Fatalf("YARN admitted %v (k8s released %v), want n1 released by Kubernetes then admitted by YARN", w.yarn.admitted, w.k8s.released)
	}
	if ops := w.ledger.opsOf(broker.ActTransfer); ops[0].State != broker.OpDone {
		t.Fatalf("transfer op: %+v", ops[0])
	}
}

func TestRuntimeTransferTimeoutGivesNodeBack(t *testing.T) {
	w := newRTWorld(t, 1)
	w.k8s.join("n1", rtPool, 4, map[string]string{"infra-type": "gpu"}, nil)
	w.cloud.pools[rtPool].Instances = []broker.Instance{{ID: "i-n1", Hostname: "n1", Phase: broker.PhaseActive}}
	w.cloud.pools[rtPool].Desired = 1
	r := w.runtime()
	w.tick(r)
	// Journal the transfer by hand, then a pod lands on the node before
	// the cordon and a PodDisruptionBudget keeps it there.
	if _, err := w.ledger.InsertOp(context.Background(), broker.Op{Kind: broker.ActTransfer, Pool: rtPool, Node: "n1", To: broker.OwnerYARN,
		Reason: "test", State: broker.OpPending, Step: broker.StepRelease, Data: []byte(`{"from":"k8s"}`)}); err != nil {
		t.Fatal(err)
	}
	w.k8s.nodes["n1"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "late", GPUs: 1}}
	w.k8s.nodes["n1"].GPUsAllocated = 1
	w.k8s.drainBlocked = true
	for i := 0; i < 40; i++ {
		w.clock.Add(5 * time.Second)
		w.tick(r)
	}
	ops := w.ledger.opsOf(broker.ActTransfer)
	if ops[0].State != broker.OpFailed || !strings.Contains(ops[0].LastError, "given back") {
		t.Fatalf("transfer op: state %s, error %q; want failed and given back", ops[0].State, ops[0].LastError)
	}
	if fmt.Sprint(w.k8s.admitted) != "[n1]" || w.k8s.released["n1"] || len(w.yarn.admitted) != 0 {
		t.Fatalf("k8s admitted %v, yarn admitted %v: the node must go back to Kubernetes only", w.k8s.admitted, w.yarn.admitted)
	}
}

// TestRuntimeFirstSeenIsTheLedgers: a replica that started before the
// demand existed and takes over after another applied it sees the ledger's
// first-seen time, not the time it first saw the demand itself (the
// runtime keeps no copy of first-seen times).
func TestRuntimeFirstSeenIsTheLedgers(t *testing.T) {
	w := newRTWorld(t, 0) // no room: the demand keeps waiting
	standby := w.runtime()
	w.tick(standby) // nothing pending yet
	w.k8s.submit(trainingPod("p", 2, 0))
	leader := w.runtime()
	w.tick(leader) // applies the demand at t0
	w.clock.Add(time.Minute)
	rep := w.tick(standby)
	if len(rep.Snapshot.Demand) != 1 || !rep.Snapshot.Demand[0].FirstSeen.Equal(t0) {
		t.Fatalf("first seen on the replica that took over: %+v, want %s", rep.Snapshot.Demand, t0)
	}
	plan, err := standby.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Waits) != 1 {
		t.Fatalf("dry run waits: %+v", plan.Waits)
	}
}

func TestRuntimeSnapshotFirstSeenSurvivesRestart(t *testing.T) {
	w := newRTWorld(t, 0) // no room: the demand keeps waiting
	w.k8s.submit(trainingPod("p", 2, 0))
	r1 := w.runtime()
	w.tick(r1)
	w.clock.Add(time.Minute)
	r2 := w.runtime()
	rep := w.tick(r2)
	if len(rep.Snapshot.Demand) != 1 || !rep.Snapshot.Demand[0].FirstSeen.Equal(t0) {
		t.Fatalf("first seen after restart: %+v, want %s", rep.Snapshot.Demand, t0)
	}
	if len(rep.Plan.Waits) != 1 {
		t.Fatalf("want one wait, got %+v", rep.Plan.Waits)
	}
}
