package hadoop_test

import (
	"context"
	"encoding/json"
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

// workTarget is a broker target that runs the work a real cluster runs
// beside GPU containers: a managed ApplicationMaster (0 GPUs) and
// applications with containers on several hosts, one of which may ignore
// SIGTERM.
type workTarget struct {
	brokerTarget
	// managedAM starts an app whose managed AM registers and stays for
	// seconds; it returns the app, the AM container and its host.
	managedAM func(ctx context.Context, queue string, seconds int) (app, container, host string, err error)
	// spread starts an app with one container per spec on its host.
	spread func(ctx context.Context, queue string, seconds int, specs ...hadoop.ContainerSpec) (string, []string, error)
	// alive reports whether container of app still runs on host, asked
	// of the NodeManager itself where the target has one.
	alive func(ctx context.Context, host, app, container string) (bool, error)
}

// TestBrokerStopsNothingItNeedNot runs the product over the work a GPU
// cluster really runs beside its GPU containers, on yarnsim and every
// Hadoop version (four NodeManagers):
//
//   - ManagedAMKeepsItsNode: a node whose only container is a registered
//     managed ApplicationMaster (0 GPUs) is never put in the exclude file
//     nor terminated while an idle node beside it is scaled down, and
//     terminated only once the RM lists it DECOMMISSIONED for real (its
//     NodeManager's id, not the host:-1 placeholder a restarted RM makes).
//   - VictimIgnoringGracefulStoppedAlone: a pod preempts a node whose one
//     container (all its GPUs) traps SIGTERM and belongs to an
//     application with a container on another host. GRACEFUL_SHUTDOWN
//     does not stop it; once its tenant's grace is over
//     FORCEFUL_SHUTDOWN does, and only it: the application and its other
//     container run on, the op records how the victim stopped, and the pod
//     gets the node.
func TestBrokerStopsNothingItNeedNot(t *testing.T) {
	t.Run("yarnsim", func(t *testing.T) {
		tg, sim, admin := simBrokerWorld(t)
		h := "127.0.0.14"
		tg.hosts = append(tg.hosts, h)
		if err := sim.AddNode(yarnsim.NodeSpec{Host: h, GPUs: 4, MemoryMB: 16384, VCores: 16}); err != nil {
			t.Fatal(err)
		}
		runBrokerWork(t, workTarget{brokerTarget: tg,
			managedAM: func(_ context.Context, queue string, seconds int) (string, string, string, error) {
				app, err := sim.Submit(yarnsim.AppSpec{Queue: queue, ManagedAM: true})
				if err != nil {
					return "", "", "", err
				}
				time.AfterFunc(time.Duration(seconds)*time.Second, func() { _ = sim.Finish(app) })
				cs, err := sim.Containers(app)
				if err != nil {
					return "", "", "", err
				}
				for _, c := range cs {
					if c.AM {
						return app, c.ID, c.Host, nil
					}
				}
				return "", "", "", fmt.Errorf("app %s has no AM container: %+v", app, cs)
			},
			spread: func(_ context.Context, queue string, seconds int, specs ...hadoop.ContainerSpec) (string, []string, error) {
				ps := make([]yarnsim.Placement, len(specs))
				for i, s := range specs {
					ps[i] = yarnsim.Placement{Host: s.Host, GPUs: s.GPUs, Trap: s.Trap}
				}
				return admin.Spread(queue, time.Duration(seconds)*time.Second, ps...)
			},
			alive: simRuns(sim)})
	})
	for _, v := range hadoop.Versions() {
		t.Run("hadoop-"+v, func(t *testing.T) {
			tg, c := hadoopBrokerWorld(t, hadoop.Config{Version: v, Nodes: 4, Cordon: yarn.DefaultCordonLabel})
			runBrokerWork(t, workTarget{brokerTarget: tg, managedAM: c.ManagedAM, spread: c.Spread, alive: nodeManagerRuns(c)})
		})
	}
}

func runBrokerWork(t *testing.T, tg workTarget) {
	ctx, direct, ex := startBrokerSuite(t, tg.brokerTarget)
	if len(tg.hosts) < 4 {
		t.Fatalf("hosts %v: want four", tg.hosts)
	}
	// The RM places the managed AM; the other hosts get their roles after.
	amApp, amC, amHost, err := tg.managedAM(ctx, "b", 900)
	if err != nil {
		t.Fatalf("managed AM: %v", err)
	}
	var others []string
	for _, h := range tg.hosts {
		if h != amHost {
			others = append(others, h)
		}
	}
	idle, victimHost, otherHost := others[0], others[1], others[2]
	waitNode(t, ctx, direct, amHost, "the AM on "+amHost, time.Minute, func(n yarn.Node) error {
		if n.Containers != 1 || n.GPUsUsed != 0 {
			return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
		}
		return nil
	})
	t.Logf("managed AM %s of %s on %s; idle %s, victim %s, other %s", amC, amApp, amHost, idle, victimHost, otherHost)

	ok := t.Run("ManagedAMKeepsItsNode", func(t *testing.T) {
		pol := broker.DefaultPolicy()
		pol.ScaleDownUnneeded = broker.Duration(3 * time.Second)
		pol.DrainTimeout = broker.Duration(2 * time.Minute)
		r := newBrokerRig(t, ctx, tg.brokerTarget, tg.url, direct, pol, nil, amHost, idle)
		// IMPORTANT: the AM's node is never excluded nor terminated; the
		// idle one only once the RM lists it DECOMMISSIONED for real.
		safe := func() error {
			if in, err := ex.Contains(amHost); err != nil || in {
				return fmt.Errorf("node %s of the managed AM in the exclude file = %v, %v", amHost, in, err)
			}
			for _, th := range r.pool.terminations() {
				if th.Host != idle || th.RMState != "DECOMMISSIONED" {
					return fmt.Errorf("terminated %+v, want only %s once the RM lists it DECOMMISSIONED", th, idle)
				}
			}
			if ok, err := tg.alive(ctx, amHost, amApp, amC); err != nil || !ok {
				return fmt.Errorf("the managed AM %s on %s is gone (%v)", amC, amHost, err)
			}
			return nil
		}
		var seen []string // the RM's ids of idle while it is decommissioned
		ticks := r.tickUntil(ctx, idle+" terminated", 2*time.Minute, func() error {
			if o, err := direct.Observe(ctx); err == nil {
				if n, ok := o.Node(idle); ok && n.State == "DECOMMISSIONED" && !slices.Contains(seen, n.ID) {
					seen = append(seen, n.ID)
				}
			}
			return safe()
		}, func() bool { return len(r.pool.terminations()) == 1 })
		if slices.ContainsFunc(seen, func(id string) bool { return strings.HasSuffix(id, ":-1") }) {
			t.Fatalf("the RM listed %s as the placeholder %v: the test wants a real decommission", idle, seen)
		}
		// Past the cordon's hold and several scale-down delays the AM's
		// node is still left alone.
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
			if _, err := r.rt.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if err := safe(); err != nil {
				r.dumpOps(ctx)
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if s := appState(t, ctx, tg.url, amApp); s != "RUNNING" {
			t.Fatalf("app %s of the managed AM is %s", amApp, s)
		}
		t.Logf("%s terminated after %d ticks (RM ids while DECOMMISSIONED %v); the AM's node %s kept", idle, ticks, seen, amHost)
	})
	if !ok {
		return
	}

	t.Run("VictimIgnoringGracefulStoppedAlone", func(t *testing.T) {
		// The victim fills victimHost and ignores SIGTERM; its app's other
		// container runs on otherHost, in no pool of the broker.
		app, cs, err := tg.spread(ctx, "b", 900,
			hadoop.ContainerSpec{Host: victimHost, GPUs: tg.gpus, Trap: true},
			hadoop.ContainerSpec{Host: otherHost, GPUs: 1})
		if err != nil {
			t.Fatalf("spread: %v", err)
		}
		victim, other := cs[0], cs[1]
		waitNode(t, ctx, direct, victimHost, "the victim on "+victimHost, time.Minute, func(n yarn.Node) error {
			if n.Containers != 1 || n.GPUsUsed != tg.gpus {
				return fmt.Errorf("node %s runs %d containers on %d GPUs", n.Host, n.Containers, n.GPUsUsed)
			}
			return nil
		})
		rec := &rmRecorder{}
		k := &podK8s{gpus: tg.gpus, owners: map[string]broker.Owner{victimHost: broker.OwnerNone},
			state: func(h string) string { return nodeState(t, context.WithoutCancel(ctx), direct, h) }}
		const pod = "uid-infer-0"
		k.pod(pod, "serving/infer-0", "", "serving", 1000000, tg.gpus, false)
		r := newBrokerRig(t, ctx, tg.brokerTarget, rec.start(t, tg.url), direct, broker.DefaultPolicy(), k, victimHost)
		const grace = 4 * time.Second
		for _, tn := range []broker.Tenant{
			{Name: "serving", MaxGPUs: 100, Weight: 1, Namespaces: []string{"serving"}},
			{Name: "batch", MaxGPUs: 100, Weight: 1, YARNQueues: []string{"root.b"}, EvictGrace: broker.Duration(grace)},
		} {
			if _, err := r.st.CreateTenant(ctx, tn); err != nil {
				t.Fatal(err)
			}
		}
		// IMPORTANT: nothing but the victim stops: its app and the other
		// container run on; the broker never kills the app.
		appSafe := func() error {
			if s := appState(t, ctx, tg.url, app); s != "RUNNING" {
				return fmt.Errorf("the victim's app %s is %s: its other container %s was not a victim", app, s, other)
			}
			if ok, err := tg.alive(ctx, otherHost, app, other); err != nil || !ok {
				return fmt.Errorf("container %s on %s, of the victim's app but no victim, is gone (%v)", other, otherHost, err)
			}
			if slices.ContainsFunc(rec.requests(), func(s string) bool { return strings.Contains(s, "/apps/"+app+"/state") && strings.HasPrefix(s, "PUT") }) {
				return fmt.Errorf("RM requests %v kill the victim's app %s", rec.requests(), app)
			}
			if ts := r.pool.terminations(); len(ts) > 0 {
				return fmt.Errorf("terminated %+v", ts)
			}
			return nil
		}
		var graceful, forceful time.Time
		signals := func() {
			for _, s := range rec.requests() {
				switch s {
				case "POST /ws/v1/cluster/containers/" + victim + "/signal/" + yarn.SignalGraceful:
					if graceful.IsZero() {
						graceful = time.Now()
					}
				case "POST /ws/v1/cluster/containers/" + victim + "/signal/" + yarn.SignalForceful:
					if forceful.IsZero() {
						forceful = time.Now()
					}
				}
			}
		}
		var survivedGraceful bool
		ticks := r.tickUntil(ctx, "the pod to run on "+victimHost, 2*time.Minute, func() error {
			signals()
			if !graceful.IsZero() && forceful.IsZero() && time.Since(graceful) > time.Second {
				// A second after GRACEFUL_SHUTDOWN the trapping victim runs.
				if ok, err := tg.alive(ctx, victimHost, app, victim); err == nil && ok {
					survivedGraceful = true
				}
			}
			for _, op := range r.ops(ctx, broker.ActPreempt, "") {
				if op.State == broker.OpFailed || op.State == broker.OpCancelled {
					return fmt.Errorf("preempt op %d %s: %s", op.ID, op.State, op.LastError)
				}
			}
			return appSafe()
		}, func() bool {
			ops := r.ops(ctx, broker.ActPreempt, "")
			return k.placed(pod) == victimHost && len(ops) == 1 && ops[0].State == broker.OpDone
		})
		if err := appSafe(); err != nil {
			t.Fatal(err)
		}
		if graceful.IsZero() || forceful.IsZero() {
			t.Fatalf("RM requests %v: want GRACEFUL_SHUTDOWN then FORCEFUL_SHUTDOWN to %s", rec.requests(), victim)
		}
		if !survivedGraceful {
			t.Fatalf("the victim %s did not outlive GRACEFUL_SHUTDOWN: the test's trap did not hold", victim)
		}
		if d := forceful.Sub(graceful); d < grace {
			t.Fatalf("FORCEFUL_SHUTDOWN %s after GRACEFUL_SHUTDOWN, before the tenant's grace of %s", d, grace)
		}
		if ok, _ := tg.alive(ctx, victimHost, app, victim); ok {
			t.Fatalf("the victim %s still runs on %s", victim, victimHost)
		}
		op := r.ops(ctx, broker.ActPreempt, victimHost)[0]
		var d struct {
			Stopped []string `json:"stopped"`
		}
		if err := json.Unmarshal(op.Data, &d); err != nil {
			t.Fatalf("op data %s: %v", op.Data, err)
		}
		if len(d.Stopped) != 1 || !strings.Contains(d.Stopped[0], victim) || !strings.Contains(d.Stopped[0], yarn.SignalForceful) {
			t.Fatalf("op %d records stopped %q, want %s after %s", op.ID, d.Stopped, victim, yarn.SignalForceful)
		}
		t.Logf("pod on %s after %d ticks; FORCEFUL_SHUTDOWN %s after GRACEFUL_SHUTDOWN; op records %q; %s and %s run on",
			victimHost, ticks, forceful.Sub(graceful).Round(time.Millisecond), d.Stopped, app, other)
	})
}
