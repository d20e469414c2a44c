package yarn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// This file holds the JSON shapes of the RM REST API (the JAXB DAOs of
// org.apache.hadoop.yarn.server.resourcemanager.webapp.dao) and decoders for
// the quirks of their Jersey rendering. Only the fields gpubroker reads are
// declared; encoding/json ignores the rest. The three large answers (apps,
// nodes, an attempt's containers) are decoded by decode.go's scanner
// instead; their encoding/json shapes, the reference it is tested against,
// are in reference_test.go.

// list decodes a JAXB collection that Jersey may render as null, as {} (an
// empty wrapper), as a bare object when it holds one element, or as an
// array.
type list[T any] []T

func (l *list[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*l = nil
		return nil
	case b[0] == '[':
		var s []T
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = s
		return nil
	case bytes.Equal(b, []byte("{}")):
		*l = nil
		return nil
	default:
		var one T
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*l = list[T]{one}
		return nil
	}
}

// flexInt decodes an integer rendered as a JSON number or as a string
// ("12345"), as JAXB maps render their values as strings on Hadoop 3.3 and
// as numbers on 3.4+. Numbers are decoded as int64, never through float64,
// so 9223372036854775807 survives.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*n = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		// A float such as 1.0E9 from an older RM.
		f, ferr := strconv.ParseFloat(string(b), 64)
		if ferr != nil {
			return fmt.Errorf("decode integer %s: %w", b, err)
		}
		v = int64(f)
	}
	*n = flexInt(v)
	return nil
}

// entryMap decodes a JAXB map, rendered as {"entry": {"key": k, "value": v}}
// for one element, {"entry": [...]} for more, and {} or null for none.
type entryMap map[string]flexInt

func (m *entryMap) UnmarshalJSON(b []byte) error {
	var w struct {
		Entry list[struct {
			Key   string  `json:"key"`
			Value flexInt `json:"value"`
		}] `json:"entry"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out := make(entryMap, len(w.Entry))
	for _, e := range w.Entry {
		out[e.Key] = e.Value
	}
	*m = out
	return nil
}

// resourceInfo is a ResourceInfo: memory and vCores, plus every resource
// type (memory-mb, vcores, yarn.io/gpu, ...) in resourceInformations.
type resourceInfo struct {
	Memory               flexInt `json:"memory"`
	VCores               flexInt `json:"vCores"`
	ResourceInformations *struct {
		ResourceInformation list[resourceInformation] `json:"resourceInformation"`
	} `json:"resourceInformations"`
}

type resourceInformation struct {
	Name              string  `json:"name"`
	Value             flexInt `json:"value"`
	Units             string  `json:"units"`
	MaximumAllocation flexInt `json:"maximumAllocation"`
	MinimumAllocation flexInt `json:"minimumAllocation"`
}

// get returns the value of resource type name, and whether it is present.
func (r *resourceInfo) get(name string) (int64, bool) {
	if r == nil || r.ResourceInformations == nil {
		return 0, false
	}
	for _, ri := range r.ResourceInformations.ResourceInformation {
		if ri.Name == name {
			return int64(ri.Value), true
		}
	}
	return 0, false
}

// nodesResponse is GET PathNodes, the RM's NodesInfo, with nodeInfo the
// one node record (NodeInfo) the package decodes with encoding/json: the
// Decommissioner reads a host's record with it, and it is the reference
// the observer's scanner (decode.go: scanner.node) is tested against
// (reference_test.go). yarnsim writes the same JSON from its own types, so
// the simulator is checked against recorded real answers, not against
// these.
type nodesResponse struct {
	Nodes *struct {
		Node list[nodeInfo] `json:"node"`
	} `json:"nodes"`
}

type nodeInfo struct {
	Rack              string        `json:"rack"`
	State             string        `json:"state"`
	ID                string        `json:"id"`
	NodeHostName      string        `json:"nodeHostName"`
	NodeHTTPAddress   string        `json:"nodeHTTPAddress"`
	LastHealthUpdate  flexInt       `json:"lastHealthUpdate"`
	Version           string        `json:"version"`
	HealthReport      string        `json:"healthReport"`
	NumContainers     flexInt       `json:"numContainers"`
	UsedMemoryMB      flexInt       `json:"usedMemoryMB"`
	UsedVirtualCores  flexInt       `json:"usedVirtualCores"`
	AvailMemoryMB     flexInt       `json:"availMemoryMB"`
	NodeLabels        list[string]  `json:"nodeLabels"`
	TotalResource     *resourceInfo `json:"totalResource"`
	UsedResource      *resourceInfo `json:"usedResource"`
	AvailableResource *resourceInfo `json:"availableResource"`
}

type schedulerResponse struct {
	Scheduler *struct {
		SchedulerInfo *schedulerQueue `json:"schedulerInfo"`
	} `json:"scheduler"`
}

// schedulerQueue covers the CapacityScheduler's root and queue infos, the
// FairScheduler's schedulerInfo (whose tree hangs off rootQueue and
// childQueues), and the FIFO scheduler's flat info.
type schedulerQueue struct {
	Type              string  `json:"type"`
	QueueName         string  `json:"queueName"`
	QueuePath         string  `json:"queuePath"`
	State             string  `json:"state"`
	Capacity          float64 `json:"capacity"`
	MaxCapacity       float64 `json:"maxCapacity"`
	UsedCapacity      float64 `json:"usedCapacity"`
	NumApplications   flexInt `json:"numApplications"`
	PendingContainers flexInt `json:"pendingContainers"`
	Queues            *struct {
		Queue list[schedulerQueue] `json:"queue"`
	} `json:"queues"`
	Resources *struct {
		ResourceUsagesByPartition list[struct {
			PartitionName string        `json:"partitionName"`
			Pending       *resourceInfo `json:"pending"`
		}] `json:"resourceUsagesByPartition"`
	} `json:"resources"`
	// FairScheduler.
	RootQueue   *schedulerQueue `json:"rootQueue"`
	ChildQueues *struct {
		Queue list[schedulerQueue] `json:"queue"`
	} `json:"childQueues"`
}

// remoteException is the error body the RM's GenericExceptionHandler
// writes for 4xx/5xx answers.
type remoteException struct {
	RemoteException *struct {
		Exception string `json:"exception"`
		Message   string `json:"message"`
	} `json:"RemoteException"`
}

// appAttemptsResponse is GET /ws/v1/cluster/apps/{app}/appattempts
// (AppAttemptsInfo).
type appAttemptsResponse struct {
	AppAttempts *struct {
		AppAttempt list[appAttemptInfo] `json:"appAttempt"`
	} `json:"appAttempts"`
}

// appAttemptInfo is one AppAttemptInfo. appAttemptState appears in Hadoop
// 3.4 and later only (YARN-10381).
type appAttemptInfo struct {
	ID              flexInt `json:"id"`
	StartTime       flexInt `json:"startTime"`
	FinishedTime    flexInt `json:"finishedTime"`
	ContainerID     string  `json:"containerId"`
	NodeHTTPAddress string  `json:"nodeHttpAddress"`
	NodeID          string  `json:"nodeId"`
	AppAttemptID    string  `json:"appAttemptId"`
	AppAttemptState string  `json:"appAttemptState"`
}

// containerInfo is one ContainerInfo of yarn-server-common's webapp DAO.
// allocatedResources (a JAXB map of every resource type) appears in Hadoop
// 3.1 and later.
type containerInfo struct {
	ContainerID        string   `json:"containerId"`
	AllocatedMB        flexInt  `json:"allocatedMB"`
	AllocatedVCores    flexInt  `json:"allocatedVCores"`
	AssignedNodeID     string   `json:"assignedNodeId"`
	Priority           flexInt  `json:"priority"`
	StartedTime        flexInt  `json:"startedTime"`
	FinishedTime       flexInt  `json:"finishedTime"`
	ContainerState     string   `json:"containerState"`
	NodeHTTPAddress    string   `json:"nodeHttpAddress"`
	NodeID             string   `json:"nodeId"`
	AllocatedResources entryMap `json:"allocatedResources"`
}

// nmContainersResponse is a NodeManager's GET /ws/v1/node/containers: the
// containers it runs. The documented form is wrapped ({"containers":
// {"container": [...]}}); the unwrapped one is read too.
type nmContainersResponse struct {
	Container  list[nmContainerInfo] `json:"container"`
	Containers *struct {
		Container list[nmContainerInfo] `json:"container"`
	} `json:"containers"`
}

func (r *nmContainersResponse) all() []nmContainerInfo {
	if r.Containers != nil {
		return append(slices.Clone(r.Container), r.Containers.Container...)
	}
	return r.Container
}

// nmContainerInfo is the NodeManager's ContainerInfo: no GPU count, no
// start time, no priority.
type nmContainerInfo struct {
	ID                  string  `json:"id"`
	State               string  `json:"state"`
	NodeID              string  `json:"nodeId"`
	TotalMemoryNeededMB flexInt `json:"totalMemoryNeededMB"`
	TotalVCoresNeeded   flexInt `json:"totalVCoresNeeded"`
}

// nmGPUResponse is a NodeManager's GET /ws/v1/node/resources/yarn.io%2Fgpu
// (NMGpuResourceInfo, served with the GPU resource plugin): which GPU
// device each container holds.
type nmGPUResponse struct {
	AssignedGpuDevices list[struct {
		Index       flexInt `json:"index"`
		MinorNumber flexInt `json:"minorNumber"`
		ContainerID string  `json:"containerId"`
	}] `json:"assignedGpuDevices"`
}
