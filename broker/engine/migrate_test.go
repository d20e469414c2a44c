package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// migrateWorld: YARN node y1 runs one 1-GPU container that checkpointed a
// minute ago, y2 runs a 3-GPU container of another application; the RM
// holds a third application's 4-GPU container queued. With
// consolidation.migrate checkpointed, y1 is underused and its task fits on
// y2.
func migrateWorld(t *testing.T) (*rtWorld, *rmSide, *Runtime) {
	w := newRTWorld(t, 5)
	w.ledger.policy.Migrate = broker.MigrateCheckpointed
	task := broker.Workload{Source: broker.SourceYARN, Key: "container_1_0001_01_000002", Name: "container_1_0001_01_000002",
		Tenant: "training", GPUs: 1, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-5 * time.Hour),
		CheckpointAge: time.Minute, App: "application_1_0001"}
	w.yarnHost("y1", task)
	w.yarnHost("y2", broker.Workload{Source: broker.SourceYARN, Key: "container_1_0002_01_000002", Name: "container_1_0002_01_000002",
		Tenant: "training", GPUs: 3, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-time.Hour), CheckpointAge: -1,
		App: "application_1_0002"})
	rm := newRMSide(w.yarn, "container_1_0003_01_000001")
	rm.labels["y1"] = []string{"gpu"}
	return w, rm, w.runtimeWith(rm, rm)
}

// TestRuntimeMigrateCordonsStopsThenTerminates: a migration cordons the
// YARN node before it signals the task (so the RM places nothing of
// another application in the freed space, and the task's restart cannot
// land there), the host is excluded only once empty, then terminated;
// the other node's work is untouched and nothing is killed.
func TestRuntimeMigrateCordonsStopsThenTerminates(t *testing.T) {
	w, rm, r := migrateWorld(t)
	w.tick(r)
	w.clock.Add(6 * time.Minute) // underused past the unneeded time
	var op broker.Op
	for range 200 {
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActMigrate); len(ops) == 1 && ops[0].State.Terminal() {
			op = ops[0]
			break
		}
		w.clock.Add(2 * time.Second)
	}
	if op.State != broker.OpDone || op.Node != "y1" {
		t.Fatalf("migration %+v (RM saw %q): want y1 migrated and done", op, rm.log)
	}
	cordon, evict, stop, exclude := logIndex(rm.log, "cordon y1"), logIndex(rm.log, "evict "), logIndex(rm.log, "stopped "), logIndex(rm.log, "exclude y1")
	if cordon < 0 || evict < 0 || cordon > evict || rm.log[evict] != "evict container_1_0001_01_000002 (RUNNING, cordoned)" {
		t.Fatalf("RM saw %q: want the cordon, then the task signalled while RUNNING", rm.log)
	}
	if stop < 0 || exclude < stop {
		t.Fatalf("RM saw %q: want the host excluded only after the task stopped", rm.log)
	}
	if len(rm.killed) != 0 || logIndex(rm.log, "placed ") >= 0 {
		t.Fatalf("killed %v, RM saw %q: want nothing killed and nothing placed on the cordoned node", rm.killed, rm.log)
	}
	if !slices.Equal(w.cloud.terminated, []string{"i-y1"}) {
		t.Fatalf("terminated %v, want y1's instance", w.cloud.terminated)
	}
	if n := w.yarn.nodes["y2"]; len(n.Work) != 1 || n.Work[0].Key != "container_1_0002_01_000002" {
		t.Fatalf("y2 runs %+v, want its own container untouched", n.Work)
	}
	if got := broker.MigratedTasks(&op); got != 1 {
		t.Fatalf("op counts %d migrated tasks, want 1", got)
	}
}

// TestRuntimeMigrateBudgetCountsEndedOps: a migration that ended within
// the hour still counts against consolidation.max_migrations_per_hour: with
// a budget of 1 a second underused node is kept until the hour has passed.
func TestRuntimeMigrateBudgetCountsEndedOps(t *testing.T) {
	w, rm, r := migrateWorld(t)
	w.ledger.policy.MaxMigrationsPerHour = 1
	w.yarnHost("y3", broker.Workload{Source: broker.SourceYARN, Key: "container_1_0004_01_000002", Name: "container_1_0004_01_000002",
		Tenant: "training", GPUs: 1, Preemptible: true, Class: broker.WorkBatch, StartedAt: t0.Add(-5 * time.Hour),
		CheckpointAge: time.Minute, App: "application_1_0004"})
	w.yarn.nodes["y2"].Work[0].GPUs, w.yarn.nodes["y2"].GPUsAllocated = 2, 2 // room for both tasks
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	for range 100 {
		w.tick(r)
		w.clock.Add(2 * time.Second)
	}
	if ops := w.ledger.opsOf(broker.ActMigrate); len(ops) != 1 || ops[0].State != broker.OpDone {
		t.Fatalf("migrations %+v (RM saw %q): want exactly one within the budget of 1", ops, rm.log)
	}
}

// TestRuntimeMigrateWaitsForTheNextCheckpoint: a task whose checkpoint is
// 20 minutes old is not stopped when the node is cordoned; the op holds
// the node until the task checkpoints again, and only then stops it.
func TestRuntimeMigrateWaitsForTheNextCheckpoint(t *testing.T) {
	w, rm, r := migrateWorld(t)
	y1 := w.yarn.nodes["y1"]
	y1.Work[0].CheckpointAge = 20 * time.Minute
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	assertMigrationWaits(t, w, rm, r, 30, nil)
	w.yarn.mu.Lock()
	y1.Work[0].CheckpointAge = 10 * time.Second // it checkpointed
	w.yarn.mu.Unlock()
	assertMigrationDone(t, w, rm, r, nil)
}

// assertMigrationWaits ticks n times, 2 s apart (each after before, when
// set), and fails unless one migration waits in its evict step with y1
// cordoned and nothing signalled.
func assertMigrationWaits(t *testing.T, w *rtWorld, rm *rmSide, r *Runtime, n int, before func()) {
	t.Helper()
	for range n {
		if before != nil {
			before()
		}
		w.tick(r)
		w.clock.Add(2 * time.Second)
	}
	ops := w.ledger.opsOf(broker.ActMigrate)
	if len(ops) != 1 || ops[0].State.Terminal() || ops[0].Step != broker.StepEvict {
		t.Fatalf("migrations %+v, want one waiting in evict", ops)
	}
	if logIndex(rm.log, "cordon y1") < 0 || logIndex(rm.log, "evict ") >= 0 {
		t.Fatalf("RM saw %q: want y1 cordoned and its task not signalled before its next checkpoint", rm.log)
	}
}

// assertMigrationDone ticks, 2 s apart (each after before, when set),
// until the migration ends, and fails unless it is done with nothing
// killed.
func assertMigrationDone(t *testing.T, w *rtWorld, rm *rmSide, r *Runtime, before func()) {
	t.Helper()
	for range 100 {
		if before != nil {
			before()
		}
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActMigrate); ops[0].State.Terminal() {
			break
		}
		w.clock.Add(2 * time.Second)
	}
	if ops := w.ledger.opsOf(broker.ActMigrate); ops[0].State != broker.OpDone || len(rm.killed) != 0 {
		t.Fatalf("migration %+v, killed %v (RM saw %q): want done after the checkpoint, nothing killed", ops[0], rm.killed, rm.log)
	}
}

// TestRuntimeMigrateWaitsPastACheckpointBeforeTheCordon: a task whose
// newest checkpoint, written before the node was cordoned, is still
// inside the window is not stopped (that would throw away the work since
// that checkpoint): the op waits for the next checkpoint, and stops the
// task right after it.
func TestRuntimeMigrateWaitsPastACheckpointBeforeTheCordon(t *testing.T) {
	w, rm, r := migrateWorld(t)
	y1 := w.yarn.nodes["y1"]
	ckpt := w.clock.Now().Add(-time.Minute)
	age := func() {
		w.yarn.mu.Lock()
		if len(y1.Work) > 0 { // until it stopped
			y1.Work[0].CheckpointAge = w.clock.Now().Sub(ckpt)
		}
		w.yarn.mu.Unlock()
	}
	age()
	w.tick(r)
	w.clock.Add(6 * time.Minute) // underused past the unneeded time
	// When the node is planned and cordoned, its task's newest checkpoint
	// is a minute old, inside the 5-minute window.
	ckpt = w.clock.Now().Add(-time.Minute)
	assertMigrationWaits(t, w, rm, r, 25, age)
	ckpt = w.clock.Now() // it checkpoints
	assertMigrationDone(t, w, rm, r, age)
}

// TestRuntimeMigrateGivesTheNodeBackWhenNoCheckpointComes: a task that
// never checkpoints again within the max wait is never stopped: the op
// gives the node back, uncordoned, and its work runs on.
func TestRuntimeMigrateGivesTheNodeBackWhenNoCheckpointComes(t *testing.T) {
	w, rm, r := migrateWorld(t)
	w.ledger.policy.MigrateMaxWait = broker.Duration(10 * time.Minute)
	w.yarn.nodes["y1"].Work[0].CheckpointAge = 8 * time.Minute
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	for range 400 {
		w.tick(r)
		if ops := w.ledger.opsOf(broker.ActMigrate); len(ops) > 0 && ops[0].State.Terminal() {
			break
		}
		w.clock.Add(10 * time.Second)
	}
	ops := w.ledger.opsOf(broker.ActMigrate)
	if len(ops) == 0 || ops[0].State != broker.OpFailed {
		t.Fatalf("migrations %+v, want the first given back (failed) at its deadline", ops)
	}
	if logIndex(rm.log, "evict ") >= 0 || logIndex(rm.log, "uncordon y1") < 0 || len(w.yarn.nodes["y1"].Work) != 1 {
		t.Fatalf("RM saw %q, y1 runs %+v: want y1 uncordoned with its task untouched", rm.log, w.yarn.nodes["y1"].Work)
	}
}

// TestRuntimeMigrateYieldsToLatencySensitiveDemand: while a migration
// waits for its task's next checkpoint, YARN demand that may not be
// preempted and fits the cordoned node's free GPUs arrives. The migration
// is cancelled rather than a node bought: y1 is uncordoned, its task runs
// on untouched, nothing is signalled or terminated, and the demand lands
// on y1.
func TestRuntimeMigrateYieldsToLatencySensitiveDemand(t *testing.T) {
	w, rm, r := migrateWorld(t)
	rm.queued = ""
	y1 := w.yarn.nodes["y1"]
	y1.Work[0].CheckpointAge = 20 * time.Minute
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	assertMigrationWaits(t, w, rm, r, 10, nil)
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_5/1", Name: "application_5", Tenant: "training",
		Queue: "root.training", GPUsPerUnit: 2, Units: 1, Priority: 10000})
	w.ticks(r, 3, 5*time.Second)
	ops := w.ledger.opsOf(broker.ActMigrate)
	if len(ops) != 1 || ops[0].State != broker.OpCancelled {
		t.Fatalf("migrations %+v: want the one cancelled for the demand", ops)
	}
	if logIndex(rm.log, "evict ") >= 0 || logIndex(rm.log, "uncordon y1") < 0 || len(rm.killed) != 0 {
		t.Fatalf("RM saw %q, killed %v: want y1 uncordoned, nothing signalled or killed", rm.log, rm.killed)
	}
	if ups := w.ledger.opsOf(broker.ActScaleUp); len(ups) != 0 || len(w.cloud.terminated) != 0 {
		t.Fatalf("scale-ups %+v, terminated %v: want nothing bought or terminated", ups, w.cloud.terminated)
	}
	if reason := w.ledger.closed["yarn/application_5/1"]; reason != "scheduled" || !slices.ContainsFunc(y1.Work, func(x broker.Workload) bool { return x.Key == "container_1_0001_01_000002" }) {
		t.Fatalf("demand closed as %q, y1 runs %+v: want the demand on y1 beside its own task", reason, y1.Work)
	}
}

// TestRuntimeMigrateStopsNothingWhileItsSideIsStale: a migration waiting
// for a task's next checkpoint signals nothing while the YARN observation
// fails, even though the checkpoint store shows the task's new checkpoint
// (the broker cannot see whether the container still runs there); once
// YARN is seen again, the checkpoint lets the task stop.
func TestRuntimeMigrateStopsNothingWhileItsSideIsStale(t *testing.T) {
	w, rm, r := migrateWorld(t)
	y1 := w.yarn.nodes["y1"]
	y1.Work[0].CheckpointDir = "hdfs://nn/ckpt/app1"
	ckpt := &fakeCheckpoints{age: 20 * time.Minute}
	r.cfg.Checkpoints = ckpt
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	assertMigrationWaits(t, w, rm, r, 10, nil)
	w.yarn.mu.Lock()
	w.yarn.err = errors.New("RM unreachable")
	w.yarn.mu.Unlock()
	ckpt.set(10 * time.Second) // it checkpoints: the store shows it
	assertMigrationWaits(t, w, rm, r, 20, nil)
	w.yarn.mu.Lock()
	w.yarn.err = nil
	w.yarn.mu.Unlock()
	assertMigrationDone(t, w, rm, r, nil)
}

// fakeCheckpoints answers every checkpoint directory with one age.
type fakeCheckpoints struct {
	mu  sync.Mutex
	age time.Duration
}

func (f *fakeCheckpoints) set(age time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.age = age
}

func (f *fakeCheckpoints) WorkAtRisk(context.Context, string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.age, true
}

// TestRuntimeMigrateNeverTakesAnUnlistedTaskForEnded: after an RM restart
// the RM lists the recovering application's container as nothing it can
// name (unlisted work on the node). The migration does not take the task
// for ended (it would release the node and wait for a container it no
// longer tracks); once the container is listed again and checkpoints, it
// is stopped as planned.
func TestRuntimeMigrateNeverTakesAnUnlistedTaskForEnded(t *testing.T) {
	w, rm, r := migrateWorld(t)
	y1 := w.yarn.nodes["y1"]
	task := y1.Work[0]
	y1.Work[0].CheckpointAge = 20 * time.Minute
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	assertMigrationWaits(t, w, rm, r, 10, nil)
	w.yarn.mu.Lock()
	y1.Work = []broker.Workload{{Source: broker.SourceYARN, Key: "unlisted/y1", Name: "unlisted containers", GPUs: 1,
		CheckpointAge: -1, Unlisted: true}}
	w.yarn.mu.Unlock()
	assertMigrationWaits(t, w, rm, r, 20, nil)
	if op := w.ledger.opsOf(broker.ActMigrate)[0]; len(broker.OpDataOf(&op).Victims) != 1 {
		t.Fatalf("op %+v: want its task still a victim while the RM cannot name it", op)
	}
	w.yarn.mu.Lock()
	task.CheckpointAge = 10 * time.Second // listed again, checkpointed
	y1.Work = []broker.Workload{task}
	w.yarn.mu.Unlock()
	assertMigrationDone(t, w, rm, r, nil)
	if logIndex(rm.log, "evict "+task.Key) < 0 {
		t.Fatalf("RM saw %q: want the task signalled once listed again", rm.log)
	}
}

// TestRuntimeMigrateNeverTakesAnUnlistedNodeForEmpty: right after an RM
// restart the new RM does not list a node until its NodeManager
// re-registers; the node is still known (cloud, store) but shows no work.
// The migration does not take its task for ended; once the node is
// listed again with the task, the task checkpoints and is stopped.
func TestRuntimeMigrateNeverTakesAnUnlistedNodeForEmpty(t *testing.T) {
	w, rm, r := migrateWorld(t)
	y1 := w.yarn.nodes["y1"]
	y1.Work[0].CheckpointAge = 20 * time.Minute
	w.tick(r)
	w.clock.Add(6 * time.Minute)
	assertMigrationWaits(t, w, rm, r, 10, nil)
	w.yarn.mu.Lock()
	delete(w.yarn.nodes, "y1")
	w.yarn.mu.Unlock()
	assertMigrationWaits(t, w, rm, r, 20, nil)
	if op := w.ledger.opsOf(broker.ActMigrate)[0]; len(broker.OpDataOf(&op).Victims) != 1 {
		t.Fatalf("op %+v: want its task still a victim while the RM does not list its node", op)
	}
	w.yarn.mu.Lock()
	w.yarn.nodes["y1"] = y1
	y1.Work[0].CheckpointAge = 10 * time.Second
	w.yarn.mu.Unlock()
	assertMigrationDone(t, w, rm, r, nil)
}
