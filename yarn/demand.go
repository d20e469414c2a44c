package yarn

import (
	"cmp"
	"slices"
	"strconv"

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

// MapOptions tune MapDemand. None are defined now: a node-label expression
// names a partition (broker.Constraints.NodeLabel, matched against
// broker.Node.Partition and broker.Pool.Partition), never a GPU model.
type MapOptions struct{}

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
// its leaf name (broker.TenantIndex.QueueTenant, the one tenant mapping).
type QueueMap struct {
	idx broker.TenantIndex
}

// QueueMapOf resolves queues through idx, the index the tick built; Side
// uses it on every poll, so no poll builds a mapping of its own.
func QueueMapOf(idx broker.TenantIndex) QueueMap { return QueueMap{idx: idx} }

// NewQueueMap indexes the tenants' queues (broker.NewTenantIndex), for
// callers that hold tenants rather than the tick's index.
func NewQueueMap(tenants map[string]broker.Tenant) QueueMap {
	ts := make([]broker.Tenant, 0, len(tenants))
	for _, t := range tenants {
		ts = append(ts, t)
	}
	return QueueMap{idx: broker.NewTenantIndex(ts)}
}

// Tenant returns the tenant of the queue at path (or leaf name), and false
// when no tenant claims it.
func (m QueueMap) Tenant(path string) (broker.Tenant, bool) { return m.idx.QueueTenant(path) }

// appTenant returns the tenant of an app's queue, by full path, then as
// the RM reported it.
func (m QueueMap) appTenant(a *App) (broker.Tenant, bool) {
	t, ok := m.Tenant(a.QueuePath)
	if !ok && a.QueuePath != a.Queue {
		t, ok = m.Tenant(a.Queue)
	}
	return t, ok
}

// MapDemand turns the pending GPU requests of an observation into broker
// demand: one Demand per app ANY request with pending GPU containers, one
// unit per container, keyed "<app id>/<request priority>" (with
// "#<allocation request id>" appended when the app uses allocation ids). The
// priority is the tenant's base priority plus the app priority. Requests in
// queues no tenant claims are returned as Unmapped. The result is sorted by
// key.
func MapDemand(obs *Observation, queues QueueMap, _ MapOptions) ([]broker.Demand, []Unmapped) {
	asks := 0
	for i := range obs.Apps {
		asks += len(obs.Apps[i].Requests)
	}
	var out []broker.Demand
	if asks > 0 {
		out = make([]broker.Demand, 0, asks) // grown by append, 25,000 asks cost twice
	}
	var unmapped []Unmapped
	for i := range obs.Apps {
		a := &obs.Apps[i]
		if len(a.Requests) == 0 {
			continue
		}
		t, ok := queues.appTenant(a)
		if !ok {
			unmapped = append(unmapped, Unmapped{AppID: a.ID, Queue: a.QueuePath, GPUs: a.PendingGPUs()})
			continue
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
				LastSeen:    obs.At,
			}
			// The ask's partition: empty is the default partition.
			d.Constraints.NodeLabel = r.NodeLabel
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		out = nil // none: as before the sizing
	}
	slices.SortFunc(out, func(x, y broker.Demand) int { return cmp.Compare(x.Key, y.Key) })
	return out, unmapped
}

// NodePhase maps a NodeManager state to the broker's lifecycle phase. A LOST
// NodeManager stays active (and down, see BrokerNodes): its machine is still
// in its pool, to be replaced, not forgotten.
func NodePhase(state string) broker.Phase {
	switch state {
	case "NEW":
		return broker.PhaseRegistered
	case "RUNNING", "UNHEALTHY", "LOST":
		return broker.PhaseActive
	case "DECOMMISSIONING":
		return broker.PhaseDraining
	case "DECOMMISSIONED":
		return broker.PhaseDrained
	case "SHUTDOWN", "REBOOTED":
		return broker.PhaseGone
	}
	return broker.PhaseRegistered
}

// KindUnknownWork is the Workload.Name of GPUs a NodeManager reports in use
// that no listed container explains (a container allocated between the
// RM's answers): they are work of unknown size, never idle GPUs.
const KindUnknownWork = "unlisted containers"

// BrokerNodes returns the observation's nodes as the broker sees them from
// the YARN side: owner yarn while it takes containers (none once
// decommissioning or gone), phase from the NodeManager state, partition
// from its node label, down while LOST or UNHEALTHY, GPU counts, and the
// live containers of the apps holding GPUs as running work (tenant and
// priority from the app's queue, as for demand). GPUsAllocated is the
// larger of the RM's count and the listed containers' GPUs; GPUs the RM
// counts beyond the listed containers appear as one non-preemptible
// workload of unknown size. The node's pool, instance and utilisation come
// from other sources.
func BrokerNodes(obs *Observation, queues QueueMap) []broker.Node {
	work := map[string][]broker.Workload{}
	for i := range obs.Apps {
		a := &obs.Apps[i]
		if len(a.Containers) == 0 {
			continue
		}
		t, _ := queues.appTenant(a)
		dir := CheckpointDir(a.Tags)
		for _, c := range a.Containers {
			work[c.Host] = append(work[c.Host], broker.Workload{
				Source:        broker.SourceYARN,
				Key:           c.ID,
				Name:          a.Name,
				Tenant:        t.Name,
				Priority:      t.BasePriority + a.Priority,
				GPUs:          c.GPUs,
				Preemptible:   !a.HasTag(TagNotPreemptible),
				StartedAt:     c.Started,
				CheckpointAge: -1,
				CheckpointDir: dir,
				App:           a.ID,
				AM:            c.AM,
				Class:         broker.WorkBatch,
			})
		}
	}
	out := make([]broker.Node, 0, len(obs.Nodes))
	for _, n := range obs.Nodes {
		// Only a NodeManager that takes containers belongs to YARN; one
		// being or already decommissioned has been released.
		owner := broker.OwnerYARN
		switch n.State {
		case "DECOMMISSIONING", "DECOMMISSIONED", "SHUTDOWN", "REBOOTED":
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
			Partition:     n.Partition(),
			Work:          work[n.Host],
		}
		if !bn.Healthy {
			bn.HealthReason = n.HealthReport
		}
		switch n.State {
		case "LOST", "UNHEALTHY":
			bn.Down = "NodeManager " + n.State
			if n.HealthReport != "" {
				bn.Down += ": " + n.HealthReport
			}
			bn.DownSince = n.LastHealth
			if bn.DownSince.IsZero() || bn.DownSince.After(obs.At) {
				bn.DownSince = obs.At
			}
		}
		listed := 0
		for _, w := range bn.Work {
			listed += w.GPUs
		}
		if extra := n.GPUsUsed - listed; extra > 0 {
			bn.Work = append(bn.Work, broker.Workload{
				Source: broker.SourceYARN, Key: "unlisted/" + n.Host, Name: KindUnknownWork,
				GPUs: extra, CheckpointAge: -1, Class: broker.WorkBatch,
			})
		}
		bn.GPUsAllocated = max(n.GPUsUsed, listed)
		out = append(out, bn)
	}
	return out
}
