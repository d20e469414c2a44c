package yarnsim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Containers and their preemption, as the RM REST API serves them:
//
//	GET  /ws/v1/cluster/apps/{id}/state                  {"state":"RUNNING"}
//	PUT  /ws/v1/cluster/apps/{id}/state {"state":"KILLED"}   KILLING, then KILLED
//	GET  /ws/v1/cluster/apps/{id}/appattempts/{attempt}/containers/{cid}
//	POST /ws/v1/cluster/containers/{cid}/signal/{command}
//
// The simulator keeps containers as counts per app, node and request; a
// container's id is given when it is first seen here and kept while it
// lives, so ids are stable across calls.

// Container is a live container of the simulator.
type Container struct {
	ID      string
	App     string
	Host    string
	GPUs    int
	Started time.Time
}

// containerTable gives the simulator's allocations container ids.
type containerTable struct {
	apps map[*app]*appContainers
	// ended holds the final state of apps killed through the REST API.
	ended map[string]string
	// oneShot apps end with their (only) container, as RunOn's do.
	oneShot map[string]bool
	// ignoreTERM apps' containers survive GRACEFUL_SHUTDOWN.
	ignoreTERM map[string]bool
}

type slotKey struct {
	host string
	req  int
}

type appContainers struct {
	next  int
	slots map[slotKey][]Container
}

func (t *containerTable) init() {
	if t.apps == nil {
		t.apps = map[*app]*appContainers{}
		t.ended = map[string]string{}
		t.oneShot = map[string]bool{}
		t.ignoreTERM = map[string]bool{}
	}
}

// syncApp brings a's container ids in line with its allocations: new
// allocations get new ids, vanished ones lose theirs (the newest first).
// Callers hold s.mu.
func (s *Sim) syncApp(a *app) *appContainers {
	s.ctrs.init()
	ac := s.ctrs.apps[a]
	if ac == nil {
		ac = &appContainers{slots: map[slotKey][]Container{}}
		s.ctrs.apps[a] = ac
	}
	live := map[slotKey]int{}
	for host, n := range s.nodes {
		for ri, c := range n.allocs[a] {
			live[slotKey{host, ri}] = c
		}
	}
	for k := range ac.slots {
		if live[k] == 0 {
			delete(ac.slots, k)
		}
	}
	keys := make([]slotKey, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y slotKey) int { return cmp.Or(cmp.Compare(x.host, y.host), cmp.Compare(x.req, y.req)) })
	for _, k := range keys {
		ids := ac.slots[k]
		if len(ids) > live[k] {
			ids = ids[:live[k]]
		}
		for len(ids) < live[k] {
			ac.next++
			ids = append(ids, Container{
				ID:  fmt.Sprintf("container_%d_%04d_01_%06d", s.cfg.ClusterTimestamp, a.seq, ac.next+1), // 1 was the AM's
				App: a.id, Host: k.host, GPUs: a.requests[k.req].spec.GPUs, Started: s.cfg.Now(),
			})
		}
		ac.slots[k] = ids
	}
	return ac
}

// Containers returns the live containers of app id, by id.
func (s *Sim) Containers(id string) ([]Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.appByID[id]
	if !ok {
		return nil, fmt.Errorf("yarnsim: app %q: not found", id)
	}
	var out []Container
	for _, ids := range s.syncApp(a).slots {
		out = append(out, ids...)
	}
	slices.SortFunc(out, func(x, y Container) int { return cmp.Compare(x.ID, y.ID) })
	return out, nil
}

// IgnoreGracefulShutdown makes app id's containers survive
// GRACEFUL_SHUTDOWN, as a process that traps SIGTERM does; only
// FORCEFUL_SHUTDOWN (or its app's end) stops them.
func (s *Sim) IgnoreGracefulShutdown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctrs.init()
	s.ctrs.ignoreTERM[id] = true
}

// endsWithContainer marks app id as one that ends when its container
// does (RunOn's apps).
func (s *Sim) endsWithContainer(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctrs.init()
	s.ctrs.oneShot[id] = true
}

// findContainer returns the app and slot of a live container. Callers
// hold s.mu.
func (s *Sim) findContainer(cid string) (*app, slotKey, bool) {
	// container_<ts>_<app>_<attempt>_<n>: the app is in the id.
	f := strings.Split(cid, "_")
	if len(f) != 5 {
		return nil, slotKey{}, false
	}
	a, ok := s.appByID["application_"+f[1]+"_"+f[2]]
	if !ok {
		return nil, slotKey{}, false
	}
	for k, ids := range s.syncApp(a).slots {
		if slices.ContainsFunc(ids, func(c Container) bool { return c.ID == cid }) {
			return a, k, true
		}
	}
	return nil, slotKey{}, false
}

// stopContainer ends container cid: its resources are freed and its ask
// goes back to pending (the AM asks again), or its app ends when the app
// ends with its container. Callers hold s.mu; it returns an app to
// finish after unlocking.
func (s *Sim) stopContainer(a *app, k slotKey, cid string) (finish string) {
	ac := s.ctrs.apps[a]
	ids := ac.slots[k]
	i := slices.IndexFunc(ids, func(c Container) bool { return c.ID == cid })
	ac.slots[k] = slices.Delete(ids, i, i+1)
	if s.ctrs.oneShot[a.id] {
		s.ctrs.ended[a.id] = "FINISHED" // its AM unregisters
		return a.id
	}
	n := s.nodes[k.host]
	r := &a.requests[k.req]
	n.allocs[a][k.req]--
	if n.allocs[a][k.req] == 0 {
		delete(n.allocs[a], k.req)
		if len(n.allocs[a]) == 0 {
			delete(n.allocs, a)
		}
	}
	n.usedGPUs -= r.spec.GPUs
	n.usedMem -= r.spec.MemoryMB
	n.usedVCores -= r.spec.VCores
	n.containers--
	if n.state == "RUNNING" {
		s.freeByLabel[label(n.spec.Labels)] += r.spec.GPUs
	}
	a.running--
	a.usedGPUs -= r.spec.GPUs
	a.usedMem -= r.spec.MemoryMB
	a.usedCores -= r.spec.VCores
	r.pending++
	s.live = nil
	s.scheduleAll()
	return ""
}

// handleContainers adds the container and app-state routes to mux.
func (s *Sim) handleContainers(mux *http.ServeMux) {
	mux.HandleFunc("GET /ws/v1/cluster/apps/{id}/state", s.serveAppState)
	mux.HandleFunc("PUT /ws/v1/cluster/apps/{id}/state", s.serveAppKill)
	mux.HandleFunc("GET /ws/v1/cluster/apps/{id}/appattempts/{attempt}/containers/{cid}", s.serveContainer)
	mux.HandleFunc("POST /ws/v1/cluster/containers/{cid}/signal/{command}", s.serveSignal)
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"RemoteException": map[string]string{
		"exception": "BadRequestException", "message": "java.lang.Exception: " + msg,
		"javaClassName": "org.apache.hadoop.yarn.webapp.BadRequestException",
	}})
}

func (s *Sim) appState(id string) (string, bool) {
	s.ctrs.init()
	if st, ok := s.ctrs.ended[id]; ok {
		return st, true
	}
	if a, ok := s.appByID[id]; ok {
		return a.state, true
	}
	return "", false
}

func (s *Sim) serveAppState(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	st, ok := s.appState(id)
	s.mu.Unlock()
	if !ok {
		notFound(w, "app with id: "+id+" not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"state": st})
}

// serveAppKill kills an app as the RM does: 200 with {"state":"KILLING"}
// while the kill runs (Hadoop 3.3.6; the kill is done here at once, so the
// next read says KILLED) or {"state":"KILLED"} (3.5.0 waits for it), and
// 200 with the final state when the app has already ended.
func (s *Sim) serveAppKill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		badRequest(w, "bad app state: "+err.Error())
		return
	}
	if body.State != "KILLED" {
		badRequest(w, "Only 'KILLED' is allowed as a target state.")
		return
	}
	s.mu.Lock()
	st, ok := s.appState(id)
	if ok && st != "KILLED" && st != "FINISHED" && st != "FAILED" {
		s.ctrs.ended[id] = "KILLED"
	}
	s.mu.Unlock()
	switch {
	case !ok:
		notFound(w, "app with id: "+id+" not found")
	case st == "KILLED" || st == "FINISHED" || st == "FAILED":
		writeJSON(w, http.StatusOK, map[string]string{"state": st})
	default:
		_ = s.Finish(id)
		answer := "KILLED"
		if s.cfg.Flavor == Flavor33 {
			answer = "KILLING"
		}
		writeJSON(w, http.StatusOK, map[string]string{"state": answer})
	}
}

// jContainer is ContainerInfo of the RM's container report.
type jContainer struct {
	ContainerID      string `json:"containerId"`
	AllocatedMB      int64  `json:"allocatedMB"`
	AllocatedVCores  int64  `json:"allocatedVCores"`
	AssignedNodeID   string `json:"assignedNodeId"`
	Priority         int32  `json:"priority"`
	StartedTime      int64  `json:"startedTime"`
	FinishedTime     int64  `json:"finishedTime"`
	ElapsedTime      int64  `json:"elapsedTime"`
	ContainerState   string `json:"containerState"`
	NodeHTTPAddress  string `json:"nodeHttpAddress"`
	NodeID           string `json:"nodeId"`
	ContainerExitSts int    `json:"containerExitStatus"`
}

func (s *Sim) serveContainer(w http.ResponseWriter, r *http.Request) {
	cid := r.PathValue("cid")
	s.mu.Lock()
	defer s.mu.Unlock()
	a, k, ok := s.findContainer(cid)
	if !ok || a.id != r.PathValue("id") {
		notFound(w, "Container with id '"+cid+"' doesn't exist in RM.")
		return
	}
	var c Container
	for _, x := range s.ctrs.apps[a].slots[k] {
		if x.ID == cid {
			c = x
		}
	}
	n, spec := s.nodes[k.host], a.requests[k.req].spec
	nodeID := k.host + ":" + strconv.Itoa(n.port)
	jc := jContainer{
		ContainerID: cid, AllocatedMB: spec.MemoryMB, AllocatedVCores: spec.VCores, AssignedNodeID: nodeID,
		Priority: spec.Priority, StartedTime: c.Started.UnixMilli(), ElapsedTime: s.cfg.Now().Sub(c.Started).Milliseconds(),
		ContainerState: "RUNNING", NodeHTTPAddress: "http://" + k.host + ":8042", NodeID: nodeID,
	}
	// Hadoop 3.3 answers the bare ContainerInfo (numbers as strings), 3.5
	// wraps it in {"container": ...}.
	if s.cfg.Flavor == Flavor33 {
		writeJSON(w, http.StatusOK, map[string]any{
			"containerId": jc.ContainerID, "allocatedMB": strconv.FormatInt(jc.AllocatedMB, 10),
			"allocatedVCores": strconv.FormatInt(jc.AllocatedVCores, 10), "assignedNodeId": jc.AssignedNodeID,
			"priority": strconv.Itoa(int(jc.Priority)), "startedTime": strconv.FormatInt(jc.StartedTime, 10),
			"finishedTime": "0", "elapsedTime": strconv.FormatInt(jc.ElapsedTime, 10), "containerExitStatus": "0",
			"containerState": jc.ContainerState, "nodeHttpAddress": jc.NodeHTTPAddress, "nodeId": jc.NodeID,
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"container": jc})
}

// serveSignal signals a container as the RM forwards it to its
// NodeManager: GRACEFUL_SHUTDOWN (SIGTERM) and FORCEFUL_SHUTDOWN
// (SIGKILL) end it, OUTPUT_THREAD_DUMP changes nothing. Like Hadoop 3.3.6
// and 3.5.0, whose RMNodeImpl has no SIGNAL_CONTAINER transition outside
// RUNNING, a signal to a container on a node in any other state (notably
// DECOMMISSIONING) is answered 200 and dropped.
func (s *Sim) serveSignal(w http.ResponseWriter, r *http.Request) {
	cid, cmd := r.PathValue("cid"), r.PathValue("command")
	// The RM answers these two failures in plain text (with a JSON
	// content type), not as a RemoteException.
	switch cmd {
	case "GRACEFUL_SHUTDOWN", "FORCEFUL_SHUTDOWN", "OUTPUT_THREAD_DUMP":
	default:
		plain(w, http.StatusBadRequest, "Invalid command: "+strings.ToUpper(cmd)+", valid commands are: [OUTPUT_THREAD_DUMP, GRACEFUL_SHUTDOWN, FORCEFUL_SHUTDOWN]")
		return
	}
	s.mu.Lock()
	a, k, ok := s.findContainer(cid)
	finish := ""
	if ok && s.nodes[k.host].state == "RUNNING" &&
		(cmd == "FORCEFUL_SHUTDOWN" || cmd == "GRACEFUL_SHUTDOWN" && !s.ctrs.ignoreTERM[a.id]) {
		finish = s.stopContainer(a, k, cid)
	}
	s.mu.Unlock()
	if !ok {
		plain(w, http.StatusInternalServerError, "Trying to signal an absent container "+cid)
		return
	}
	if finish != "" {
		_ = s.Finish(finish)
	}
	msg := "signal success" // Hadoop 3.5; 3.3 answers an empty body
	if s.cfg.Flavor == Flavor33 {
		msg = ""
	}
	plain(w, http.StatusOK, msg)
}
