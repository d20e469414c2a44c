package cloud

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Provider is a engine.NodePool backed by AWS autoscaling groups. It is
// safe for concurrent use.
type Provider struct {
	cfg  Config
	asg  *autoscaling.Client
	ec2  *ec2.Client
	log  *slog.Logger
	now  func() time.Time
	conf map[string]*PoolConfig // by pool name

	mu sync.Mutex
	// groups maps pool names to group names as last seen, so SetDesired and
	// Terminate find discovered pools without a full discovery.
	groups map[string]string
	// backoff is the per-pool backoff state.
	backoff map[string]backoff
	// registered holds the instance ids and host names that are nodes on
	// either side; nil until ObserveRegistered is first called, which
	// keeps the provision timeout off until the broker has looked.
	registered map[string]struct{}
	// stuck remembers instances already reported as never registering.
	stuck map[string]struct{}
	// machines caches host names and launch times by instance id.
	machines map[string]machine
	// last is each pool's state at its last good observation, returned with
	// Stale set while the pool cannot be observed.
	last map[string]broker.PoolState
}

var _ engine.NodePool = (*Provider)(nil)

// New returns a Provider. It loads credentials from cfg.Credentials or the
// default chain (environment, shared files, IRSA, instance profile) but
// calls no AWS API.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
			})
		}),
	}
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	}
	if cfg.Endpoint != "" {
		opts = append(opts, awsconfig.WithBaseEndpoint(cfg.Endpoint))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load aws configuration: %w", err)
	}
	awsCfg.HTTPClient = httpClient{inner: awsCfg.HTTPClient}
	if awsCfg.Region == "" {
		return nil, broker.Invalid("region", "no region configured and none found in AWS_REGION or the shared config")
	}
	p := &Provider{
		cfg:      cfg,
		asg:      autoscaling.NewFromConfig(awsCfg),
		ec2:      ec2.NewFromConfig(awsCfg),
		log:      cfg.Logger,
		now:      cfg.Now,
		conf:     map[string]*PoolConfig{},
		groups:   map[string]string{},
		backoff:  map[string]backoff{},
		stuck:    map[string]struct{}{},
		machines: map[string]machine{},
		last:     map[string]broker.PoolState{},
	}
	for i := range cfg.Pools {
		pc := &p.cfg.Pools[i]
		p.conf[pc.Name] = pc
		p.groups[pc.Name] = pc.Group
	}
	return p, nil
}

// ObserveRegistered tells the provider which machines are nodes on either
// side: Kubernetes node names and YARN NodeManager hosts (private DNS
// names) or instance ids. It replaces the previous set. The tick loop calls
// it every tick; once it has been called, instances that stay unregistered
// past MaxProvisionTime put their pool into backoff.
//
// The provider, not the broker, decides about the provision timeout because
// it also owns the other backoff causes and the instance launch times; the
// broker only has to say what registered.
func (p *Provider) ObserveRegistered(names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	p.mu.Lock()
	p.registered = set
	p.mu.Unlock()
}

// Pools returns every configured and discovered pool with its state. It
// fails only when ctx ends: a pool whose group is missing or could not be
// described is returned with Stale saying why and its last-known desired
// capacity and instances, so its GPUs still count while nothing acts on it.
func (p *Provider) Pools(ctx context.Context) ([]broker.PoolState, error) {
	reports, err := p.Report(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]broker.PoolState, len(reports))
	for i, r := range reports {
		out[i] = r.PoolState
	}
	return out, nil
}

// PoolReport is a pool's state with the cloud's own instance counts, for
// people (gpubroker inspect cloud) rather than the planner.
type PoolReport struct {
	broker.PoolState
	// InService counts instances in the autoscaling lifecycle state
	// InService; Pending counts those still launching (Pending*).
	InService, Pending int
}

// Report observes every pool as Pools does and adds lifecycle counts.
func (p *Provider) Report(ctx context.Context) ([]PoolReport, error) {
	groups, stale := p.describeAll(ctx)
	machines, merr := p.machinesOf(ctx, groups)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := p.now()
	maxProv := p.cfg.MaxProvisionTime
	if p.cfg.ProvisionTime != nil {
		if d, err := p.cfg.ProvisionTime(ctx); err != nil {
			p.log.Warn("read max provision time; using the configured one", "max_provision_time", maxProv, "err", err)
		} else if d > 0 {
			maxProv = d
		}
	}
	out := make([]PoolReport, 0, len(groups)+len(stale))
	for _, g := range groups {
		if merr != nil && !g.described(machines) {
			stale[g.pool.Name] = merr.Error()
			continue
		}
		p.checkActivities(ctx, g, now)
		r := PoolReport{PoolState: p.state(g, machines, now, maxProv)}
		for _, in := range g.instances {
			switch {
			case in.lifecycle == "InService":
				r.InService++
			case strings.HasPrefix(in.lifecycle, "Pending"):
				r.Pending++
			}
		}
		p.mu.Lock()
		p.last[g.pool.Name] = r.PoolState
		p.mu.Unlock()
		out = append(out, r)
	}
	for name, why := range stale {
		if name == "" {
			continue
		}
		st := p.staleState(name, why, now)
		p.log.Warn("pool stale", "pool", name, "group", st.Pool.Group, "reason", why,
			"last_desired", st.Desired, "last_instances", len(st.Instances))
		out = append(out, PoolReport{PoolState: st})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool.Name < out[j].Pool.Name })
	return out, nil
}

// staleState is a pool's last good state (or its configuration, if it was
// never observed) marked stale with why.
func (p *Provider) staleState(name, why string, now time.Time) broker.PoolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.last[name]
	if !ok {
		pc := p.conf[name]
		pool, _ := poolFromTags(name, pc.Group, nil, pc)
		if pc.MinNodes != nil {
			pool.MinNodes = *pc.MinNodes
		}
		if pc.MaxNodes != nil {
			pool.MaxNodes = *pc.MaxNodes
		}
		st = broker.PoolState{Pool: pool}
	}
	st.Instances = slices.Clone(st.Instances)
	st.Stale = why
	st.BackoffUntil, st.BackoffReason = time.Time{}, ""
	if b, ok := p.backoff[name]; ok && now.Before(b.until) {
		st.BackoffUntil, st.BackoffReason = b.until, b.reason
	}
	return st
}

// described reports whether EC2's view of every instance of g is known.
func (g *group) described(machines map[string]machine) bool {
	for _, in := range g.instances {
		if _, ok := machines[in.id]; !ok {
			return false
		}
	}
	return true
}

// machinesOf returns EC2's view of every instance of the groups. An
// instance's private DNS name and launch time never change, so they are
// cached and only instances not seen before are described: a steady fleet
// of thousands costs no DescribeInstances calls at all. Cached entries
// carry no EC2 state; the group's lifecycle state covers termination.
func (p *Provider) machinesOf(ctx context.Context, groups []*group) (map[string]machine, error) {
	out := map[string]machine{}
	var missing []string
	p.mu.Lock()
	for _, g := range groups {
		for _, in := range g.instances {
			if m, ok := p.machines[in.id]; ok {
				out[in.id] = m
			} else {
				missing = append(missing, in.id)
			}
		}
	}
	p.mu.Unlock()
	fresh, err := p.describeInstances(ctx, missing)
	if err != nil {
		// The cached instances stand; pools with others go stale.
		return out, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, m := range fresh {
		out[id] = m
		if m.hostname != "" && !m.launched.IsZero() {
			p.machines[id] = machine{hostname: m.hostname, launched: m.launched}
		}
	}
	// Forget instances that left every group.
	for id := range p.machines {
		if _, ok := out[id]; !ok {
			delete(p.machines, id)
		}
	}
	for id := range p.stuck {
		if _, ok := out[id]; !ok {
			delete(p.stuck, id)
		}
	}
	return out, nil
}

// state builds one pool's state and applies the provision timeout.
func (p *Provider) state(g *group, machines map[string]machine, now time.Time, maxProv time.Duration) broker.PoolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := broker.PoolState{Pool: g.pool, Desired: g.desired, Instances: make([]broker.Instance, 0, len(g.instances))}
	var stuck []string
	for _, in := range g.instances {
		m := machines[in.id]
		bi := broker.Instance{ID: in.id, Hostname: m.hostname, LaunchedAt: m.launched}
		bi.Phase = phaseOf(in.lifecycle, m.state)
		_, regID := p.registered[in.id]
		_, regHost := p.registered[m.hostname]
		registered := regID || (m.hostname != "" && regHost)
		if bi.Phase == broker.PhaseBooting && registered && in.lifecycle == "InService" {
			bi.Phase = broker.PhaseRegistered
		}
		if p.registered != nil && bi.Phase == broker.PhaseBooting && !registered &&
			!m.launched.IsZero() && now.Sub(m.launched) > maxProv {
			if _, seen := p.stuck[in.id]; !seen {
				p.stuck[in.id] = struct{}{}
				stuck = append(stuck, in.id)
			}
		}
		st.Instances = append(st.Instances, bi)
	}
	if len(stuck) > 0 {
		reason := fmt.Sprintf("instance %s did not register as a node within %s", stuck[0], maxProv)
		if len(stuck) > 1 {
			reason = fmt.Sprintf("instances %v did not register as nodes within %s", stuck, maxProv)
		}
		p.setBackoffLocked(g.pool.Name, backoff{until: now.Add(p.cfg.PoolBackoff), reason: reason, cause: causeProvision, since: now})
	}
	if b, ok := p.backoff[g.pool.Name]; ok && now.Before(b.until) {
		st.BackoffUntil = b.until
		st.BackoffReason = b.reason
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	return st
}

// phaseOf maps an autoscaling lifecycle state and the EC2 instance state to
// a node phase. Registration on a side is not the cloud's to know; an
// instance in service is booting until ObserveRegistered names it.
func phaseOf(lifecycle, ec2State string) broker.Phase {
	switch ec2State {
	case "shutting-down", "stopping", "stopped":
		return broker.PhaseTerminating
	case "terminated":
		return broker.PhaseGone
	}
	switch lifecycle {
	case "Terminating", "Terminating:Wait", "Terminating:Proceed", "Terminating:Retained", "Detaching":
		return broker.PhaseTerminating
	case "Terminated", "Detached":
		return broker.PhaseGone
	case "EnteringStandby", "Standby":
		// Out of service but still a machine: nothing may be scheduled.
		return broker.PhaseDrained
	default:
		// Pending, Pending:Wait/Proceed, Quarantined, InService,
		// ReplacingRootVolume*, RootVolumeReplaced.
		return broker.PhaseBooting
	}
}

// gone reports whether an instance of this lifecycle state is on its way
// out, so terminating it again must not decrement again.
func gone(lifecycle string) bool {
	switch phaseOf(lifecycle, "") {
	case broker.PhaseTerminating, broker.PhaseGone:
		return true
	}
	return false
}
