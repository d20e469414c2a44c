package yarn

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// refreshNodes has the RM re-read the exclude file (a graceful refresh),
// unless the file holds entries nobody has had the RM apply yet
// (ExcludeFile.Unrefreshed): another writer's edit, which the refresh
// would apply too. It then fails, naming the hosts, wrapping
// broker.ErrConflict; whoever wrote them refreshes (or removes them), and
// the broker's next attempt goes on. After a refresh, the file's entries
// count as refreshed.
//
// IMPORTANT: the RM's node list is read only when an entry is neither the
// broker's own nor one it saw refreshed: a host the RM lists as running
// with such an entry is an unapplied edit.
func (d *Decommissioner) refreshNodes(ctx context.Context) error {
	var (
		states map[string]string
		err    error
	)
	state := func(host string) string {
		if states == nil && err == nil {
			states, err = d.nodeStates(ctx)
		}
		return states[host]
	}
	hosts, uerr := d.cfg.Exclude.Unrefreshed(state)
	if uerr != nil {
		return uerr
	}
	if err != nil {
		return rmError{err}
	}
	if len(hosts) > 0 {
		return fmt.Errorf("exclude file %s holds entries nobody has refreshed yet (%s): refreshing the RM now would apply them too; "+
			"whoever wrote them refreshes the RM (yarn rmadmin -refreshNodes -g) or removes them: %w",
			d.cfg.Exclude.Path(), strings.Join(hosts, ", "), broker.ErrConflict)
	}
	if err := d.cfg.Admin.RefreshNodes(ctx, rmadmin.Graceful, 0); err != nil {
		return err
	}
	if err := d.cfg.Exclude.MarkRefreshed(); err != nil {
		return fmt.Errorf("remember the refreshed exclude file: %w", err)
	}
	return nil
}

// nodeStates returns the RM's state of every host it lists (the live
// entry where a restarted NodeManager is listed twice).
func (d *Decommissioner) nodeStates(ctx context.Context) (map[string]string, error) {
	var resp nodesResponse
	if _, err := d.cfg.Client.Get(ctx, PathNodes, &resp); err != nil {
		return nil, fmt.Errorf("read node states: %w", err)
	}
	out := map[string]string{}
	if resp.Nodes == nil {
		return out, nil
	}
	for _, n := range resp.Nodes.Node {
		h := n.NodeHostName
		if h == "" {
			h, _, _ = strings.Cut(n.ID, ":")
		}
		if prev, ok := out[h]; !ok || !liveNodeState(prev) && liveNodeState(n.State) {
			out[h] = n.State
		}
	}
	return out, nil
}
