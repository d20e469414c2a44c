package yarn

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
)

// Application tags that steer the mapping. YARN lowercases tags, so they are
// matched without case.
const (
	// TagGang marks an app that needs all its containers at once.
	TagGang = "gpubroker.io/gang=true"
	// TagNotPreemptible marks an app whose containers must not be preempted.
	TagNotPreemptible = "gpubroker.io/preemptible=false"
)

// MapOptions tune MapDemand.
type MapOptions struct {
	// LabelModels maps a node-label expression to the GPU model it stands
	// for ("a100" → "nvidia-a100"). A label not listed is taken as the model
	// name itself.
	LabelModels map[string]string
}

// Unmapped is pending GPU demand whose queue belongs to no tenant: the broker
// cannot weigh it, so it is reported instead of silently dropped.
type Unmapped struct {
	AppID string `json:"app_id"`
	Queue string `json:"queue"`
	GPUs  int    `json:"gpus"`
}

// QueueMap resolves YARN queues to tenants from broker.Tenant.YARNQueues,
// which list full paths (root.a.b) or leaf names. A queue belongs to the
// tenant listing its full path, else the nearest listed ancestor path, else
// its leaf name.
type QueueMap struct {
	byQueue map[string]broker.Tenant
}

// NewQueueMap indexes the tenants' queues.
func NewQueueMap(tenants map[string]broker.Tenant) QueueMap {
	m := QueueMap{byQueue: map[string]broker.Tenant{}}
	names := make([]string, 0, len(tenants))
	for n := range tenants {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic when two tenants claim one queue
	for _, n := range names {
		t := tenants[n]
		for _, q := range t.YARNQueues {
			if _, dup := m.byQueue[q]; !dup {
				m.byQueue[q] = t
			}
		}
	}
	return m
}

// Tenant returns the tenant of the queue at path (or leaf name), and false
// when no tenant claims it.
func (m QueueMap) Tenant(path string) (broker.Tenant, bool) {
	if t, ok := m.byQueue[path]; ok {
		return t, true
	}
	for p := path; ; {
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
		if t, ok := m.byQueue[p]; ok {
			return t, true
		}
	}
	leaf := path[strings.LastIndexByte(path, '.')+1:]
	t, ok := m.byQueue[leaf]
	return t, ok
}

// MapDemand turns the pending GPU requests of an observation into broker
// demand: one Demand per app ANY request with pending GPU containers, one
// unit per container, keyed "<app id>/<request priority>" (with
// "#<allocation request id>" appended when the app uses allocation ids). The
// priority is the tenant's base priority plus the app priority. Requests in
// queues no tenant claims are returned as Unmapped. The result is sorted by
// key.
func MapDemand(obs *Observation, queues QueueMap, opts MapOptions) ([]broker.Demand, []Unmapped) {
	var out []broker.Demand
	var unmapped []Unmapped
	for _, a := range obs.Apps {
		if len(a.Requests) == 0 {
			continue
		}
		t, ok := queues.Tenant(a.QueuePath)
		if !ok && a.QueuePath != a.Queue {
			t, ok = queues.Tenant(a.Queue)
		}
		if !ok {
			unmapped = append(unmapped, Unmapped{AppID: a.ID, Queue: a.QueuePath, GPUs: a.PendingGPUs()})
			continue
		}
		first := a.Started
		if first.IsZero() || first.After(obs.At) {
			first = obs.At
		}
		for _, r := range a.Requests {
			key := a.ID + "/" + strconv.Itoa(int(r.Priority))
			if r.AllocationRequestID > 0 {
				key += "#" + strconv.FormatInt(r.AllocationRequestID, 10)
			}
			d := broker.Demand{
				Source:      broker.SourceYARN,
				Key:         key,
				Name:        a.Name,
				Tenant:      t.Name,
				Queue:       a.QueuePath,
				Priority:    t.BasePriority + a.Priority,
				GPUsPerUnit: r.GPUsPerContainer,
				Units:       r.Containers,
				Gang:        a.HasTag(TagGang),
				Preemptible: !a.HasTag(TagNotPreemptible),
				FirstSeen:   first,
				LastSeen:    obs.At,
			}
			if r.NodeLabel != "" {
				d.Constraints.NodeLabel = r.NodeLabel
				model := r.NodeLabel
				if m, ok := opts.LabelModels[r.NodeLabel]; ok {
					model = m
				}
				d.Constraints.GPUModels = []string{model}
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(x, y broker.Demand) int { return cmp.Compare(x.Key, y.Key) })
	return out, unmapped
}

// NodePhase maps a NodeManager state to the broker's lifecycle phase.
func NodePhase(state string) broker.Phase {
	switch state {
	case "NEW":
		return broker.PhaseRegistered
	case "RUNNING", "UNHEALTHY":
		return broker.PhaseActive
	case "DECOMMISSIONING":
		return broker.PhaseDraining
	case "DECOMMISSIONED":
		return broker.PhaseDrained
	case "LOST", "SHUTDOWN", "REBOOTED":
		return broker.PhaseGone
	}
	return broker.PhaseRegistered
}

// BrokerNodes returns the observation's nodes as the broker sees them from
// the YARN side: owner yarn while it takes containers (none once
// decommissioning or gone), phase from the NodeManager state, GPU counts.
// The node's pool, instance and utilisation come from other sources.
func BrokerNodes(obs *Observation) []broker.Node {
	out := make([]broker.Node, 0, len(obs.Nodes))
	for _, n := range obs.Nodes {
		// Only a NodeManager that takes containers belongs to YARN; one
		// being or already decommissioned has been released.
		owner := broker.OwnerYARN
		switch n.State {
		case "DECOMMISSIONING", "DECOMMISSIONED", "LOST", "SHUTDOWN", "REBOOTED":
			owner = broker.OwnerNone
		}
		bn := broker.Node{
			Name:          n.Host,
			Owner:         owner,
			Phase:         NodePhase(n.State),
			GPUsTotal:     n.GPUsTotal,
			GPUsAllocated: n.GPUsUsed,
			Utilisation:   -1,
			Healthy:       n.State != "UNHEALTHY",
		}
		if !bn.Healthy {
			bn.HealthReason = n.HealthReport
		}
		if len(n.Labels) > 0 {
			bn.Labels = map[string]string{}
			for _, l := range n.Labels {
				bn.Labels["yarn.io/node-label"] = l
			}
		}
		out = append(out, bn)
	}
	return out
}
