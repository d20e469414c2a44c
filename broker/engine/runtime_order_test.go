package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// orderLog records, in order, the calls a test wants to compare.
type orderLog struct{ calls []string }

type orderCloud struct {
	*rtCloud
	log *orderLog
}

func (c orderCloud) SetDesired(ctx context.Context, pool string, target int) error {
	c.log.calls = append(c.log.calls, "set-desired")
	return c.rtCloud.SetDesired(ctx, pool, target)
}

type orderSide struct {
	*rtSide
	log *orderLog
}

func (s orderSide) Release(ctx context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error) {
	s.log.calls = append(s.log.calls, "release "+node)
	return s.rtSide.Release(ctx, node, deadline)
}

// TestRuntimeNewOpsStepFirst: a scale-up journaled this tick calls the
// provider before the tick polls older open ops (here a drain a PDB
// holds), so the headline latency does not grow with the ops in flight.
func TestRuntimeNewOpsStepFirst(t *testing.T) {
	w := newRTWorld(t, 5)
	w.machine(w.k8s, "busy")
	w.k8s.nodes["busy"].Work = []broker.Workload{{Source: broker.SourceK8s, Key: "cpu-only", Name: "default/cpu-only", CheckpointAge: -1, Class: broker.WorkService}}
	w.k8s.drainBlocked = true
	log := &orderLog{}
	r, err := NewRuntime(RuntimeConfig{Observers: []SideObserver{w.yarn, w.k8s},
		Actions: []SideActions{w.yarn, orderSide{w.k8s, log}}, Pools: orderCloud{w.cloud, log}, Ledger: w.ledger, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.tick(r)
	w.ticks(r, 3, 2*time.Minute) // the scale-down is journaled, its node fenced
	w.ticks(r, 2, 5*time.Second) // it drains, held by the PDB
	if downs := w.ledger.opsOf(broker.ActScaleDown); len(downs) != 1 || downs[0].State.Terminal() || !slices.Contains(log.calls, "release busy") {
		t.Fatalf("scale-downs %+v, calls %v: want one draining", downs, log.calls)
	}
	log.calls = nil
	w.yarn.submit(broker.Demand{Source: broker.SourceYARN, Key: "application_1_0001/1", Tenant: "training", Queue: "root.training",
		GPUsPerUnit: 4, Units: 1})
	w.ticks(r, 1, 5*time.Second)
	if len(log.calls) != 2 || log.calls[0] != "set-desired" {
		t.Fatalf("calls in the tick %v: want the new scale-up's set-desired before the older drain's release", log.calls)
	}
}
