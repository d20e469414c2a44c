package awssim_test

import (
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/cloud/awssim"
)

// FuzzQueryRequest sends fuzzed AWS query-protocol bodies (Auto Scaling
// 2011-01-01 and EC2 2016-11-15, as aws-sdk-go-v2 encodes them) to the
// simulator. Properties: no panic and no 5xx without an injected fault;
// the answer is well-formed XML whose root is the action's response or the
// protocol's error document with a Code and a Message, and its RequestId is
// the x-amzn-RequestId header; and whatever the request, every group keeps
// 0 <= min <= desired <= max.
func FuzzQueryRequest(f *testing.F) {
	asg := func(kv ...string) string {
		v := url.Values{"Version": {"2011-01-01"}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	ec2 := func(kv ...string) string {
		v := url.Values{"Version": {"2016-11-15"}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	for _, s := range []string{
		asg("Action", "DescribeAutoScalingGroups"),
		asg("Action", "DescribeAutoScalingGroups", "AutoScalingGroupNames.member.1", "gpu-training-group", "MaxRecords", "1"),
		asg("Action", "DescribeAutoScalingGroups", "Filters.member.1.Name", "tag-key", "Filters.member.1.Values.member.1", "gpubroker.io/pool", "NextToken", "Z3B1"),
		asg("Action", "SetDesiredCapacity", "AutoScalingGroupName", "gpu-training-group", "DesiredCapacity", "2", "HonorCooldown", "false"),
		asg("Action", "SetDesiredCapacity", "AutoScalingGroupName", "gpu-training-group", "DesiredCapacity", "-1"),
		asg("Action", "TerminateInstanceInAutoScalingGroup", "InstanceId", "i-0000000000000001", "ShouldDecrementDesiredCapacity", "true"),
		asg("Action", "DescribeScalingActivities", "AutoScalingGroupName", "gpu-training-group", "MaxRecords", "100"),
		asg("Action", "CreateLaunchConfiguration", "LaunchConfigurationName", "lc", "InstanceType", "p4d.24xlarge"),
		asg("Action", "CreateAutoScalingGroup", "AutoScalingGroupName", "new", "MinSize", "0", "MaxSize", "3", "DesiredCapacity", "1",
			"LaunchConfigurationName", "lc", "AvailabilityZones.member.1", "us-east-1a", "Tags.member.1.Key", "gpubroker.io/pool", "Tags.member.1.Value", "new", "Tags.member.1.PropagateAtLaunch", "true"),
		asg("Action", "CreateOrUpdateTags", "Tags.member.1.ResourceId", "gpu-training-group", "Tags.member.1.ResourceType", "auto-scaling-group", "Tags.member.1.Key", "k", "Tags.member.1.Value", "v"),
		asg("Action", "DeleteAutoScalingGroup", "AutoScalingGroupName", "cpu-node-group", "ForceDelete", "true"),
		ec2("Action", "DescribeInstances", "InstanceId.1", "i-0000000000000001", "MaxResults", "5"),
		ec2("Action", "DescribeInstances", "Filter.1.Name", "tag:aws:autoscaling:groupName", "Filter.1.Value.1", "gpu-training-group"),
		"Action=Nope&Version=2099-01-01",
		"%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		sim := awssim.New(awssim.Config{})
		for _, g := range []awssim.GroupSpec{
			{Name: "gpu-training-group", Min: 0, Max: 5, Desired: 1, InstanceType: "p4d.24xlarge", Tags: map[string]string{"gpubroker.io/pool": "gpu"}},
			{Name: "cpu-node-group", Min: 1, Max: 10, Desired: 1, InstanceType: "m5.large"},
		} {
			if err := sim.CreateGroup(g); err != nil {
				t.Fatal(err)
			}
		}
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-east-1/autoscaling/aws4_request, SignedHeaders=host, Signature=0")
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%q: answered %d %s", body, rec.Code, rec.Body)
		}
		var doc struct {
			XMLName   xml.Name
			RequestID string   `xml:"RequestId"` // Auto Scaling error
			EC2ID     string   `xml:"RequestID"` // EC2 error
			EC2Result string   `xml:"requestId"` // EC2 result
			Meta      string   `xml:"ResponseMetadata>RequestId"`
			Codes     []string `xml:"Error>Code"`
			Msgs      []string `xml:"Error>Message"`
			EC2Codes  []string `xml:"Errors>Error>Code"`
			EC2Msgs   []string `xml:"Errors>Error>Message"`
		}
		if err := xml.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("%q: answer is not XML: %v\n%s", body, err, rec.Body)
		}
		id := rec.Header().Get("x-amzn-RequestId")
		if id == "" || (doc.RequestID != id && doc.EC2ID != id && doc.EC2Result != id && doc.Meta != id) {
			t.Errorf("%q: request id header %q is not in the answer:\n%s", body, id, rec.Body)
		}
		switch root := doc.XMLName.Local; {
		case rec.Code == http.StatusOK && !strings.HasSuffix(root, "Response"):
			t.Errorf("%q: 200 with root %s", body, root)
		case rec.Code != http.StatusOK && root == "ErrorResponse":
			if len(doc.Codes) != 1 || doc.Codes[0] == "" || len(doc.Msgs) != 1 || doc.Msgs[0] == "" {
				t.Errorf("%q: error without a code and a message:\n%s", body, rec.Body)
			}
		case rec.Code != http.StatusOK && root == "Response":
			if len(doc.EC2Codes) != 1 || doc.EC2Codes[0] == "" || len(doc.EC2Msgs) != 1 || doc.EC2Msgs[0] == "" {
				t.Errorf("%q: EC2 error without a code and a message:\n%s", body, rec.Body)
			}
		case rec.Code != http.StatusOK:
			t.Errorf("%q: %d with root %s", body, rec.Code, root)
		}
		names := []string{"gpu-training-group", "cpu-node-group"}
		if form, err := url.ParseQuery(body); err == nil && form.Get("AutoScalingGroupName") != "" {
			names = append(names, form.Get("AutoScalingGroupName"))
		}
		for _, n := range names {
			g, ok := sim.Group(n)
			if ok && (g.Min < 0 || g.Min > g.Desired || g.Desired > g.Max) {
				t.Errorf("%q: group %s has min %d desired %d max %d", body, n, g.Min, g.Desired, g.Max)
			}
		}
	})
}
