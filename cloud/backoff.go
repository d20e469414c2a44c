package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"

	"github.com/gpubroker/gpubroker/broker"
)

// backoffCause says what put a pool into backoff.
type backoffCause string

const (
	causeLaunch    backoffCause = "launch-failed"
	causeThrottle  backoffCause = "throttled"
	causeProvision backoffCause = "provision-timeout"
)

// backoff is one pool's backoff state.
type backoff struct {
	until  time.Time
	reason string
	cause  backoffCause
	// since is when the cause happened (the failed activity's time for
	// launch failures).
	since time.Time
}

// Backoff returns the pool's current backoff, if any, for callers outside
// the tick loop (inspect, tests).
func (p *Provider) Backoff(pool string) (until time.Time, reason string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.backoff[pool]
	if !ok || !p.now().Before(b.until) {
		return time.Time{}, "", false
	}
	return b.until, b.reason, true
}

// setBackoffLocked records b unless a backoff that lasts longer is already
// in place. p.mu must be held.
func (p *Provider) setBackoffLocked(pool string, b backoff) {
	if cur, ok := p.backoff[pool]; ok && !b.until.After(cur.until) {
		return
	}
	p.backoff[pool] = b
	p.log.Warn("pool backs off", "pool", pool, "until", b.until.UTC().Format(time.RFC3339),
		"cause", string(b.cause), "reason", b.reason)
}

func (p *Provider) setBackoff(pool string, b backoff) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setBackoffLocked(pool, b)
}

// backoffError returns the pool's active backoff as an error, or nil.
func (p *Provider) backoffError(pool string, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.backoff[pool]
	if !ok || !now.Before(b.until) {
		return nil
	}
	return &broker.BackoffError{Pool: pool, Reason: b.reason, Until: b.until}
}

// checkActivities looks for failed launches while the group is short of
// its desired capacity. When a launch failed within the last PoolBackoff
// (insufficient capacity for the instance type, an invalid launch template,
// a spot request that could not be fulfilled) and the group still has fewer
// instances than it wants, the pool backs off until PoolBackoff after the
// failure. Once the group has all its instances, a launch backoff ends
// early: capacity came back. The backoff is derived from the activity's own
// time, so reading the same activity after a restart gives the same answer.
// A failure to read activities is logged, not returned: it must not blind
// the broker to the pool's instances.
func (p *Provider) checkActivities(ctx context.Context, g *group, now time.Time) {
	live := 0
	for _, in := range g.instances {
		if !gone(in.lifecycle) {
			live++
		}
	}
	if live >= g.desired {
		p.mu.Lock()
		if b, ok := p.backoff[g.pool.Name]; ok && b.cause == causeLaunch {
			delete(p.backoff, g.pool.Name)
			p.log.Info("pool backoff ends: the group reached its desired capacity", "pool", g.pool.Name)
		}
		p.mu.Unlock()
		return
	}
	out, err := p.asg.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{
		AutoScalingGroupName: aws.String(g.name),
		MaxRecords:           aws.Int32(int32(p.cfg.ActivityRecords)),
	})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("describe scaling activities", "group", g.name, "err", translate(err).Error())
		}
		return
	}
	// Activities come newest first: the first failed launch is the newest.
	for _, a := range out.Activities {
		if !isLaunch(a) || (a.StatusCode != asgtypes.ScalingActivityStatusCodeFailed &&
			a.StatusCode != asgtypes.ScalingActivityStatusCodeCancelled) {
			continue
		}
		at := aws.ToTime(a.EndTime)
		if at.IsZero() {
			at = aws.ToTime(a.StartTime)
		}
		until := at.Add(p.cfg.PoolBackoff)
		if now.Before(until) {
			msg := strings.TrimSpace(aws.ToString(a.StatusMessage))
			if msg == "" {
				msg = aws.ToString(a.Description)
			}
			p.setBackoff(g.pool.Name, backoff{until: until, reason: "launch failed: " + msg, cause: causeLaunch, since: at})
		}
		return
	}
}

// isLaunch reports whether an activity launched an instance. AWS describes
// them as "Launching a new EC2 instance: i-..." (or "... Status Reason: ..."
// when it failed before an instance existed).
func isLaunch(a asgtypes.Activity) bool {
	return strings.HasPrefix(strings.ToLower(aws.ToString(a.Description)), "launching")
}

// isThrottle reports whether err is throttling that outlasted the SDK's
// retries (or ran out of retry tokens).
func isThrottle(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if _, ok := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]; ok {
			return true
		}
	}
	var qe ratelimit.QuotaExceededError
	return errors.As(err, &qe)
}

// translate turns AWS errors into broker errors where one fits: missing
// groups become ErrNotFound, concurrent scaling ErrConflict. Other errors
// are returned unchanged so callers can still inspect them.
func translate(err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return err
	}
	msg := ae.ErrorMessage()
	switch ae.ErrorCode() {
	case "ScalingActivityInProgress", "ResourceContention", "ResourceInUse":
		return fmt.Errorf("%s: %s: %w", ae.ErrorCode(), msg, broker.ErrConflict)
	case "ValidationError":
		if strings.Contains(msg, "not found") {
			return fmt.Errorf("%s: %w", msg, broker.ErrNotFound)
		}
	}
	return err
}
