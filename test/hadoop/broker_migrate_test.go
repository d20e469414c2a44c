package hadoop_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/colinmarc/hdfs/v2"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// migrateTarget is a broker target that runs a restartable trainer: an
// app tagged with its checkpoint directory whose AM asks again, anywhere,
// for a container that ends early.
type migrateTarget struct {
	brokerTarget
	restartable func(ctx context.Context, queue string, seconds int, spec hadoop.ContainerSpec, tag string) (string, string, error)
	spread      func(ctx context.Context, queue string, seconds int, specs ...hadoop.ContainerSpec) (string, []string, error)
	alive       func(ctx context.Context, host, app, container string) (bool, error)
	// restartRM makes a new active RM (work-preserving recovery) while
	// the migration waits for the checkpoint.
	restartRM func(ctx context.Context) error
}

// TestBrokerMigratesAtTheCheckpoint runs checkpoint-aligned migration
// (broker/migrate.go) over yarnsim and every Hadoop version, with the
// checkpoints in a real HDFS (one MiniDFSCluster for all three) read by
// the product's yarn.CheckpointReader. Node X runs one 1-GPU container of
// a trainer tagged gpubroker.io/checkpoint-dir, whose newest checkpoint
// is 30 minutes old; node Y, of the same pool, is 3 of 4 GPUs full; a
// third host, in no pool, is full. X is underused, and YARN work is never
// drained, so consolidation migrates: the op cordons X (the yarn cordon
// label, never the exclude file), signals nothing until the trainer
// writes a new checkpoint, then stops the container with
// GRACEFUL_SHUTDOWN; the trainer's AM asks again and the RM places the
// new container on Y (X is cordoned); X is decommissioned and terminated
// only once the RM lists it DECOMMISSIONED. Nothing else stops: the
// trainer's app runs on, Y's and the third host's containers too. While
// the op waits for the checkpoint the RM restarts (a failover to a new
// active RM): X stays cordoned (the label survives, or the op puts it
// back), out of the exclude file, its container untouched and not
// signalled, and the migration goes on after it.
func TestBrokerMigratesAtTheCheckpoint(t *testing.T) {
	hctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	h, fs := startTestHDFS(t, hctx)

	t.Run("yarnsim", func(t *testing.T) {
		tg, sim, admin := simBrokerWorld(t)
		runBrokerMigrate(t, fs, h.NameNode, "sim", migrateTarget{brokerTarget: tg,
			restartable: func(_ context.Context, queue string, seconds int, s hadoop.ContainerSpec, tag string) (string, string, error) {
				return admin.Restartable(queue, time.Duration(seconds)*time.Second, tag, yarnsim.Placement{Host: s.Host, GPUs: s.GPUs})
			},
			spread: func(_ context.Context, queue string, seconds int, specs ...hadoop.ContainerSpec) (string, []string, error) {
				ps := make([]yarnsim.Placement, len(specs))
				for i, s := range specs {
					ps[i] = yarnsim.Placement{Host: s.Host, GPUs: s.GPUs}
				}
				return admin.Spread(queue, time.Duration(seconds)*time.Second, ps...)
			},
			alive:     simRuns(sim),
			restartRM: func(context.Context) error { return admin.RestartRM() }})
	})
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) {
			tg, c := hadoopBrokerWorld(t, hadoop.Config{Version: v, Recovery: true, Cordon: yarn.DefaultCordonLabel})
			runBrokerMigrate(t, fs, h.NameNode, strings.ReplaceAll(v, ".", ""), migrateTarget{brokerTarget: tg,
				restartable: c.Restartable, spread: c.Spread, alive: nodeManagerRuns(c),
				restartRM: func(ctx context.Context) error {
					away, err := c.RestartRM(ctx)
					t.Logf("hadoop %s: the RM was away %s", v, away)
					return err
				}})
		})
	}
}

// writeCheckpoint writes a file below dir on HDFS, modified at (with its
// directories, so only it decides the tree's newest time when at is old).
func writeCheckpoint(t *testing.T, fs *hdfs.Client, dir, name string, at time.Time) {
	t.Helper()
	if err := fs.MkdirAll(dir+"/"+name, 0o755); err != nil {
		t.Fatal(err)
	}
	path := dir + "/" + name + "/model.pt"
	writeHDFSFile(t, fs, path)
	for _, p := range []string{path, dir + "/" + name, dir} {
		if err := fs.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func runBrokerMigrate(t *testing.T, fs *hdfs.Client, namenode, name string, tg migrateTarget) {
	ctx, direct, ex := startBrokerSuite(t, tg.brokerTarget)
	if len(tg.hosts) < 3 {
		t.Fatalf("hosts %v: want three", tg.hosts)
	}
	x, y, other := tg.hosts[0], tg.hosts[1], tg.hosts[2]
	// YARN lowercases tags: the directory is lowercase.
	dir := "/ckpt/" + name + "/trainer"
	writeCheckpoint(t, fs, dir, "step-100", time.Now().Add(-30*time.Minute))
	tag := yarn.CheckpointDirKey + "=hdfs://" + namenode + dir

	fillApp, fill, err := tg.spread(ctx, "b", 900, hadoop.ContainerSpec{Host: y, GPUs: tg.gpus - 1})
	if err != nil {
		t.Fatalf("spread on %s: %v", y, err)
	}
	fullApp, full, err := tg.spread(ctx, "b", 900, hadoop.ContainerSpec{Host: other, GPUs: tg.gpus})
	if err != nil {
		t.Fatalf("spread on %s: %v", other, err)
	}
	app, first, err := tg.restartable(ctx, "a", 900, hadoop.ContainerSpec{Host: x, GPUs: 1}, tag)
	if err != nil {
		t.Fatalf("restartable on %s: %v", x, err)
	}
	waitNode(t, ctx, direct, x, "the trainer on "+x, time.Minute, func(n yarn.Node) error {
		if n.Containers != 1 || n.GPUsUsed != 1 {
			return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
		}
		return nil
	})
	t.Logf("trainer %s (%s) on %s, tag %s; %s 3/4 full (%s), %s full (%s)", app, first, x, tag, y, fill[0], other, full[0])

	ckpts, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{CacheFor: 200 * time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tg.checkpoints = ckpts
	pol := broker.DefaultPolicy()
	pol.ScaleDownUnneeded = broker.Duration(3 * time.Second)
	pol.DrainTimeout = broker.Duration(2 * time.Minute)
	pol.Migrate = broker.MigrateCheckpointed
	pol.MigrateWindow = broker.Duration(2 * time.Minute)
	rec := &rmRecorder{}
	r := newBrokerRig(t, ctx, tg.brokerTarget, rec.start(t, tg.url), direct, pol, nil, x, y)

	signalled := func() bool {
		return slices.ContainsFunc(rec.requests(), func(s string) bool {
			return strings.Contains(s, "/containers/"+first+"/signal/")
		})
	}
	// IMPORTANT: nothing but the trainer's container stops, the app is
	// never killed, nothing is terminated before its time, and X never
	// goes into the exclude file while it runs work.
	// An RM that recovers after a restart lists the app ACCEPTED until
	// its AM resyncs: recovering says that is expected.
	recovering := false
	safe := func() error {
		if s := appState(t, ctx, tg.url, app); s != "RUNNING" && !(recovering && s == "ACCEPTED") {
			return fmt.Errorf("the trainer's app %s is %s", app, s)
		}
		for _, c := range []struct{ host, app, id string }{{y, fillApp, fill[0]}, {other, fullApp, full[0]}} {
			if ok, err := tg.alive(ctx, c.host, c.app, c.id); err != nil || !ok {
				return fmt.Errorf("container %s on %s, no migration's, is gone (%v)", c.id, c.host, err)
			}
		}
		if slices.ContainsFunc(rec.requests(), func(s string) bool { return strings.HasPrefix(s, "PUT") && strings.Contains(s, "/state") }) {
			return fmt.Errorf("RM requests %v kill an app", rec.requests())
		}
		for _, th := range r.pool.terminations() {
			if th.Host != x || th.RMState != "DECOMMISSIONED" {
				return fmt.Errorf("terminated %+v, want only %s once the RM lists it DECOMMISSIONED", th, x)
			}
		}
		return nil
	}

	// The migration is planned, X cordoned, the container left running:
	// its checkpoint is older than the window.
	r.tickUntil(ctx, "a migration cordoning "+x, 2*time.Minute, func() error {
		if signalled() {
			return fmt.Errorf("container %s signalled before a fresh checkpoint: %v", first, rec.requests())
		}
		return safe()
	}, func() bool {
		return len(r.ops(ctx, broker.ActMigrate, x)) == 1 && slices.Contains(nodeLabels(ctx, direct, x), yarn.DefaultCordonLabel)
	})
	if in, err := ex.Contains(x); err != nil || in {
		t.Fatalf("%s in the exclude file (%v, %v) while its container runs: the cordon must hold it", x, in, err)
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		if _, err := r.rt.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if signalled() {
			t.Fatalf("container %s signalled before a fresh checkpoint", first)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if ok, err := tg.alive(ctx, x, app, first); err != nil || !ok {
		t.Fatalf("the trainer's container %s on %s stopped before its checkpoint (%v)", first, x, err)
	}

	// A failover while the op waits: the new active RM must find X
	// cordoned, never excluded, with its container running and not
	// signalled.
	recovering = true
	if err := tg.restartRM(ctx); err != nil {
		t.Fatalf("restart the RM: %v", err)
	}
	stillHeld := func() error {
		if signalled() {
			return fmt.Errorf("container %s signalled before a fresh checkpoint: %v", first, rec.requests())
		}
		if in, err := ex.Contains(x); err != nil || in {
			return fmt.Errorf("%s in the exclude file (%v, %v) while its container runs", x, in, err)
		}
		return safe()
	}
	r.tickUntil(ctx, x+" cordoned with its trainer after the RM restart", 2*time.Minute, stillHeld, func() bool {
		o, err := direct.Observe(ctx)
		if err != nil {
			return false
		}
		n, ok := o.Node(x)
		return ok && n.State == "RUNNING" && n.Containers == 1 && slices.Contains(n.Labels, yarn.DefaultCordonLabel) &&
			appState(t, ctx, tg.url, app) == "RUNNING"
	})
	recovering = false
	for range 5 {
		if _, err := r.rt.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if err := stillHeld(); err != nil {
			t.Fatalf("after the RM restart: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if ok, err := tg.alive(ctx, x, app, first); err != nil || !ok {
		t.Fatalf("the trainer's container %s on %s is gone after the RM restart (%v)", first, x, err)
	}
	if ops := r.ops(ctx, broker.ActMigrate, x); len(ops) != 1 || ops[0].State.Terminal() {
		t.Fatalf("migration ops %+v after the RM restart: want the one op still waiting", ops)
	}

	// The trainer checkpoints: the op stops its container right after.
	checkpointed := time.Now()
	writeCheckpoint(t, fs, dir, "step-200", checkpointed)
	var moved string
	ticks := r.tickUntil(ctx, x+" terminated and the trainer running on "+y, 3*time.Minute, safe, func() bool {
		if moved == "" {
			if o, err := direct.Observe(ctx); err == nil {
				if a, ok := o.App(app); ok {
					for _, c := range a.Containers {
						if c.Host == y && c.ID != first && !c.AM {
							moved = c.ID
						}
					}
				}
			}
		}
		ops := r.ops(ctx, broker.ActMigrate, x)
		return moved != "" && len(r.pool.terminations()) == 1 && len(ops) == 1 && ops[0].State == broker.OpDone
	})
	if err := safe(); err != nil {
		t.Fatal(err)
	}
	if ok, err := tg.alive(ctx, y, app, moved); err != nil || !ok {
		t.Fatalf("the trainer's new container %s does not run on %s (%v)", moved, y, err)
	}
	if ok, _ := tg.alive(ctx, x, app, first); ok {
		t.Fatalf("the trainer's old container %s still runs on %s", first, x)
	}
	if !signalled() {
		t.Fatalf("RM requests %v: no signal to %s", rec.requests(), first)
	}
	if labels := nodeLabels(ctx, direct, y); len(labels) > 0 {
		t.Fatalf("the landing node %s carries labels %v", y, labels)
	}
	t.Logf("%s: the trainer moved %s on %s -> %s on %s; %s terminated after %d ticks, %s after the checkpoint",
		name, first, x, moved, y, x, ticks, time.Since(checkpointed).Round(time.Millisecond))
}

// nodeLabels returns host's partition labels as the RM lists them (none
// when it cannot be read).
func nodeLabels(ctx context.Context, direct *yarn.Client, host string) []string {
	o, err := direct.Observe(ctx)
	if err != nil {
		return nil
	}
	n, _ := o.Node(host)
	return n.Labels
}
