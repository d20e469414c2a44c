package yarn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// The YARN cordon. The exclude file cannot hold a busy node: a new active
// RM (failover or restart) turns every excluded host into a DECOMMISSIONED
// placeholder and answers SHUTDOWN to its NodeManager, whose containers
// die. The cordon is an exclusive node label that no queue asks for: set
// on a host with replaceLabelsOnNode, it moves the host into a partition
// where nothing new is placed, while its running containers keep running
// (the CapacityScheduler re-accounts them, it does not kill them). The RM
// keeps node labels in its node-label store (on shared storage such as
// HDFS in an HA pair), so the label survives a failover; the broker also
// checks the label on every observation and re-applies it when it is
// missing (Ensure).

// DefaultCordonLabel is the exclusive node label the broker cordons with.
const DefaultCordonLabel = "gpubroker-cordon"

// DefaultCordonHold is how long the cordon must have held on an empty host
// before the host may enter the exclude file.
//
// The RM counts every container its scheduler allocated on a node in the
// node's numContainers (and used resources) from the allocation on,
// launched or not: measured on Hadoop 3.3.6 and 3.5.0 (test/hadoop
// TestContract: an unmanaged AM's containers, allocated and never
// launched, count on their nodes; with its NodeManager holding none). So a
// host the RM reports empty holds no allocation either, and Release checks
// exactly that before the exclude file. The hold only has to outlast an
// allocation the scheduler was making when the cordon's label reached it
// (a node-label update is an event the scheduler applies between
// allocations, async scheduling commits proposals within milliseconds):
// 30 seconds is many scheduler heartbeats. (Until 2026-12 it was 10m30s,
// the allocation expiry interval, on the assumption that an allocated but
// unlaunched container would not show on the node.)
const DefaultCordonHold = 30 * time.Second

// uncordonedEmptyHold is how long a DECOMMISSIONING host without the
// cordon must have been empty before its short timeout: without a cordon
// an older scheduler (Hadoop 3.3) may still place a container there at any
// heartbeat, so this is a margin, not a guarantee — the RM's container
// allocation expiry interval (10 minutes) and a heartbeat.
const uncordonedEmptyHold = 10*time.Minute + 30*time.Second

// Labeler is the part of the RM admin protocol the cordon uses;
// RMAdminLabeler implements it on *rmadmin.Client.
type Labeler interface {
	// AddExclusiveLabel adds name to the cluster's node labels as an
	// exclusive label; an existing exclusive label is no error.
	AddExclusiveLabel(ctx context.Context, name string) error
	// ReplaceLabelsOnNode sets the labels of each host (or host:port).
	ReplaceLabelsOnNode(ctx context.Context, labels map[string][]string, failOnUnknownNodes bool) error
}

// CordonConfig configures a Cordon.
type CordonConfig struct {
	// Client reads node labels from the RM's REST API and the scheduler's
	// type.
	Client *Client
	// Admin adds the label and sets it on hosts.
	Admin Labeler
	// Label is the exclusive node label (default DefaultCordonLabel). No
	// queue may have it as its default node-label expression.
	Label string
	// Hold is how long the cordon must have held on an empty host before
	// a decommission (default DefaultCordonHold).
	Hold time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the startup warning and one line per action.
	Logger *slog.Logger
	// ProbeInterval spaces probes that failed for a reason that may pass
	// (the RM unreachable) (default 1m).
	ProbeInterval time.Duration
}

// Cordon sets and clears the broker's cordon label on YARN hosts, and
// remembers from each observation which hosts carry it. It is safe for
// concurrent use.
type Cordon struct {
	cfg CordonConfig

	mu sync.Mutex
	// probed is set once the cluster answered the probe for good: ok, or
	// refused with why.
	probed    bool
	ok        bool
	why       string
	lastProbe time.Time
	// labels are the hosts' labels in the latest observation; since is,
	// per host, since when it has carried the cordon label without a gap.
	labels map[string][]string
	since  map[string]time.Time
}

// NewCordon returns a Cordon for cfg.
func NewCordon(cfg CordonConfig) (*Cordon, error) {
	if cfg.Client == nil || cfg.Admin == nil {
		return nil, errors.New("yarn cordon: Client and Admin must be set")
	}
	if cfg.Label == "" {
		cfg.Label = DefaultCordonLabel
	}
	if err := CheckLabelName(cfg.Label); err != nil {
		return nil, fmt.Errorf("yarn cordon: %w", err)
	}
	if cfg.Hold == 0 {
		cfg.Hold = DefaultCordonHold
	}
	if cfg.Hold < 0 {
		return nil, errors.New("yarn cordon: Hold must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Minute
	}
	return &Cordon{cfg: cfg, labels: map[string][]string{}, since: map[string]time.Time{}}, nil
}

// CheckLabelName applies YARN's rule for node label names
// (NodeLabelUtil.checkAndThrowLabelName: letters, digits, '-' and '_',
// starting with a letter or digit, at most 255 characters), so a bad
// cordon label is refused at startup, not by the RM at the first cordon.
func CheckLabelName(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("label %q is longer than 255 characters", s)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_')
		if !ok {
			return fmt.Errorf("label %q: use letters, digits, '-' and '_', starting with a letter or digit", s)
		}
	}
	return nil
}

// Label returns the cordon label.
func (c *Cordon) Label() string { return c.cfg.Label }

// Hold returns how long the cordon must hold on an empty host before a
// decommission.
func (c *Cordon) Hold() time.Duration { return c.cfg.Hold }

// Available probes, once, whether the cluster can offer the cordon: a
// CapacityScheduler (the FairScheduler ignores node labels), node labels
// enabled (yarn.node-labels.enabled) and the centralized node-label
// configuration (so the admin protocol may set a host's labels). A refusal
// the probe recognises is final: it logs one warning naming what is
// missing and returns false with why ever after. Any other failure (the
// RM unreachable) returns false and is probed again after ProbeInterval.
func (c *Cordon) Available(ctx context.Context) (bool, string) {
	c.mu.Lock()
	if c.probed || (!c.lastProbe.IsZero() && c.cfg.Now().Sub(c.lastProbe) < c.cfg.ProbeInterval) {
		ok, why := c.ok, c.why
		c.mu.Unlock()
		return ok, why
	}
	c.lastProbe = c.cfg.Now()
	c.mu.Unlock()
	ok, final, why := c.probe(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ok, c.why = ok, why
	if final && !c.probed {
		c.probed = true
		if ok {
			c.cfg.Logger.Info("yarn cordon available", "label", c.cfg.Label, "hold", c.cfg.Hold)
		} else {
			c.cfg.Logger.Warn("yarn cordon unavailable: busy YARN nodes are left alone (no drain by attrition, no fence or preemption of a busy node)",
				"label", c.cfg.Label, "missing", why)
		}
	}
	return ok, why
}

// probe asks the RM; final is false when the answer may change.
func (c *Cordon) probe(ctx context.Context) (ok, final bool, why string) {
	var resp schedulerResponse
	if _, err := c.cfg.Client.Get(ctx, PathScheduler, &resp); err != nil {
		return false, false, fmt.Sprintf("cannot read the RM's scheduler yet: %s", err)
	}
	if resp.Scheduler != nil && resp.Scheduler.SchedulerInfo != nil {
		if t := resp.Scheduler.SchedulerInfo.Type; t != "" && t != "capacityScheduler" {
			return false, true, fmt.Sprintf("the RM runs the %s: node labels need the CapacityScheduler", t)
		}
	}
	if err := c.cfg.Admin.AddExclusiveLabel(ctx, c.cfg.Label); err != nil {
		if why, known := labelRefusal(err); known {
			return false, true, why
		}
		return false, false, fmt.Sprintf("add node label %s: %s", c.cfg.Label, err)
	}
	// A replacement on a host no RM knows, refused for that (failOn-
	// UnknownNodes), changes nothing: it only meets the AdminService's
	// check that refuses replaceLabelsOnNode unless the node-label
	// configuration is centralized, which comes first.
	err := c.cfg.Admin.ReplaceLabelsOnNode(ctx, map[string][]string{probeHost: {}}, true)
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "unknown nodes") {
		if why, known := labelRefusal(err); known {
			return false, true, why
		}
		return false, false, fmt.Sprintf("replace labels on a host no RM knows: %s", err)
	}
	return true, true, ""
}

// probeHost is a host name no cluster has (.invalid, RFC 2606).
const probeHost = "gpubroker-probe.invalid"

// RMAdminLabeler is the RM admin client as the cordon's Labeler.
type RMAdminLabeler struct{ *rmadmin.Client }

var _ Labeler = RMAdminLabeler{}

// AddExclusiveLabel adds name as an exclusive cluster node label.
func (l RMAdminLabeler) AddExclusiveLabel(ctx context.Context, name string) error {
	return l.AddToClusterNodeLabels(ctx, []rmadmin.NodeLabel{{Name: name, Exclusive: true}})
}

// labelRefusal recognises the RM's answers that mean the cluster cannot
// offer the cordon, and says what is missing.
func labelRefusal(err error) (string, bool) {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "node-label-based scheduling is disabled"), strings.Contains(msg, "yarn.node-labels.enabled"),
		strings.Contains(msg, "node labels not enabled"), strings.Contains(msg, "nodelabels are not enabled"):
		return "node labels are disabled on the RM (set yarn.node-labels.enabled=true)", true
	case strings.Contains(msg, "distributed node label configuration"), strings.Contains(msg, "centralized node label configuration"),
		strings.Contains(msg, "delegated-centralized"):
		return "the RM's node-label configuration is not centralized (set yarn.node-labels.configuration-type=centralized)", true
	case strings.Contains(msg, "exclusivity cannot be modified"):
		return "the cluster already has the cordon label as a non-exclusive label: remove it or configure another label", true
	}
	return "", false
}

// Observed records the hosts' labels from an observation just taken, on
// the cordon's clock. Hosts the observation does not list keep what was
// known of them: an RM that just failed over lists NodeManagers only as
// they register again.
func (c *Cordon) Observed(nodes []Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.cfg.Now()
	for _, n := range nodes {
		switch n.State {
		case "DECOMMISSIONED", "LOST", "SHUTDOWN":
			// No NodeManager serves there (a placeholder has no labels):
			// nothing can land, and there is no label to re-apply.
			delete(c.labels, n.Host)
			continue
		}
		c.seenLocked(n.Host, n.Labels, at)
	}
}

func (c *Cordon) seenLocked(host string, labels []string, at time.Time) {
	c.labels[host] = slices.Clone(labels)
	if slices.Contains(labels, c.cfg.Label) {
		if _, ok := c.since[host]; !ok {
			c.since[host] = at
		}
		return
	}
	delete(c.since, host)
}

// seen records one host's labels from a fresh node read.
func (c *Cordon) seen(host string, labels []string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seenLocked(host, labels, at)
}

// HeldFor reports how long the RM has listed host with the cordon label
// without a gap, as this process saw it (zero after a restart of the
// broker, or once the label was seen missing: the hold starts again), and
// false when the last look did not show the label.
func (c *Cordon) HeldFor(host string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok := c.since[host]
	if !ok {
		return 0, false
	}
	return max(c.cfg.Now().Sub(since), 0), true
}

// Prior reads host's labels from the RM, less the cordon label: what
// undoing the cordon puts back. A host the RM does not list has no known
// labels: an error, so nothing is cordoned without its prior journaled.
func (c *Cordon) Prior(ctx context.Context, host string) ([]string, error) {
	n, err := nodeOf(ctx, c.cfg.Client, host)
	if err != nil {
		return nil, err
	}
	if n.State == "" {
		return nil, fmt.Errorf("read labels of host %s: the RM does not list it", host)
	}
	c.seen(host, n.NodeLabels, c.cfg.Now())
	var prior []string
	for _, l := range n.NodeLabels {
		if l != c.cfg.Label && l != "" {
			prior = append(prior, l)
		}
	}
	if len(prior) < len(n.NodeLabels) {
		c.cfg.Logger.Warn("host already carries the cordon label: undoing this cordon leaves it in the default partition", "node", host, "label", c.cfg.Label)
	}
	return prior, nil
}

// Apply sets the cordon label on host (replacing its partition label: a
// YARN node has at most one). Running containers keep running; nothing
// new is placed there, as no request names the label.
func (c *Cordon) Apply(ctx context.Context, host string) error {
	if ok, why := c.Available(ctx); !ok {
		return fmt.Errorf("cordon host %s: the cluster cannot offer the yarn cordon: %s", host, why)
	}
	if err := c.cfg.Admin.ReplaceLabelsOnNode(ctx, map[string][]string{host: {c.cfg.Label}}, false); err != nil {
		return fmt.Errorf("cordon host %s: replace its node labels with %s: %w", host, c.cfg.Label, err)
	}
	c.cfg.Logger.Info("yarn node cordoned", "node", host, "label", c.cfg.Label)
	return nil
}

// Undo puts prior back as host's labels, ending the cordon.
func (c *Cordon) Undo(ctx context.Context, host string, prior []string) error {
	labels := slices.Clone(prior)
	if labels == nil {
		labels = []string{}
	}
	if err := c.cfg.Admin.ReplaceLabelsOnNode(ctx, map[string][]string{host: labels}, false); err != nil {
		return fmt.Errorf("uncordon host %s: restore its node labels %v: %w", host, prior, err)
	}
	c.mu.Lock()
	delete(c.since, host)
	c.mu.Unlock()
	c.cfg.Logger.Info("yarn node uncordoned", "node", host, "labels", prior)
	return nil
}

// Ensure re-applies the cordon on host when the latest observation lists
// the host without the label (a label store that did not survive an RM
// failover, an operator's edit), and reports whether it did. A host the
// observation does not list is left as it is.
func (c *Cordon) Ensure(ctx context.Context, host string) (bool, error) {
	c.mu.Lock()
	labels, listed := c.labels[host]
	c.mu.Unlock()
	if !listed || slices.Contains(labels, c.cfg.Label) {
		return false, nil
	}
	c.cfg.Logger.Warn("yarn cordon missing from a host the broker holds: re-applying it", "node", host, "labels", labels)
	if err := c.Apply(ctx, host); err != nil {
		return false, err
	}
	c.mu.Lock()
	c.labels[host] = []string{c.cfg.Label}
	c.mu.Unlock()
	return true, nil
}

// Cordoned reports whether labels carry the cordon label.
func (c *Cordon) Cordoned(labels []string) bool { return slices.Contains(labels, c.cfg.Label) }
