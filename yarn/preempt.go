package yarn

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Preemption of YARN work through the RM REST API. The RM serves
// POST /ws/v1/cluster/containers/{id}/signal/{command} (checked in the
// RMWebServices of Hadoop 3.3.6 and 3.5.0: both serve it) and
// PUT /ws/v1/cluster/apps/{id}/state {"state":"KILLED"} (every 3.x).

// The REST paths Evict uses, under the RM root.
const (
	pathSignal    = "/ws/v1/cluster/containers/%s/signal/%s"
	pathAppState  = "/ws/v1/cluster/apps/%s/state"
	pathContainer = "/ws/v1/cluster/apps/%s/appattempts/%s/containers/%s"
)

// Signal commands of the RM's container signal API (SignalContainerCommand).
const (
	SignalGraceful = "GRACEFUL_SHUTDOWN"
	SignalForceful = "FORCEFUL_SHUTDOWN"
)

// errNoSignal marks an RM that does not serve the container signal API.
var errNoSignal = errors.New("the RM does not serve the container signal API")

// Evict stops one YARN workload on node and reports done (nil) only when
// it is gone. It is called again until then: while the work is stopping
// it returns an error wrapping broker.ErrInProgress.
//
// A container (w.Key or w.Name names container_...) is sent
// GRACEFUL_SHUTDOWN first (its process gets SIGTERM and may checkpoint);
// a call its grace after that (w.EvictGrace, its tenant's, else
// EvictGrace) sends FORCEFUL_SHUTDOWN (SIGKILL) to that container alone,
// again every grace while it runs. It is gone when the RM no longer lists
// it among its app attempt's live containers, or its application has
// ended.
//
// IMPORTANT: preemption stops only its victims. An application is killed
// (PUT .../apps/{id}/state KILLED, done when the RM reports it KILLED,
// FINISHED or FAILED) only when all its live containers are victims, as a
// fresh listing from the RM shows: its ApplicationMaster is the victim
// (w.AM: the planner takes an AM only with its whole application, on this
// node), or the victim is the application's only container. That is the
// way out for an RM without the signal API, a container the RM cannot
// signal (on a DECOMMISSIONING node the RM drops signals, and the
// NodeManager's REST API has none), and one that outlives
// FORCEFUL_SHUTDOWN. Otherwise Evict keeps waiting (in progress, the
// reason named) and the op's deadline ends the wait: the application's
// other containers are not victims and keep running.
func (d *Decommissioner) Evict(ctx context.Context, node string, w broker.Workload) error {
	cid := containerID(w)
	app := w.App
	if app == "" {
		app = appOfContainer(cid)
	}
	if app == "" {
		if a, _, ok := strings.Cut(w.Key, "/"); ok && strings.HasPrefix(a, "application_") {
			app = a
		} else if strings.HasPrefix(w.Key, "application_") {
			app = w.Key
		}
	}
	if app == "" {
		return fmt.Errorf("evict %q from %s: no YARN application or container id in the workload", w.Key, node)
	}
	grace := d.cfg.EvictGrace
	if w.EvictGrace > 0 {
		grace = w.EvictGrace
	}
	if w.AM || cid == "" {
		// The whole application is the victim.
		return d.killWholeApp(ctx, node, app, cid, "its ApplicationMaster "+cid+" is a victim, with the rest of the application")
	}
	gone, err := d.containerGone(ctx, node, app, cid)
	if err != nil {
		return fmt.Errorf("evict container %s from %s: %w", cid, node, err)
	}
	if gone {
		d.mu.Lock()
		ev := d.evicting[cid]
		delete(d.evicting, cid)
		d.mu.Unlock()
		how := "container " + cid + " had ended before any signal"
		switch {
		case !ev.forceful.IsZero():
			how = "container " + cid + " stopped after FORCEFUL_SHUTDOWN"
		case !ev.graceful.IsZero():
			how = "container " + cid + " stopped after GRACEFUL_SHUTDOWN"
		}
		d.recordStopped(cid, how)
		d.cfg.Client.refreshContainers(app, node)
		d.cfg.Logger.Info("yarn container stopped", "node", node, "container", cid, "app", app, "how", how)
		return nil
	}
	// IMPORTANT: the RM drops container signals to a DECOMMISSIONING node
	// (RMNodeImpl has no SIGNAL_CONTAINER transition there: Hadoop 3.3.6
	// and 3.5.0 log "Invalid event" and answer 200), but a signal it took
	// while the node was RUNNING is queued on the node and still reaches
	// the NodeManager with its next heartbeat. So a container on a
	// DECOMMISSIONING node gets its grace from its GRACEFUL_SHUTDOWN (or,
	// with none remembered, from now), and nothing is sent there.
	n, err := d.node(ctx, node)
	if err != nil {
		return fmt.Errorf("evict container %s from %s: %w", cid, node, err)
	}
	now := d.cfg.Now()
	d.mu.Lock()
	ev, signalled := d.evicting[cid]
	if n.State == "DECOMMISSIONING" && !signalled {
		ev = eviction{graceful: now}
		d.evicting[cid] = ev
	}
	d.mu.Unlock()
	if n.State == "DECOMMISSIONING" {
		if now.Sub(ev.sent()) < grace {
			return fmt.Errorf("container %s on decommissioning %s is shutting down (%s sent before the decommission; the RM drops signals now): %w", cid, node, ev.last(), broker.ErrInProgress)
		}
		return d.stopAlone(ctx, node, app, cid, "it runs on a decommissioning node past its grace of "+grace.String()+" and the RM drops signals there")
	}
	cmd := SignalGraceful
	switch {
	case !signalled:
	case now.Sub(ev.sent()) < grace:
		return fmt.Errorf("container %s on %s is shutting down (%s sent): %w", cid, node, ev.last(), broker.ErrInProgress)
	default:
		// Its grace is over: FORCEFUL_SHUTDOWN to this container alone,
		// again each grace while it survives (a signal can be lost: the
		// NodeManager missed it).
		cmd = SignalForceful
		if !ev.forceful.IsZero() {
			live, err := d.liveContainers(ctx, app)
			if err != nil {
				return fmt.Errorf("evict container %s from %s: list the containers of %s: %w", cid, node, app, err)
			}
			if !slices.ContainsFunc(live, func(c Container) bool { return c.ID != cid }) {
				// The victim is all of its application: killing it stops
				// nothing else.
				return d.stopAlone(ctx, node, app, cid, "it survived FORCEFUL_SHUTDOWN for its grace of "+grace.String())
			}
			d.cfg.Logger.Warn("yarn container survived FORCEFUL_SHUTDOWN; sending it again, its application's other containers are not victims", "node", node, "container", cid, "app", app)
		}
	}
	err = d.signal(ctx, cid, cmd)
	if errors.Is(err, errNoSignal) {
		return d.stopAlone(ctx, node, app, cid, "the RM does not serve the container signal API")
	}
	if err != nil {
		return fmt.Errorf("evict container %s from %s: %w", cid, node, err)
	}
	d.cfg.Client.refreshContainers(app, node)
	d.mu.Lock()
	if cmd == SignalGraceful {
		d.evicting[cid] = eviction{graceful: now}
	} else {
		ev.forceful = now
		d.evicting[cid] = ev
	}
	d.mu.Unlock()
	d.cfg.Logger.Info("yarn container signalled", "node", node, "container", cid, "app", app, "command", cmd, "grace", grace)
	return fmt.Errorf("container %s on %s sent %s: %w", cid, node, cmd, broker.ErrInProgress)
}

// stopAlone handles a victim container that no signal can stop (why):
// its application is killed only when the container is all of it (a
// fresh listing from the RM); otherwise the eviction waits, in progress,
// for the container to end, and the op's deadline bounds the wait.
func (d *Decommissioner) stopAlone(ctx context.Context, node, app, cid, why string) error {
	live, err := d.liveContainers(ctx, app)
	if err != nil {
		return fmt.Errorf("evict container %s from %s: list the containers of %s: %w", cid, node, app, err)
	}
	others := slices.DeleteFunc(slices.Clone(live), func(c Container) bool { return c.ID == cid })
	if len(others) == 0 {
		d.cfg.Logger.Warn("yarn victim cannot be signalled; killing its application, of which it is the only container", "node", node, "container", cid, "app", app, "why", why)
		return d.killApp(ctx, node, app, cid, fmt.Sprintf("application %s killed: %s, and it was the application's only container", app, why))
	}
	return fmt.Errorf("container %s on %s cannot be stopped alone (%s); its application %s is not killed: %d of its containers are not victims (%s); waiting for it to end: %w",
		cid, node, why, app, len(others), containerList(others), broker.ErrInProgress)
}

// killWholeApp kills app, whose ApplicationMaster (or, with cid empty,
// the app itself) is the victim, once a fresh listing shows that all its
// live containers run on node (the planner takes an AM only with its
// whole application, on one node): a container elsewhere is no victim,
// and the kill would take it too.
func (d *Decommissioner) killWholeApp(ctx context.Context, node, app, cid, why string) error {
	d.mu.Lock()
	_, killed := d.stopped[cmp.Or(cid, app)]
	d.mu.Unlock()
	if killed {
		// Killed already: wait for the RM to report it ended.
		return d.killApp(ctx, node, app, cid, "")
	}
	if done, _, err := d.appEnded(ctx, node, app); err != nil {
		return err
	} else if done {
		return d.killApp(ctx, node, app, cid, "")
	}
	live, err := d.liveContainers(ctx, app)
	if err != nil {
		return fmt.Errorf("evict application %s from %s: list its containers: %w", app, node, err)
	}
	var elsewhere []Container
	for _, c := range live {
		if c.Host != node {
			elsewhere = append(elsewhere, c)
		}
	}
	if len(elsewhere) > 0 {
		return fmt.Errorf("evict application %s from %s: it runs containers on other nodes (%s) that are not victims; killing it would stop them too: %w",
			app, node, containerList(elsewhere), broker.ErrConflict)
	}
	ids := make([]string, 0, len(live))
	for _, c := range live {
		ids = append(ids, c.ID)
	}
	return d.killApp(ctx, node, app, cid, fmt.Sprintf("application %s killed: %s (all its containers were victims: %s)", app, why, strings.Join(ids, ", ")))
}

// liveContainers lists app's live containers on the RM now: its current
// attempt's. An app the RM does not know has none.
func (d *Decommissioner) liveContainers(ctx context.Context, app string) ([]Container, error) {
	attempt, _, err := d.cfg.Client.currentAttempt(ctx, app)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cs, err := d.cfg.Client.attemptContainers(ctx, app, attempt)
	if notFound(err) {
		return nil, nil
	}
	return cs, err
}

// containerList names containers and their hosts for reasons.
func containerList(cs []Container) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, c.ID+" on "+c.Host)
	}
	return strings.Join(parts, ", ")
}

// recordStopped remembers how victim cid stopped, for HowStopped.
func (d *Decommissioner) recordStopped(cid, how string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped == nil {
		d.stopped = map[string]string{}
	}
	d.stopped[cid] = how
}

var _ engine.StopReporter = (*Decommissioner)(nil)

// HowStopped says how a workload Evict reported done actually stopped
// (after GRACEFUL_SHUTDOWN, after FORCEFUL_SHUTDOWN, its application
// killed and why), so the op records what the preemption stopped; ""
// when Evict did not stop it. It forgets the answer.
func (d *Decommissioner) HowStopped(w broker.Workload) string {
	key := containerID(w)
	if key == "" {
		key = w.App
		if key == "" {
			key = w.Key
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	how := d.stopped[key]
	delete(d.stopped, key)
	return how
}

// eviction is when an evicted container was sent each signal.
type eviction struct {
	graceful, forceful time.Time
}

// sent is when the last signal went.
func (e eviction) sent() time.Time {
	if e.forceful.IsZero() {
		return e.graceful
	}
	return e.forceful
}

func (e eviction) last() string {
	if e.forceful.IsZero() {
		return SignalGraceful
	}
	return SignalForceful
}

// appEnded reports whether app has ended (or the RM no longer knows it),
// and its final state.
func (d *Decommissioner) appEnded(ctx context.Context, node, app string) (bool, string, error) {
	var st struct {
		State string `json:"state"`
	}
	_, err := d.send(ctx, http.MethodGet, fmt.Sprintf(pathAppState, url.PathEscape(app)), nil, &st)
	if err != nil && !isNotFound(err) {
		return false, "", fmt.Errorf("evict application %s from %s: %w", app, node, err)
	}
	if err != nil || finalAppState(st.State) {
		d.cfg.Client.refreshContainers(app, node)
		return true, cmp.Or(st.State, "unknown to the RM"), nil
	}
	return false, "", nil
}

// killApp kills app unless it has ended; nil once it has. how (what the
// kill stops, and why) is recorded for HowStopped under the victim cid
// (the app when empty) once the RM took the kill; an app that ended by
// itself first is recorded as such.
func (d *Decommissioner) killApp(ctx context.Context, node, app, cid, how string) error {
	key := cmp.Or(cid, app)
	done, state, err := d.appEnded(ctx, node, app)
	if err != nil {
		return err
	}
	if done {
		d.mu.Lock()
		if _, killed := d.stopped[key]; !killed {
			if d.stopped == nil {
				d.stopped = map[string]string{}
			}
			d.stopped[key] = "application " + app + " ended by itself (" + state + ") before the broker killed it"
		}
		d.mu.Unlock()
		d.cfg.Logger.Info("yarn application ended", "node", node, "app", app, "state", state)
		return nil
	}
	path := fmt.Sprintf(pathAppState, url.PathEscape(app))
	var st struct {
		State string `json:"state"`
	}
	code, err := d.send(ctx, http.MethodPut, path, map[string]string{"state": "KILLED"}, &st)
	if err != nil {
		return fmt.Errorf("kill application %s on %s: %w", app, node, err)
	}
	if code != http.StatusOK && code != http.StatusAccepted {
		return fmt.Errorf("kill application %s on %s: the RM answered %d", app, node, code)
	}
	if how != "" {
		d.recordStopped(key, how)
	}
	d.cfg.Client.refreshContainers(app, node)
	d.cfg.Logger.Info("yarn application kill requested", "node", node, "app", app, "victim", cid, "how", how)
	if finalAppState(st.State) {
		return nil
	}
	return fmt.Errorf("application %s on %s is being killed: %w", app, node, broker.ErrInProgress)
}

func finalAppState(s string) bool { return s == "KILLED" || s == "FINISHED" || s == "FAILED" }

// containerGone reports whether the RM no longer lists container cid of
// app as live: the container report answers 404 with a RemoteException
// (ContainerNotFoundException, or the app or attempt is gone), or its app
// has ended. A live container on another host than node is an error: the
// victim is not where the preemption was planned.
func (d *Decommissioner) containerGone(ctx context.Context, node, app, cid string) (bool, error) {
	var st struct {
		State string `json:"state"`
	}
	_, err := d.send(ctx, http.MethodGet, fmt.Sprintf(pathAppState, url.PathEscape(app)), nil, &st)
	if isNotFound(err) || err == nil && finalAppState(st.State) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	attempt := attemptOfContainer(cid)
	if attempt == "" {
		return false, fmt.Errorf("container id %q has no app attempt", cid)
	}
	// Hadoop 3.3 answers the bare ContainerInfo, 3.5 wraps it.
	type containerInfo struct {
		ID     string `json:"containerId"`
		State  string `json:"containerState"`
		NodeID string `json:"assignedNodeId"`
	}
	var report struct {
		containerInfo
		Container *containerInfo `json:"container"`
	}
	_, err = d.send(ctx, http.MethodGet, fmt.Sprintf(pathContainer, url.PathEscape(app), url.PathEscape(attempt), url.PathEscape(cid)), nil, &report)
	if isNotFound(err) && st.State == "ACCEPTED" {
		// IMPORTANT: the victim ran, so its application is ACCEPTED
		// again only while a new active RM recovers it (until its AM
		// re-registers) or a new attempt starts: the RM not knowing the
		// container then proves nothing.
		return false, fmt.Errorf("application %s is ACCEPTED (a new RM recovering it, or a new attempt) and the RM does not know container %s yet: %w", app, cid, broker.ErrInProgress)
	}
	if isNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if report.Container != nil {
		report.containerInfo = *report.Container
	}
	if report.State == "COMPLETE" {
		return true, nil
	}
	if host, _, _ := strings.Cut(report.NodeID, ":"); host != "" && host != node {
		return false, fmt.Errorf("container %s runs on %s, not on %s: %w", cid, host, node, broker.ErrConflict)
	}
	return false, nil
}

// signal sends cmd to container cid. It returns errNoSignal when the RM
// does not serve the signal API.
func (d *Decommissioner) signal(ctx context.Context, cid, cmd string) error {
	_, err := d.send(ctx, http.MethodPost, fmt.Sprintf(pathSignal, url.PathEscape(cid), cmd), nil, nil)
	var re *restError
	if errors.As(err, &re) && (re.code == http.StatusMethodNotAllowed ||
		re.code == http.StatusNotFound && !strings.Contains(re.detail, cid)) {
		// No such resource (an RM before the signal API); a container the
		// RM does not know is named in its answer.
		return fmt.Errorf("%w: %w", errNoSignal, err)
	}
	return err
}

// isNotFound reports whether err is the RM's own 404 (a RemoteException:
// no such app, attempt or container).
func isNotFound(err error) bool {
	var re *restError
	return errors.As(err, &re) && re.code == http.StatusNotFound && re.remote
}

// restError is an RM answer Evict does not expect.
type restError struct {
	code   int
	remote bool // the body is a RemoteException: the RM itself answered
	detail string
}

func (e *restError) Error() string { return fmt.Sprintf("answered %d: %s", e.code, e.detail) }

// send performs one REST call against the RMs of d's client, with the
// client's transport, user and timeout, starting with the RM that answered
// last and failing over to the next on a connection failure or a standby's
// answer; a standby's redirect is followed with the same method and body.
// It decodes a JSON answer into v (when not nil) and returns the status
// code; any other answer than 2xx is a *restError.
func (d *Decommissioner) send(ctx context.Context, method, path string, body, v any) (int, error) {
	c := d.cfg.Client
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	start := c.active
	c.mu.Unlock()
	n := len(c.cfg.RMs)
	var errs []error
	for i := range n {
		rm := c.cfg.RMs[(start+i)%n]
		code, err := d.sendTo(ctx, rm, method, path, payload, v)
		if err == nil {
			c.remember(rm)
			return code, nil
		}
		var re *restError
		if errors.As(err, &re) && re.remote {
			return code, fmt.Errorf("rm %s: %s %s: %w", rm, method, path, err)
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("rm %s: %s %s: %w", rm, method, path, ctx.Err())
		}
		errs = append(errs, fmt.Errorf("rm %s: %s %s: %w", rm, method, path, err))
	}
	return 0, errors.Join(errs...)
}

func (d *Decommissioner) sendTo(ctx context.Context, rm, method, path string, payload []byte, v any) (int, error) {
	c := d.cfg.Client
	target := rm + path
	if c.cfg.User != "-" {
		target += "?user.name=" + url.QueryEscape(c.cfg.User)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	for hop := 0; ; hop++ {
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Accept", "application/json")
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return 0, err
		}
		code := resp.StatusCode
		if code >= 300 && code < 400 {
			loc := resp.Header.Get("Location")
			resp.Body.Close()
			if loc == "" || hop >= maxRedirects {
				return 0, fmt.Errorf("standby RM answered %d without a usable redirect", code)
			}
			u, err := resp.Request.URL.Parse(loc)
			if err != nil {
				return 0, fmt.Errorf("redirect target %q: %w", loc, err)
			}
			target = u.String()
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("read answer: %w", err)
		}
		var rex remoteException
		remote := json.Unmarshal(b, &rex) == nil && rex.RemoteException != nil
		switch {
		case code < 200 || code >= 300:
			detail := strings.TrimSpace(string(b))
			if remote {
				detail = rex.RemoteException.Exception + ": " + rex.RemoteException.Message
			} else if m := titleRE.FindSubmatch(b); m != nil {
				detail = "HTML page " + strings.Join(strings.Fields(string(m[1])), " ")
			}
			if len(detail) > 200 {
				detail = detail[:200] + "..."
			}
			return code, &restError{code: code, remote: remote, detail: detail}
		}
		if v != nil && len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, v); err != nil {
				return code, fmt.Errorf("decode answer: %w", err)
			}
		}
		return code, nil
	}
}

// containerID returns the container id a workload names, or "".
func containerID(w broker.Workload) string {
	for _, s := range []string{w.Key, w.Name} {
		for _, part := range strings.Split(s, "/") {
			if strings.HasPrefix(part, "container_") {
				return part
			}
		}
	}
	return ""
}

// containerParts splits container_[e<epoch>_]<ts>_<app>_<attempt>_<n>
// into its cluster timestamp, app and attempt numbers.
func containerParts(cid string) (ts, app string, attempt int, ok bool) {
	f := strings.Split(strings.TrimPrefix(cid, "container_"), "_")
	if len(f) == 5 && strings.HasPrefix(f[0], "e") {
		f = f[1:]
	}
	if len(f) != 4 || !strings.HasPrefix(cid, "container_") {
		return "", "", 0, false
	}
	a, err := strconv.Atoi(f[2])
	if err != nil {
		return "", "", 0, false
	}
	return f[0], f[1], a, true
}

// appOfContainer returns application_<ts>_<app> of a container id.
func appOfContainer(cid string) string {
	ts, app, _, ok := containerParts(cid)
	if !ok {
		return ""
	}
	return "application_" + ts + "_" + app
}

// attemptOfContainer returns appattempt_<ts>_<app>_<attempt, 6 digits>.
func attemptOfContainer(cid string) string {
	ts, app, attempt, ok := containerParts(cid)
	if !ok {
		return ""
	}
	return fmt.Sprintf("appattempt_%s_%s_%06d", ts, app, attempt)
}
