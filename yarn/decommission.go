package yarn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// Admin is the part of the RM admin protocol decommissioning uses;
// *rmadmin.Client implements it.
type Admin interface {
	RefreshNodes(ctx context.Context, t rmadmin.DecommissionType, timeout time.Duration) error
	UpdateNodeResource(ctx context.Context, nodeID string, r rmadmin.Resource, overCommit time.Duration) error
}

var _ Admin = (*rmadmin.Client)(nil)

// DecommissionConfig configures a Decommissioner.
type DecommissionConfig struct {
	// Client reads node states from the RM's REST API.
	Client *Client
	// Admin calls refreshNodes on the RM.
	Admin Admin
	// Exclude is the exclude file the RM reads at refresh.
	Exclude *ExcludeFile
	// Cordon is the cordon (an exclusive node label) that holds a busy
	// node: Cordon applies it, Release decommissions only a host that it
	// has held empty for its Hold. Nil: there is no cordon, busy nodes are
	// left alone, and Release decommissions only a host that is empty.
	Cordon *Cordon
	// PlaceholderSettle is how long a host must stay only a new active
	// RM's DECOMMISSIONED placeholder before Release takes it for
	// released, naming the work it last saw there as lost (default
	// DefaultPlaceholderSettle).
	PlaceholderSettle time.Duration
	// ShortTimeout is the graceful timeout a decommission gets once its
	// DECOMMISSIONING host is empty (default 1s): the RM otherwise keeps
	// it DECOMMISSIONING while any application that ran there runs.
	ShortTimeout time.Duration
	// HTTP reaches NodeManager REST APIs for container names (default: a
	// client with a 3s timeout). A NodeManager that does not answer is
	// reported by its container count alone.
	HTTP *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives one line per action (default: discarded).
	Logger *slog.Logger
	// RestartNodeManager brings a host's NodeManager back after a
	// recommission (a DECOMMISSIONED NodeManager has shut down). Admit
	// runs it after the exclude file and refreshNodes let the host in;
	// Admitted runs it again, at most every RestartInterval, while the
	// host is not RUNNING. Nil: the NodeManager's service manager restarts
	// it on its own (systemd Restart=always). See NodeManagerRestartCommand.
	RestartNodeManager func(ctx context.Context, host string) error
	// RestartInterval spaces repeated restart attempts (default 1m).
	RestartInterval time.Duration
	// EvictGrace is how long an evicted container has after
	// GRACEFUL_SHUTDOWN before Evict sends FORCEFUL_SHUTDOWN (default 30s).
	EvictGrace time.Duration
	// DeadlineMargin is taken off the time left until a Release deadline
	// to give the graceful timeout (default 30s): the RM enforces the
	// timeout only on its decommissioning watcher's poll (20s by default),
	// and the node must be DECOMMISSIONED before the executor's deadline,
	// or a transfer gives it back instead.
	DeadlineMargin time.Duration
}

// Decommissioner takes NodeManagers away from YARN and gives them back:
// graceful decommission through the exclude file and refreshNodes, and
// recommission the same way. It implements engine.SideActions; every
// method is idempotent and reports progress from the RM's state, so the
// executor may call it again after a crash.
type Decommissioner struct {
	cfg DecommissionConfig
	mu  sync.Mutex
	// seen remembers, per host, the containers last seen on a
	// decommissioning node and when its graceful timeout ends, to report
	// which containers a timeout cut off. It is a cache: after a restart
	// a cut-off is reported as a count at most.
	seen map[string]*decomState
	// restarted is when the restart hook last ran for a host, and what it
	// answered, so repeated checks do not run it in a tight loop.
	restarted map[string]restartRun
	// evicting remembers when each evicted container was sent
	// GRACEFUL_SHUTDOWN (see preempt.go). It is a cache: after a restart
	// the grace period starts again.
	evicting map[string]eviction
	// running is, per host being released, the containers at the last
	// look that found any, and decomSince since when Release has seen the
	// host DECOMMISSIONING without a gap. Caches: after a restart a loss is
	// not named and the wait before a short timeout starts again.
	running    map[string][]string
	decomSince map[string]time.Time
	// placeholderSince is when each host was first seen as only a new
	// active RM's placeholder (see placeholderReleased).
	placeholderSince map[string]time.Time
	// emptyExcluded holds the hosts this process put in the exclude file
	// because the RM and the NodeManager reported them empty under the
	// cordon's hold (see placeholderReleased).
	emptyExcluded map[string]bool
	// stopped says how each victim Evict reported done stopped
	// (HowStopped), by container id, or app id for a whole app.
	stopped map[string]string
}

type restartRun struct {
	at  time.Time
	err error
}

type decomState struct {
	until      time.Time
	containers []string
}

var _ engine.SideActions = (*Decommissioner)(nil)

// NewDecommissioner returns a Decommissioner for cfg.
func NewDecommissioner(cfg DecommissionConfig) (*Decommissioner, error) {
	if cfg.Client == nil || cfg.Admin == nil || cfg.Exclude == nil {
		return nil, errors.New("yarn decommissioner: Client, Admin and Exclude must be set")
	}
	if cfg.PlaceholderSettle <= 0 {
		cfg.PlaceholderSettle = DefaultPlaceholderSettle
	}
	if cfg.ShortTimeout == 0 {
		cfg.ShortTimeout = time.Second
	}
	if cfg.ShortTimeout < time.Second {
		return nil, errors.New("yarn decommissioner: ShortTimeout must be at least 1s")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 3 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RestartInterval == 0 {
		cfg.RestartInterval = time.Minute
	}
	if cfg.EvictGrace == 0 {
		cfg.EvictGrace = 30 * time.Second
	}
	if cfg.DeadlineMargin == 0 {
		cfg.DeadlineMargin = 30 * time.Second
	}
	if cfg.RestartInterval < 0 || cfg.EvictGrace < 0 || cfg.DeadlineMargin < 0 {
		return nil, errors.New("yarn decommissioner: RestartInterval, EvictGrace and DeadlineMargin must not be negative")
	}
	return &Decommissioner{cfg: cfg, seen: map[string]*decomState{}, restarted: map[string]restartRun{},
		evicting: map[string]eviction{}, running: map[string][]string{}, decomSince: map[string]time.Time{},
		emptyExcluded: map[string]bool{}, placeholderSince: map[string]time.Time{}}, nil
}

// Source reports the YARN side.
func (d *Decommissioner) Source() broker.Source { return broker.SourceYARN }

// DecommissionStatus is how far a graceful decommission has come.
type DecommissionStatus struct {
	// State is the node's RM state ("" when the RM does not list the host).
	State string
	// NodeID is host:port as the RM knows the node.
	NodeID string
	// Containers are the containers running on the node: their ids when
	// the NodeManager's REST API answers, else "N containers".
	Containers []string
	// Done is true when the RM has confirmed the node gone from YARN:
	// DECOMMISSIONED, or LOST or SHUTDOWN with no containers. A host the
	// RM does not list is never done: after an RM restart or failover the
	// active RM lists NodeManagers only as they register again.
	Done bool
	// TimedOut is true when the graceful timeout ended the decommission
	// with containers still running; CutOff names them.
	TimedOut bool
	CutOff   []string
}

// DefaultPlaceholderSettle is how long a host stays only a new active
// RM's placeholder before Release takes it for released: many heartbeats
// of a NodeManager (one second by default), which the new RM answers with
// SHUTDOWN at the first.
const DefaultPlaceholderSettle = time.Minute

// InfiniteTimeout asks Decommission for a graceful decommission without a
// timeout: the exclude file carries -1, so no new containers land on the
// node and the RM lets it leave only when its running work has ended.
const InfiniteTimeout time.Duration = -1

// Decommission runs one step of a graceful decommission of host with the
// given timeout (InfiniteTimeout or any negative value: none; otherwise
// at least a second): it puts host in the exclude file with the timeout
// (an entry already there keeps its own, except that an infinite one is
// shortened to a finite timeout), asks the RM to refresh gracefully while
// the node is still schedulable, and reports the node's state and
// containers. Calling it again only reports progress.
func (d *Decommissioner) Decommission(ctx context.Context, host string, timeout time.Duration) (DecommissionStatus, error) {
	switch {
	case timeout < 0:
		timeout = InfiniteTimeout
	case timeout < time.Second:
		timeout = time.Second
	}
	// IMPORTANT: the exclude file is written before refreshNodes: the RM
	// reads the file at refresh, and a refresh that finds the host absent
	// would recommission it.
	added, err := d.cfg.Exclude.Add(host, timeout)
	if err != nil {
		return DecommissionStatus{}, err
	}
	n, err := d.node(ctx, host)
	if err != nil {
		return DecommissionStatus{}, rmError{err}
	}
	if added || schedulable(n.State) {
		if err := d.refreshNodes(ctx); err != nil {
			return DecommissionStatus{}, rmError{fmt.Errorf("decommission %s: %w", host, err)}
		}
		d.cfg.Logger.Info("yarn node decommission requested", "node", host, "timeout", timeoutText(timeout), "state", n.State)
		d.mu.Lock()
		if added {
			delete(d.restarted, host) // a new cycle: the next Admit restarts it
		}
		if d.seen[host] == nil || added {
			ds := &decomState{}
			if timeout > 0 {
				ds.until = d.cfg.Now().Add(timeout)
			}
			d.seen[host] = ds
		}
		d.mu.Unlock()
		if n, err = d.node(ctx, host); err != nil {
			return DecommissionStatus{}, rmError{err}
		}
	}
	return d.status(ctx, host, n), nil
}

// rmError marks a failure to reach or convince the RM (REST or admin
// RPC), as opposed to one of the exclude file: Release reports it as
// Unknown.
type rmError struct{ err error }

func (e rmError) Error() string { return e.err.Error() }
func (e rmError) Unwrap() error { return e.err }

func timeoutText(t time.Duration) string {
	if t < 0 {
		return "infinite"
	}
	return t.String()
}

// status turns a node's REST view into a DecommissionStatus.
func (d *Decommissioner) status(ctx context.Context, host string, n nodeInfo) DecommissionStatus {
	st := DecommissionStatus{State: n.State, NodeID: n.ID}
	d.mu.Lock()
	defer d.mu.Unlock()
	mem := d.seen[host]
	switch {
	case n.State == "DECOMMISSIONED",
		(n.State == "LOST" || n.State == "SHUTDOWN") && n.NumContainers == 0:
		st.Done = true
		// The RM ends a graceful decommission at its timeout with whatever
		// still runs; what ran at the last look before it was cut off.
		if mem != nil && len(mem.containers) > 0 && !mem.until.IsZero() && !d.cfg.Now().Before(mem.until) {
			st.TimedOut, st.CutOff = true, slices.Clone(mem.containers)
		}
		return st
	case n.State == "":
		return st
	}
	if n.NumContainers > 0 {
		st.Containers = d.containers(ctx, n)
	}
	if mem != nil && n.State == "DECOMMISSIONING" {
		mem.containers = slices.Clone(st.Containers)
	}
	return st
}

// schedulable reports whether the RM may still place containers on a node
// in state s, i.e. a refresh has not taken effect.
func schedulable(s string) bool { return s == "RUNNING" || s == "UNHEALTHY" || s == "NEW" }

// Release takes node out of YARN without killing anything, one step per
// call, and reports how far it has come. The deadline bounds only the
// executor's wait: no finite graceful timeout is ever given to a host that
// runs a container.
//
//   - While the RM lists any container on the host (numContainers, any
//     application, ApplicationMasters included) or its NodeManager does,
//     the host stays out of the exclude file: Remaining names them. The
//     cordon (Cordon, applied by the executor before Release) keeps new
//     ones off it and survives an RM failover; an excluded busy host
//     would not (a new active RM shuts its NodeManager down).
//   - An empty host enters the exclude file with an infinite timeout (-1)
//     only once the cordon has held for its Hold (see DefaultCordonHold:
//     the RM counts allocated-but-not-launched containers on the node, so
//     the hold only outlasts an allocation in flight when the label
//     landed); without a cordon, at once.
//   - A DECOMMISSIONING host that is empty gets the ShortTimeout (the RM
//     otherwise waits for every application that ran there to end) once it
//     has been cordoned or DECOMMISSIONING for the Hold.
//   - Drained comes only from a real DECOMMISSIONED entry (or LOST or
//     SHUTDOWN with no containers). A DECOMMISSIONED placeholder (node id
//     host:-1, no HTTP address, version unknown) means an RM restarted
//     and listed the exclude file: Unknown, so the executor re-observes.
//     A host the RM does not list, or an RM that cannot be asked, is
//     Unknown too. Containers seen at the last look that are gone when
//     the host is found released were lost to something other than this
//     release (a failover's SHUTDOWN): Lost names them.
func (d *Decommissioner) Release(ctx context.Context, node string, _ time.Time) (broker.ReleaseStatus, error) {
	st, err := d.release(ctx, node)
	if err != nil {
		var re rmError
		if !errors.As(err, &re) || ctx.Err() != nil {
			return broker.ReleaseStatus{}, err // the exclude file itself: an error of ours
		}
		d.cfg.Logger.Warn("yarn release state unknown", "node", node, "err", err)
		return broker.ReleaseStatus{Unknown: err.Error()}, nil
	}
	return st, nil
}

func (d *Decommissioner) release(ctx context.Context, host string) (broker.ReleaseStatus, error) {
	n, err := d.node(ctx, host)
	if err != nil {
		return broker.ReleaseStatus{}, rmError{err}
	}
	now := d.cfg.Now()
	if !placeholder(n) {
		d.mu.Lock()
		delete(d.placeholderSince, host)
		d.mu.Unlock()
	}
	if d.cfg.Cordon != nil && n.State != "" && !placeholder(n) {
		d.cfg.Cordon.seen(host, n.NodeLabels, now)
	}
	switch {
	case n.State == "":
		return broker.ReleaseStatus{Unknown: fmt.Sprintf("the RM does not list host %s (an RM restart or failover lists NodeManagers only as they register again)", host)}, nil
	case placeholder(n):
		// IMPORTANT: no release by itself. The RM made this entry from
		// the exclude file when it became active; the NodeManager has not
		// registered with it yet (or was told to shut down). Only a host
		// the broker excluded because it was empty is released by it.
		if ok, why := d.placeholderReleased(host, now); ok {
			d.mu.Lock()
			lost := d.running[host]
			delete(d.running, host)
			delete(d.decomSince, host)
			d.mu.Unlock()
			d.cfg.Logger.Warn("yarn node released by an RM failover", "node", host, "placeholder", n.ID, "evidence", why, "lost", lost)
			return broker.ReleaseStatus{Drained: true, Lost: lost}, nil
		}
		return broker.ReleaseStatus{Unknown: fmt.Sprintf("the RM lists host %s only as a DECOMMISSIONED placeholder (%s): it restarted or failed over; waiting for the NodeManager's own entry", host, n.ID)}, nil
	case n.State == "DECOMMISSIONED", (n.State == "LOST" || n.State == "SHUTDOWN") && n.NumContainers == 0:
		d.mu.Lock()
		lost := d.running[host]
		delete(d.running, host)
		delete(d.decomSince, host)
		delete(d.emptyExcluded, host)
		d.mu.Unlock()
		if len(lost) > 0 {
			d.cfg.Logger.Warn("yarn node released with work lost", "node", host, "state", n.State, "lost", lost)
		}
		return broker.ReleaseStatus{Drained: true, Lost: lost}, nil
	}
	var running []string
	if n.NumContainers > 0 {
		running = d.containers(ctx, n)
	} else if nm, ok := d.nmContainers(ctx, n); ok {
		running = nm // the NodeManager knows containers the RM does not count yet
	}
	d.mu.Lock()
	if len(running) > 0 {
		d.running[host] = slices.Clone(running)
	}
	if n.State == "DECOMMISSIONING" {
		if _, ok := d.decomSince[host]; !ok {
			d.decomSince[host] = now
		}
	} else {
		delete(d.decomSince, host)
	}
	decomFor := now.Sub(d.decomSince[host])
	d.mu.Unlock()
	if len(running) > 0 {
		rs := broker.ReleaseStatus{Remaining: running}
		if n.State == "DECOMMISSIONING" {
			rs.BlockedBy = "node is DECOMMISSIONING with containers (its graceful timeout stays infinite)"
		} else {
			rs.BlockedBy = "waiting for its containers to end under the cordon (the host enters the exclude file only when empty)"
		}
		return rs, nil
	}
	held, listed, hold := d.cordonHeld(ctx, host)
	if n.State == "DECOMMISSIONING" {
		// Empty: a short timeout ends the RM's wait for the applications
		// that ran there. IMPORTANT: only after the hold, so nothing
		// allocated before the node stopped taking work can be there.
		if held < hold && decomFor < hold {
			return broker.ReleaseStatus{BlockedBy: fmt.Sprintf("empty and DECOMMISSIONING for %s; the short timeout waits for %s", decomFor.Round(time.Second), hold)}, nil
		}
		if err := d.decommission(ctx, host, n, d.cfg.ShortTimeout); err != nil {
			return broker.ReleaseStatus{}, err
		}
		d.markEmptyExcluded(host)
		return broker.ReleaseStatus{BlockedBy: "empty and DECOMMISSIONING with the short timeout " + d.cfg.ShortTimeout.String()}, nil
	}
	if !schedulable(n.State) {
		return broker.ReleaseStatus{BlockedBy: "node is " + n.State}, nil
	}
	if d.cordonAvailable(ctx) && held < hold {
		// IMPORTANT: the exclude file only for a host the cordon has held
		// empty for the hold; an excluded host loses its work at the next
		// RM failover, and the hold rules out an allocation not yet
		// launched.
		why := fmt.Sprintf("empty under the cordon for %s of the %s hold before it may be decommissioned", held.Round(time.Second), hold)
		if !listed {
			why = "empty, but the RM does not list the cordon on it"
		}
		return broker.ReleaseStatus{BlockedBy: why}, nil
	}
	if err := d.decommission(ctx, host, n, InfiniteTimeout); err != nil {
		return broker.ReleaseStatus{}, err
	}
	d.markEmptyExcluded(host)
	return broker.ReleaseStatus{BlockedBy: "empty; graceful decommission requested without a timeout"}, nil
}

func (d *Decommissioner) markEmptyExcluded(host string) {
	d.mu.Lock()
	d.emptyExcluded[host] = true
	d.mu.Unlock()
}

// placeholderReleased reports whether a host the new active RM lists only
// as its placeholder is released, and on what evidence. A new active RM
// answers SHUTDOWN to the NodeManager of every excluded host, and it never
// registers again while excluded: waiting for its own entry would wait
// forever. The host is released when the broker put it in the exclude
// file because the RM and its NodeManager reported it empty after the
// cordon's hold (nothing could be allocated there since): this process
// remembers doing so, or the entry carries the short timeout, which the
// broker writes only for such a host (a new leader's evidence). Any other
// excluded host (an operator's entry, one excluded busy) stays unknown.
//
// Any other placeholder is released once it has stayed one for the
// PlaceholderSettle: a new active RM answers SHUTDOWN to the excluded
// host's NodeManager at its first heartbeat (measured: half a second after
// the new RM served, test/hadoop TestFailover), so by then nothing YARN
// runs there, and whatever ran was lost to the failover, not to a
// terminate: Release names it in Lost (what this process last saw
// running), which the op records.
func (d *Decommissioner) placeholderReleased(host string, now time.Time) (bool, string) {
	d.mu.Lock()
	mine := d.emptyExcluded[host]
	since, ok := d.placeholderSince[host]
	if !ok {
		since = now
		d.placeholderSince[host] = now
	}
	d.mu.Unlock()
	if mine {
		return true, "this broker excluded the host when it was empty under the cordon"
	}
	if settle := d.cfg.PlaceholderSettle; now.Sub(since) >= settle {
		return true, fmt.Sprintf("the new active RM has listed it only as its placeholder for %s (settle %s): its NodeManager was told to shut down", now.Sub(since).Round(time.Second), settle)
	}
	hs, err := d.cfg.Exclude.Hosts()
	if err != nil {
		return false, ""
	}
	for _, h := range hs {
		if h.Name == host && h.Timeout > 0 && h.Timeout == d.cfg.ShortTimeout {
			return true, fmt.Sprintf("its exclude entry has the short timeout %s the broker gives only an empty host", h.Timeout)
		}
	}
	return false, ""
}

// cordonHeld reports how long the cordon has held host (listed: the RM
// lists the label on it), and the hold Release needs before a
// decommission: the cordon's, or without one uncordonedEmptyHold, which a
// DECOMMISSIONING host must then have been empty for before its short
// timeout (an older scheduler may still place containers on it).
func (d *Decommissioner) cordonHeld(ctx context.Context, host string) (held time.Duration, listed bool, hold time.Duration) {
	if !d.cordonAvailable(ctx) {
		return 0, false, uncordonedEmptyHold
	}
	held, listed = d.cfg.Cordon.HeldFor(host)
	return held, listed, d.cfg.Cordon.Hold()
}

// cordonAvailable reports whether the cordon is configured and the
// cluster offers it.
func (d *Decommissioner) cordonAvailable(ctx context.Context) bool {
	if d.cfg.Cordon == nil {
		return false
	}
	ok, _ := d.cfg.Cordon.Available(ctx)
	return ok
}

// decommission writes host into the exclude file with timeout (an
// infinite entry is shortened to a finite one, never lengthened) and asks
// the RM to refresh gracefully.
func (d *Decommissioner) decommission(ctx context.Context, host string, n nodeInfo, timeout time.Duration) error {
	// IMPORTANT: the exclude file is written before refreshNodes: the RM
	// reads the file at refresh.
	changed, err := d.cfg.Exclude.Add(host, timeout)
	if err != nil {
		return err
	}
	if !changed && !schedulable(n.State) {
		return nil // the RM has it already
	}
	if err := d.cfg.Admin.RefreshNodes(ctx, rmadmin.Graceful, 0); err != nil {
		return rmError{fmt.Errorf("decommission %s: %w", host, err)}
	}
	d.cfg.Logger.Info("yarn node decommission requested", "node", host, "timeout", timeoutText(timeout), "state", n.State)
	d.mu.Lock()
	delete(d.restarted, host) // a new cycle: the next Admit restarts it
	d.mu.Unlock()
	return nil
}

// placeholder reports whether n is the entry an RM makes from its exclude
// file when it becomes active (NodesListManager.setDecommissionedNMs: an
// RMNodeImpl for host:-1 with no HTTP port and version "unknown"), not a
// NodeManager it decommissioned. An empty HTTP address alone is no sign:
// a NodeManager without its web UI (the test minicluster's) registers
// with none and is really decommissioned.
func placeholder(n nodeInfo) bool {
	if n.State != "DECOMMISSIONED" {
		return false
	}
	_, port, _ := strings.Cut(n.ID, ":")
	_, httpPort, _ := strings.Cut(n.NodeHTTPAddress, ":")
	return port == "-1" || httpPort == "-1" || strings.EqualFold(n.Version, "unknown")
}

// Cordon stops new containers from landing on node, keeping running ones:
// the cordon label (see Cordon). Without a cordon it fails: the exclude
// file is no cordon (a failover kills what runs on an excluded host).
func (d *Decommissioner) Cordon(ctx context.Context, node string) error {
	if d.cfg.Cordon == nil {
		return fmt.Errorf("cordon %s: no yarn cordon is configured (yarn.cordon_label)", node)
	}
	return d.cfg.Cordon.Apply(ctx, node)
}

var _ engine.Cordoner = (*Decommissioner)(nil)

// CordonAvailable reports whether the cluster offers the cordon, and if
// not, what is missing.
func (d *Decommissioner) CordonAvailable(ctx context.Context) (bool, string) {
	if d.cfg.Cordon == nil {
		return false, "no yarn cordon is configured"
	}
	return d.cfg.Cordon.Available(ctx)
}

// CordonPrior returns node's labels less the cordon label, for the
// executor to journal before Cordon replaces them.
func (d *Decommissioner) CordonPrior(ctx context.Context, node string) ([]string, error) {
	if d.cfg.Cordon == nil {
		return nil, fmt.Errorf("cordon %s: no yarn cordon is configured", node)
	}
	return d.cfg.Cordon.Prior(ctx, node)
}

// Uncordon restores node's labels to prior.
func (d *Decommissioner) Uncordon(ctx context.Context, node string, prior []string) error {
	if d.cfg.Cordon == nil {
		return fmt.Errorf("uncordon %s: no yarn cordon is configured", node)
	}
	return d.cfg.Cordon.Undo(ctx, node, prior)
}

// EnsureCordon re-applies the cordon on node when the latest observation
// lists it without the label.
func (d *Decommissioner) EnsureCordon(ctx context.Context, node string) (bool, error) {
	if d.cfg.Cordon == nil {
		return false, nil
	}
	return d.cfg.Cordon.Ensure(ctx, node)
}

// Admit recommissions node: it leaves the exclude file and the RM
// refreshes. A node still DECOMMISSIONING becomes RUNNING at once; a
// DECOMMISSIONED NodeManager has shut down, so Admit then runs the
// RestartNodeManager hook (when configured; once per RestartInterval) to
// start it again. A failing
// hook is logged and reported by Admitted, not returned: the host may be
// gone for good (the executor also admits a terminated host, to clear the
// exclude file). Admitted tells when the node is back.
func (d *Decommissioner) Admit(ctx context.Context, node string) error {
	removed, err := d.cfg.Exclude.Remove(node)
	if err != nil {
		return err
	}
	n, err := d.node(ctx, node)
	if err != nil {
		return err
	}
	if removed || n.State == "DECOMMISSIONING" {
		// IMPORTANT: a graceful refresh. A NORMAL one forcefully
		// decommissions every other excluded host that is not
		// DECOMMISSIONED yet (NodesListManager.handleExcludeNodeList),
		// killing the containers of nodes draining gracefully or by
		// attrition; a graceful one keeps their per-host timeouts.
		if err := d.refreshNodes(ctx); err != nil {
			return fmt.Errorf("recommission %s: %w", node, err)
		}
		d.cfg.Logger.Info("yarn node recommissioned", "node", node, "state", n.State)
	}
	d.mu.Lock()
	delete(d.seen, node)
	delete(d.emptyExcluded, node)
	d.mu.Unlock()
	// IMPORTANT: the NodeManager is restarted only after the host left the
	// exclude file and the RM refreshed: the RM tells a NodeManager that
	// registers while excluded to shut down again.
	if nmDown(n.State) {
		d.restart(ctx, node)
	}
	return nil
}

var _ engine.Capable = (*Decommissioner)(nil)

// Capabilities tells the engine what YARN's release does that it must
// know: any container that lands on a fenced host counts (a CPU container
// or an ApplicationMaster dies with a decommission as surely as a GPU
// container); Release without a deadline holds a busy host under the
// cordon, evicting nothing, until it is empty (drain by attrition); a
// preemption or migration signals its containers under the cordon, where
// the RM still delivers the signals; and without the cordon the fence is
// the graceful decommission, which stops placement and kills nothing.
func (d *Decommissioner) Capabilities() engine.SideCaps {
	return engine.SideCaps{CountsAllWork: true, ReleasesByAttrition: true, CordonsVictims: true, FencesByRelease: true}
}

// Forget takes a terminated host out of the exclude file and refreshes the
// RM, so a later machine that reuses its name is not turned away, without
// running the restart hook (Admit would try to start a NodeManager on a
// machine that is going away). The executor calls it after terminating a
// node taken from YARN.
func (d *Decommissioner) Forget(ctx context.Context, host string) error {
	removed, err := d.cfg.Exclude.Remove(host)
	if err != nil {
		return err
	}
	if removed {
		// Graceful, as in Admit: other draining hosts keep their timeouts.
		if err := d.refreshNodes(ctx); err != nil {
			return fmt.Errorf("forget %s: %w", host, err)
		}
	}
	d.mu.Lock()
	delete(d.seen, host)
	delete(d.restarted, host)
	delete(d.emptyExcluded, host)
	d.mu.Unlock()
	return nil
}

// nmDown reports whether a node in RM state s has no NodeManager running
// for it ("" : the RM does not list it).
func nmDown(s string) bool {
	return s == "" || s == "DECOMMISSIONED" || s == "SHUTDOWN" || s == "LOST"
}

// restart runs the RestartNodeManager hook for host unless it ran less
// than RestartInterval ago in this decommission cycle (a repeated Admit
// does not restart a NodeManager that is still coming up).
func (d *Decommissioner) restart(ctx context.Context, host string) {
	if d.cfg.RestartNodeManager == nil {
		return
	}
	d.mu.Lock()
	last, ran := d.restarted[host]
	d.mu.Unlock()
	if ran && d.cfg.Now().Sub(last.at) < d.cfg.RestartInterval {
		return
	}
	err := d.cfg.RestartNodeManager(ctx, host)
	d.mu.Lock()
	d.restarted[host] = restartRun{at: d.cfg.Now(), err: err}
	d.mu.Unlock()
	if err != nil {
		d.cfg.Logger.Warn("yarn nodemanager restart hook failed", "node", host, "err", err)
		return
	}
	d.cfg.Logger.Info("yarn nodemanager restart hook ran", "node", host)
}

var (
	_ engine.AdmitChecker = (*Decommissioner)(nil)
	_ engine.Forgetter    = (*Decommissioner)(nil)
)

// Admitted reports whether the RM lists node RUNNING with yarn.io/gpu and
// the host is out of the exclude file: only then has a hand-over to YARN
// completed. While the NodeManager is down it runs the restart hook again,
// at most every RestartInterval; why says what the RM reports instead,
// with the hook's last error. A failed REST read is an error.
func (d *Decommissioner) Admitted(ctx context.Context, node string) (bool, string, error) {
	excluded, err := d.cfg.Exclude.Contains(node)
	if err != nil {
		return false, "", err
	}
	if excluded {
		return false, fmt.Sprintf("host %s is still in the exclude file %s", node, d.cfg.Exclude.Path()), nil
	}
	n, err := d.node(ctx, node)
	if err != nil {
		return false, "", err
	}
	gpus := resourceValue(n.TotalResource, GPUResource, func(*resourceInfo) flexInt { return 0 })
	if n.State == "RUNNING" && gpus > 0 {
		d.mu.Lock()
		delete(d.restarted, node)
		d.mu.Unlock()
		return true, "", nil
	}
	var why string
	switch {
	case n.State == "":
		why = fmt.Sprintf("the RM does not list host %s: its NodeManager has not registered", node)
	case n.State == "RUNNING":
		why = fmt.Sprintf("node %s is RUNNING without %s", node, GPUResource)
	default:
		why = fmt.Sprintf("node %s is %s", node, n.State)
	}
	if nmDown(n.State) {
		d.restart(ctx, node)
		if d.cfg.RestartNodeManager == nil {
			why += " (no yarn.nodemanager_restart hook: waiting for its service manager to restart the NodeManager)"
		}
	}
	d.mu.Lock()
	last, ran := d.restarted[node]
	d.mu.Unlock()
	if ran && last.err != nil {
		why += "; restart hook: " + last.err.Error()
	}
	return false, why, nil
}

// Recommission admits host and waits, polling every poll, until Admitted
// reports it RUNNING with its GPUs or ctx ends.
func (d *Decommissioner) Recommission(ctx context.Context, host string, poll time.Duration) error {
	if err := d.Admit(ctx, host); err != nil {
		return err
	}
	for {
		ok, why, err := d.Admitted(ctx, host)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("recommission %s: %s: %w", host, why, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// SetGPUs sets the node's total yarn.io/gpu to gpus through
// updateNodeResource, keeping its memory and vcores, for a quick
// reversible hand-over; containers above the new total are preempted after
// overCommit (negative: never). The node keeps that total until its
// NodeManager re-registers; it survives an RM restart or failover only
// once the NodeManager has heard it in a heartbeat answer (test/hadoop
// TestFailover).
func (d *Decommissioner) SetGPUs(ctx context.Context, host string, gpus int, overCommit time.Duration) error {
	n, err := d.node(ctx, host)
	if err != nil {
		return err
	}
	if n.State == "" {
		return fmt.Errorf("set gpus of %s: %w", host, broker.ErrNotFound)
	}
	r := rmadmin.Resource{
		MemoryMB: resourceValue(n.TotalResource, "memory-mb", func(r *resourceInfo) flexInt { return r.Memory }),
		VCores:   int32(resourceValue(n.TotalResource, "vcores", func(r *resourceInfo) flexInt { return r.VCores })),
		Others:   map[string]int64{GPUResource: int64(gpus)},
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = int64(n.UsedMemoryMB + n.AvailMemoryMB)
	}
	if err := d.cfg.Admin.UpdateNodeResource(ctx, n.ID, r, overCommit); err != nil {
		return fmt.Errorf("set gpus of %s: %w", host, err)
	}
	d.cfg.Logger.Info("yarn node gpus set", "node", host, "gpus", gpus)
	return nil
}

// resourceValue returns a resource type's value (memory-mb, vcores, ...),
// falling back to the legacy field; 0 when absent.
func resourceValue(r *resourceInfo, name string, legacy func(*resourceInfo) flexInt) int64 {
	if r == nil {
		return 0
	}
	if v, ok := r.get(name); ok {
		return v
	}
	return int64(legacy(r))
}

// node returns host's RM record (see nodeOf).
func (d *Decommissioner) node(ctx context.Context, host string) (nodeInfo, error) {
	return nodeOf(ctx, d.cfg.Client, host)
}

// nodeOf returns host's RM record; State is "" when the RM does not know
// it. A host that appears twice (a restarted NodeManager; a placeholder
// beside the entry of the NodeManager that registered again) is taken in
// its live entry, else its real one.
func nodeOf(ctx context.Context, c *Client, host string) (nodeInfo, error) {
	var resp nodesResponse
	if _, err := c.Get(ctx, PathNodes, &resp); err != nil {
		return nodeInfo{}, fmt.Errorf("read state of node %s: %w", host, err)
	}
	var found nodeInfo
	if resp.Nodes == nil {
		return found, nil
	}
	for _, n := range resp.Nodes.Node {
		h := n.NodeHostName
		if h == "" {
			h, _, _ = strings.Cut(n.ID, ":")
		}
		if h != host {
			continue
		}
		if found.State == "" || (!liveNodeState(found.State) && liveNodeState(n.State)) ||
			found.State == "DECOMMISSIONED" && n.State == "DECOMMISSIONING" ||
			placeholder(found) && n.State == "DECOMMISSIONED" && !placeholder(n) {
			found = n
		}
	}
	return found, nil
}

// containers names the containers running on n from its NodeManager's
// REST API (/ws/v1/node/containers); when that does not answer, or lists
// none while the RM still counts some, a count.
func (d *Decommissioner) containers(ctx context.Context, n nodeInfo) []string {
	if out, ok := d.nmContainers(ctx, n); ok && len(out) > 0 {
		return out
	}
	return []string{strconv.Itoa(int(n.NumContainers)) + " containers"}
}

// nmContainers lists the live containers n's NodeManager reports, and
// false when it does not answer.
func (d *Decommissioner) nmContainers(ctx context.Context, n nodeInfo) ([]string, bool) {
	if n.NodeHTTPAddress == "" {
		return nil, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.NodeHTTPAddress+"/ws/v1/node/containers", nil)
	if err != nil {
		return nil, false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := d.cfg.HTTP.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var body struct {
		Containers *struct {
			Container list[struct {
				ID    string `json:"id"`
				State string `json:"state"`
			}] `json:"container"`
		} `json:"containers"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil, false
	}
	var out []string
	if body.Containers != nil {
		for _, c := range body.Containers.Container {
			switch c.State {
			case "COMPLETE", "DONE", "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE":
				continue
			}
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out, true
}

// NodeManagerRestartCommand returns a RestartNodeManager hook that runs
// argv with the host name appended as the last argument, bounded by
// timeout: ["/usr/local/bin/restart-nm"] runs "restart-nm gpu-7", a script
// that might ssh to the host and "systemctl restart
// hadoop-yarn-nodemanager". A non-zero exit is an error carrying the end
// of its output.
func NodeManagerRestartCommand(argv []string, timeout time.Duration) (func(ctx context.Context, host string) error, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("nodemanager restart command: the command must be set")
	}
	if timeout <= 0 {
		return nil, errors.New("nodemanager restart command: the timeout must be positive")
	}
	argv = slices.Clone(argv)
	return func(ctx context.Context, host string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], host)...)
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("restart nodemanager of %s: %s did not finish within %s", host, argv[0], timeout)
		}
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if len(msg) > 300 {
				msg = "..." + msg[len(msg)-300:]
			}
			return fmt.Errorf("restart nodemanager of %s: %s: %w: %s", host, argv[0], err, msg)
		}
		return nil
	}, nil
}
