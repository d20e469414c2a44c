package yarnsim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Handler returns the active RM's REST API:
// GET /ws/v1/cluster[/info], /ws/v1/cluster/apps[?states=...],
// /ws/v1/cluster/apps/{id}, /ws/v1/cluster/apps/{id}/appattempts,
// /ws/v1/cluster/apps/{id}/appattempts/{attempt}/containers,
// /ws/v1/cluster/nodes[?states=...] and /ws/v1/cluster/scheduler.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws/v1/cluster", s.serveInfo)
	mux.HandleFunc("GET /ws/v1/cluster/info", s.serveInfo)
	mux.HandleFunc("GET /ws/v1/cluster/apps", s.serveApps)
	mux.HandleFunc("GET /ws/v1/cluster/apps/{id}", s.serveApp)
	mux.HandleFunc("GET /ws/v1/cluster/apps/{id}/appattempts", s.serveAttempts)
	mux.HandleFunc("GET /ws/v1/cluster/apps/{id}/appattempts/{attempt}/containers", s.serveContainers)
	mux.HandleFunc("GET /ws/v1/cluster/nodes", s.serveNodes)
	mux.HandleFunc("GET /ws/v1/cluster/scheduler", s.serveScheduler)
	s.handleContainers(mux)
	return s.faulty(mux)
}

// StandbyHandler returns what a standby RM answers: a 307 redirect to
// active()+path, as Hadoop's RMWebAppFilter does, or a 503 page when active
// returns "" (no active RM known).
func StandbyHandler(active func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := active()
		if a == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("This is standby RM. Could not find an active RM.\n"))
			return
		}
		w.Header().Set("Location", strings.TrimRight(a, "/")+r.URL.RequestURI())
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
}

const loginPage = `<!DOCTYPE html>
<html><head><title>Sign in - Corporate SSO</title></head>
<body><form method="post" action="/login"><input name="user"><input type="password" name="password"></form></body></html>
`

func (s *Sim) faulty(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.lockRead()
		f := s.fault
		s.mu.Unlock()
		switch f {
		case FaultHTML:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(loginPage))
		case FaultServerError:
			writeJSON(w, http.StatusInternalServerError, map[string]any{"RemoteException": map[string]string{
				"exception": "WebApplicationException", "message": "java.lang.NullPointerException",
				"javaClassName": "javax.ws.rs.WebApplicationException",
			}})
		case FaultStandbyNoRedirect:
			w.WriteHeader(http.StatusTemporaryRedirect)
		case FaultTruncated:
			rec := &bufferWriter{header: http.Header{}}
			next.ServeHTTP(rec, r)
			b := rec.buf.Bytes()
			w.Header().Set("Content-Type", rec.header.Get("Content-Type"))
			w.WriteHeader(rec.code)
			_, _ = w.Write(b[:len(b)/2])
		default:
			next.ServeHTTP(w, r)
		}
	})
}

type bufferWriter struct {
	header http.Header
	buf    bytes.Buffer
	code   int
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.buf.Write(p)
}
func (b *bufferWriter) WriteHeader(code int) { b.code = code }

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, code, b)
}

func writeBody(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// cachedAnswer is a bulk answer's body as rendered at state generation
// gen.
type cachedAnswer struct {
	gen  uint64
	body []byte
}

// maxCachedAnswers bounds the answers kept (one per route and query).
const maxCachedAnswers = 32

// lockUnlessCached takes the read lock for a bulk answer. When the body
// kept under key was rendered at the current state generation it writes
// that body, releases the lock and reports false; otherwise it returns the
// generation to render with the lock still held (the caller renders under
// it, unlocks, then writeCached).
func (s *Sim) lockUnlessCached(w http.ResponseWriter, key string) (gen uint64, render bool) {
	s.mu.lockRead()
	if c, ok := s.answers[key]; ok && c.gen == s.mu.gen {
		s.mu.Unlock()
		writeBody(w, http.StatusOK, c.body)
		return 0, false
	}
	return s.mu.gen, true
}

// writeCached renders v, keeps it under key for state generation gen and
// writes it. A real RM renders every poll too, but the simulator's cost
// must not dominate a benchmark of the broker: polls of an unchanged
// cluster (the apps answer is tens of MiB at 25,000 apps) are served from
// the kept body.
func (s *Sim) writeCached(w http.ResponseWriter, key string, gen uint64, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.mu.lockRead()
	if s.answers == nil || len(s.answers) >= maxCachedAnswers {
		s.answers = map[string]cachedAnswer{}
	}
	s.answers[key] = cachedAnswer{gen: gen, body: b}
	s.mu.Unlock()
	writeBody(w, http.StatusOK, b)
}

func notFound(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"RemoteException": map[string]string{
		"exception": "NotFoundException", "message": "java.lang.Exception: " + msg,
		"javaClassName": "org.apache.hadoop.yarn.webapp.NotFoundException",
	}})
}

// jlist renders a JAXB list the way the configured quirks say.
func jlist[T any](q Quirks, xs []T) any {
	if q.SingleObject && len(xs) == 1 {
		return xs[0]
	}
	return xs
}

// wrapper renders {"<key>": list} or, when empty, {} or null.
func wrapper[T any](q Quirks, key string, xs []T) any {
	if len(xs) == 0 {
		if q.NullWhenEmpty {
			return nil
		}
		return struct{}{}
	}
	return map[string]any{key: jlist(q, xs)}
}

type jResourceInformation struct {
	Attributes        *struct{} `json:"attributes,omitempty"` // Hadoop 3.3 only
	MaximumAllocation int64     `json:"maximumAllocation"`
	MinimumAllocation int64     `json:"minimumAllocation"`
	Name              string    `json:"name"`
	ResourceType      string    `json:"resourceType"`
	Units             string    `json:"units"`
	Value             int64     `json:"value"`
}

type jResource struct {
	Memory               int64 `json:"memory"`
	VCores               int64 `json:"vCores"`
	ResourceInformations any   `json:"resourceInformations"`
}

const maxAlloc = 9223372036854775807

func (s *Sim) resource(mem, vcores int64, gpus int) jResource {
	ri := []jResourceInformation{
		{MaximumAllocation: maxAlloc, Name: "memory-mb", ResourceType: "COUNTABLE", Units: "Mi", Value: mem},
		{MaximumAllocation: maxAlloc, Name: "vcores", ResourceType: "COUNTABLE", Value: vcores},
		{MaximumAllocation: maxAlloc, Name: "yarn.io/gpu", ResourceType: "COUNTABLE", Value: int64(gpus)},
	}
	if s.cfg.Flavor == Flavor33 {
		for i := range ri {
			ri[i].Attributes = &struct{}{}
		}
	}
	return jResource{Memory: mem, VCores: vcores, ResourceInformations: map[string]any{"resourceInformation": jlist(s.cfg.Quirks, ri)}}
}

func (s *Sim) serveInfo(w http.ResponseWriter, _ *http.Request) {
	v := "3.5.0"
	if s.cfg.Flavor == Flavor33 {
		v = "3.3.6"
	}
	writeJSON(w, http.StatusOK, map[string]any{"clusterInfo": map[string]any{
		"id": s.cfg.ClusterTimestamp, "startedOn": s.cfg.ClusterTimestamp, "state": "STARTED", "haState": "ACTIVE",
		"resourceManagerVersion": v + "-yarnsim", "hadoopVersion": v + "-yarnsim",
	}})
}

type jRequest struct {
	Priority            int32     `json:"priority"`
	AllocationRequestID int64     `json:"allocationRequestId"`
	ResourceName        string    `json:"resourceName"`
	Capability          jResource `json:"capability"`
	NumContainers       int       `json:"numContainers"`
	RelaxLocality       bool      `json:"relaxLocality"`
	NodeLabelExpression string    `json:"nodeLabelExpression"`
	ExecutionType       struct {
		ExecutionType        string `json:"executionType"`
		EnforceExecutionType bool   `json:"enforceExecutionType"`
	} `json:"executionTypeRequest"`
}

type jApp struct {
	ID                 string  `json:"id"`
	User               string  `json:"user"`
	Name               string  `json:"name"`
	Queue              string  `json:"queue"`
	State              string  `json:"state"`
	FinalStatus        string  `json:"finalStatus"`
	Progress           float64 `json:"progress"`
	TrackingUI         string  `json:"trackingUI"`
	Diagnostics        string  `json:"diagnostics"`
	ClusterID          int64   `json:"clusterId"`
	ApplicationType    string  `json:"applicationType"`
	ApplicationTags    string  `json:"applicationTags"`
	Priority           int64   `json:"priority"`
	StartedTime        int64   `json:"startedTime"`
	LaunchTime         int64   `json:"launchTime"`
	FinishedTime       int64   `json:"finishedTime"`
	AllocatedMB        int64   `json:"allocatedMB"`
	AllocatedVCores    int64   `json:"allocatedVCores"`
	RunningContainers  int     `json:"runningContainers"`
	ResourceSecondsMap any     `json:"resourceSecondsMap"`
	ResourceRequests   any     `json:"resourceRequests,omitempty"`
	Unmanaged          bool    `json:"unmanagedApplication"`
	MasterNodeID       string  `json:"masterNodeId"`
	ResourceInfo       any     `json:"resourceInfo"`
}

func (s *Sim) renderApp(a *app) jApp {
	q := a.queue.path
	if s.cfg.Flavor == Flavor33 {
		q = a.queue.name
	}
	j := jApp{
		ID: a.id, User: a.spec.User, Name: a.spec.Name, Queue: q, State: s.listedState(a), FinalStatus: "UNDEFINED",
		TrackingUI: "ApplicationMaster", ClusterID: s.cfg.ClusterTimestamp, ApplicationType: "SIM",
		ApplicationTags: strings.Join(a.spec.Tags, ","), Priority: a.spec.Priority,
		StartedTime: a.started.UnixMilli(), LaunchTime: a.started.UnixMilli(),
		AllocatedMB: a.usedMem, AllocatedVCores: a.usedCores, RunningContainers: a.running,
		Unmanaged: !a.spec.ManagedAM,
	}
	if a.am != nil {
		j.MasterNodeID = a.am.node.spec.Host + ":" + strconv.Itoa(a.am.node.port)
	}
	j.ResourceInfo = s.appResourceInfo(a)
	type entry struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	}
	entries := []entry{{"memory-mb", a.usedMem}, {"vcores", a.usedCores}, {"yarn.io/gpu", int64(a.usedGPUs)}}
	if s.cfg.Flavor == Flavor33 {
		for i := range entries {
			entries[i].Value = strconv.FormatInt(entries[i].Value.(int64), 10)
		}
	}
	j.ResourceSecondsMap = map[string]any{"entry": jlist(s.cfg.Quirks, entries)}
	var reqs []jRequest
	for _, r := range a.requests {
		if r.pending == 0 {
			continue
		}
		base := jRequest{
			Priority: r.spec.Priority, ResourceName: "*", Capability: s.resource(r.spec.MemoryMB, r.spec.VCores, r.spec.GPUs),
			NumContainers: r.pending, RelaxLocality: true, NodeLabelExpression: r.spec.NodeLabel,
		}
		base.ExecutionType.ExecutionType = "GUARANTEED"
		racks := map[string]bool{}
		for _, h := range r.spec.Hosts {
			hr := base
			hr.ResourceName = h
			reqs = append(reqs, hr)
			rack := "/default-rack"
			if n, ok := s.nodes[h]; ok {
				rack = n.spec.Rack
			}
			if !racks[rack] {
				racks[rack] = true
				rr := base
				rr.ResourceName = rack
				reqs = append(reqs, rr)
			}
		}
		reqs = append(reqs, base)
	}
	if len(reqs) > 0 {
		j.ResourceRequests = jlist(s.cfg.Quirks, reqs)
	}
	return j
}

// appResourceInfo renders an app's resourceInfo: used and pending per
// partition, the default partition always.
func (s *Sim) appResourceInfo(a *app) any {
	type usage struct {
		mem, vcores   int64
		gpus          int
		pmem, pvcores int64
		pgpus         int
	}
	parts := map[string]*usage{"": {}}
	get := func(p string) *usage {
		if parts[p] == nil {
			parts[p] = &usage{}
		}
		return parts[p]
	}
	for _, c := range a.conts {
		gpus, mem, vcores := c.size()
		u := get(label(c.node.spec.Labels))
		u.mem, u.vcores, u.gpus = u.mem+mem, u.vcores+vcores, u.gpus+gpus
	}
	for _, r := range a.requests {
		u := get(r.spec.NodeLabel)
		u.pmem += int64(r.pending) * r.spec.MemoryMB
		u.pvcores += int64(r.pending) * r.spec.VCores
		u.pgpus += r.pending * r.spec.GPUs
	}
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	slices.Sort(names)
	var out []map[string]any
	for _, p := range names {
		u := parts[p]
		out = append(out, map[string]any{
			"partitionName": p,
			"used":          s.resource(u.mem, u.vcores, u.gpus),
			"reserved":      s.resource(0, 0, 0),
			"pending":       s.resource(u.pmem, u.pvcores, u.pgpus),
			"amUsed":        s.resource(0, 0, 0),
			"amLimit":       s.resource(0, 0, 0),
			"userAmLimit":   s.resource(0, 0, 0),
		})
	}
	return map[string]any{"resourceUsagesByPartition": out}
}

// attemptID is appattempt_<cluster>_<app>_<attempt>.
func (s *Sim) attemptID(a *app, n int) string {
	return fmt.Sprintf("appattempt_%d_%04d_%06d", s.cfg.ClusterTimestamp, a.seq, n)
}

// serveAttempts answers /apps/{id}/appattempts as AppAttemptsInfo: every
// attempt so far, the current one with its AM container (none for an
// unmanaged AM, as Hadoop renders it: empty strings). appAttemptState is
// rendered from Hadoop 3.4 on.
func (s *Sim) serveAttempts(w http.ResponseWriter, r *http.Request) {
	s.mu.lockRead()
	a, ok := s.appByID[r.PathValue("id")]
	var atts []map[string]any
	if ok {
		for n := 1; n <= a.attempt; n++ {
			j := map[string]any{
				"id": n, "startTime": a.started.UnixMilli(), "finishedTime": 0, "containerId": "", "nodeHttpAddress": "",
				"nodeId": "", "logsLink": "", "blacklistedNodes": "", "appAttemptId": s.attemptID(a, n), "exportPorts": "",
			}
			state := "FAILED"
			if n == a.attempt {
				state = "RUNNING"
				if a.am != nil {
					nd := a.am.node
					j["containerId"] = a.am.id
					j["nodeHttpAddress"] = nd.spec.Host + ":8042"
					j["nodeId"] = nd.spec.Host + ":" + strconv.Itoa(nd.port)
					j["logsLink"] = "http://" + nd.spec.Host + ":8042/node/containerlogs/" + a.am.id + "/" + a.spec.User
				}
			} else {
				j["finishedTime"] = a.started.UnixMilli()
			}
			if s.cfg.Flavor == Flavor35 {
				j["appAttemptState"] = state
			}
			atts = append(atts, j)
		}
	}
	s.mu.Unlock()
	if !ok {
		notFound(w, "app with id: "+r.PathValue("id")+" not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"appAttempts": map[string]any{"appAttempt": atts}})
}

// serveContainers answers /apps/{id}/appattempts/{attempt}/containers as
// Hadoop 3.3 and 3.5 render ContainersInfo: without its root element,
// {"container": [...]}, a bare object for one container (always, not only
// with the SingleObject quirk) and {} for none; every value a string on 3.3.
// The current attempt lists all the app's live containers; an earlier one
// none.
func (s *Sim) serveContainers(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Quirks.NoAttemptContainers {
		w.Header().Set("Content-Type", "text/html;charset=iso-8859-1")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html><head><title>Error 404 Not Found</title></head><body><h2>HTTP ERROR 404 Not Found</h2></body></html>\n"))
		return
	}
	s.mu.lockRead()
	a, ok := s.appByID[r.PathValue("id")]
	attempt := r.PathValue("attempt")
	var found bool
	var cs []map[string]any
	if ok {
		for n := 1; n <= a.attempt; n++ {
			if s.attemptID(a, n) == attempt {
				found = true
			}
		}
		if found && attempt == s.attemptID(a, a.attempt) {
			for _, c := range a.conts {
				cs = append(cs, s.renderContainer(c))
			}
		}
	}
	s.mu.Unlock()
	switch {
	case !ok:
		notFound(w, "Application with id '"+r.PathValue("id")+"' doesn't exist in RM. Please check that the job submission was successful.")
		return
	case !found:
		notFound(w, "ApplicationAttempt with id '"+attempt+"' doesn't exist in RM.")
		return
	}
	var body any = struct{}{}
	switch len(cs) {
	case 0:
	case 1:
		body = map[string]any{"container": cs[0]}
	default:
		body = map[string]any{"container": cs}
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Sim) renderContainer(c *container) map[string]any {
	gpus, mem, vcores := c.size()
	prio := int64(0)
	if c.req != amRequest {
		prio = int64(c.app.requests[c.req].spec.Priority)
	}
	n := c.node
	nodeID := n.spec.Host + ":" + strconv.Itoa(n.port)
	start := c.started.UnixMilli()
	elapsed := max(s.cfg.Now().UnixMilli()-start, 0)
	num := func(v int64) any {
		if s.cfg.Flavor == Flavor33 {
			return strconv.FormatInt(v, 10)
		}
		return v
	}
	type entry struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	}
	return map[string]any{
		"containerId": c.id, "allocatedMB": num(mem), "allocatedVCores": num(vcores), "assignedNodeId": nodeID,
		"priority": num(prio), "startedTime": num(start), "finishedTime": num(0), "elapsedTime": num(elapsed),
		"logUrl":              "http://" + n.spec.Host + ":8042/node/containerlogs/" + c.id + "/" + c.app.spec.User,
		"containerExitStatus": num(0), "containerState": "RUNNING", "nodeHttpAddress": "http://" + n.spec.Host + ":8042",
		"nodeId": nodeID, "exposedPorts": "",
		"allocatedResources": map[string]any{"entry": []entry{{"memory-mb", num(mem)}, {"yarn.io/gpu", num(int64(gpus))}, {"vcores", num(vcores)}}},
	}
}

func (s *Sim) serveApps(w http.ResponseWriter, r *http.Request) {
	states := map[string]bool{}
	for _, st := range strings.Split(r.URL.Query().Get("states"), ",") {
		if st = strings.TrimSpace(st); st != "" {
			states[strings.ToUpper(st)] = true
		}
	}
	queue := r.URL.Query().Get("queue")
	key := "apps?" + r.URL.RawQuery
	gen, render := s.lockUnlessCached(w, key)
	if !render {
		return
	}
	apps := make([]jApp, 0, len(s.apps))
	for _, a := range s.apps {
		if len(states) > 0 && !states[s.listedState(a)] {
			continue
		}
		if queue != "" && queue != a.queue.name && queue != a.queue.path {
			continue
		}
		apps = append(apps, s.renderApp(a))
	}
	s.mu.Unlock()
	s.writeCached(w, key, gen, map[string]any{"apps": wrapper(s.cfg.Quirks, "app", apps)})
}

func (s *Sim) serveApp(w http.ResponseWriter, r *http.Request) {
	s.mu.lockRead()
	a, ok := s.appByID[r.PathValue("id")]
	var j jApp
	if ok {
		j = s.renderApp(a)
	}
	s.mu.Unlock()
	if !ok {
		notFound(w, "app with id: "+r.PathValue("id")+" not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"app": j})
}

type jNode struct {
	Rack              string    `json:"rack,omitempty"`
	State             string    `json:"state"`
	ID                string    `json:"id"`
	NodeHostName      string    `json:"nodeHostName"`
	NodeHTTPAddress   string    `json:"nodeHTTPAddress"`
	LastHealthUpdate  int64     `json:"lastHealthUpdate"`
	Version           string    `json:"version"`
	HealthReport      string    `json:"healthReport"`
	NumContainers     int       `json:"numContainers"`
	UsedMemoryMB      int64     `json:"usedMemoryMB"`
	AvailMemoryMB     int64     `json:"availMemoryMB"`
	UsedVirtualCores  int64     `json:"usedVirtualCores"`
	AvailableVCores   int64     `json:"availableVirtualCores"`
	NodeLabels        any       `json:"nodeLabels,omitempty"`
	UsedResource      jResource `json:"usedResource"`
	AvailableResource jResource `json:"availableResource"`
	TotalResource     jResource `json:"totalResource"`
}

func (s *Sim) serveNodes(w http.ResponseWriter, r *http.Request) {
	states := map[string]bool{}
	for _, st := range strings.Split(r.URL.Query().Get("states"), ",") {
		if st = strings.TrimSpace(st); st != "" {
			states[strings.ToUpper(st)] = true
		}
	}
	key := "nodes?" + r.URL.RawQuery
	gen, render := s.lockUnlessCached(w, key)
	if !render {
		return
	}
	hosts := make([]string, 0, len(s.nodes))
	for h := range s.nodes {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	nodes := make([]jNode, 0, len(hosts))
	for _, h := range hosts {
		n := s.nodes[h]
		if n.unlisted || s.cfg.Now().Before(n.resync) || len(states) > 0 && !states[n.state] {
			continue
		}
		if n.placeholder {
			// NodesListManager's placeholder for an excluded host, as
			// Hadoop 3.3.6 and 3.5.0 render it: no rack, no HTTP address,
			// version "unknown", no resources.
			nodes = append(nodes, jNode{State: n.state, ID: h + ":-1", NodeHostName: h, LastHealthUpdate: n.lastHealth.UnixMilli(),
				Version: "unknown", HealthReport: "Healthy", UsedResource: s.resource(0, 0, 0),
				AvailableResource: s.resource(0, 0, 0), TotalResource: s.resource(0, 0, 0)})
			continue
		}
		total, mem, vc := n.spec.GPUs, n.spec.MemoryMB, n.spec.VCores
		switch n.state {
		case "DECOMMISSIONED", "LOST", "SHUTDOWN":
			total, mem, vc = 0, 0, 0
		}
		j := jNode{
			Rack: n.spec.Rack, State: n.state, ID: h + ":" + strconv.Itoa(n.port), NodeHostName: h,
			NodeHTTPAddress: h + ":8042", LastHealthUpdate: n.lastHealth.UnixMilli(), Version: "yarnsim",
			NumContainers: n.containers, UsedMemoryMB: n.usedMem, AvailMemoryMB: max(mem-n.usedMem, 0),
			UsedVirtualCores: n.usedVCores, AvailableVCores: max(vc-n.usedVCores, 0),
			UsedResource:      s.resource(n.usedMem, n.usedVCores, n.usedGPUs),
			AvailableResource: s.resource(max(mem-n.usedMem, 0), max(vc-n.usedVCores, 0), max(total-n.usedGPUs, 0)),
			TotalResource:     s.resource(mem, vc, total),
		}
		if n.state == "UNHEALTHY" {
			j.HealthReport = "1/1 local-dirs usable space is below configured utilization percentage"
		}
		if len(n.spec.Labels) > 0 {
			j.NodeLabels = jlist(s.cfg.Quirks, n.spec.Labels)
		}
		nodes = append(nodes, j)
	}
	s.mu.Unlock()
	s.writeCached(w, key, gen, map[string]any{"nodes": wrapper(s.cfg.Quirks, "node", nodes)})
}

type queueUsage struct {
	apps, running, pending   int
	usedGPUs, pendingGPUs    int
	usedMem, usedCores       int64
	pendingMem, pendingCores int64
}

func (s *Sim) serveScheduler(w http.ResponseWriter, _ *http.Request) {
	const key = "scheduler"
	gen, render := s.lockUnlessCached(w, key)
	if !render {
		return
	}
	usage := map[*queue]*queueUsage{}
	for _, a := range s.apps {
		u := usage[a.queue]
		if u == nil {
			u = &queueUsage{}
			usage[a.queue] = u
		}
		u.apps++
		u.running += a.running
		u.usedGPUs += a.usedGPUs
		u.usedMem += a.usedMem
		u.usedCores += a.usedCores
		for _, r := range a.requests {
			if r.spec.NodeLabel != "" {
				continue // other partitions
			}
			u.pending += r.pending
			u.pendingGPUs += r.pending * r.spec.GPUs
			u.pendingMem += int64(r.pending) * r.spec.MemoryMB
			u.pendingCores += int64(r.pending) * r.spec.VCores
		}
	}
	var clusterGPUs int
	for _, n := range s.nodes {
		if n.state == "RUNNING" || n.state == "UNHEALTHY" || n.state == "DECOMMISSIONING" {
			clusterGPUs += n.spec.GPUs
		}
	}
	root := s.renderQueue(s.root, usage, clusterGPUs, true)
	s.mu.Unlock()
	root["type"] = "capacityScheduler"
	s.writeCached(w, key, gen, map[string]any{"scheduler": map[string]any{"schedulerInfo": root}})
}

func (s *Sim) renderQueue(q *queue, usage map[*queue]*queueUsage, clusterGPUs int, isRoot bool) map[string]any {
	u := &queueUsage{}
	var children []map[string]any
	if q.leaf {
		if x := usage[q]; x != nil {
			u = x
		}
	}
	for _, c := range q.children {
		children = append(children, s.renderQueue(c, usage, clusterGPUs, false))
	}
	var used float64
	if clusterGPUs > 0 {
		used = 100 * float64(u.usedGPUs) / float64(clusterGPUs)
	}
	m := map[string]any{
		"capacity": q.capacity, "maxCapacity": 100.0, "usedCapacity": used, "queueName": q.name,
	}
	if s.cfg.Flavor == Flavor35 {
		m["queuePath"] = q.path
	}
	if !isRoot {
		m["state"] = "RUNNING"
	}
	if q.leaf {
		m["type"] = "capacitySchedulerLeafQueueInfo"
		m["numApplications"] = u.apps
		m["allocatedContainers"] = u.running
		m["pendingContainers"] = u.pending
		m["resourcesUsed"] = s.resource(u.usedMem, u.usedCores, u.usedGPUs)
		part := map[string]any{
			"partitionName": "",
			"used":          s.resource(u.usedMem, u.usedCores, u.usedGPUs),
			"reserved":      s.resource(0, 0, 0),
			"pending":       s.resource(u.pendingMem, u.pendingCores, u.pendingGPUs),
		}
		m["resources"] = map[string]any{"resourceUsagesByPartition": jlist(s.cfg.Quirks, []map[string]any{part})}
	}
	if len(children) > 0 {
		slices.SortFunc(children, func(a, b map[string]any) int {
			return cmp.Compare(a["queueName"].(string), b["queueName"].(string))
		})
		m["queues"] = map[string]any{"queue": jlist(s.cfg.Quirks, children)}
	}
	return m
}
