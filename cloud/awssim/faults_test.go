package awssim_test

import (
	"net/url"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// TestFailTerminate: a failed terminate answers 503 ServiceUnavailable in
// the autoscaling error envelope and changes nothing; once the fault is
// spent the same call takes effect.
func TestFailTerminate(t *testing.T) {
	sim, base := start(t)
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "g", Max: 3, Desired: 1}); err != nil {
		t.Fatal(err)
	}
	g, _ := sim.Group("g")
	id := g.Instances[0]
	form := url.Values{"Action": {"TerminateInstanceInAutoScalingGroup"}, "Version": {"2011-01-01"},
		"InstanceId": {id}, "ShouldDecrementDesiredCapacity": {"true"}}
	sim.FailTerminate(1)
	resp, body := post(t, base, form, true)
	n := parse(t, body)
	if code, _ := n.path("Error/Code"); resp.StatusCode != 503 || code != "ServiceUnavailable" {
		t.Errorf("failed terminate: %d %s", resp.StatusCode, body)
	}
	if g, _ := sim.Group("g"); g.Desired != 1 || g.Terminating != 0 || len(g.Instances) != 1 {
		t.Errorf("after a failed terminate: %+v, want the instance running and desired 1", g)
	}
	resp, body = post(t, base, form, true)
	if resp.StatusCode != 200 {
		t.Fatalf("terminate after the fault: %d %s", resp.StatusCode, body)
	}
	if g, _ := sim.Group("g"); g.Desired != 0 {
		t.Errorf("after the terminate: desired %d, want 0", g.Desired)
	}
}
