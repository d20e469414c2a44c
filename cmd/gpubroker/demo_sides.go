package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// simYARNActions takes nodes from and gives nodes to the simulated YARN in
// the demo by setting NodeManager states in yarnsim directly, as a graceful
// decommission and a recommission would. The real path goes through the RM
// admin protocol and the exclude file (yarn rmadmin -refreshNodes -g), which
// is not built yet; this stand-in lets the demo show hand-overs between
// the sides meanwhile. Observation still goes through the REST client.
type simYARNActions struct {
	sim    *yarnsim.Sim
	client *yarn.Client
}

var _ broker.SideActions = simYARNActions{}

func (a simYARNActions) Source() broker.Source { return broker.SourceYARN }

func (a simYARNActions) Cordon(_ context.Context, node string) error {
	return a.sim.SetNodeState(node, "DECOMMISSIONING")
}

// Release decommissions gracefully: DECOMMISSIONING until the node's
// containers are done, then DECOMMISSIONED.
func (a simYARNActions) Release(ctx context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	obs, err := a.client.Observe(ctx)
	if err != nil {
		return broker.ReleaseStatus{}, err
	}
	n, ok := obs.Node(node)
	if !ok {
		return broker.ReleaseStatus{Drained: true}, nil
	}
	if n.State == "DECOMMISSIONED" {
		return broker.ReleaseStatus{Drained: true}, nil
	}
	if n.State != "DECOMMISSIONING" {
		if err := a.sim.SetNodeState(node, "DECOMMISSIONING"); err != nil {
			return broker.ReleaseStatus{}, err
		}
	}
	if n.Containers > 0 {
		return broker.ReleaseStatus{Remaining: []string{fmt.Sprintf("%d containers", n.Containers)}}, nil
	}
	if err := a.sim.SetNodeState(node, "DECOMMISSIONED"); err != nil {
		return broker.ReleaseStatus{}, err
	}
	return broker.ReleaseStatus{Drained: true}, nil
}

func (a simYARNActions) Admit(_ context.Context, node string) error {
	return a.sim.SetNodeState(node, "RUNNING")
}

// Evict kills the application: yarnsim has no container-level preemption.
func (a simYARNActions) Evict(_ context.Context, _ string, w broker.Workload) error {
	app, _, _ := strings.Cut(w.Key, "/")
	if err := a.sim.Finish(app); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}
