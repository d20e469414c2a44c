package yarn

import (
	"sort"
	"strings"
	"time"
)

// GPUResource is the name of YARN's GPU resource type.
const GPUResource = "yarn.io/gpu"

// AnyResource is the resourceName of an app's ANY request. Host and rack
// requests of the same ask repeat its containers, so only this one counts.
const AnyResource = "*"

// Observation is one consistent look at the RM: the GPU asks of the apps in
// ACCEPTED or RUNNING, the NodeManagers and the queue tree.
type Observation struct {
	// RM is the base URL of the RM that answered (the active one).
	RM string `json:"rm"`
	// At is when the observation was taken.
	At time.Time `json:"at"`
	// Scheduler is the scheduler type: capacityScheduler, fairScheduler or
	// fifoScheduler.
	Scheduler string `json:"scheduler"`
	// Apps are the ACCEPTED and RUNNING apps, in id order.
	Apps []App `json:"apps"`
	// Nodes are the NodeManagers, in host order.
	Nodes []Node `json:"nodes"`
	// Queues are all queues of the tree, parents before children.
	Queues []Queue `json:"queues"`
	// Others are live containers a GPU node's NodeManager runs for apps
	// the app list does not show (an app that is ending, or in a state
	// the list leaves out): work all the same. App names each one's app.
	Others []Container `json:"others,omitempty"`
}

// App is one YARN application and its pending GPU asks.
type App struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	User  string `json:"user"`
	State string `json:"state"`
	// Queue is the queue as the RM reports it: the leaf name on Hadoop 3.3,
	// the full path on 3.4 and later.
	Queue string `json:"queue"`
	// QueuePath is the full path (root.a.b) resolved through the queue
	// tree, or Queue when the tree does not know it.
	QueuePath string `json:"queue_path"`
	// Priority is the application priority.
	Priority int64 `json:"priority"`
	// Tags are the application tags (YARN lowercases them).
	Tags []string `json:"tags,omitempty"`
	// Started is when the RM accepted the app.
	Started time.Time `json:"started,omitzero"`
	// RunningContainers is the number of containers the app holds.
	RunningContainers int `json:"running_containers"`
	// AllocatedMB and AllocatedVCores are what its containers hold.
	AllocatedMB     int64 `json:"allocated_mb"`
	AllocatedVCores int64 `json:"allocated_vcores"`
	// AllocatedGPUs is the yarn.io/gpu its containers hold, summed over
	// partitions from resourceInfo; -1 when the RM does not say (before
	// Hadoop 3.1).
	AllocatedGPUs int `json:"allocated_gpus"`
	// Attempt is the current application attempt id and AMContainer the
	// container its ApplicationMaster runs in (empty for an unmanaged AM);
	// both are filled only for apps whose containers were listed.
	Attempt     string `json:"attempt,omitempty"`
	AMContainer string `json:"am_container,omitempty"`
	// Containers are the app's live containers, listed for RUNNING apps
	// that hold GPUs (or may: AllocatedGPUs -1), in id order.
	Containers []Container `json:"containers,omitempty"`
	// Requests are the app's ANY ("*") requests that ask for GPUs and
	// still have containers pending, in (priority, allocation id) order.
	Requests []Request `json:"requests,omitempty"`
}

// HoldsGPUs reports whether the app may hold GPUs: RUNNING with containers
// and GPUs allocated, or an allocation the RM does not break down.
func (a App) HoldsGPUs() bool {
	return a.State == "RUNNING" && a.RunningContainers > 0 && a.AllocatedGPUs != 0
}

// Container is one live container of an app, as the RM's scheduler holds
// it.
type Container struct {
	ID string `json:"id"`
	// Host is the NodeManager host and NodeID its host:port.
	Host   string `json:"host"`
	NodeID string `json:"node_id"`
	// GPUs, MemoryMB and VCores are the container's allocation.
	GPUs     int   `json:"gpus"`
	MemoryMB int64 `json:"memory_mb"`
	VCores   int64 `json:"vcores"`
	// Priority is the container (request) priority.
	Priority int32 `json:"priority"`
	// Started is when the RM allocated it.
	Started time.Time `json:"started,omitzero"`
	// State is the container state (RUNNING, ALLOCATED, ...), when known.
	State string `json:"state,omitempty"`
	// AM marks the attempt's ApplicationMaster container.
	AM bool `json:"am,omitempty"`
	// App is the container's application, set only on Observation.Others
	// (an App's containers are its own).
	App string `json:"app,omitempty"`
}

// Request is one ANY resource request of an app.
type Request struct {
	// Priority is the request (container) priority, not the app priority.
	Priority int32 `json:"priority"`
	// AllocationRequestID tells apart requests of one priority (-1 or 0
	// when unused).
	AllocationRequestID int64 `json:"allocation_request_id"`
	// Containers is numContainers: how many are still pending.
	Containers int `json:"containers"`
	// GPUsPerContainer is the yarn.io/gpu value of the capability.
	GPUsPerContainer int   `json:"gpus_per_container"`
	MemoryMB         int64 `json:"memory_mb"`
	VCores           int64 `json:"vcores"`
	// NodeLabel is the node-label expression, empty for the default
	// partition.
	NodeLabel     string `json:"node_label,omitempty"`
	RelaxLocality bool   `json:"relax_locality"`
	ExecutionType string `json:"execution_type,omitempty"`
}

// PendingContainers returns the GPU containers the app still waits for.
func (a App) PendingContainers() int {
	n := 0
	for _, r := range a.Requests {
		n += r.Containers
	}
	return n
}

// PendingGPUs returns the GPUs the app still waits for: the sum over its
// ANY requests of numContainers × yarn.io/gpu.
func (a App) PendingGPUs() int {
	n := 0
	for _, r := range a.Requests {
		n += r.Containers * r.GPUsPerContainer
	}
	return n
}

// HasTag reports whether the app carries tag t (compared without case, as
// YARN lowercases tags).
func (a App) HasTag(t string) bool {
	for _, x := range a.Tags {
		if strings.EqualFold(x, t) {
			return true
		}
	}
	return false
}

// Node is one NodeManager, keyed by host: its RPC port changes when it
// restarts, its host does not.
type Node struct {
	Host string `json:"host"`
	// ID is host:port as the RM knows it now.
	ID    string `json:"id"`
	Rack  string `json:"rack"`
	State string `json:"state"`
	// Labels are the node's partition labels.
	Labels        []string `json:"labels,omitempty"`
	GPUsTotal     int      `json:"gpus_total"`
	GPUsUsed      int      `json:"gpus_used"`
	GPUsAvailable int      `json:"gpus_available"`
	// Containers (numContainers), UsedMemoryMB and UsedVCores
	// (usedVirtualCores) are what the RM's scheduler holds on the node:
	// every container, of any app, launched or only allocated. They are
	// the cross-check of the containers listed on the node (BrokerNodes):
	// a node holding more than its listed containers explain runs work of
	// unknown size, never nothing.
	Containers   int   `json:"containers"`
	UsedMemoryMB int64 `json:"used_memory_mb"`
	UsedVCores   int64 `json:"used_vcores"`
	// HTTPAddress is the NodeManager's web address (host:port).
	HTTPAddress  string    `json:"http_address,omitempty"`
	HealthReport string    `json:"health_report,omitempty"`
	LastHealth   time.Time `json:"last_health,omitzero"`
	Version      string    `json:"version,omitempty"`
}

// Partition returns the node's partition: its node label, empty for the
// default partition (YARN gives a node at most one label).
func (n Node) Partition() string {
	if len(n.Labels) == 0 {
		return ""
	}
	return n.Labels[0]
}

// Queue is one queue of the scheduler's tree.
type Queue struct {
	// Path is the full path, root.a.b.
	Path string `json:"path"`
	// Name is the last path element.
	Name  string `json:"name"`
	Leaf  bool   `json:"leaf"`
	State string `json:"state,omitempty"`
	// Capacity, MaxCapacity and UsedCapacity are percentages of the parent.
	Capacity     float64 `json:"capacity"`
	MaxCapacity  float64 `json:"max_capacity"`
	UsedCapacity float64 `json:"used_capacity"`
	// PendingContainers and PendingGPUs are the queue's pending asks in the
	// default partition, as the CapacityScheduler reports them; zero under
	// other schedulers.
	PendingContainers int `json:"pending_containers"`
	PendingGPUs       int `json:"pending_gpus"`
}

// App returns the app with id, and false when the observation lacks it.
func (o *Observation) App(id string) (App, bool) {
	i := sort.Search(len(o.Apps), func(i int) bool { return o.Apps[i].ID >= id })
	if i < len(o.Apps) && o.Apps[i].ID == id {
		return o.Apps[i], true
	}
	return App{}, false
}

// Node returns the node on host, and false when the observation lacks it.
func (o *Observation) Node(host string) (Node, bool) {
	i := sort.Search(len(o.Nodes), func(i int) bool { return o.Nodes[i].Host >= host })
	if i < len(o.Nodes) && o.Nodes[i].Host == host {
		return o.Nodes[i], true
	}
	return Node{}, false
}

// Queue returns the queue with the full path or, failing that, the unique
// leaf name, and false when there is none.
func (o *Observation) Queue(name string) (Queue, bool) {
	var leaf *Queue
	n := 0
	for i := range o.Queues {
		q := &o.Queues[i]
		if q.Path == name {
			return *q, true
		}
		if q.Name == name {
			leaf = q
			n++
		}
	}
	if n == 1 {
		return *leaf, true
	}
	return Queue{}, false
}

// PendingGPUs returns the GPUs all apps wait for.
func (o *Observation) PendingGPUs() int {
	n := 0
	for _, a := range o.Apps {
		n += a.PendingGPUs()
	}
	return n
}
