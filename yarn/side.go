package yarn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Side is the YARN half of the tick loop's observations: pending GPU
// containers (each ask's partition from its nodeLabelExpression), the
// NodeManagers with their partitions and health, and the running
// containers of GPU apps through the RM REST API (or the NodeManagers'
// where the RM lacks the containers endpoint), mapped to tenants from the
// broker's tenant index on every poll so tenant edits apply at once.
//
// Side only observes. Taking nodes from YARN and giving them back
// (graceful decommission and recommission through the exclude file and
// the RM admin protocol) and evicting containers are the Decommissioner's,
// the engine.SideActions the runtime is given beside Side. Without one
// (no yarn.admin_address and yarn.exclude_file) the runtime refuses
// ownership transfers to and from YARN and fails YARN node operations
// with "no actions configured for yarn".
type Side struct {
	client *Client
	opts   MapOptions
	// cordon, when set, learns each host's labels from every observation
	// (for its hold and re-apply), and a host under the cordon is reported
	// as no side's, in its pool's partition.
	cordon *Cordon

	mu sync.Mutex
	// down remembers since when each down node has been down: an
	// UNHEALTHY NodeManager's lastHealthUpdate moves on with every health
	// check, and the broker's replacement timeout must not restart with it.
	down map[string]time.Time
}

var _ engine.SideObserver = (*Side)(nil)

// NewSide observes through client.
func NewSide(client *Client, opts MapOptions) *Side {
	return &Side{client: client, opts: opts, down: map[string]time.Time{}}
}

// WithCordon makes s report the hosts under c's label released (owner
// none) and tell c every host's labels. It returns s.
func (s *Side) WithCordon(c *Cordon) *Side {
	s.cordon = c
	return s
}

// Source reports the YARN side.
func (s *Side) Source() broker.Source { return broker.SourceYARN }

// Observe polls the RM once. Any failure is returned (wrapping
// broker.ErrStale), never an empty observation.
func (s *Side) Observe(ctx context.Context, idx broker.TenantIndex) (broker.SideObservation, error) {
	obs, err := s.client.Observe(ctx)
	if err != nil {
		return broker.SideObservation{}, err
	}
	queues := QueueMapOf(idx)
	demand, unmapped := MapDemand(obs, queues, s.opts)
	out := broker.SideObservation{Source: broker.SourceYARN, At: obs.At, Demand: demand,
		Nodes: BrokerNodes(obs, queues), Departed: departed(obs)}
	if s.cordon != nil {
		s.cordon.Observed(obs.Nodes)
		for i := range out.Nodes {
			n := &out.Nodes[i]
			yn, ok := obs.Node(n.Name)
			if !ok || !s.cordon.Cordoned(yn.Labels) {
				continue
			}
			// The cordon label is no partition of its own: the host
			// belongs to no side while it holds, and the partition it
			// returns to is its pool's (the journal keeps its own).
			n.Owner = broker.OwnerNone
			if n.Partition == s.cordon.Label() {
				n.Partition = ""
			}
			if n.Phase == broker.PhaseActive {
				n.Phase = broker.PhaseDraining
			}
		}
	}
	for _, u := range unmapped {
		out.Ignored = append(out.Ignored, broker.Wait{Demand: "yarn/" + u.AppID, Reason: broker.WaitUnmapped,
			Detail: fmt.Sprintf("queue %s maps to no tenant (%d GPUs pending); add it to a tenant's yarn_queues", u.Queue, u.GPUs)})
	}
	s.mu.Lock()
	down := make(map[string]time.Time, len(s.down))
	for i := range out.Nodes {
		n := &out.Nodes[i]
		if n.Down == "" {
			continue
		}
		if since, ok := s.down[n.Name]; ok && since.Before(n.DownSince) {
			n.DownSince = since
		}
		down[n.Name] = n.DownSince
	}
	s.down = down
	s.mu.Unlock()
	return out, nil
}

// departed says why a YARN demand key (<app id>/<priority>...) that left
// did: its app still runs (its containers were allocated), or it is gone
// (finished, failed or killed). Which keys left is the ledger's to say.
func departed(obs *Observation) func(key string) broker.CloseReason {
	apps := make(map[string]bool, len(obs.Apps))
	for i := range obs.Apps {
		apps[obs.Apps[i].ID] = true
	}
	return func(key string) broker.CloseReason {
		appID, _, _ := strings.Cut(key, "/")
		if apps[appID] {
			return broker.CloseScheduled
		}
		return broker.CloseFinished
	}
}
