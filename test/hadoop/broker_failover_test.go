package hadoop_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
)

// brokerFailTarget is a broker target whose RM can be restarted as a
// failover makes a new active RM.
type brokerFailTarget struct {
	brokerTarget
	restartRM func(ctx context.Context) error
	// alive reports whether container of app still runs on host, asked
	// of the NodeManager itself where the target has one.
	alive func(ctx context.Context, host, app, container string) (bool, error)
}

// TestBrokerCordonSurvivesFailover runs the product (the engine, the YARN
// side with its cordon, the decommissioner) over a node it drains by
// attrition while the node runs a GPU container and a CPU container, and
// restarts the RM twice under it, on yarnsim and every Hadoop version:
// the node is never put in the exclude file nor terminated, its cordon
// holds (or is put back) after each failover, and both containers run on
// to the end.
func TestBrokerCordonSurvivesFailover(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) {
		tg, sim, admin := simBrokerWorld(t)
		runBrokerFailover(t, brokerFailTarget{brokerTarget: tg,
			restartRM: func(context.Context) error { return admin.RestartRM() },
			alive:     simRuns(sim)})
	})
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) {
			tg, c := hadoopBrokerWorld(t, hadoop.Config{Version: v, Recovery: true, Cordon: yarn.DefaultCordonLabel})
			runBrokerFailover(t, brokerFailTarget{brokerTarget: tg,
				restartRM: func(ctx context.Context) error {
					away, err := c.RestartRM(ctx)
					t.Logf("hadoop %s: the RM was away %s", v, away)
					return err
				},
				alive: nodeManagerRuns(c)})
		})
	}
}

func runBrokerFailover(t *testing.T, tg brokerFailTarget) {
	ctx, direct, ex := startBrokerSuite(t, tg.brokerTarget)
	busy := tg.hosts[0]
	type ctr struct{ app, id string }
	var work []ctr
	for _, gpus := range []int{1, 0} {
		app, id, err := tg.run(ctx, busy, gpus, 900)
		if err != nil {
			t.Fatalf("run a %d-GPU container on %s: %v", gpus, busy, err)
		}
		work = append(work, ctr{app, id})
	}
	waitNode(t, ctx, direct, busy, "both containers on "+busy, time.Minute, func(n yarn.Node) error {
		if n.Containers != 2 || n.GPUsUsed != 1 {
			return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
		}
		return nil
	})

	pol := broker.DefaultPolicy()
	pol.ScaleDownUnneeded = broker.Duration(3 * time.Second)
	pol.DrainTimeout = broker.Duration(2 * time.Minute)
	pol.YARNDrainByAttrition = true
	r := newBrokerRig(t, ctx, tg.brokerTarget, tg.url, direct, pol, nil, busy)
	if !r.cordonOK {
		t.Fatal("the cluster was started with the cordon label, but the broker finds the cordon unavailable")
	}
	// IMPORTANT: never the exclude file for a busy host, never a
	// terminate, whatever the RM answers while it restarts.
	safe := func() error {
		if in, err := ex.Contains(busy); err != nil || in {
			return fmt.Errorf("busy node %s in the exclude file = %v, %v", busy, in, err)
		}
		if ts := r.pool.terminations(); len(ts) > 0 {
			return fmt.Errorf("terminated %+v", ts)
		}
		return nil
	}
	cordonedWithWork := func() bool {
		o, err := direct.Observe(ctx)
		if err != nil {
			return false
		}
		n, ok := o.Node(busy)
		return ok && n.State == "RUNNING" && n.Containers == 2 && slices.Contains(n.Labels, yarn.DefaultCordonLabel)
	}
	r.tickUntil(ctx, busy+" held by the cordon", time.Minute, safe, cordonedWithWork)

	for round := 1; round <= 2; round++ {
		if err := tg.restartRM(ctx); err != nil {
			t.Fatalf("failover %d: %v", round, err)
		}
		// The broker goes on ticking through the new RM's first answers.
		r.tickUntil(ctx, fmt.Sprintf("failover %d: %s under the cordon with its work", round, busy), 2*time.Minute, safe, cordonedWithWork)
		for range 5 {
			if _, err := r.rt.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if err := safe(); err != nil {
				t.Fatalf("failover %d: %v", round, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		for _, x := range work {
			if ok, err := tg.alive(ctx, busy, x.app, x.id); err != nil || !ok {
				r.dumpOps(ctx)
				t.Fatalf("failover %d: container %s on the cordoned %s is gone (%v)", round, x.id, busy, err)
			}
		}
	}
	// Past the cordon's hold (3 s in the rig) the host still runs its
	// work: it never enters the exclude file.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
		if _, err := r.rt.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if err := safe(); err != nil {
			r.dumpOps(ctx)
			t.Fatalf("after the failovers: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, x := range work {
		if ok, err := tg.alive(ctx, busy, x.app, x.id); err != nil || !ok {
			t.Fatalf("container %s on the cordoned %s is gone (%v)", x.id, busy, err)
		}
	}
	// The attrition op is still open (waiting for the work to end), and
	// no op recorded work lost.
	ops := r.ops(ctx, broker.ActScaleDown, busy)
	if len(ops) == 0 {
		t.Fatalf("no scale-down op for %s: the node was not drained by attrition", busy)
	}
	for _, op := range ops {
		if op.State.Terminal() {
			r.dumpOps(ctx)
			t.Fatalf("op %d of %s ended (%s) while its work runs", op.ID, busy, op.State)
		}
	}
}
