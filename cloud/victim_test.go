package cloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// describe reads one group as AWS reports it.
func describe(t *testing.T, b backend, name string) asgtypes.AutoScalingGroup {
	t.Helper()
	out, err := client(b).DescribeAutoScalingGroups(t.Context(), &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil || len(out.AutoScalingGroups) != 1 {
		t.Fatalf("describe group %q: %v (%d groups)", name, err, len(out.AutoScalingGroups))
	}
	return out.AutoScalingGroups[0]
}

// liveIDs are the group's instances that are not leaving it.
func liveIDs(g asgtypes.AutoScalingGroup) map[string]bool {
	out := map[string]bool{}
	for _, in := range g.Instances {
		switch in.LifecycleState {
		case asgtypes.LifecycleStatePending, asgtypes.LifecycleStateInService:
			out[aws.ToString(in.InstanceId)] = true
		}
	}
	return out
}

// TestCloudNeverPicksAVictim runs on awssim and moto: every instance the
// broker's scale-ups launch is protected from scale in, so a lower
// desired capacity set outside the broker kills none of them; a target
// below the group's launched instances (a stale plan, a hand-back) never
// lowers the group below them; and the broker's own terminate still
// removes a protected instance, with its decrement.
func TestCloudNeverPicksAVictim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		createGroup(t, b, groupSpec{name: "gpu", max: 6, tags: map[string]string{cloud.TagPool: "gpu", cloud.TagGPUsPerNode: "4"}})
		p := newProvider(t, b, cloud.Config{Discover: true})
		if err := p.SetDesired(ctx, "gpu", 2); err != nil {
			t.Fatal(err)
		}
		g := describe(t, b, "gpu")
		if !aws.ToBool(g.NewInstancesProtectedFromScaleIn) {
			t.Fatal("a group the broker grows must launch its new instances protected from scale in")
		}
		for _, in := range g.Instances {
			if !aws.ToBool(in.ProtectedFromScaleIn) {
				t.Fatalf("instance %s launched by the broker is not protected from scale in", aws.ToString(in.InstanceId))
			}
		}
		ours := liveIDs(g)
		if len(ours) != 2 {
			t.Fatalf("%d live instances, want 2", len(ours))
		}

		// Someone lowers the group outside the broker: AWS may not pick
		// one of the broker's instances.
		if _, err := client(b).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
			AutoScalingGroupName: aws.String("gpu"), DesiredCapacity: aws.Int32(0)}); err != nil {
			t.Fatal(err)
		}
		for id := range ours {
			if !liveIDs(describe(t, b, "gpu"))[id] {
				t.Fatalf("an outside lower of the desired capacity terminated the broker's instance %s", id)
			}
		}

		// Someone raises it to 4 (Terraform, a scheduled action); a stale
		// target of 3 must not lower it below its launched instances.
		if _, err := client(b).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
			AutoScalingGroupName: aws.String("gpu"), DesiredCapacity: aws.Int32(4)}); err != nil {
			t.Fatal(err)
		}
		before := liveIDs(describe(t, b, "gpu"))
		// And takes the protection off one of them.
		var bare string
		for id := range before {
			bare = id
			break
		}
		if _, err := client(b).SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
			AutoScalingGroupName: aws.String("gpu"), InstanceIds: []string{bare}, ProtectedFromScaleIn: aws.Bool(false)}); err != nil {
			t.Fatal(err)
		}
		if err := p.SetDesired(ctx, "gpu", 3); err != nil {
			t.Fatal(err)
		}
		g = describe(t, b, "gpu")
		if got := aws.ToInt32(g.DesiredCapacity); got != int32(len(before)) {
			t.Fatalf("desired capacity %d after a target of 3, want the %d launched instances kept", got, len(before))
		}
		for id := range before {
			if !liveIDs(g)[id] {
				t.Fatalf("instance %s was terminated by a lower target", id)
			}
		}
		for _, in := range g.Instances {
			if !aws.ToBool(in.ProtectedFromScaleIn) {
				t.Fatalf("instance %s is still unprotected after the broker acted on the group", aws.ToString(in.InstanceId))
			}
		}

		// The broker's own terminate removes a protected instance.
		var victim string
		for id := range ours {
			victim = id
			break
		}
		if err := p.Terminate(ctx, "gpu", victim); err != nil {
			t.Fatalf("terminate protected instance %s: %v", victim, err)
		}
		g = describe(t, b, "gpu")
		if liveIDs(g)[victim] || aws.ToInt32(g.DesiredCapacity) != int32(len(before)-1) {
			t.Fatalf("after terminate: live %v, desired %d; want %s gone and desired %d", liveIDs(g), aws.ToInt32(g.DesiredCapacity), victim, len(before)-1)
		}
	})
}

// TestHandBackLowersOnlyUnlaunchedCapacity: awssim's group cannot launch
// (insufficient capacity), so of a desired capacity of 4 only 2 instances
// exist. A hand-back asking for 1 lowers the group by the 2 that never
// launched, to 2, and kills neither running instance.
func TestHandBackLowersOnlyUnlaunchedCapacity(t *testing.T) {
	b := simBackend(t, awssim.Config{LaunchRetry: time.Hour})
	createGroup(t, b, groupSpec{name: "gpu", max: 6, tags: map[string]string{cloud.TagPool: "gpu", cloud.TagGPUsPerNode: "4"}})
	p := newProvider(t, b, cloud.Config{Discover: true})
	ctx := context.Background()
	if err := p.SetDesired(ctx, "gpu", 2); err != nil {
		t.Fatal(err)
	}
	running := liveIDs(describe(t, b, "gpu"))
	b.sim.FailLaunches("gpu", -1, "")
	if err := p.SetDesired(ctx, "gpu", 4); err != nil {
		t.Fatal(err)
	}
	if got := aws.ToInt32(describe(t, b, "gpu").DesiredCapacity); got != 4 {
		t.Fatalf("desired %d, want 4 with 2 not launched", got)
	}
	if err := p.SetDesired(ctx, "gpu", 1); err != nil {
		t.Fatal(err)
	}
	g := describe(t, b, "gpu")
	if got := aws.ToInt32(g.DesiredCapacity); got != 2 {
		t.Fatalf("desired %d after the hand-back, want 2: only the capacity that never launched is handed back", got)
	}
	for id := range running {
		if !liveIDs(g)[id] {
			t.Fatalf("the hand-back terminated running instance %s", id)
		}
	}
}
