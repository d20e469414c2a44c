package yarnsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
// They act on the simulator's one container model (sim.go's container,
// kept per app and per node): the ids the app-attempt listing
// (http.go) and the NodeManagers' REST API (nodemanager_http.go) serve are
// the ids these endpoints report on and stop, and a stopped container
// leaves both listings at once.

// Container is a live container of the simulator.
type Container struct {
	ID   string
	App  string
	Host string
	GPUs int
	// AM marks the app's ApplicationMaster container (AppSpec.ManagedAM).
	AM      bool
	Started time.Time
}

// appRules holds what the REST endpoints need to know about apps beyond
// their containers.
type appRules struct {
	// ended holds the final state of apps killed through the REST API or
	// ended with their only container.
	ended map[string]string
	// oneShot apps end with their (only) container, as RunOn's do.
	oneShot map[string]bool
	// ignoreTERM apps' containers survive GRACEFUL_SHUTDOWN.
	ignoreTERM map[string]bool
	// noReask apps do not ask again for a container that ended, as
	// Spread's (and the test launcher's) AM does not.
	noReask map[string]bool
}

func (t *appRules) init() {
	if t.ended == nil {
		t.ended = map[string]string{}
		t.oneShot = map[string]bool{}
		t.ignoreTERM = map[string]bool{}
		t.noReask = map[string]bool{}
	}
}

// Containers returns the live containers of app id in allocation order,
// its AM container (if managed) among them.
func (s *Sim) Containers(id string) ([]Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.appByID[id]
	if !ok {
		return nil, fmt.Errorf("yarnsim: app %q: not found", id)
	}
	out := make([]Container, 0, len(a.conts))
	for _, c := range a.conts {
		gpus, _, _ := c.size()
		out = append(out, Container{ID: c.id, App: a.id, Host: c.node.spec.Host, GPUs: gpus, AM: c.req == amRequest, Started: c.started})
	}
	return out, nil
}

// IgnoreGracefulShutdown makes app id's containers survive
// GRACEFUL_SHUTDOWN, as a process that traps SIGTERM does; only
// FORCEFUL_SHUTDOWN (or its app's end) stops them.
func (s *Sim) IgnoreGracefulShutdown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules.init()
	s.rules.ignoreTERM[id] = true
}

// findContainer returns a live container by id. Callers hold s.mu.
func (s *Sim) findContainer(cid string) (*container, bool) {
	// container_<ts>_<app>_<attempt>_<n>: the app is in the id.
	f := strings.Split(cid, "_")
	if len(f) != 5 || f[0] != "container" {
		return nil, false
	}
	a, ok := s.appByID["application_"+f[1]+"_"+f[2]]
	if !ok {
		return nil, false
	}
	i := slices.IndexFunc(a.conts, func(c *container) bool { return c.id == cid })
	if i < 0 {
		return nil, false
	}
	return a.conts[i], true
}

// dropContainer frees c's resources and removes it from its node and app.
// Callers hold s.mu and decide what its app does next.
func (s *Sim) dropContainer(c *container) {
	a, n := c.app, c.node
	gpus, mem, vcores := c.size()
	n.usedGPUs -= gpus
	n.usedMem -= mem
	n.usedVCores -= vcores
	n.containers--
	if n.state == "RUNNING" {
		s.freeByLabel[label(n.spec.Labels)] += gpus
	}
	delete(n.conts, c.id)
	a.conts = slices.DeleteFunc(a.conts, func(x *container) bool { return x == c })
	a.running--
	a.usedGPUs -= gpus
	a.usedMem -= mem
	a.usedCores -= vcores
	defer s.offerFreed(n, gpus, mem, vcores)
	if c.req == amRequest {
		// The attempt ends with its AM; the next one keeps the app's
		// containers (work-preserving AM restart) and its AM is placed
		// again when there is room.
		a.am = nil
		a.attempt++
		return
	}
	if reqs := n.allocs[a]; reqs != nil {
		if reqs[c.req]--; reqs[c.req] == 0 {
			delete(reqs, c.req)
		}
		if len(reqs) == 0 {
			delete(n.allocs, a)
		}
	}
}

// stopContainer ends container c on a signal: its resources are freed and
// its ask goes back to pending (the AM asks again), or its app ends when
// the app ends with its container. Callers hold s.mu; it returns an app
// to finish after unlocking.
func (s *Sim) stopContainer(c *container) (finish string) {
	a := c.app
	if s.rules.oneShot[a.id] {
		s.rules.ended[a.id] = "FINISHED" // its AM unregisters
		return a.id
	}
	s.dropContainer(c)
	if c.req != amRequest && !s.rules.noReask[a.id] {
		a.requests[c.req].pending++
	}
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
	s.rules.init()
	if st, ok := s.rules.ended[id]; ok {
		return st, true
	}
	if a, ok := s.appByID[id]; ok {
		return s.listedState(a), true
	}
	return "", false
}

// listedState is the state the RM lists app in: ACCEPTED while a new
// active RM recovers a running app (Config.AMResync), else its state.
func (s *Sim) listedState(a *app) string {
	if a.state == "RUNNING" && s.cfg.Now().Before(a.recovering) {
		return "ACCEPTED"
	}
	return a.state
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
		s.rules.ended[id] = "KILLED"
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

// serveContainer answers one container's report: its app attempt must
// exist (the current one or an earlier one, whose containers a
// work-preserving AM restart kept), and the container must be live.
func (s *Sim) serveContainer(w http.ResponseWriter, r *http.Request) {
	cid, attempt := r.PathValue("cid"), r.PathValue("attempt")
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.appByID[r.PathValue("id")]
	if !ok {
		notFound(w, "Application with id '"+r.PathValue("id")+"' doesn't exist in RM. Please check that the job submission was successful.")
		return
	}
	found := false
	for n := 1; n <= a.attempt; n++ {
		found = found || s.attemptID(a, n) == attempt
	}
	if !found {
		notFound(w, "ApplicationAttempt with id '"+attempt+"' doesn't exist in RM.")
		return
	}
	c, ok := s.findContainer(cid)
	if !ok || c.app != a {
		notFound(w, "Container with id '"+cid+"' doesn't exist in RM.")
		return
	}
	// Hadoop 3.3 answers the bare ContainerInfo (numbers as strings), 3.5
	// wraps it in {"container": ...}; both as the attempt's list renders
	// each container.
	jc := s.renderContainer(c)
	if s.cfg.Flavor == Flavor33 {
		writeJSON(w, http.StatusOK, jc)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"container": jc})
}

// serveSignal signals a container as the RM forwards it to its
// NodeManager: GRACEFUL_SHUTDOWN (SIGTERM) and FORCEFUL_SHUTDOWN
// (SIGKILL) end it, OUTPUT_THREAD_DUMP changes nothing. Like Hadoop 3.3.6
// and 3.5.0, whose RMNodeImpl takes SIGNAL_CONTAINER only while RUNNING or
// UNHEALTHY, a signal to a container on a node in any other state (notably
// DECOMMISSIONING) is answered 200 and dropped. A signal taken is queued
// on the node (RMNodeImpl.containersToSignal) and delivered with the
// NodeManager's next heartbeat, also when the node has turned
// DECOMMISSIONING meanwhile (ResourceTrackerService answers every
// heartbeat of a node not yet ready to leave with its queued signals);
// the container ends with the heartbeat after that, which reports it
// completed: two Config.Heartbeat after the signal.
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
	c, ok := s.findContainer(cid)
	if ok && (c.node.state == "RUNNING" || c.node.state == "UNHEALTHY") {
		time.AfterFunc(2*s.cfg.Heartbeat, func() { s.deliverSignal(cid, cmd) })
	}
	s.mu.Unlock()
	if !ok {
		plain(w, http.StatusInternalServerError, "Trying to signal an absent container "+cid)
		return
	}
	msg := "signal success" // Hadoop 3.5; 3.3 answers an empty body
	if s.cfg.Flavor == Flavor33 {
		msg = ""
	}
	plain(w, http.StatusOK, msg)
}

// deliverSignal acts on a queued signal once the container's NodeManager
// has had it and reported back: a NodeManager still up (its node RUNNING,
// UNHEALTHY or DECOMMISSIONING) stops the container.
func (s *Sim) deliverSignal(cid, cmd string) {
	s.mu.Lock()
	s.rules.init()
	c, ok := s.findContainer(cid)
	finish := ""
	if ok && (c.node.state == "RUNNING" || c.node.state == "UNHEALTHY" || c.node.state == "DECOMMISSIONING") &&
		(cmd == "FORCEFUL_SHUTDOWN" || cmd == "GRACEFUL_SHUTDOWN" && !s.rules.ignoreTERM[c.app.id]) {
		finish = s.stopContainer(c)
	}
	s.mu.Unlock()
	if finish != "" {
		_ = s.Finish(finish)
	}
}
