package yarn

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/gpubroker/gpubroker/broker"
)

// Side is the YARN half of the tick loop's observations: pending GPU
// containers through the RM REST API, mapped to tenants from the broker's
// tenant index on every poll so tenant edits apply at once.
//
// Taking nodes away from YARN (graceful decommission through the RM admin
// protocol) is not part of Side yet; until it is, the runtime reports YARN
// node operations as failed with "no actions configured for yarn".
type Side struct {
	client *Client
	opts   MapOptions

	mu   sync.Mutex
	prev map[string]bool
}

var _ broker.SideObserver = (*Side)(nil)

// NewSide observes through client.
func NewSide(client *Client, opts MapOptions) *Side {
	return &Side{client: client, opts: opts, prev: map[string]bool{}}
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
	demand, unmapped := MapDemand(obs, NewQueueMap(idx.Tenants), s.opts)
	out := broker.SideObservation{Source: broker.SourceYARN, At: obs.At, Demand: demand,
		Nodes: BrokerNodes(obs), Closed: map[string]string{}}
	for _, u := range unmapped {
		out.Ignored = append(out.Ignored, broker.Wait{Demand: "yarn/" + u.AppID, Reason: "unmapped",
			Detail: fmt.Sprintf("queue %s maps to no tenant (%d GPUs pending); add it to a tenant's yarn_queues", u.Queue, u.GPUs)})
	}
	live := map[string]bool{}
	for _, d := range demand {
		live[d.Key] = true
	}
	// Demand that left: the app still runs (its containers were
	// allocated) or it is gone (finished, failed or killed).
	s.mu.Lock()
	for k := range s.prev {
		if live[k] {
			continue
		}
		appID, _, _ := strings.Cut(k, "/")
		if _, running := obs.App(appID); running {
			out.Closed[k] = "scheduled"
		} else {
			out.Closed[k] = "finished"
		}
	}
	s.prev = live
	s.mu.Unlock()
	return out, nil
}
