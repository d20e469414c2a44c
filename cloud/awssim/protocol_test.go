package awssim_test

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// These tests check the wire shapes against the AWS documentation of the
// query protocols (Auto Scaling API Reference "Common Errors" and response
// examples; EC2 API Reference "Error codes" and DescribeInstances example),
// not against the simulator's own structs.

func post(t *testing.T, base string, form url.Values, signed bool) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if signed {
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-east-1/autoscaling/aws4_request, SignedHeaders=host, Signature=0")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func start(t *testing.T) (*awssim.Server, string) {
	sim := awssim.New(awssim.Config{})
	base, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close(context.Background()) })
	return sim, base
}

// node is a generic XML tree for shape assertions.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []node     `xml:",any"`
	Text    string     `xml:",chardata"`
}

func parse(t *testing.T, body string) node {
	t.Helper()
	var n node
	if err := xml.Unmarshal([]byte(body), &n); err != nil {
		t.Fatalf("not XML: %v\n%s", err, body)
	}
	return n
}

// path returns the text at a slash-separated element path (first match).
func (n node) path(p string) (string, bool) {
	cur := n
	for _, part := range strings.Split(p, "/") {
		found := false
		for _, c := range cur.Nodes {
			if c.XMLName.Local == part {
				cur, found = c, true
				break
			}
		}
		if !found {
			return "", false
		}
	}
	return strings.TrimSpace(cur.Text), true
}

func TestAutoScalingResponseShape(t *testing.T) {
	sim, base := start(t)
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "g", Max: 3, Desired: 1, Tags: map[string]string{"gpubroker.io/pool": "p"}}); err != nil {
		t.Fatal(err)
	}
	resp, body := post(t, base, url.Values{"Action": {"DescribeAutoScalingGroups"}, "Version": {"2011-01-01"},
		"AutoScalingGroupNames.member.1": {"g"}}, true)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	n := parse(t, body)
	if n.XMLName.Local != "DescribeAutoScalingGroupsResponse" || n.XMLName.Space != "http://autoscaling.amazonaws.com/doc/2011-01-01/" {
		t.Errorf("root %v", n.XMLName)
	}
	reqID := resp.Header.Get("x-amzn-RequestId")
	if got, _ := n.path("ResponseMetadata/RequestId"); reqID == "" || got != reqID {
		t.Errorf("request id header %q, body %q", reqID, got)
	}
	for p, want := range map[string]string{
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/AutoScalingGroupName":                  "g",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/DesiredCapacity":                       "1",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Instances/member/LifecycleState":       "InService",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Tags/member/Key":                       "gpubroker.io/pool",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Tags/member/ResourceType":              "auto-scaling-group",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Instances/member/AvailabilityZone":     "us-east-1b",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Instances/member/HealthStatus":         "Healthy",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/AvailabilityZones/member":              "us-east-1a",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Instances/member/ProtectedFromScaleIn": "false",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/TerminationPolicies/member":            "Default",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/NewInstancesProtectedFromScaleIn":      "false",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/HealthCheckType":                       "EC2",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Tags/member/PropagateAtLaunch":         "true",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Instances/member/InstanceType":         "p4d.24xlarge",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/MinSize":                               "0",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/MaxSize":                               "3",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Tags/member/ResourceId":                "g",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/Tags/member/Value":                     "p",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/DefaultCooldown":                       "300",
		"DescribeAutoScalingGroupsResult/AutoScalingGroups/member/HealthCheckGracePeriod":                "300",
	} {
		if got, ok := n.path(p); !ok || got != want {
			t.Errorf("%s = %q (present %v), want %q", p, got, ok, want)
		}
	}
	if _, ok := n.path("DescribeAutoScalingGroupsResult/NextToken"); ok {
		t.Errorf("NextToken present on the last page")
	}
}

func TestAutoScalingErrorShape(t *testing.T) {
	sim, base := start(t)
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "g", Max: 3}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		form   url.Values
		signed bool
		status int
		typ    string
		code   string
		msg    string
	}{
		{"unsigned", url.Values{"Action": {"DescribeAutoScalingGroups"}, "Version": {"2011-01-01"}}, false,
			403, "Sender", "MissingAuthenticationToken", "Authentication Token"},
		{"above max", url.Values{"Action": {"SetDesiredCapacity"}, "Version": {"2011-01-01"}, "AutoScalingGroupName": {"g"}, "DesiredCapacity": {"4"}}, true,
			400, "Sender", "ValidationError", "New SetDesiredCapacity value 4 is above max value 3 for the AutoScalingGroup."},
		{"unknown instance", url.Values{"Action": {"TerminateInstanceInAutoScalingGroup"}, "Version": {"2011-01-01"}, "InstanceId": {"i-0123"}, "ShouldDecrementDesiredCapacity": {"true"}}, true,
			400, "Sender", "ValidationError", "Instance Id not found"},
		{"unknown action", url.Values{"Action": {"Frobnicate"}, "Version": {"2011-01-01"}}, true,
			400, "Sender", "InvalidAction", "Frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, base, tt.form, tt.signed)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			n := parse(t, body)
			if n.XMLName.Local != "ErrorResponse" {
				t.Fatalf("root %q:\n%s", n.XMLName.Local, body)
			}
			typ, _ := n.path("Error/Type")
			code, _ := n.path("Error/Code")
			msg, _ := n.path("Error/Message")
			reqID, _ := n.path("RequestId")
			if typ != tt.typ || code != tt.code || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %s/%s %q, want %s/%s containing %q", typ, code, msg, tt.typ, tt.code, tt.msg)
			}
			if reqID == "" || reqID != resp.Header.Get("x-amzn-RequestId") {
				t.Errorf("request id body %q header %q", reqID, resp.Header.Get("x-amzn-RequestId"))
			}
		})
	}

	sim.Throttle("", 1)
	resp, body := post(t, base, url.Values{"Action": {"DescribeAutoScalingGroups"}, "Version": {"2011-01-01"}}, true)
	n := parse(t, body)
	if code, _ := n.path("Error/Code"); resp.StatusCode != 400 || code != "Throttling" {
		t.Errorf("throttled: %d %s", resp.StatusCode, body)
	}
}

func TestEC2DescribeInstancesShape(t *testing.T) {
	sim, base := start(t)
	if err := sim.CreateGroup(awssim.GroupSpec{Name: "g", Max: 3, Desired: 1}); err != nil {
		t.Fatal(err)
	}
	g, _ := sim.Group("g")
	id := g.Instances[0]
	resp, body := post(t, base, url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"}, "InstanceId.1": {id}}, true)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	n := parse(t, body)
	if n.XMLName.Local != "DescribeInstancesResponse" || n.XMLName.Space != "http://ec2.amazonaws.com/doc/2016-11-15/" {
		t.Errorf("root %v", n.XMLName)
	}
	if got, _ := n.path("requestId"); got == "" || got != resp.Header.Get("x-amzn-RequestId") {
		t.Errorf("requestId %q", got)
	}
	for p, want := range map[string]string{
		"reservationSet/item/instancesSet/item/instanceId":                 id,
		"reservationSet/item/instancesSet/item/instanceState/code":         "16",
		"reservationSet/item/instancesSet/item/instanceState/name":         "running",
		"reservationSet/item/instancesSet/item/privateDnsName":             "ip-10-0-0-1.ec2.internal",
		"reservationSet/item/instancesSet/item/privateIpAddress":           "10.0.0.1",
		"reservationSet/item/instancesSet/item/tagSet/item/key":            "aws:autoscaling:groupName",
		"reservationSet/item/instancesSet/item/tagSet/item/value":          "g",
		"reservationSet/item/instancesSet/item/placement/availabilityZone": "us-east-1b",
	} {
		if got, ok := n.path(p); !ok || got != want {
			t.Errorf("%s = %q (present %v), want %q", p, got, ok, want)
		}
	}

	// EC2's error envelope differs from autoscaling's.
	resp, body = post(t, base, url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"}, "InstanceId.1": {"i-0000000000000dead"}}, true)
	n = parse(t, body)
	code, _ := n.path("Errors/Error/Code")
	reqID, _ := n.path("RequestID")
	if resp.StatusCode != 400 || n.XMLName.Local != "Response" || code != "InvalidInstanceID.NotFound" || reqID == "" {
		t.Errorf("not-found error: %d %s", resp.StatusCode, body)
	}
	sim.Throttle("DescribeInstances", 1)
	resp, body = post(t, base, url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"}}, true)
	n = parse(t, body)
	if code, _ := n.path("Errors/Error/Code"); resp.StatusCode != 503 || code != "RequestLimitExceeded" {
		t.Errorf("throttled: %d %s", resp.StatusCode, body)
	}
}
