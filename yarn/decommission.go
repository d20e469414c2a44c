package yarn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
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
	// CordonTimeout is the graceful timeout of a decommission started by
	// Cordon, which has no deadline of its own (default 24h).
	CordonTimeout time.Duration
	// HTTP reaches NodeManager REST APIs for container names (default: a
	// client with a 3s timeout). A NodeManager that does not answer is
	// reported by its container count alone.
	HTTP *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives one line per action (default: discarded).
	Logger *slog.Logger
}

// Decommissioner takes NodeManagers away from YARN and gives them back:
// graceful decommission through the exclude file and refreshNodes, and
// recommission the same way. It implements broker.SideActions; every
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
}

type decomState struct {
	until      time.Time
	containers []string
}

var _ broker.SideActions = (*Decommissioner)(nil)

// NewDecommissioner returns a Decommissioner for cfg.
func NewDecommissioner(cfg DecommissionConfig) (*Decommissioner, error) {
	if cfg.Client == nil || cfg.Admin == nil || cfg.Exclude == nil {
		return nil, errors.New("yarn decommissioner: Client, Admin and Exclude must be set")
	}
	if cfg.CordonTimeout == 0 {
		cfg.CordonTimeout = 24 * time.Hour
	}
	if cfg.CordonTimeout < 0 {
		return nil, errors.New("yarn decommissioner: CordonTimeout must not be negative")
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
	return &Decommissioner{cfg: cfg, seen: map[string]*decomState{}}, nil
}

// Source reports the YARN side.
func (d *Decommissioner) Source() broker.Source { return broker.SourceYARN }

// DecommissionStatus is how far a graceful decommission has come.
type DecommissionStatus struct {
	// State is the node's RM state ("" when the RM does not know the host).
	State string
	// NodeID is host:port as the RM knows the node.
	NodeID string
	// Containers are the containers running on the node: their ids when
	// the NodeManager's REST API answers, else "N containers".
	Containers []string
	// Done is true when the node is DECOMMISSIONED (or unknown to the RM).
	Done bool
	// TimedOut is true when the graceful timeout ended the decommission
	// with containers still running; CutOff names them.
	TimedOut bool
	CutOff   []string
}

// Decommission runs one step of a graceful decommission of host with the
// given timeout: it puts host in the exclude file with the timeout (an
// entry already there keeps its own), asks the RM to refresh gracefully
// while the node is still schedulable, and reports the node's state and
// containers. Calling it again only reports progress.
func (d *Decommissioner) Decommission(ctx context.Context, host string, timeout time.Duration) (DecommissionStatus, error) {
	if timeout < time.Second {
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
		return DecommissionStatus{}, err
	}
	if added || schedulable(n.State) {
		if err := d.cfg.Admin.RefreshNodes(ctx, rmadmin.Graceful, 0); err != nil {
			return DecommissionStatus{}, fmt.Errorf("decommission %s: %w", host, err)
		}
		d.cfg.Logger.Info("yarn node decommission requested", "node", host, "timeout", timeout, "state", n.State)
		d.mu.Lock()
		if d.seen[host] == nil || added {
			d.seen[host] = &decomState{until: d.cfg.Now().Add(timeout)}
		}
		d.mu.Unlock()
		if n, err = d.node(ctx, host); err != nil {
			return DecommissionStatus{}, err
		}
	}
	return d.status(ctx, host, n), nil
}

// status turns a node's REST view into a DecommissionStatus.
func (d *Decommissioner) status(ctx context.Context, host string, n restNode) DecommissionStatus {
	st := DecommissionStatus{State: n.State, NodeID: n.ID}
	d.mu.Lock()
	defer d.mu.Unlock()
	mem := d.seen[host]
	switch n.State {
	case "", "DECOMMISSIONED":
		st.Done = true
		// The RM ends a graceful decommission at its timeout with whatever
		// still runs; what ran at the last look before it was cut off.
		if mem != nil && len(mem.containers) > 0 && !d.cfg.Now().Before(mem.until) {
			st.TimedOut, st.CutOff = true, slices.Clone(mem.containers)
		}
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

// Release decommissions node gracefully with the time left until deadline
// as its timeout, and reports the containers still running.
func (d *Decommissioner) Release(ctx context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error) {
	st, err := d.Decommission(ctx, node, deadline.Sub(d.cfg.Now()))
	if err != nil {
		return broker.ReleaseStatus{}, err
	}
	if st.Done {
		if st.TimedOut {
			d.cfg.Logger.Warn("yarn graceful decommission timed out", "node", node, "cut_off", st.CutOff)
		}
		return broker.ReleaseStatus{Drained: true}, nil
	}
	rs := broker.ReleaseStatus{Remaining: st.Containers}
	if st.State != "DECOMMISSIONING" {
		rs.BlockedBy = "node is " + st.State
	}
	return rs, nil
}

// Cordon starts a graceful decommission with the configured CordonTimeout:
// no new containers land on node; running ones finish.
func (d *Decommissioner) Cordon(ctx context.Context, node string) error {
	_, err := d.Decommission(ctx, node, d.cfg.CordonTimeout)
	return err
}

// Admit recommissions node: it leaves the exclude file and the RM
// refreshes. A node still DECOMMISSIONING becomes RUNNING at once; a
// DECOMMISSIONED NodeManager has shut down and registers again when its
// service manager restarts it (see Recommission to wait for that).
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
		if err := d.cfg.Admin.RefreshNodes(ctx, rmadmin.Normal, 0); err != nil {
			return fmt.Errorf("recommission %s: %w", node, err)
		}
		d.cfg.Logger.Info("yarn node recommissioned", "node", node, "state", n.State)
	}
	d.mu.Lock()
	delete(d.seen, node)
	d.mu.Unlock()
	return nil
}

// Recommission admits host and waits, polling every poll, until its
// NodeManager is RUNNING again or ctx ends.
func (d *Decommissioner) Recommission(ctx context.Context, host string, poll time.Duration) error {
	if err := d.Admit(ctx, host); err != nil {
		return err
	}
	for {
		n, err := d.node(ctx, host)
		if err != nil {
			return err
		}
		if n.State == "RUNNING" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("recommission %s: node is %s: %w", host, n.State, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// Evict is not supported on YARN: the RM admin protocol has no call that
// kills one container, and killing applications is the YARN client
// protocol's business.
func (d *Decommissioner) Evict(_ context.Context, node string, w broker.Workload) error {
	return fmt.Errorf("evict %s from %s: yarn container preemption is not implemented: %w", w.Key, node, errors.ErrUnsupported)
}

// SetGPUs sets the node's total yarn.io/gpu to gpus through
// updateNodeResource, keeping its memory and vcores, for a quick
// reversible hand-over; containers above the new total are preempted after
// overCommit (negative: never). The node keeps that total until its
// NodeManager re-registers.
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

// restNode is the part of the RM's node record decommissioning needs.
type restNode struct {
	ID              string        `json:"id"`
	NodeHostName    string        `json:"nodeHostName"`
	NodeHTTPAddress string        `json:"nodeHTTPAddress"`
	State           string        `json:"state"`
	NumContainers   flexInt       `json:"numContainers"`
	UsedMemoryMB    flexInt       `json:"usedMemoryMB"`
	AvailMemoryMB   flexInt       `json:"availMemoryMB"`
	TotalResource   *resourceInfo `json:"totalResource"`
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

// node returns host's RM record; State is "" when the RM does not know it.
// A host that appears twice (a restarted NodeManager) is taken in its
// live entry.
func (d *Decommissioner) node(ctx context.Context, host string) (restNode, error) {
	var resp struct {
		Nodes *struct {
			Node list[restNode] `json:"node"`
		} `json:"nodes"`
	}
	if _, err := d.cfg.Client.Get(ctx, PathNodes, &resp); err != nil {
		return restNode{}, fmt.Errorf("read state of node %s: %w", host, err)
	}
	var found restNode
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
		if found.State == "" || (!liveNodeState(found.State) && liveNodeState(n.State)) || found.State == "DECOMMISSIONED" && n.State == "DECOMMISSIONING" {
			found = n
		}
	}
	return found, nil
}

// containers names the containers running on n from its NodeManager's
// REST API (/ws/v1/node/containers); when that does not answer, a count.
func (d *Decommissioner) containers(ctx context.Context, n restNode) []string {
	count := []string{strconv.Itoa(int(n.NumContainers)) + " containers"}
	if n.NodeHTTPAddress == "" {
		return count
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.NodeHTTPAddress+"/ws/v1/node/containers", nil)
	if err != nil {
		return count
	}
	req.Header.Set("Accept", "application/json")
	resp, err := d.cfg.HTTP.Do(req)
	if err != nil {
		return count
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
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || body.Containers == nil {
		return count
	}
	var out []string
	for _, c := range body.Containers.Container {
		switch c.State {
		case "COMPLETE", "DONE", "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE":
			continue
		}
		out = append(out, c.ID)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return count // the RM still counts them: not yet reported done
	}
	return out
}
