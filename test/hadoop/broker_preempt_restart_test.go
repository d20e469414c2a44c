package hadoop_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// preemptRestartTarget is a broker target that can place a container
// which ignores SIGTERM and restart its RM.
type preemptRestartTarget struct {
	brokerFailTarget
	// trap runs one container of gpus GPUs on host in queue for seconds;
	// it ignores SIGTERM, so GRACEFUL_SHUTDOWN does not stop it.
	trap func(ctx context.Context, queue, host string, gpus, seconds int) (app, container string, err error)
}

// TestBrokerPreemptSurvivesRMRestart runs a preemption taking a YARN node
// for a Kubernetes pod and restarts the RM (work-preserving recovery, a
// new active RM) right after the victim was told to stop, while it still
// runs (it ignores SIGTERM), on yarnsim and every Hadoop version. The new
// RM does not list the node until its NodeManager registers again, and
// lists the victim's application ACCEPTED until its AM does. Through that:
// the node never enters the exclude file while the victim runs (the new RM
// would shut the NodeManager down with it), no other application's
// container stops, nothing is terminated, the victim is stopped to the
// end (FORCEFUL_SHUTDOWN after its grace) and the node is admitted to
// Kubernetes only once the RM lists it DECOMMISSIONED.
func TestBrokerPreemptSurvivesRMRestart(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) {
		tg, sim, admin := simBrokerWorld(t)
		runBrokerPreemptRestart(t, preemptRestartTarget{
			brokerFailTarget: brokerFailTarget{brokerTarget: tg,
				restartRM: func(context.Context) error { return admin.RestartRM() },
				alive:     simRuns(sim)},
			trap: func(_ context.Context, queue, host string, gpus, seconds int) (string, string, error) {
				app, cs, err := admin.Spread(queue, time.Duration(seconds)*time.Second, yarnsim.Placement{Host: host, GPUs: gpus, Trap: true})
				if err != nil {
					return "", "", err
				}
				return app, cs[0], nil
			}})
	})
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) {
			tg, c := hadoopBrokerWorld(t, hadoop.Config{Version: v, Recovery: true, Cordon: yarn.DefaultCordonLabel})
			runBrokerPreemptRestart(t, preemptRestartTarget{
				brokerFailTarget: brokerFailTarget{brokerTarget: tg,
					restartRM: func(ctx context.Context) error {
						away, err := c.RestartRM(ctx)
						t.Logf("hadoop %s: the RM was away %s", v, away)
						return err
					},
					alive: nodeManagerRuns(c)},
				trap: func(ctx context.Context, queue, host string, gpus, seconds int) (string, string, error) {
					app, cs, err := c.Spread(ctx, queue, seconds, hadoop.ContainerSpec{Host: host, GPUs: gpus, Trap: true})
					if err != nil {
						return "", "", err
					}
					return app, cs[0], nil
				}})
		})
	}
}

func runBrokerPreemptRestart(t *testing.T, tg preemptRestartTarget) {
	ctx, direct, ex := startBrokerSuite(t, tg.brokerTarget)
	if len(tg.hosts) < 2 {
		t.Fatalf("hosts %v: want two", tg.hosts)
	}
	x, other := tg.hosts[0], tg.hosts[1]
	// The victim fills x; a bystander of another application runs on
	// another host, outside the pool: nothing may stop it.
	victimApp, victim, err := tg.trap(ctx, "b", x, tg.gpus, 900)
	if err != nil {
		t.Fatalf("trap container on %s: %v", x, err)
	}
	byApp, bystander, err := tg.run(ctx, other, 1, 900)
	if err != nil {
		t.Fatalf("container on %s: %v", other, err)
	}
	waitNode(t, ctx, direct, x, "the victim on "+x, time.Minute, func(n yarn.Node) error {
		if n.Containers != 1 || n.GPUsUsed != tg.gpus {
			return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
		}
		return nil
	})

	rec := &rmRecorder{}
	k := &podK8s{gpus: tg.gpus, owners: map[string]broker.Owner{x: broker.OwnerNone},
		state: func(h string) string { return nodeState(t, context.WithoutCancel(ctx), direct, h) }}
	const pod = "uid-infer-restart"
	pol := broker.DefaultPolicy()
	pol.ScaleDownUnneeded = broker.Duration(3 * time.Second)
	pol.DrainTimeout = broker.Duration(3 * time.Minute)
	r := newBrokerRig(t, ctx, tg.brokerTarget, rec.start(t, tg.url), direct, pol, k, x)
	if !r.cordonOK {
		t.Fatal("the cluster was started with the cordon label, but the broker finds the cordon unavailable")
	}
	for _, tn := range []broker.Tenant{
		{Name: "serving", MaxGPUs: 100, Weight: 1, Namespaces: []string{"serving"}},
		{Name: "batch", MaxGPUs: 100, Weight: 1, YARNQueues: []string{"root.b"}},
	} {
		if _, err := r.st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	k.pod(pod, "serving/infer-restart", "", "serving", 1000000, tg.gpus, false)

	// IMPORTANT: whatever the RM answers while it restarts, the node is
	// never in the exclude file while the victim runs there, the
	// bystander runs on, nothing is terminated, and the node goes to
	// Kubernetes only once the RM lists it DECOMMISSIONED.
	safe := func() error {
		in, err := ex.Contains(x)
		if err != nil {
			return err
		}
		if in {
			if up, err := tg.alive(ctx, x, victimApp, victim); err != nil || up {
				return fmt.Errorf("%s is in the exclude file while its victim %s runs (%v): a new RM would shut it down", x, victim, err)
			}
		}
		if up, err := tg.alive(ctx, other, byApp, bystander); err != nil || !up {
			return fmt.Errorf("bystander %s on %s is gone (%v)", bystander, other, err)
		}
		if ts := r.pool.terminations(); len(ts) > 0 {
			return fmt.Errorf("terminated %+v", ts)
		}
		if _, _, adm := k.record(); len(adm) > 0 && adm[0] != (terminatedHost{Host: x, RMState: "DECOMMISSIONED"}) {
			return fmt.Errorf("admitted to kubernetes %+v, want %s only once the RM lists it DECOMMISSIONED", adm, x)
		}
		for _, op := range r.ops(ctx, broker.ActPreempt, "") {
			if op.State == broker.OpFailed || op.State == broker.OpCancelled {
				return fmt.Errorf("preempt op %d %s: %s", op.ID, op.State, op.LastError)
			}
		}
		return nil
	}
	signalled := func() bool {
		return slices.Contains(rec.requests(), "POST /ws/v1/cluster/containers/"+victim+"/signal/"+yarn.SignalGraceful)
	}
	var journaled []broker.Workload
	r.tickUntil(ctx, "the victim "+victim+" told to stop", time.Minute, func() error {
		if journaled == nil {
			journaled = r.journaledVictims(ctx, x)
		}
		return safe()
	}, signalled)
	if up, err := tg.alive(ctx, x, victimApp, victim); err != nil || !up {
		t.Fatalf("the victim %s stopped at GRACEFUL_SHUTDOWN (%v): it should ignore SIGTERM, and the restart would come after its end", victim, err)
	}
	if ops := r.ops(ctx, broker.ActPreempt, x); len(ops) != 1 || ops[0].State.Terminal() {
		t.Fatalf("preempt ops %+v when the victim was signalled: want one open", ops)
	}

	restartAt := time.Now()
	if err := tg.restartRM(ctx); err != nil {
		t.Fatalf("restart the RM: %v", err)
	}
	ticks := r.tickUntil(ctx, "the pod on "+x+" after the RM restart", 3*time.Minute, safe, func() bool {
		ops := r.ops(ctx, broker.ActPreempt, "")
		return k.placed(pod) == x && len(ops) == 1 && ops[0].State == broker.OpDone
	})
	done := time.Since(restartAt)
	r.checkPreempt(ctx, x, broker.OwnerK8s, pod, victim, journaled)
	if up, err := tg.alive(ctx, x, victimApp, victim); err != nil || up {
		t.Fatalf("the victim %s still runs on %s after the preemption (%v)", victim, x, err)
	}
	if up, err := tg.alive(ctx, other, byApp, bystander); err != nil || !up {
		t.Fatalf("bystander %s on %s is gone (%v)", bystander, other, err)
	}
	var touched []string
	for _, q := range rec.requests() {
		if strings.Contains(q, strings.TrimPrefix(byApp, "application_")) {
			touched = append(touched, q)
		}
	}
	if len(touched) > 0 {
		t.Fatalf("RM requests %v touch the bystander's app %s", touched, byApp)
	}
	var how string
	for _, op := range r.ops(ctx, broker.ActPreempt, x) {
		how = fmt.Sprint(broker.OpDataOf(&op).Stopped)
	}
	t.Logf("pod on %s %s after the RM restart (%d ticks); victim %s: %s; RM requests %v", x, done.Round(100*time.Millisecond), ticks, victim, how, rec.requests())
}
