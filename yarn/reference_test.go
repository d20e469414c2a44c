package yarn

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
)

// The reference decode of the large answers: their wire shapes as
// encoding/json decodes them and the conversion the client made of them
// before the fast decoders of decode.go, which
// TestFastDecodeMatchesReference and BenchmarkDecode compare against.

// requestPriority decodes a resource request's priority, an int in Hadoop
// 3.x ("priority": 1) and an object in some builds ({"priority": 1}).
type requestPriority int32

func (p *requestPriority) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var w struct {
			Priority flexInt `json:"priority"`
		}
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		*p = requestPriority(w.Priority)
		return nil
	}
	var n flexInt
	if err := n.UnmarshalJSON(b); err != nil {
		return err
	}
	*p = requestPriority(n)
	return nil
}

type appsResponse struct {
	Apps *struct {
		App list[appInfo] `json:"app"`
	} `json:"apps"`
}

type appInfo struct {
	ID                string                `json:"id"`
	User              string                `json:"user"`
	Name              string                `json:"name"`
	Queue             string                `json:"queue"`
	State             string                `json:"state"`
	ApplicationType   string                `json:"applicationType"`
	ApplicationTags   string                `json:"applicationTags"`
	Priority          flexInt               `json:"priority"`
	StartedTime       flexInt               `json:"startedTime"`
	RunningContainers flexInt               `json:"runningContainers"`
	AllocatedMB       flexInt               `json:"allocatedMB"`
	AllocatedVCores   flexInt               `json:"allocatedVCores"`
	ResourceSeconds   entryMap              `json:"resourceSecondsMap"`
	ResourceRequests  list[resourceRequest] `json:"resourceRequests"`
	Unmanaged         bool                  `json:"unmanagedApplication"`
	// ResourceInfo is decoded (into appResourceInfo) only for apps that
	// hold containers: it is most of an app's answer.
	ResourceInfo json.RawMessage `json:"resourceInfo"`
}

type resourceRequest struct {
	Priority            requestPriority `json:"priority"`
	AllocationRequestID flexInt         `json:"allocationRequestId"`
	ResourceName        string          `json:"resourceName"`
	Capability          resourceInfo    `json:"capability"`
	NumContainers       flexInt         `json:"numContainers"`
	RelaxLocality       bool            `json:"relaxLocality"`
	NodeLabelExpression string          `json:"nodeLabelExpression"`
	ExecutionType       *struct {
		ExecutionType string `json:"executionType"`
	} `json:"executionTypeRequest"`
}

// appResourceInfo is an app's resourceInfo (ResourcesInfo): what it holds
// and asks for per partition, with every resource type. Hadoop 3.1 and
// later render it; older RMs omit it.
type appResourceInfo struct {
	ResourceUsagesByPartition list[struct {
		PartitionName string        `json:"partitionName"`
		Used          *resourceInfo `json:"used"`
	}] `json:"resourceUsagesByPartition"`
}

// containersResponse is GET
// /ws/v1/cluster/apps/{app}/appattempts/{attempt}/containers (ContainersInfo):
// the attempt's live containers as the scheduler holds them. Hadoop 3.3 and
// 3.5 render it without its root element, {"container": [...]} (a bare
// object for one container); the wrapped {"containers": {"container": ...}}
// form is read too.
type containersResponse struct {
	Container  list[containerInfo] `json:"container"`
	Containers *struct {
		Container list[containerInfo] `json:"container"`
	} `json:"containers"`
}

func (r *containersResponse) all() []containerInfo {
	if r.Containers != nil {
		return append(slices.Clone(r.Container), r.Containers.Container...)
	}
	return r.Container
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
			UsedMemoryMB:  int64(w.UsedMemoryMB),
			UsedVCores:    int64(w.UsedVirtualCores),
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
