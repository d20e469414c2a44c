package yarn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestEvictStopsOnlyTheVictim: a victim whose process ignores
// GRACEFUL_SHUTDOWN gets its tenant's grace (2 minutes here, not the
// broker's 30 s), then FORCEFUL_SHUTDOWN to that container alone; its
// application's other container keeps running and the application is
// never killed; HowStopped says how the victim stopped.
func TestEvictStopsOnlyTheVictim(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	app, err := e.sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	e.sim.IgnoreGracefulShutdown(app) // a trainer that checkpoints on SIGTERM, slowly
	cs, _ := e.sim.Containers(app)
	if len(cs) != 2 || cs[0].Host == cs[1].Host {
		t.Fatalf("containers of %s = %+v, want two on two nodes", app, cs)
	}
	victim, other := cs[0], cs[1]
	w := broker.Workload{Source: broker.SourceYARN, Key: victim.ID, App: app, GPUs: 4, EvictGrace: 2 * time.Minute}
	if err := e.d.Evict(ctx, victim.Host, w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("first Evict = %v, want in progress", err)
	}
	e.clk.Add(time.Minute) // past the broker's 30 s, within the tenant's 2 min
	if err := e.d.Evict(ctx, victim.Host, w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict within the tenant's grace = %v, want in progress", err)
	}
	if got := e.calls("POST"); len(got) != 1 || !strings.HasSuffix(got[0], "/signal/GRACEFUL_SHUTDOWN") {
		t.Fatalf("signals within the tenant's grace: %q, want GRACEFUL_SHUTDOWN only", got)
	}
	e.clk.Add(time.Minute)
	if err := e.d.Evict(ctx, victim.Host, w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict after the grace = %v, want in progress", err)
	}
	if got := e.calls("POST"); len(got) != 2 || !strings.HasSuffix(got[1], "/containers/"+victim.ID+"/signal/FORCEFUL_SHUTDOWN") {
		t.Fatalf("signals after the grace: %q, want FORCEFUL_SHUTDOWN to %s", got, victim.ID)
	}
	until(t, "the victim to stop", func() bool {
		now, _ := e.sim.Containers(app)
		for _, c := range now {
			if c.ID == victim.ID {
				return false
			}
		}
		return true
	})
	if err := e.d.Evict(ctx, victim.Host, w); err != nil {
		t.Fatalf("Evict of the stopped victim = %v, want done", err)
	}
	if got := e.calls("PUT"); len(got) != 0 {
		t.Fatalf("application killed: %q", got)
	}
	now, err := e.sim.Containers(app)
	if err != nil || !containsID(now, other.ID) {
		t.Fatalf("the application's other container %s: %+v, %v; want it running", other.ID, now, err)
	}
	if how := e.d.HowStopped(w); !strings.Contains(how, "stopped after FORCEFUL_SHUTDOWN") || !strings.Contains(how, victim.ID) {
		t.Fatalf("HowStopped = %q, want the victim stopped after FORCEFUL_SHUTDOWN", how)
	}
}

func containsID(cs []yarnsim.Container, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}

// TestEvictNeverKillsAnApplicationThatIsNotAllVictim: a victim that
// cannot be signalled (its node decommissioning: the RM drops signals)
// and whose application runs another container is waited for, never
// stopped by killing the application; an ApplicationMaster victim whose
// application runs a container on another node is refused (a conflict):
// the kill would stop that container too.
func TestEvictNeverKillsAnApplicationThatIsNotAllVictim(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{EvictGrace: 30 * time.Second})
	app, err := e.sim.Submit(yarnsim.AppSpec{Queue: "a", ManagedAM: true, Requests: []yarnsim.RequestSpec{{Containers: 2, GPUs: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.sim.Containers(app)
	var am, onG1, onG2 yarnsim.Container
	for _, c := range cs {
		switch {
		case c.AM:
			am = c
		case c.Host == "g1":
			onG1 = c
		default:
			onG2 = c
		}
	}
	if am.ID == "" || onG1.ID == "" || onG2.ID == "" || am.Host != "g1" {
		t.Fatalf("containers %+v: want the AM and one GPU container on g1, one on g2", cs)
	}
	// The node is DECOMMISSIONING (an operator's decommission, or one
	// from before the broker cordoned instead): the RM drops signals there.
	if err := e.sim.SetNodeState("g1", "DECOMMISSIONING"); err != nil {
		t.Fatal(err)
	}
	w := broker.Workload{Source: broker.SourceYARN, Key: onG1.ID, App: app, GPUs: 4}
	if err := e.d.Evict(ctx, "g1", w); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Evict on a decommissioning node = %v, want in progress", err)
	}
	e.clk.Add(time.Minute)
	for range 3 {
		err := e.d.Evict(ctx, "g1", w)
		if !errors.Is(err, broker.ErrInProgress) || !strings.Contains(err.Error(), "not killed") || !strings.Contains(err.Error(), onG2.ID) {
			t.Fatalf("Evict past the grace on a decommissioning node = %v, want in progress, the app not killed, naming %s", err, onG2.ID)
		}
		e.clk.Add(time.Minute)
	}
	amw := broker.Workload{Source: broker.SourceYARN, Key: am.ID, App: app, AM: true}
	if err := e.d.Evict(ctx, "g1", amw); !errors.Is(err, broker.ErrConflict) || !strings.Contains(err.Error(), onG2.ID) {
		t.Fatalf("Evict of an AM whose app runs on g2 too = %v, want a conflict naming %s", err, onG2.ID)
	}
	if got := e.calls("PUT"); len(got) != 0 {
		t.Fatalf("application killed: %q", got)
	}
	if now, _ := e.sim.Containers(app); len(now) != 3 {
		t.Fatalf("containers now %+v, want all three running", now)
	}
}
