package cloud

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/gpubroker/gpubroker/broker"
)

// group is one autoscaling group resolved to a pool.
type group struct {
	name      string // autoscaling group name
	pool      broker.Pool
	asgMin    int
	asgMax    int
	desired   int
	instances []groupInstance
	// newProtected is the group's NewInstancesProtectedFromScaleIn.
	newProtected bool
}

type groupInstance struct {
	id        string
	lifecycle string
	protected bool // ProtectedFromScaleIn
}

// machine is what EC2 says about one instance.
type machine struct {
	hostname string
	state    string
	launched time.Time
}

// namesPerCall is how many group names one DescribeAutoScalingGroups call
// may carry; instancesPerCall bounds DescribeInstances the same way.
const (
	namesPerCall     = 50
	instancesPerCall = 200
)

// describeAll reads every configured group and, with discovery on, every
// group tagged gpubroker.io/pool, and resolves them to pools sorted by name.
// It never fails as a whole: a configured group that does not exist, whose
// describe fails or that does not describe a valid pool, and a discovered
// pool that discovery could not see this time, is returned in stale (pool
// name → why), so one bad group does not blind the broker to the others.
func (p *Provider) describeAll(ctx context.Context) ([]*group, map[string]string) {
	byGroup := map[string]asgtypes.AutoScalingGroup{}
	stale := map[string]string{}
	poolOf := map[string]string{} // configured group → pool name
	var names []string
	for _, pc := range p.cfg.Pools {
		names = append(names, pc.Group)
		poolOf[pc.Group] = pc.Name
	}
	failed := map[string]bool{}
	for start := 0; start < len(names); start += namesPerCall {
		batch := names[start:min(start+namesPerCall, len(names))]
		gs, err := p.describeGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: batch})
		if err != nil && len(batch) > 1 && !throttledByAPI(err) && ctx.Err() == nil {
			// Describe each group alone, so only the failing ones go stale.
			// (Not when AWS throttles: more calls would only make it worse.
			// A spent retry quota is no reason: one failing group spends it,
			// and each group's first attempt is still sent.)
			gs, err = nil, nil
			for _, n := range batch {
				one, err1 := p.describeGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{n}})
				if err1 != nil {
					stale[poolOf[n]] = fmt.Sprintf("describe group %q: %s", n, err1)
					failed[n] = true
					continue
				}
				gs = append(gs, one...)
			}
		}
		if err != nil {
			for _, n := range batch {
				stale[poolOf[n]] = fmt.Sprintf("describe group %q: %s", n, err)
				failed[n] = true
			}
			continue
		}
		for _, g := range gs {
			byGroup[aws.ToString(g.AutoScalingGroupName)] = g
		}
	}
	for _, n := range names {
		if _, ok := byGroup[n]; !ok && !failed[n] {
			p.log.Warn("configured autoscaling group not found", "group", n, "pool", poolOf[n])
			stale[poolOf[n]] = fmt.Sprintf("autoscaling group %q not found", n)
		}
	}
	discovered := false
	if p.cfg.Discover {
		gs, err := p.describeGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
			Filters: []asgtypes.Filter{{Name: aws.String("tag-key"), Values: []string{TagPool}}},
		})
		if err != nil {
			// Pools discovered before stay, stale, with their last state.
			p.mu.Lock()
			for name := range p.last {
				if _, configured := p.conf[name]; !configured {
					stale[name] = fmt.Sprintf("discover groups tagged %s: %s", TagPool, err)
				}
			}
			p.mu.Unlock()
		}
		discovered = err == nil
		for _, g := range gs {
			byGroup[aws.ToString(g.AutoScalingGroupName)] = g
		}
	}

	groupNames := make([]string, 0, len(byGroup))
	for n := range byGroup {
		groupNames = append(groupNames, n)
	}
	sort.Strings(groupNames)
	configuredByGroup := map[string]*PoolConfig{}
	for name, pc := range p.conf {
		configuredByGroup[p.conf[name].Group] = pc
	}
	seen := map[string]string{}
	var out []*group
	for _, gn := range groupNames {
		g, problem := p.resolve(byGroup[gn], configuredByGroup[gn])
		if problem != "" {
			if pc := configuredByGroup[gn]; pc != nil {
				stale[pc.Name] = problem
			}
			continue
		}
		if other, dup := seen[g.pool.Name]; dup {
			p.log.Warn("two autoscaling groups claim one pool; ignoring the second",
				"pool", g.pool.Name, "group", gn, "kept_group", other)
			continue
		}
		seen[g.pool.Name] = gn
		delete(stale, g.pool.Name) // found by discovery after all
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pool.Name < out[j].pool.Name })
	p.mu.Lock()
	for _, g := range out {
		p.groups[g.pool.Name] = g.name
	}
	if discovered {
		// A discovered pool whose tag is gone is no longer managed.
		for name := range p.last {
			if _, configured := p.conf[name]; !configured && seen[name] == "" {
				delete(p.last, name)
			}
		}
	}
	p.mu.Unlock()
	return out, stale
}

// resolve turns an SDK group into a pool, merging tags and configuration.
func (p *Provider) resolve(g asgtypes.AutoScalingGroup, pc *PoolConfig) (*group, string) {
	gn := aws.ToString(g.AutoScalingGroupName)
	tags := make(map[string]string, len(g.Tags))
	for _, t := range g.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	name := tags[TagPool]
	if pc != nil {
		name = pc.Name
	}
	pool, warns := poolFromTags(name, gn, tags, pc)
	for _, w := range warns {
		p.log.Warn("ignoring bad group tag", "group", gn, "problem", w)
	}
	out := &group{
		name:    gn,
		asgMin:  int(aws.ToInt32(g.MinSize)),
		asgMax:  int(aws.ToInt32(g.MaxSize)),
		desired: int(aws.ToInt32(g.DesiredCapacity)),

		newProtected: aws.ToBool(g.NewInstancesProtectedFromScaleIn),
	}
	pool.MinNodes, pool.MaxNodes = out.asgMin, out.asgMax
	if pc != nil && pc.MinNodes != nil && *pc.MinNodes > pool.MinNodes {
		pool.MinNodes = *pc.MinNodes
	}
	if pc != nil && pc.MaxNodes != nil && *pc.MaxNodes < pool.MaxNodes {
		pool.MaxNodes = *pc.MaxNodes
	}
	if pool.MaxNodes < pool.MinNodes {
		p.log.Warn("pool bounds are empty; configuration and group disagree",
			"pool", pool.Name, "group", gn, "min", pool.MinNodes, "max", pool.MaxNodes)
		return nil, fmt.Sprintf("group %q: pool bounds are empty (min %d, max %d): configuration and group disagree", gn, pool.MinNodes, pool.MaxNodes)
	}
	if err := pool.Validate(); err != nil {
		p.log.Warn("ignoring autoscaling group with an invalid pool", "group", gn, "problem", err.Error())
		return nil, fmt.Sprintf("group %q does not describe a valid pool: %s", gn, err)
	}
	out.pool = pool
	for _, in := range g.Instances {
		out.instances = append(out.instances, groupInstance{id: aws.ToString(in.InstanceId), lifecycle: string(in.LifecycleState),
			protected: aws.ToBool(in.ProtectedFromScaleIn)})
	}
	return out, ""
}

// describeGroups runs one paginated DescribeAutoScalingGroups.
func (p *Provider) describeGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput) ([]asgtypes.AutoScalingGroup, error) {
	in.MaxRecords = aws.Int32(int32(p.cfg.PageSize))
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(p.asg, in)
	var out []asgtypes.AutoScalingGroup
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, page.AutoScalingGroups...)
	}
	return out, nil
}

// group reads the one group behind a pool.
func (p *Provider) group(ctx context.Context, pool string) (*group, error) {
	p.mu.Lock()
	gn, ok := p.groups[pool]
	p.mu.Unlock()
	if !ok {
		// A discovered pool not seen yet: discover now.
		if _, stale := p.describeAll(ctx); stale[pool] != "" {
			return nil, fmt.Errorf("pool %q: %s: %w", pool, stale[pool], broker.ErrStale)
		}
		p.mu.Lock()
		gn, ok = p.groups[pool]
		p.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("pool %q: %w", pool, broker.ErrNotFound)
		}
	}
	gs, err := p.describeGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{gn}})
	if err != nil {
		return nil, fmt.Errorf("describe group %q: %w", gn, err)
	}
	if len(gs) == 0 {
		return nil, fmt.Errorf("group %q of pool %q: %w", gn, pool, broker.ErrNotFound)
	}
	g, problem := p.resolve(gs[0], p.conf[pool])
	if problem != "" {
		return nil, broker.Invalid("pool", "pool %q: %s", pool, problem)
	}
	g.pool.Name = pool
	return g, nil
}

// describeInstances reads private DNS names, states and launch times. An
// instance EC2 does not know yet (eventual consistency right after a
// launch) is left without them until the next call.
func (p *Provider) describeInstances(ctx context.Context, ids []string) (map[string]machine, error) {
	out := make(map[string]machine, len(ids))
	for start := 0; start < len(ids); start += instancesPerCall {
		batch := ids[start:min(start+instancesPerCall, len(ids))]
		pages := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{InstanceIds: batch})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorCode() == "InvalidInstanceID.NotFound" {
				p.log.Debug("instances not visible in EC2 yet", "problem", ae.ErrorMessage())
				break
			}
			if err != nil {
				return nil, fmt.Errorf("describe instances: %w", translate(err))
			}
			for _, r := range page.Reservations {
				for _, in := range r.Instances {
					m := machine{hostname: aws.ToString(in.PrivateDnsName), launched: aws.ToTime(in.LaunchTime)}
					if in.State != nil {
						m.state = string(in.State.Name)
					}
					out[aws.ToString(in.InstanceId)] = m
				}
			}
		}
	}
	return out, nil
}

// throttledByAPI reports whether AWS itself answered with throttling.
func throttledByAPI(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		_, ok := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]
		return ok
	}
	return false
}
