package yarnsim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// Actions takes nodes from and gives nodes to the simulated YARN by setting
// NodeManager states in the simulator directly, as a graceful decommission
// and a recommission would. The real path goes through the RM admin
// protocol and the exclude file (yarn rmadmin -refreshNodes -g), which is
// not built yet; this stand-in lets the demo and the end-to-end tests show
// hand-overs between the sides meanwhile. Reading a node's containers goes
// through the real REST client.
type Actions struct {
	Sim    *Sim
	Client *yarn.Client
}

var _ broker.SideActions = Actions{}

// Source reports the YARN side.
func (a Actions) Source() broker.Source { return broker.SourceYARN }

// Cordon starts a decommission: no new containers land on node.
func (a Actions) Cordon(_ context.Context, node string) error {
	return a.Sim.SetNodeState(node, "DECOMMISSIONING")
}

// Release decommissions gracefully: DECOMMISSIONING until the node's
// containers are done, then DECOMMISSIONED.
func (a Actions) Release(ctx context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	obs, err := a.Client.Observe(ctx)
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
		if err := a.Sim.SetNodeState(node, "DECOMMISSIONING"); err != nil {
			return broker.ReleaseStatus{}, err
		}
	}
	if n.Containers > 0 {
		return broker.ReleaseStatus{Remaining: []string{fmt.Sprintf("%d containers", n.Containers)}}, nil
	}
	if err := a.Sim.SetNodeState(node, "DECOMMISSIONED"); err != nil {
		return broker.ReleaseStatus{}, err
	}
	return broker.ReleaseStatus{Drained: true}, nil
}

// Admit recommissions node.
func (a Actions) Admit(_ context.Context, node string) error {
	return a.Sim.SetNodeState(node, "RUNNING")
}

// Evict kills the application: yarnsim has no container-level preemption.
func (a Actions) Evict(_ context.Context, _ string, w broker.Workload) error {
	app := w.App // a container's application
	if app == "" {
		app, _, _ = strings.Cut(w.Key, "/")
	}
	if err := a.Sim.Finish(app); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}
