package yarnsim

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Flavor selects the Hadoop line whose JSON the simulator imitates.
type Flavor string

// Supported flavors. Hadoop 3.3 reports an app's queue by leaf name and
// renders JAXB map values as strings; 3.4 and later report full queue paths,
// numbers, and a queuePath in the scheduler tree.
const (
	Flavor33 Flavor = "3.3"
	Flavor35 Flavor = "3.5"
)

// Quirks turn on renderings real RMs produce in some versions or cases.
type Quirks struct {
	// NullWhenEmpty renders empty collections as {"apps":null} instead of
	// {"apps":{}}.
	NullWhenEmpty bool
	// SingleObject renders one-element lists as a bare object, as Jersey
	// does without an array hint.
	SingleObject bool
	// NoAttemptContainers makes the RM answer the containers of an app
	// attempt with a plain 404 page, as an RM without that endpoint does.
	NoAttemptContainers bool
	// NoGPUPlugin makes the NodeManagers answer their GPU resource path
	// with 404, as without the GPU resource plugin.
	NoGPUPlugin bool
}

// QueueSpec declares a leaf queue of the tree.
type QueueSpec struct {
	// Path is the full path, root.a or root.x.y; leaf names must be unique.
	Path string
	// Capacity is the percentage of the parent (default: an equal share).
	Capacity float64
	// AccessibleLabels are the node labels the queue may ask for
	// (accessible-node-labels); nil inherits root's "*", every label, as
	// the CapacityScheduler does. A label no queue may access holds a
	// node that no ask can reach: the cordon.
	AccessibleLabels []string
}

// Config configures a Sim.
type Config struct {
	// Queues are the leaf queues; default root.a and root.b at 50% each.
	Queues []QueueSpec
	// Flavor is the JSON flavor (default Flavor35).
	Flavor Flavor
	// Quirks are optional renderings.
	Quirks Quirks
	// ClusterTimestamp is the RM start time in ms, the middle part of app
	// ids (default 1700000000000).
	ClusterTimestamp int64
	// Now is the clock for app start times (default time.Now).
	Now func() time.Time
	// Heartbeat is the NodeManagers' heartbeat interval (default 500ms;
	// Hadoop's is 1s): a container signal waits on its node for the next
	// heartbeat, and the NodeManager reports the container completed, which
	// frees its space, with the one after.
	Heartbeat time.Duration
	// NodeLabelsDisabled runs the RM without yarn.node-labels.enabled:
	// every label call fails as Hadoop's does.
	NodeLabelsDisabled bool
	// AMResync is how long after an RM restart (RestartRM) a running
	// application is listed ACCEPTED, as the new RM recovers it until its
	// ApplicationMaster re-registers (Hadoop 3.3.6 and 3.5.0 list it so;
	// test/hadoop, TestBrokerMigratesAtTheCheckpoint). Its containers run
	// on and count on their nodes meanwhile. Default 1s (the AM's
	// heartbeat); negative: at once.
	AMResync time.Duration
}

// NodeSpec describes a NodeManager to add.
type NodeSpec struct {
	Host string
	// Rack defaults to /default-rack.
	Rack string
	GPUs int
	// MemoryMB and VCores default to 262144 and 64.
	MemoryMB int64
	VCores   int64
	// Labels are the node's partition labels (at most one in YARN).
	Labels []string
}

// RequestSpec is one container ask of an app, its ANY request.
type RequestSpec struct {
	// Priority is the request priority (default 1).
	Priority int32
	// Containers is how many containers are asked for.
	Containers int
	// GPUs per container.
	GPUs int
	// MemoryMB and VCores per container default to 1024 and 1.
	MemoryMB int64
	VCores   int64
	// NodeLabel is the node-label expression; only nodes with that label
	// serve it, and only unlabelled nodes serve an empty one.
	NodeLabel string
	// Hosts are preferred hosts; they add host and rack requests that repeat
	// the ask, as AMRMClient does.
	Hosts []string
}

// AppSpec describes an application to submit.
type AppSpec struct {
	Name string
	// User defaults to "sim".
	User string
	// Queue is a leaf name or full path (default: the first queue).
	Queue    string
	Priority int64
	Tags     []string
	Requests []RequestSpec
	// ManagedAM gives the app an ApplicationMaster container (1024 MB, one
	// vcore, no GPUs, priority 0, on the first default-partition node with
	// room), which its attempt names; without it the AM is unmanaged, as in
	// the test minicluster. A lost AM container starts a new attempt that
	// keeps the app's other containers (work-preserving AM restart).
	ManagedAM bool
}

// Fault makes the simulator answer every REST request badly.
type Fault string

// The faults.
const (
	FaultNone              Fault = ""
	FaultHTML              Fault = "html"                // 200 text/html: a login page
	FaultTruncated         Fault = "truncated"           // JSON cut off halfway
	FaultServerError       Fault = "500"                 // 500 with a RemoteException
	FaultStandbyNoRedirect Fault = "standby-no-redirect" // 307 without Location
)

type node struct {
	spec                NodeSpec
	state               string
	port                int
	usedGPUs            int
	usedMem, usedVCores int64
	containers          int
	lastHealth          time.Time
	allocs              map[*app]map[int]int // app → request index → containers
	conts               map[string]*container
	// placeholder marks the DECOMMISSIONED "host:-1" entry a new active
	// RM makes of an excluded host (restart.go); unlisted a node a new
	// active RM does not know, its NodeManager being down.
	placeholder, unlisted bool
	// resync, until it passes, keeps a running node out of the listing: a
	// new active RM has not heard from its NodeManager since the restart
	// (it re-registers at its next heartbeat, with its containers).
	resync time.Time
	// ran holds the live apps that have run a container on the node
	// (RMNodeImpl.runningApplications, left at the app's end): the RM keeps
	// a DECOMMISSIONING node until they end or its timeout passes.
	ran map[*app]bool
}

// container is one allocated container.
type container struct {
	id      string
	app     *app
	node    *node
	req     int // request index; amRequest for the AM container
	started time.Time
}

// amRequest is the request index of an AM container.
const amRequest = -1

// The AM container's size.
const (
	amMemoryMB = 1024
	amVCores   = 1
)

func (c *container) size() (gpus int, mem, vcores int64) {
	if c.req == amRequest {
		return 0, amMemoryMB, amVCores
	}
	r := c.app.requests[c.req].spec
	return r.GPUs, r.MemoryMB, r.VCores
}

func (n *node) freeGPUs() int { return n.spec.GPUs - n.usedGPUs }

type request struct {
	spec    RequestSpec
	pending int
}

type app struct {
	seq   int
	id    string
	spec  AppSpec
	queue *queue
	state string
	// recovering, until it passes, lists a RUNNING app ACCEPTED: a new
	// active RM recovered it and its AM has not re-registered yet.
	recovering time.Time
	started    time.Time
	requests   []request
	running    int
	usedGPUs   int
	usedMem    int64
	usedCores  int64
	// attempt is the current attempt number (from 1); am its AM
	// container, nil while unmanaged or not placed; conts the live
	// containers, in allocation order.
	attempt  int
	am       *container
	conts    []*container
	nextCont int
}

type queue struct {
	path, name string
	capacity   float64
	children   []*queue
	leaf       bool
	// labels are the accessible node labels; nil: every label.
	labels []string
}

// Sim is a simulated ResourceManager. It is safe for concurrent use.
type Sim struct {
	mu       genMutex
	cfg      Config
	root     *queue
	leaves   map[string]*queue // by path and by leaf name
	nodes    map[string]*node
	apps     []*app // submit order
	appByID  map[string]*app
	nextSeq  int
	nextPort int
	fault    Fault
	// freeGPUs per label: when zero, scheduling that label is skipped.
	freeByLabel map[string]int
	// live caches the RUNNING nodes in host order; nil when stale.
	live []*node
	// srv is the listener Start opened.
	srv *http.Server
	// rules are the apps' answers to container signals and kills
	// (containers.go).
	rules appRules
	// answers are the bulk answers rendered, by route and query, with
	// the state generation they show (http.go).
	answers map[string]cachedAnswer
	// clusterLabels are the cluster's node labels, exclusive or not: the
	// RM's label store (labels.go).
	clusterLabels map[string]bool
}

// genMutex is the simulator's lock. It counts the times it was taken to
// change state: Lock, which every mutation takes, starts a new generation
// (so does any other caller of Lock: a spurious generation costs one
// render, a missed one would serve a stale answer); lockRead, taken by the
// read-only REST handlers, does not.
type genMutex struct {
	sync.Mutex
	gen uint64
}

// Lock takes the lock and starts a new state generation.
func (m *genMutex) Lock() {
	m.Mutex.Lock()
	m.gen++
}

// lockRead takes the lock for a caller that changes no state.
func (m *genMutex) lockRead() { m.Mutex.Lock() }

// New returns a simulator with no nodes and no apps.
func New(cfg Config) (*Sim, error) {
	if cfg.Flavor == "" {
		cfg.Flavor = Flavor35
	}
	if cfg.Flavor != Flavor33 && cfg.Flavor != Flavor35 {
		return nil, fmt.Errorf("yarnsim: flavor must be %q or %q, got %q", Flavor33, Flavor35, cfg.Flavor)
	}
	if cfg.ClusterTimestamp == 0 {
		cfg.ClusterTimestamp = 1700000000000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 500 * time.Millisecond
	}
	if cfg.AMResync == 0 {
		cfg.AMResync = time.Second
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = []QueueSpec{{Path: "root.a", Capacity: 50}, {Path: "root.b", Capacity: 50}}
	}
	s := &Sim{
		cfg:           cfg,
		root:          &queue{path: "root", name: "root", capacity: 100},
		leaves:        map[string]*queue{},
		nodes:         map[string]*node{},
		appByID:       map[string]*app{},
		nextPort:      40000,
		freeByLabel:   map[string]int{},
		clusterLabels: map[string]bool{},
	}
	for _, qs := range cfg.Queues {
		if err := s.addQueue(qs); err != nil {
			return nil, err
		}
	}
	s.fillCapacities(s.root)
	return s, nil
}

func (s *Sim) addQueue(qs QueueSpec) error {
	parts := strings.Split(qs.Path, ".")
	if len(parts) < 2 || parts[0] != "root" {
		return fmt.Errorf("yarnsim: queue path must start with root., got %q", qs.Path)
	}
	leafName := parts[len(parts)-1]
	if _, dup := s.leaves[leafName]; dup {
		return fmt.Errorf("yarnsim: leaf queue name %q is used twice", leafName)
	}
	q := s.root
	for i := 1; i < len(parts); i++ {
		path := strings.Join(parts[:i+1], ".")
		var next *queue
		for _, c := range q.children {
			if c.path == path {
				next = c
			}
		}
		if next == nil {
			next = &queue{path: path, name: parts[i]}
			q.children = append(q.children, next)
		}
		q = next
	}
	q.leaf = true
	q.capacity = qs.Capacity
	q.labels = slices.Clone(qs.AccessibleLabels)
	s.leaves[leafName] = q
	s.leaves[qs.Path] = q
	return nil
}

// fillCapacities gives queues without a capacity an equal share of what
// their siblings leave.
func (s *Sim) fillCapacities(q *queue) {
	left, unset := 100.0, 0
	for _, c := range q.children {
		if c.capacity > 0 {
			left -= c.capacity
		} else {
			unset++
		}
	}
	for _, c := range q.children {
		if c.capacity <= 0 && unset > 0 {
			c.capacity = max(left, 0) / float64(unset)
		}
		s.fillCapacities(c)
	}
}

// SetFault makes every REST answer fail as f until cleared with FaultNone.
func (s *Sim) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// AddNode registers a NodeManager in state RUNNING and schedules pending
// requests onto it.
func (s *Sim) AddNode(spec NodeSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Host == "" {
		return fmt.Errorf("yarnsim: node host must not be empty")
	}
	if n, ok := s.nodes[spec.Host]; ok && n.state != "SHUTDOWN" && n.state != "LOST" && !n.placeholder && !n.unlisted {
		return fmt.Errorf("yarnsim: node %q already exists", spec.Host)
	}
	if spec.GPUs < 0 {
		return fmt.Errorf("yarnsim: node %q: GPUs must not be negative", spec.Host)
	}
	if spec.Rack == "" {
		spec.Rack = "/default-rack"
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = 262144
	}
	if spec.VCores == 0 {
		spec.VCores = 64
	}
	spec.Labels = slices.Clone(spec.Labels)
	for _, l := range spec.Labels {
		if _, ok := s.clusterLabels[l]; !ok {
			s.clusterLabels[l] = true // a label the node brings is exclusive
		}
	}
	s.nextPort++
	s.nodes[spec.Host] = &node{spec: spec, state: "RUNNING", port: s.nextPort, lastHealth: s.cfg.Now(), allocs: map[*app]map[int]int{},
		conts: map[string]*container{}}
	s.freeByLabel[label(spec.Labels)] += spec.GPUs
	s.live = nil
	s.scheduleAll()
	return nil
}

// RemoveNode takes a NodeManager away. Its containers are lost; their apps
// ask for them again, so they become pending.
func (s *Sim) RemoveNode(host string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[host]
	if !ok {
		return fmt.Errorf("yarnsim: node %q: not found", host)
	}
	s.releaseNode(n)
	if n.state == "RUNNING" {
		s.freeByLabel[label(n.spec.Labels)] -= n.spec.GPUs
	}
	delete(s.nodes, host)
	s.live = nil
	s.scheduleAll()
	return nil
}

// SetNodeState sets a node's state (RUNNING, UNHEALTHY, DECOMMISSIONING,
// DECOMMISSIONED, LOST, SHUTDOWN). Only RUNNING nodes receive containers;
// DECOMMISSIONED, LOST and SHUTDOWN nodes lose theirs and report no
// resources.
func (s *Sim) SetNodeState(host, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[host]
	if !ok {
		return fmt.Errorf("yarnsim: node %q: not found", host)
	}
	switch state {
	case "RUNNING", "UNHEALTHY", "DECOMMISSIONING", "DECOMMISSIONED", "LOST", "SHUTDOWN":
	default:
		return fmt.Errorf("yarnsim: node %q: unknown state %q", host, state)
	}
	l := label(n.spec.Labels)
	if n.state == "RUNNING" {
		s.freeByLabel[l] -= n.freeGPUs()
	}
	n.state = state
	s.live = nil
	switch state {
	case "DECOMMISSIONED", "LOST", "SHUTDOWN":
		s.releaseNode(n) // not RUNNING now: frees nothing schedulable
	case "RUNNING":
		s.freeByLabel[l] += n.freeGPUs()
	}
	s.scheduleAll()
	return nil
}

// SetNodeLabels moves a node into the partition of its labels (at most
// one; none for the default partition), as yarn rmadmin
// -replaceLabelsOnNode does. Its containers stay.
func (s *Sim) SetNodeLabels(host string, labels []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[host]
	if !ok {
		return fmt.Errorf("yarnsim: node %q: not found", host)
	}
	if len(labels) > 1 {
		return fmt.Errorf("yarnsim: node %q: at most one label, got %v", host, labels)
	}
	for _, l := range labels {
		if _, ok := s.clusterLabels[l]; !ok {
			s.clusterLabels[l] = true
		}
	}
	s.moveToPartition(n, labels)
	s.scheduleAll()
	return nil
}

// releaseNode returns a node's containers to their apps' pending asks;
// an app that ends with its container (RunOn's) ends.
func (s *Sim) releaseNode(n *node) {
	var ended []*app
	for a, reqs := range n.allocs {
		if s.rules.oneShot[a.id] {
			ended = append(ended, a)
			continue
		}
		for ri, c := range reqs {
			r := &a.requests[ri]
			r.pending += c
			a.running -= c
			a.usedGPUs -= c * r.spec.GPUs
			a.usedMem -= int64(c) * r.spec.MemoryMB
			a.usedCores -= int64(c) * r.spec.VCores
		}
	}
	if n.state == "RUNNING" {
		s.freeByLabel[label(n.spec.Labels)] += n.usedGPUs
	}
	for _, c := range n.conts {
		a := c.app
		a.conts = slices.DeleteFunc(a.conts, func(x *container) bool { return x == c })
		if c.req == amRequest {
			// The AM is lost: a new attempt starts, and its AM is placed
			// again when there is room.
			a.am = nil
			a.attempt++
			a.running--
			a.usedMem -= amMemoryMB
			a.usedCores -= amVCores
		}
	}
	n.allocs = map[*app]map[int]int{}
	n.conts = map[string]*container{}
	n.ran = nil
	n.usedGPUs, n.usedMem, n.usedVCores, n.containers = 0, 0, 0, 0
	for _, a := range ended {
		s.finish(a) // its container is already gone from n
	}
}

// newContainer records a container of a on n for request ri.
func (s *Sim) newContainer(a *app, n *node, ri int) *container {
	a.nextCont++
	c := &container{
		id:  fmt.Sprintf("container_%d_%04d_%02d_%06d", s.cfg.ClusterTimestamp, a.seq, a.attempt, a.nextCont),
		app: a, node: n, req: ri, started: s.cfg.Now(),
	}
	a.conts = append(a.conts, c)
	n.conts[c.id] = c
	if n.ran == nil {
		n.ran = map[*app]bool{}
	}
	n.ran[a] = true
	return c
}

// placeAM places a managed AM's container on the first RUNNING
// default-partition node with room for it.
func (s *Sim) placeAM(a *app, nodes []*node) {
	if !a.spec.ManagedAM || a.am != nil {
		return
	}
	for _, n := range nodes {
		if label(n.spec.Labels) != "" || n.spec.MemoryMB-n.usedMem < amMemoryMB || n.spec.VCores-n.usedVCores < amVCores {
			continue
		}
		n.usedMem += amMemoryMB
		n.usedVCores += amVCores
		n.containers++
		a.running++
		a.usedMem += amMemoryMB
		a.usedCores += amVCores
		a.am = s.newContainer(a, n, amRequest)
		return
	}
}

// Submit adds a RUNNING application (its AM registered) and allocates what
// fits now. It returns the application id.
func (s *Sim) Submit(spec AppSpec) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.leaves[spec.Queue]
	if spec.Queue == "" {
		q = s.leaves[s.cfg.Queues[0].Path]
	}
	if q == nil {
		return "", fmt.Errorf("yarnsim: queue %q: not found", spec.Queue)
	}
	if spec.User == "" {
		spec.User = "sim"
	}
	a := &app{queue: q, state: "RUNNING", started: s.cfg.Now(), attempt: 1}
	spec.Tags = slices.Clone(spec.Tags)
	for i := range spec.Tags {
		spec.Tags[i] = strings.ToLower(spec.Tags[i]) // as YARN does
	}
	for _, r := range spec.Requests {
		if r.Containers < 0 || r.GPUs < 0 {
			return "", fmt.Errorf("yarnsim: app %q: containers and GPUs must not be negative", spec.Name)
		}
		if !accessible(q, r.NodeLabel) {
			// SchedulerUtils.validateResourceRequest refuses the ask.
			return "", fmt.Errorf("yarnsim: app %q: InvalidLabelResourceRequestException: Invalid resource request, queue=%s doesn't have permission to access all labels in resource request. labelExpression of resource request=%s. Queue labels=%s",
				spec.Name, q.name, r.NodeLabel, strings.Join(q.labels, ","))
		}
		if r.Priority == 0 {
			r.Priority = 1
		}
		if r.MemoryMB == 0 {
			r.MemoryMB = 1024
		}
		if r.VCores == 0 {
			r.VCores = 1
		}
		r.Hosts = slices.Clone(r.Hosts)
		a.requests = append(a.requests, request{spec: r, pending: r.Containers})
	}
	s.nextSeq++
	a.seq = s.nextSeq
	a.id = fmt.Sprintf("application_%d_%04d", s.cfg.ClusterTimestamp, a.seq)
	if spec.Name == "" {
		spec.Name = "sim-app-" + fmt.Sprint(a.seq)
	}
	a.spec = spec
	s.apps = append(s.apps, a)
	s.appByID[a.id] = a
	s.schedule(a, s.liveNodes())
	return a.id, nil
}

// Finish ends an application: its containers are freed and it leaves
// ACCEPTED/RUNNING.
func (s *Sim) Finish(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.appByID[id]
	if !ok {
		return fmt.Errorf("yarnsim: app %q: not found", id)
	}
	s.finish(a)
	s.scheduleAll()
	return nil
}

// finish frees a's containers and removes it. Callers hold s.mu and
// schedule afterwards.
func (s *Sim) finish(a *app) {
	type freed struct {
		gpus        int
		mem, vcores int64
	}
	var decom map[*node]*freed
	defer func() {
		for n, f := range decom {
			s.offerFreed(n, f.gpus, f.mem, f.vcores)
		}
	}()
	for _, c := range a.conts {
		if c.node.state == "DECOMMISSIONING" {
			if decom == nil {
				decom = map[*node]*freed{}
			}
			if decom[c.node] == nil {
				decom[c.node] = &freed{}
			}
			g, m, v := c.size()
			decom[c.node].gpus += g
			decom[c.node].mem += m
			decom[c.node].vcores += v
		}
		n := c.node
		gpus, mem, vcores := c.size()
		n.usedGPUs -= gpus
		n.usedMem -= mem
		n.usedVCores -= vcores
		n.containers--
		if n.state == "RUNNING" {
			s.freeByLabel[label(n.spec.Labels)] += gpus
		}
		delete(n.conts, c.id)
		delete(n.allocs, a)
	}
	a.conts, a.am = nil, nil
	for _, n := range s.nodes {
		delete(n.ran, a)
	}
	delete(s.appByID, a.id)
	i := slices.Index(s.apps, a)
	s.apps = slices.Delete(s.apps, i, i+1)
}

// offerFreed models Hadoop 3.3's CapacityScheduler on a DECOMMISSIONING
// node, which it does not skip: a node's heartbeat frees its completed
// containers and then allocates on the node in the same pass, before the
// update that sets the node's total to its used resource takes effect
// (AbstractYarnScheduler.nodeUpdate sends it as an event), so the space
// the completed containers freed goes to asks pending at that moment.
// Hadoop 3.5 skips nodes that are not RUNNING (shouldSkipNodeSchedule).
// A node left with no container and no app that ran there is ready to
// leave: ResourceTrackerService decommissions it at that heartbeat before
// the scheduler sees it. Callers hold s.mu; the app whose container ended
// asks again only after.
func (s *Sim) offerFreed(n *node, gpus int, mem, vcores int64) {
	if s.cfg.Flavor != Flavor33 || n.state != "DECOMMISSIONING" || len(s.apps) == 0 || n.containers == 0 && len(n.ran) == 0 {
		return
	}
	// Only the freed space: the earlier heartbeats' updates took the rest.
	xg, xm, xv := n.freeGPUs()-gpus, n.spec.MemoryMB-n.usedMem-mem, n.spec.VCores-n.usedVCores-vcores
	n.usedGPUs += xg
	n.usedMem += xm
	n.usedVCores += xv
	l := label(n.spec.Labels)
	s.freeByLabel[l] += n.freeGPUs()
	order := slices.Clone(s.apps)
	slices.SortStableFunc(order, func(a, b *app) int { return cmp.Compare(b.spec.Priority, a.spec.Priority) })
	for _, a := range order {
		s.schedule(a, []*node{n})
	}
	s.freeByLabel[l] -= n.freeGPUs()
	n.usedGPUs -= xg
	n.usedMem -= xm
	n.usedVCores -= xv
}

func label(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return ls[0]
}

// liveNodes returns the RUNNING nodes in host order.
func (s *Sim) liveNodes() []*node {
	if s.live != nil {
		return s.live
	}
	out := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		if n.state == "RUNNING" {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *node) int { return cmp.Compare(a.spec.Host, b.spec.Host) })
	s.live = out
	return out
}

// scheduleAll offers free capacity to pending apps: higher app priority
// first, then submit order.
func (s *Sim) scheduleAll() {
	if len(s.apps) == 0 {
		return
	}
	for _, a := range s.apps {
		if a.spec.ManagedAM && a.am == nil {
			s.placeAM(a, s.liveNodes())
		}
	}
	total := 0
	for _, f := range s.freeByLabel {
		total += max(f, 0)
	}
	if total == 0 {
		return
	}
	order := slices.Clone(s.apps)
	slices.SortStableFunc(order, func(a, b *app) int { return cmp.Compare(b.spec.Priority, a.spec.Priority) })
	nodes := s.liveNodes()
	for _, a := range order {
		s.schedule(a, nodes)
	}
}

// schedule places a's AM container and pending containers first-fit on
// nodes.
func (s *Sim) schedule(a *app, nodes []*node) {
	s.placeAM(a, nodes)
	for ri := range a.requests {
		r := &a.requests[ri]
		if r.pending == 0 {
			continue
		}
		lbl := r.spec.NodeLabel
		for _, n := range nodes {
			if r.pending == 0 || s.freeFor(lbl) < r.spec.GPUs || (r.spec.GPUs == 0 && lbl != "") {
				break
			}
			if !s.serves(n, lbl) {
				continue
			}
			for r.pending > 0 && n.freeGPUs() >= r.spec.GPUs &&
				n.spec.MemoryMB-n.usedMem >= r.spec.MemoryMB && n.spec.VCores-n.usedVCores >= r.spec.VCores {
				r.pending--
				n.usedGPUs += r.spec.GPUs
				n.usedMem += r.spec.MemoryMB
				n.usedVCores += r.spec.VCores
				n.containers++
				if n.allocs[a] == nil {
					n.allocs[a] = map[int]int{}
				}
				n.allocs[a][ri]++
				s.newContainer(a, n, ri)
				s.freeByLabel[label(n.spec.Labels)] -= r.spec.GPUs
				a.running++
				a.usedGPUs += r.spec.GPUs
				a.usedMem += r.spec.MemoryMB
				a.usedCores += r.spec.VCores
			}
		}
	}
}

// AppContainers returns the ids of an app's live containers in allocation
// order, and which of them is the AM container ("" when unmanaged).
func (s *Sim) AppContainers(id string) (containers []string, am string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.appByID[id]
	if !ok {
		return nil, "", fmt.Errorf("yarnsim: app %q: not found", id)
	}
	for _, c := range a.conts {
		containers = append(containers, c.id)
	}
	if a.am != nil {
		am = a.am.id
	}
	return containers, am, nil
}

// CompleteContainer ends a live container, as when its process exits: its
// resources are freed and its app does not ask for it again (an app that
// ends with its container ends).
func (s *Sim) CompleteContainer(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.findContainer(id)
	if !ok {
		return fmt.Errorf("yarnsim: container %q: not found", id)
	}
	s.rules.init()
	if s.rules.oneShot[c.app.id] {
		s.rules.ended[c.app.id] = "FINISHED"
		s.finish(c.app)
	} else {
		s.dropContainer(c)
	}
	s.scheduleAll()
	return nil
}

// Counts reports the simulator's totals: apps, nodes and pending GPUs.
func (s *Sim) Counts() (apps, nodes, pendingGPUs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.apps {
		for _, r := range a.requests {
			pendingGPUs += r.pending * r.spec.GPUs
		}
	}
	return len(s.apps), len(s.nodes), pendingGPUs
}
