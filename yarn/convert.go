package yarn

import (
	"cmp"
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
