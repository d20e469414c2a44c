// Package fleet is the node pool of machines a company owns: a fixed set
// of hosts, named in the configuration, shared between YARN and
// Kubernetes with no cloud behind them.
//
// A fleet pool's size is what exists. The broker never grows or shrinks
// it and never terminates one of its hosts: it places demand on the
// fleet's free GPUs, hands idle hosts between the sides, preempts across
// them and drains by attrition as for any pool, and where a cloud pool
// would replace a faulty node it cordons the host and reports it.
//
// A pool names its members by host name, by Kubernetes node labels (a node
// selector) or by YARN partition. A host is a member once either side
// lists a node of that name (a Kubernetes node or a YARN NodeManager
// host): a configured host that neither side lists is a machine that is
// off, or not installed yet, and is no capacity. A node a selector or a
// partition names is a member while its side lists it. Until the broker has listed the sides once (the first
// tick after a start), every configured host is a member: one neither
// side lists then looks like a machine on its way for that tick, so the
// broker waits for it rather than buying in a cloud pool beside the fleet
// (the end-to-end test caught that purchase when the fleet was reported
// stale instead).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Pool is one fleet pool: its definition (Provider broker.ProviderFleet;
// MinNodes and MaxNodes are ignored: they are the hosts present) and how
// its members are named: hosts by name, Kubernetes nodes by their labels,
// NodeManagers by their YARN partition; a node any of them names is a
// member.
type Pool struct {
	broker.Pool
	Members
}

// Members names a fleet pool's nodes.
type Members struct {
	// Hosts are node names as both sides list them.
	Hosts []string
	// NodeSelector makes every Kubernetes node carrying all these labels
	// a member.
	NodeSelector map[string]string
	// YARNPartition makes every NodeManager in this YARN partition (node
	// label) a member.
	YARNPartition string
}

// bySides reports whether the pool names members by what a side lists
// (labels, a partition) rather than by host names alone.
func (p *Pool) bySides() bool { return len(p.NodeSelector) > 0 || p.YARNPartition != "" }

// names reports whether the pool names node n that side src lists.
func (p *Pool) names(src broker.Source, n *broker.Node) bool {
	if slices.Contains(p.Hosts, n.Name) {
		return true
	}
	switch {
	case src == broker.SourceK8s && len(p.NodeSelector) > 0:
		for k, v := range p.NodeSelector {
			if n.Labels[k] != v {
				return false
			}
		}
		return true
	case src == broker.SourceYARN && p.YARNPartition != "":
		return n.Partition == p.YARNPartition
	}
	return false
}

// NodePool is an engine.NodePool over fleet pools. It is safe for
// concurrent use.
type NodePool struct {
	pools []Pool
	host  map[string]string // host → pool

	mu sync.Mutex
	// registered holds the node names either side listed last; nil until
	// ObserveRegistered is first called.
	registered map[string]struct{}
	// listed are the nodes each side listed last (ObserveNodes), for the
	// members named by labels or partition; listedOnce[src] is closed
	// once src was first listed.
	listed     map[broker.Source][]broker.Node
	listedOnce map[broker.Source]chan struct{}
	// waited is set once a Pools call has waited for the first listing:
	// later calls never wait (a side that cannot be listed must not slow
	// every tick by the observe timeout).
	waited bool
}

var _ engine.NodePool = (*NodePool)(nil)

// New returns a NodePool over pools. A pool must be a fleet pool and name
// at least one host; a host may belong to one pool only.
func New(pools []Pool) (*NodePool, error) {
	f := &NodePool{host: map[string]string{}, listed: map[broker.Source][]broker.Node{},
		listedOnce: map[broker.Source]chan struct{}{broker.SourceK8s: make(chan struct{}), broker.SourceYARN: make(chan struct{})}}
	names := map[string]bool{}
	for i, p := range pools {
		prefix := fmt.Sprintf("pools[%d]", i)
		if !p.Fleet() {
			return nil, broker.Invalid(prefix+".provider", "pool %q is not a fleet pool (provider %q); only provider %q pools name hosts", p.Name, p.Provider, broker.ProviderFleet)
		}
		if err := p.Validate(); err != nil {
			return nil, broker.WithPrefix(prefix, err)
		}
		if names[p.Name] {
			return nil, broker.Invalid(prefix+".name", "pool %q is defined twice", p.Name)
		}
		names[p.Name] = true
		if len(p.Hosts) == 0 && !p.bySides() {
			return nil, broker.Invalid(prefix+".hosts", "a fleet pool names its members: hosts (the node names both sides list, e.g. [gpu-01.example.com]), a node_selector (Kubernetes node labels) or a yarn_partition; pool %q names none", p.Name)
		}
		for k := range p.NodeSelector {
			if k == "" {
				return nil, broker.Invalid(prefix+".node_selector", "a label key must not be empty")
			}
		}
		for j, h := range p.Hosts {
			if err := checkHost(h); err != nil {
				return nil, broker.Invalid(fmt.Sprintf("%s.hosts[%d]", prefix, j), "%s", err)
			}
			if other, dup := f.host[h]; dup {
				return nil, broker.Invalid(fmt.Sprintf("%s.hosts[%d]", prefix, j), "host %q is already a member of pool %q: a host belongs to one pool", h, other)
			}
			f.host[h] = p.Name
		}
		p.Hosts = slices.Clone(p.Hosts)
		sort.Strings(p.Hosts)
		f.pools = append(f.pools, p)
	}
	sort.Slice(f.pools, func(i, j int) bool { return f.pools[i].Name < f.pools[j].Name })
	return f, nil
}

// checkHost accepts a host name as both sides list nodes: a DNS name
// without a port.
func checkHost(h string) error {
	switch {
	case h == "":
		return errors.New("must be a host name, got an empty one")
	case strings.ContainsAny(h, " :/\t"):
		return fmt.Errorf("must be a host name as the sides list it (no port, scheme or space), got %q", h)
	case len(h) > 253:
		return fmt.Errorf("must be at most 253 characters, got %d", len(h))
	}
	return nil
}

// Has reports whether pool is one of the fleet's pools.
func (f *NodePool) Has(pool string) bool {
	_, ok := f.find(pool)
	return ok
}

func (f *NodePool) find(pool string) (*Pool, bool) {
	for i := range f.pools {
		if f.pools[i].Name == pool {
			return &f.pools[i], true
		}
	}
	return nil, false
}

// ObserveRegistered tells the fleet which node names either side lists
// (the app calls it after every side observation).
func (f *NodePool) ObserveRegistered(names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	f.mu.Lock()
	f.registered = set
	f.mu.Unlock()
}

// ObserveNodes tells the fleet the nodes side src lists (the app calls it
// after every good observation of a side), for the members a pool names
// by labels or partition.
func (f *NodePool) ObserveNodes(src broker.Source, nodes []broker.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed[src] = nodes
	if ch, ok := f.listedOnce[src]; ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// Pools returns each fleet pool with its members: the configured hosts
// either side lists (all of them before the first listing), and the
// nodes its node selector or YARN partition names. Its desired capacity,
// min and max are their count. A pool that names members by labels or
// partition waits, on the first call only, for the side that lists them
// (at most until ctx ends; then it is stale until the side is listed):
// otherwise the first tick after a start would see the fleet without them
// and buy in a cloud pool.
func (f *NodePool) Pools(ctx context.Context) ([]broker.PoolState, error) {
	f.mu.Lock()
	wait := !f.waited
	f.waited = true
	f.mu.Unlock()
	for _, p := range f.pools {
		if !wait {
			break
		}
		for src, need := range map[broker.Source]bool{broker.SourceK8s: len(p.NodeSelector) > 0, broker.SourceYARN: p.YARNPartition != ""} {
			if need {
				select {
				case <-f.listedOnce[src]:
				case <-ctx.Done():
				}
			}
		}
	}
	f.mu.Lock()
	reg, listed := f.registered, f.listed
	f.mu.Unlock()
	taken := map[string]bool{}
	out := make([]broker.PoolState, 0, len(f.pools))
	for _, p := range f.pools {
		st := broker.PoolState{Pool: p.Pool}
		for _, h := range p.Hosts {
			if _, ok := reg[h]; ok || reg == nil {
				st.Instances = append(st.Instances, broker.Instance{ID: h, Hostname: h})
				taken[h] = true
			} else {
				st.Missing = append(st.Missing, h)
			}
		}
		if p.bySides() {
			st.Stale = f.notListed(&p)
			for _, src := range []broker.Source{broker.SourceK8s, broker.SourceYARN} {
				for i := range listed[src] {
					n := &listed[src][i]
					// A node is one pool's: the first (by name) that names it.
					if !taken[n.Name] && f.host[n.Name] == "" && p.names(src, n) {
						st.Instances = append(st.Instances, broker.Instance{ID: n.Name, Hostname: n.Name})
						taken[n.Name] = true
					}
				}
			}
		}
		n := len(st.Instances)
		st.Desired, st.Pool.MinNodes, st.Pool.MaxNodes = n, n, n
		out = append(out, st)
	}
	return out, nil
}

// notListed says why pool p's members by labels or partition are not
// known: a side it needs was never listed; empty once they are.
func (f *NodePool) notListed(p *Pool) string {
	for src, need := range map[broker.Source]bool{broker.SourceK8s: len(p.NodeSelector) > 0, broker.SourceYARN: p.YARNPartition != ""} {
		if !need {
			continue
		}
		select {
		case <-f.listedOnce[src]:
		default:
			return fmt.Sprintf("fleet pool %s names members by what %s lists, and %s has not been listed yet", p.Name, src, src)
		}
	}
	return ""
}

// SetDesired accepts only the fleet's own size: a fleet has nothing to buy
// or give back. The planner never asks for another; this refuses one that
// would come from a bug or an operator's call.
func (f *NodePool) SetDesired(ctx context.Context, pool string, target int) error {
	st, err := f.state(ctx, pool)
	if err != nil {
		return err
	}
	if target == st.Desired {
		return nil
	}
	return fmt.Errorf("pool %s is a fleet pool: its size is its %d hosts present, and the broker cannot set it to %d (there is no cloud group to grow or shrink)", pool, st.Desired, target)
}

// Terminate refuses: the broker never terminates a host of the fleet.
func (f *NodePool) Terminate(_ context.Context, pool, instanceID string) error {
	if !f.Has(pool) {
		return fmt.Errorf("pool %s is not a fleet pool", pool)
	}
	return fmt.Errorf("pool %s is a fleet pool: the broker never terminates its host %s (it cordons a faulty host and reports it)", pool, instanceID)
}

func (f *NodePool) state(ctx context.Context, pool string) (broker.PoolState, error) {
	states, err := f.Pools(ctx)
	if err != nil {
		return broker.PoolState{}, err
	}
	for _, st := range states {
		if st.Pool.Name == pool {
			return st, nil
		}
	}
	return broker.PoolState{}, fmt.Errorf("pool %s is not a fleet pool", pool)
}

// Combine serves the fleet's pools and, when cloud is not nil, the cloud
// provider's beside them: each call goes to the pool's owner.
func Combine(f *NodePool, cloud engine.NodePool) engine.NodePool {
	c := &combined{fleet: f, cloud: cloud}
	if kd, ok := cloud.(engine.KeepDesiredTerminator); ok {
		return &combinedKeepDesired{combined: c, kd: kd}
	}
	return c
}

type combined struct {
	fleet *NodePool
	cloud engine.NodePool
}

func (c *combined) Pools(ctx context.Context) ([]broker.PoolState, error) {
	out, err := c.fleet.Pools(ctx)
	if err != nil || c.cloud == nil {
		return out, err
	}
	cl, err := c.cloud.Pools(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range cl {
		if c.fleet.Has(st.Pool.Name) {
			// A cloud group tagged with a fleet pool's name is not that
			// pool: the fleet's definition wins, and nothing acts on the
			// group through it.
			continue
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool.Name < out[j].Pool.Name })
	return out, nil
}

func (c *combined) SetDesired(ctx context.Context, pool string, target int) error {
	if c.fleet.Has(pool) || c.cloud == nil {
		return c.fleet.SetDesired(ctx, pool, target)
	}
	return c.cloud.SetDesired(ctx, pool, target)
}

func (c *combined) Terminate(ctx context.Context, pool, instanceID string) error {
	if c.fleet.Has(pool) || c.cloud == nil {
		return c.fleet.Terminate(ctx, pool, instanceID)
	}
	return c.cloud.Terminate(ctx, pool, instanceID)
}

// ObserveRegistered tells both the fleet and the cloud provider (when it
// listens) which nodes the sides list.
func (c *combined) ObserveRegistered(names []string) {
	c.fleet.ObserveRegistered(names)
	if r, ok := c.cloud.(interface{ ObserveRegistered([]string) }); ok {
		r.ObserveRegistered(names)
	}
}

// ObserveNodes tells the fleet the nodes side src lists.
func (c *combined) ObserveNodes(src broker.Source, nodes []broker.Node) {
	c.fleet.ObserveNodes(src, nodes)
}

type combinedKeepDesired struct {
	*combined
	kd engine.KeepDesiredTerminator
}

func (c *combinedKeepDesired) TerminateKeepDesired(ctx context.Context, pool, instanceID string) error {
	if c.fleet.Has(pool) {
		return c.fleet.Terminate(ctx, pool, instanceID)
	}
	return c.kd.TerminateKeepDesired(ctx, pool, instanceID)
}
