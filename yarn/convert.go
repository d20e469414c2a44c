package yarn

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Conversion from the wire shapes to an Observation.

// activeStates are the app states the client asks for; an RM that ignores
// the filter is filtered again here.
var activeStates = [...]string{"ACCEPTED", "RUNNING"}

func isActive(state string) bool {
	for _, s := range activeStates {
		if s == state {
			return true
		}
	}
	return false
}

func millis(ms flexInt) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms)).UTC()
}

func convertApps(r *appsResponse) []App {
	if r.Apps == nil {
		return nil
	}
	out := make([]App, 0, len(r.Apps.App))
	for i := range r.Apps.App {
		w := &r.Apps.App[i]
		if !isActive(w.State) {
			continue
		}
		a := App{
			ID:                w.ID,
			Name:              w.Name,
			User:              w.User,
			State:             w.State,
			Queue:             w.Queue,
			QueuePath:         w.Queue,
			Priority:          int64(w.Priority),
			Started:           millis(w.StartedTime),
			RunningContainers: int(w.RunningContainers),
			AllocatedMB:       int64(w.AllocatedMB),
			AllocatedVCores:   int64(w.AllocatedVCores),
			AllocatedGPUs:     -1,
		}
		if a.RunningContainers == 0 {
			a.AllocatedGPUs = 0
		} else if len(w.ResourceInfo) > 0 && !bytes.Equal(w.ResourceInfo, []byte("null")) {
			var ri appResourceInfo
			if err := json.Unmarshal(w.ResourceInfo, &ri); err == nil {
				a.AllocatedGPUs = 0
				for _, p := range ri.ResourceUsagesByPartition {
					g, _ := p.Used.get(GPUResource)
					a.AllocatedGPUs += int(g)
				}
			}
		}
		if w.ApplicationTags != "" {
			a.Tags = strings.Split(w.ApplicationTags, ",")
		}
		for j := range w.ResourceRequests {
			rr := &w.ResourceRequests[j]
			if rr.ResourceName != AnyResource || rr.NumContainers <= 0 {
				continue
			}
			gpus, _ := rr.Capability.get(GPUResource)
			if gpus <= 0 {
				continue
			}
			req := Request{
				Priority:            int32(rr.Priority),
				AllocationRequestID: int64(rr.AllocationRequestID),
				Containers:          int(rr.NumContainers),
				GPUsPerContainer:    int(gpus),
				MemoryMB:            int64(rr.Capability.Memory),
				VCores:              int64(rr.Capability.VCores),
				NodeLabel:           rr.NodeLabelExpression,
				RelaxLocality:       rr.RelaxLocality,
			}
			if rr.ExecutionType != nil {
				req.ExecutionType = rr.ExecutionType.ExecutionType
			}
			a.Requests = append(a.Requests, req)
		}
		slices.SortFunc(a.Requests, func(x, y Request) int {
			return cmp.Or(cmp.Compare(x.Priority, y.Priority), cmp.Compare(x.AllocationRequestID, y.AllocationRequestID))
		})
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y App) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

func convertNodes(r *nodesResponse) []Node {
	if r.Nodes == nil {
		return nil
	}
	out := make([]Node, 0, len(r.Nodes.Node))
	for i := range r.Nodes.Node {
		w := &r.Nodes.Node[i]
		host := w.NodeHostName
		if host == "" {
			host, _, _ = strings.Cut(w.ID, ":")
		}
		used, _ := w.UsedResource.get(GPUResource)
		avail, _ := w.AvailableResource.get(GPUResource)
		total, ok := w.TotalResource.get(GPUResource)
		if !ok {
			// RMs before 3.2 have no totalResource.
			total = used + avail
		}
		n := Node{
			Host:          host,
			ID:            w.ID,
			Rack:          w.Rack,
			State:         w.State,
			GPUsTotal:     int(total),
			GPUsUsed:      int(used),
			GPUsAvailable: int(avail),
			Containers:    int(w.NumContainers),
			HTTPAddress:   w.NodeHTTPAddress,
			HealthReport:  w.HealthReport,
			LastHealth:    millis(w.LastHealthUpdate),
			Version:       w.Version,
		}
		for _, l := range w.NodeLabels {
			if l != "" {
				n.Labels = append(n.Labels, l)
			}
		}
		out = append(out, n)
	}
	return finishNodes(out)
}

// finishNodes sorts nodes by host and keeps one entry per host.
func finishNodes(out []Node) []Node {
	slices.SortFunc(out, func(x, y Node) int { return cmp.Compare(x.Host, y.Host) })
	// A restarted NodeManager can briefly appear twice (old port LOST or
	// SHUTDOWN, new port RUNNING): keep one entry per host, preferring the
	// one in a live state.
	dedup := out[:0]
	for _, n := range out {
		if k := len(dedup); k > 0 && dedup[k-1].Host == n.Host {
			if !liveNodeState(dedup[k-1].State) && liveNodeState(n.State) {
				dedup[k-1] = n
			}
			continue
		}
		dedup = append(dedup, n)
	}
	return dedup
}

func liveNodeState(s string) bool {
	switch s {
	case "LOST", "SHUTDOWN", "DECOMMISSIONED":
		return false
	}
	return true
}

func convertScheduler(r *schedulerResponse) (string, []Queue) {
	if r.Scheduler == nil || r.Scheduler.SchedulerInfo == nil {
		return "", nil
	}
	si := r.Scheduler.SchedulerInfo
	var out []Queue
	switch {
	case si.RootQueue != nil: // FairScheduler
		walkQueue(si.RootQueue, "", &out)
	case si.QueueName != "": // CapacityScheduler
		walkQueue(si, "", &out)
	}
	return si.Type, out
}

func walkQueue(w *schedulerQueue, parent string, out *[]Queue) {
	path := w.QueuePath
	name := w.QueueName
	if path == "" {
		switch {
		case parent == "":
			path = name
		case strings.HasPrefix(name, parent+"."): // FairScheduler names are paths
			path = name
		default:
			path = parent + "." + name
		}
	}
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	var children list[schedulerQueue]
	if w.Queues != nil {
		children = w.Queues.Queue
	} else if w.ChildQueues != nil {
		children = w.ChildQueues.Queue
	}
	q := Queue{
		Path:              path,
		Name:              name,
		Leaf:              len(children) == 0,
		State:             w.State,
		Capacity:          w.Capacity,
		MaxCapacity:       w.MaxCapacity,
		UsedCapacity:      w.UsedCapacity,
		PendingContainers: int(w.PendingContainers),
	}
	if w.Resources != nil {
		for _, p := range w.Resources.ResourceUsagesByPartition {
			if p.PartitionName == "" {
				g, _ := p.Pending.get(GPUResource)
				q.PendingGPUs = int(g)
			}
		}
	}
	*out = append(*out, q)
	for i := range children {
		walkQueue(&children[i], path, out)
	}
}

// resolveQueues fills App.QueuePath from the queue tree: Hadoop 3.3 reports
// an app's leaf queue name, which is unique under the CapacityScheduler.
func resolveQueues(apps []App, queues []Queue) {
	byName := map[string]string{}
	paths := map[string]bool{}
	for _, q := range queues {
		paths[q.Path] = true
		if _, dup := byName[q.Name]; dup {
			byName[q.Name] = ""
		} else {
			byName[q.Name] = q.Path
		}
	}
	for i := range apps {
		a := &apps[i]
		if paths[a.Queue] {
			a.QueuePath = a.Queue
		} else if p := byName[a.Queue]; p != "" {
			a.QueuePath = p
		}
	}
}
