package awssim_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// TestSetInstanceProtectionShape checks SetInstanceProtection against the
// Auto Scaling API Reference: the empty SetInstanceProtectionResult with
// its request id, a ValidationError (400, Sender) for an instance outside
// the group, for more than 50 instance ids and for a missing
// ProtectedFromScaleIn; and the documented effect: a protected instance is
// reported ProtectedFromScaleIn and is not terminated when the desired
// capacity drops below the group's size.
func TestSetInstanceProtectionShape(t *testing.T) {
	sim, base := start(t)
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "g", Max: 3, Desired: 2}); err != nil {
		t.Fatal(err)
	}
	st, _ := sim.Group("g")
	keep := st.Instances[0]
	form := func(extra map[string]string) url.Values {
		v := url.Values{"Action": {"SetInstanceProtection"}, "Version": {"2011-01-01"}, "AutoScalingGroupName": {"g"}}
		for k, x := range extra {
			v.Set(k, x)
		}
		return v
	}
	resp, body := post(t, base, form(map[string]string{"InstanceIds.member.1": keep, "ProtectedFromScaleIn": "true"}), true)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	n := parse(t, body)
	if n.XMLName.Local != "SetInstanceProtectionResponse" || n.XMLName.Space != "http://autoscaling.amazonaws.com/doc/2011-01-01/" {
		t.Errorf("root %v", n.XMLName)
	}
	if _, ok := n.path("SetInstanceProtectionResult"); !ok {
		t.Errorf("no SetInstanceProtectionResult in %s", body)
	}
	if got, _ := n.path("ResponseMetadata/RequestId"); got == "" || got != resp.Header.Get("x-amzn-RequestId") {
		t.Errorf("request id %q, header %q", got, resp.Header.Get("x-amzn-RequestId"))
	}
	if p, err := sim.Protected(keep); err != nil || !p {
		t.Fatalf("instance %s protected %v (%v)", keep, p, err)
	}

	tooMany := map[string]string{"ProtectedFromScaleIn": "true"}
	for i := 1; i <= 51; i++ {
		tooMany[fmt.Sprintf("InstanceIds.member.%d", i)] = keep
	}
	for name, extra := range map[string]map[string]string{
		"outside the group": {"InstanceIds.member.1": "i-0123456789abcdef0", "ProtectedFromScaleIn": "true"},
		"51 instance ids":   tooMany,
		"no flag":           {"InstanceIds.member.1": keep},
	} {
		resp, body := post(t, base, form(extra), true)
		n := parse(t, body)
		code, _ := n.path("Error/Code")
		typ, _ := n.path("Error/Type")
		if resp.StatusCode != 400 || code != "ValidationError" || typ != "Sender" {
			t.Errorf("%s: status %d, code %q, type %q; want 400 ValidationError Sender: %s", name, resp.StatusCode, code, typ, body)
		}
	}
	if _, body := post(t, base, form(map[string]string{"InstanceIds.member.1": "i-0123456789abcdef0", "ProtectedFromScaleIn": "true"}), true); !strings.Contains(body, "is not part of Auto Scaling group g") {
		t.Errorf("message for an instance outside the group: %s", body)
	}

	// The desired capacity drops to 0: the unprotected instance goes, the
	// protected one stays although the group is above its desired size.
	resp, body = post(t, base, url.Values{"Action": {"SetDesiredCapacity"}, "Version": {"2011-01-01"},
		"AutoScalingGroupName": {"g"}, "DesiredCapacity": {"0"}}, true)
	if resp.StatusCode != 200 {
		t.Fatalf("lower desired: %d %s", resp.StatusCode, body)
	}
	st, _ = sim.Group("g")
	if st.Desired != 0 || st.InService != 1 || len(st.Instances) != 1 || st.Instances[0] != keep {
		t.Fatalf("after lowering to 0: %+v; want only the protected instance %s, in service", st, keep)
	}
}
