package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/smithy-go"

	"github.com/gpubroker/gpubroker/broker"
)

// SetDesired sets the pool's desired capacity to the absolute target.
// Setting the value the group already has calls nothing, so a journaled
// step can be repeated. A target outside the pool's bounds is a
// *broker.ValidationError; growing a pool that backs off, or throttling that
// outlasted the SDK's retries, is a *broker.BackoffError.
//
// IMPORTANT: the cloud never picks a victim. Before any change every
// launched instance of the group is protected from scale in, and a group
// that grows launches its new instances protected
// (NewInstancesProtectedFromScaleIn), so only the broker's own Terminate,
// after a drain, removes one. A lower target never goes below the group's
// launched instances (Pending or InService): lowering only hands back
// capacity that was never launched, and a target under that is raised to
// it (the group re-read here may hold more than the caller planned).
func (p *Provider) SetDesired(ctx context.Context, pool string, target int) error {
	g, err := p.group(ctx, pool)
	if err != nil {
		return err
	}
	b, err := p.bounds(ctx, pool, g)
	if err != nil {
		return err
	}
	switch {
	case target < b.min:
		return broker.Invalid("target", "pool %q must keep at least %d nodes%s, got %d", pool, b.min, b.minWhy, target)
	case target > b.max:
		return broker.Invalid("target", "pool %q may have at most %d nodes%s, got %d", pool, b.max, b.maxWhy, target)
	}
	if err := p.protect(ctx, pool, g); err != nil {
		return err
	}
	if launched := g.launched(); target < g.desired && target < launched {
		p.log.Info("not lowering a group below its launched instances", "pool", pool, "group", g.name,
			"desired", g.desired, "launched", launched, "asked", target)
		target = launched
	}
	if target == g.desired {
		return nil
	}
	now := p.now()
	if target > g.desired {
		if err := p.backoffError(pool, now); err != nil {
			return fmt.Errorf("scale pool %q to %d: %w", pool, target, err)
		}
		if !g.newProtected {
			_, err := p.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
				AutoScalingGroupName:             aws.String(g.name),
				NewInstancesProtectedFromScaleIn: aws.Bool(true),
			})
			if err != nil {
				return p.actionError(pool, fmt.Sprintf("launch the new instances of group %q protected from scale in", g.name), err)
			}
		}
	}
	_, err = p.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
		AutoScalingGroupName: aws.String(g.name),
		DesiredCapacity:      aws.Int32(int32(target)),
		HonorCooldown:        aws.Bool(false),
	})
	if err != nil {
		return p.actionError(pool, fmt.Sprintf("set desired capacity of group %q to %d", g.name, target), err)
	}
	p.log.Info("set desired capacity", "pool", pool, "group", g.name, "from", g.desired, "to", target)
	return nil
}

// protectionBatch is how many instances one SetInstanceProtection call
// may name.
const protectionBatch = 50

// protect protects every launched instance of the group that is not yet
// protected from scale in, so that no change of the desired capacity (the
// broker's, or anyone's) lets AWS choose one to terminate.
func (p *Provider) protect(ctx context.Context, pool string, g *group) error {
	var ids []string
	for _, in := range g.instances {
		if !in.protected && launched(in.lifecycle) {
			ids = append(ids, in.id)
		}
	}
	for start := 0; start < len(ids); start += protectionBatch {
		batch := ids[start:min(start+protectionBatch, len(ids))]
		_, err := p.asg.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
			AutoScalingGroupName: aws.String(g.name),
			InstanceIds:          batch,
			ProtectedFromScaleIn: aws.Bool(true),
		})
		if err != nil {
			return p.actionError(pool, fmt.Sprintf("protect instances %v of group %q from scale in", batch, g.name), err)
		}
		p.log.Info("protected instances from scale in", "pool", pool, "group", g.name, "instances", len(batch))
	}
	return nil
}

// launched reports whether an instance in this lifecycle state exists and
// is not leaving the group: the ones a lower desired capacity could pick.
func launched(lifecycle string) bool {
	return strings.HasPrefix(lifecycle, "Pending") || lifecycle == "InService"
}

// launched counts the group's instances that exist and are not leaving.
func (g *group) launched() int {
	n := 0
	for _, in := range g.instances {
		if launched(in.lifecycle) {
			n++
		}
	}
	return n
}

// Terminate terminates one instance of the pool and decrements the desired
// capacity with it, so the group does not replace it.
//
// IMPORTANT: the instance is looked up before the call and again after a
// failed call. An instance that is already terminating or no longer in the
// group was terminated by an earlier attempt (perhaps one whose answer was
// lost), so it is success without a second call: the desired capacity is
// never decremented twice for one instance.
func (p *Provider) Terminate(ctx context.Context, pool, instanceID string) error {
	g, err := p.group(ctx, pool)
	if err != nil {
		return err
	}
	in, ok := g.instance(instanceID)
	if !ok {
		return p.terminatedElsewhere(ctx, pool, g.name, instanceID)
	}
	if gone(in.lifecycle) {
		p.log.Debug("instance already leaving the group", "pool", pool, "instance", instanceID)
		return nil
	}
	b, err := p.bounds(ctx, pool, g)
	if err != nil {
		return err
	}
	if g.desired-1 < b.min {
		return fmt.Errorf("terminate instance %q of pool %q: desired capacity %d would drop below min %d%s: %w",
			instanceID, pool, g.desired, b.min, b.minWhy, broker.ErrConflict)
	}
	_, callErr := p.asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId:                     aws.String(instanceID),
		ShouldDecrementDesiredCapacity: aws.Bool(true),
	})
	if callErr == nil {
		p.log.Info("terminated instance with decrement", "pool", pool, "group", g.name, "instance", instanceID,
			"desired", g.desired-1)
		return nil
	}
	// The call may have taken effect before it failed (a lost response, a
	// 5xx after the change): look again before reporting failure.
	if ctx.Err() == nil {
		if again, err := p.group(ctx, pool); err == nil {
			if in, ok := again.instance(instanceID); !ok || gone(in.lifecycle) {
				p.log.Info("terminate took effect despite an error", "pool", pool, "instance", instanceID,
					"err", callErr.Error())
				return nil
			}
		}
	}
	return p.actionError(pool, fmt.Sprintf("terminate instance %q of group %q", instanceID, g.name), callErr)
}

// terminatedElsewhere decides about an instance that is not in the group:
// gone or going from EC2 means an earlier attempt did the work; a machine
// still running outside the group is someone else's and must not be
// reported as terminated.
func (p *Provider) terminatedElsewhere(ctx context.Context, pool, group, instanceID string) error {
	machines, err := p.describeInstances(ctx, []string{instanceID})
	if err != nil {
		return fmt.Errorf("terminate instance %q of pool %q: %w", instanceID, pool, err)
	}
	m, ok := machines[instanceID]
	switch {
	case !ok, m.state == "terminated", m.state == "shutting-down":
		p.log.Debug("instance already gone", "pool", pool, "instance", instanceID)
		return nil
	}
	return fmt.Errorf("terminate instance %q of pool %q: it is %s but not in group %q: %w",
		instanceID, pool, m.state, group, broker.ErrConflict)
}

func (g *group) instance(id string) (groupInstance, bool) {
	for _, in := range g.instances {
		if in.id == id {
			return in, true
		}
	}
	return groupInstance{}, false
}

// actionError wraps a failed scaling call. Throttling that outlasted the
// SDK's retries puts the pool into backoff and is returned as a
// *broker.BackoffError; AWS validation errors become *broker.ValidationError.
func (p *Provider) actionError(pool, what string, err error) error {
	if isThrottle(err) {
		now := p.now()
		b := backoff{until: now.Add(p.cfg.PoolBackoff), reason: "throttled by the autoscaling API", cause: causeThrottle, since: now}
		p.setBackoff(pool, b)
		return fmt.Errorf("%s: %w", what, errors.Join(
			&broker.BackoffError{Pool: pool, Reason: b.reason, Until: b.until}, err))
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "ValidationError" {
		return fmt.Errorf("%s: %w", what, broker.Invalid("target", "%s", ae.ErrorMessage()))
	}
	return fmt.Errorf("%s: %w", what, translate(err))
}

// poolBounds are the bounds SetDesired and Terminate enforce, with why
// when the group's own size limit is the narrower one.
type poolBounds struct {
	min, max       int
	minWhy, maxWhy string
}

// bounds returns the pool's effective bounds. Config.Bounds (the store,
// where the API edits them) owns them when set; otherwise the configured
// PoolConfig values apply. Either way they are narrowed to the group's own
// MinSize and MaxSize, which AWS enforces.
//
// IMPORTANT: the bounds are read on every call, never remembered from the
// start: raising max_nodes through the API must let the next scale-up
// through, not fail it until a restart.
func (p *Provider) bounds(ctx context.Context, pool string, g *group) (poolBounds, error) {
	b := poolBounds{min: g.pool.MinNodes, max: g.pool.MaxNodes}
	if p.cfg.Bounds == nil {
		return b, nil
	}
	minN, maxN, ok, err := p.cfg.Bounds(ctx, pool)
	if err != nil {
		return b, fmt.Errorf("read bounds of pool %q: %w", pool, err)
	}
	if !ok {
		return b, nil
	}
	b.min, b.max = minN, maxN
	if g.asgMin > b.min {
		b.min, b.minWhy = g.asgMin, fmt.Sprintf(" (autoscaling group %q has MinSize %d; the broker's min_nodes is %d)", g.name, g.asgMin, minN)
	}
	if g.asgMax < b.max {
		b.max, b.maxWhy = g.asgMax, fmt.Sprintf(" (autoscaling group %q has MaxSize %d; the broker's max_nodes is %d: raise the group's MaxSize)", g.name, g.asgMax, maxN)
	}
	return b, nil
}
