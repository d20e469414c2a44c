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

// KindUnknownWork is the Workload.Name of what a node holds that no
// listed container explains: GPUs in use, or containers, memory or vcores
// the RM counts on a GPU node beyond the listed containers (a container
// allocated between the RM's answers, not yet launched, or on a
// NodeManager that did not answer). It is work of unknown size, never
// idle.
const KindUnknownWork = "unlisted containers"

// BrokerNodes returns the observation's nodes as the broker sees them from
// the YARN side: owner yarn while it takes containers (none once
// decommissioning or gone), phase from the NodeManager state, partition
// from its node label, down while LOST or UNHEALTHY, GPU counts, and every
// live container listed on it as running work, GPU or not, AMs included
// (tenant, priority and evict grace from the app's queue, as for demand;
// an AM carries its whole application's GPUs, AppGPUs). GPUsAllocated is
// the larger of the RM's count and the listed containers' GPUs.
//
// IMPORTANT: every container counts. Where the RM's own figures for a GPU
// node (numContainers, usedMemoryMB, usedVirtualCores, GPUs used) exceed
// what the listed containers explain, the rest appears as one
// non-preemptible workload of unknown size (KindUnknownWork): a mismatch
// is unknown, never idle. The node's pool, instance and utilisation come
// from other sources.
func BrokerNodes(obs *Observation, queues QueueMap) []broker.Node {
	work := map[string][]broker.Workload{}
	use := map[string]nodeUse{}
	add := func(host string, w broker.Workload, ct *Container) {
		work[host] = append(work[host], w)
		u := use[host]
		u.containers++
		u.mb += ct.MemoryMB
		u.vcores += ct.VCores
		use[host] = u
	}
	// A container its application restarts asks what it asked before,
	// which put it in its node's partition (partitions are exclusive): it
	// may land on any node of that partition.
	partition := make(map[string]string, len(obs.Nodes))
	for i := range obs.Nodes {
		partition[obs.Nodes[i].Host] = obs.Nodes[i].Partition()
	}
	for i := range obs.Apps {
		a := &obs.Apps[i]
		if len(a.Containers) == 0 {
			continue
		}
		t, _ := queues.appTenant(a)
		dir := CheckpointDir(a.Tags)
		appGPUs := max(a.AllocatedGPUs, 0)
		if listed := containerGPUs(a.Containers); listed > appGPUs {
			appGPUs = listed
		}
		for j := range a.Containers {
			c := &a.Containers[j]
			w := broker.Workload{
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
				EvictGrace:    t.EvictGrace.D(),
			}
			if c.AM {
				w.AppGPUs = appGPUs
			}
			if p, ok := partition[c.Host]; ok {
				w.Constraints = &broker.Constraints{NodeLabel: p}
			}
			add(c.Host, w, c)
		}
	}
	for i := range obs.Others {
		// Containers of apps the app list does not show: work whose
		// owner the broker cannot weigh, so never a victim.
		c := &obs.Others[i]
		add(c.Host, broker.Workload{
			Source: broker.SourceYARN, Key: c.ID, Name: "container of " + c.App, GPUs: c.GPUs,
			StartedAt: c.Started, CheckpointAge: -1, App: c.App, AM: c.AM, Class: broker.WorkBatch,
		}, c)
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
		u := use[n.Host]
		extra := n.GPUsUsed - listed
		if extra > 0 || gpuNode(&n) && (n.Containers > u.containers || n.UsedMemoryMB > u.mb || n.UsedVCores > u.vcores) {
			bn.Work = append(bn.Work, broker.Workload{
				Source: broker.SourceYARN, Key: "unlisted/" + n.Host, Name: KindUnknownWork,
				GPUs: max(extra, 0), CheckpointAge: -1, Class: broker.WorkBatch, Unlisted: true,
			})
		}
		bn.GPUsAllocated = max(n.GPUsUsed, listed)
		out = append(out, bn)
	}
	return out
}

// containerGPUs sums the GPUs of cs.
func containerGPUs(cs []Container) int {
	n := 0
	for _, c := range cs {
		n += max(c.GPUs, 0)
	}
	return n
}
