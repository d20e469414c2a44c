package awssim

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// autoscaling answers one awsquery action. s.mu is held.
func (s *Server) autoscaling(action string, form url.Values) (any, *apiError) {
	switch action {
	case "DescribeAutoScalingGroups":
		return s.describeGroups(form)
	case "SetDesiredCapacity":
		return s.setDesired(form)
	case "TerminateInstanceInAutoScalingGroup":
		return s.terminateInGroup(form)
	case "DescribeScalingActivities":
		return s.describeActivities(form)
	case "SetInstanceProtection":
		return s.setInstanceProtection(form)
	case "UpdateAutoScalingGroup":
		return s.updateGroup(form)
	case "CreateAutoScalingGroup":
		return s.createGroup(form)
	case "CreateLaunchConfiguration":
		name := form.Get("LaunchConfigurationName")
		if name == "" {
			return nil, validation("LaunchConfigurationName is required")
		}
		if _, ok := s.configs[name]; ok {
			return nil, &apiError{status: 400, code: "AlreadyExists", message: "Launch Configuration by this name already exists - A launch configuration already exists with the name " + name, sender: true}
		}
		s.configs[name] = form.Get("InstanceType")
		return &emptyResponse{XMLName: xml.Name{Local: "CreateLaunchConfigurationResponse"}, Xmlns: asgNamespace}, nil
	case "CreateOrUpdateTags":
		return s.createOrUpdateTags(form)
	case "DeleteAutoScalingGroup":
		name := form.Get("AutoScalingGroupName")
		g, ok := s.groups[name]
		if !ok {
			return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
		}
		for _, in := range append([]*instance(nil), g.members...) {
			s.terminateLocked(g, in, "the group was deleted")
		}
		delete(s.groups, name)
		return &emptyResponse{XMLName: xml.Name{Local: "DeleteAutoScalingGroupResponse"}, Xmlns: asgNamespace}, nil
	}
	return nil, &apiError{status: http.StatusBadRequest, code: "InvalidAction", message: fmt.Sprintf("The action %s is not valid for this web service.", action), sender: true}
}

type emptyResponse struct {
	XMLName  xml.Name
	Xmlns    string           `xml:"xmlns,attr"`
	Metadata responseMetadata `xml:"ResponseMetadata"`
}

func (r *emptyResponse) setRequestID(id string) { r.Metadata.RequestID = id }

type xmlTag struct {
	ResourceID        string `xml:"ResourceId"`
	ResourceType      string `xml:"ResourceType"`
	Key               string `xml:"Key"`
	Value             string `xml:"Value"`
	PropagateAtLaunch bool   `xml:"PropagateAtLaunch"`
}

type xmlGroupInstance struct {
	InstanceID              string `xml:"InstanceId"`
	InstanceType            string `xml:"InstanceType"`
	AvailabilityZone        string `xml:"AvailabilityZone"`
	LifecycleState          string `xml:"LifecycleState"`
	HealthStatus            string `xml:"HealthStatus"`
	LaunchConfigurationName string `xml:"LaunchConfigurationName,omitempty"`
	ProtectedFromScaleIn    bool   `xml:"ProtectedFromScaleIn"`
}

type xmlGroup struct {
	AutoScalingGroupName             string             `xml:"AutoScalingGroupName"`
	AutoScalingGroupARN              string             `xml:"AutoScalingGroupARN"`
	LaunchConfigurationName          string             `xml:"LaunchConfigurationName,omitempty"`
	MinSize                          int                `xml:"MinSize"`
	MaxSize                          int                `xml:"MaxSize"`
	DesiredCapacity                  int                `xml:"DesiredCapacity"`
	DefaultCooldown                  int                `xml:"DefaultCooldown"`
	AvailabilityZones                []string           `xml:"AvailabilityZones>member"`
	HealthCheckType                  string             `xml:"HealthCheckType"`
	HealthCheckGracePeriod           int                `xml:"HealthCheckGracePeriod"`
	Instances                        []xmlGroupInstance `xml:"Instances>member"`
	CreatedTime                      string             `xml:"CreatedTime"`
	Tags                             []xmlTag           `xml:"Tags>member"`
	TerminationPolicies              []string           `xml:"TerminationPolicies>member"`
	NewInstancesProtectedFromScaleIn bool               `xml:"NewInstancesProtectedFromScaleIn"`
	ServiceLinkedRoleARN             string             `xml:"ServiceLinkedRoleARN"`
}

type describeGroupsResponse struct {
	XMLName xml.Name `xml:"DescribeAutoScalingGroupsResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Groups    []xmlGroup `xml:"AutoScalingGroups>member"`
		NextToken string     `xml:"NextToken,omitempty"`
	} `xml:"DescribeAutoScalingGroupsResult"`
	Metadata responseMetadata `xml:"ResponseMetadata"`
}

func (r *describeGroupsResponse) setRequestID(id string) { r.Metadata.RequestID = id }

// maxRecords reads MaxRecords (default def, at most 100).
func maxRecords(form url.Values, def int) (int, *apiError) {
	v := form.Get("MaxRecords")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, validation("1 validation error detected: Value '%s' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and 100", v)
	}
	return n, nil
}

// page returns the window of sorted keys after the token.
func page(keys []string, token string, limit int) ([]string, string, *apiError) {
	start := 0
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return nil, "", &apiError{status: 400, code: "InvalidNextToken", message: "The token '" + token + "' is invalid.", sender: true}
		}
		start = sort.SearchStrings(keys, string(b))
	}
	end := min(start+limit, len(keys))
	next := ""
	if end < len(keys) {
		next = base64.RawURLEncoding.EncodeToString([]byte(keys[end]))
	}
	return keys[start:end], next, nil
}

func (s *Server) describeGroups(form url.Values) (any, *apiError) {
	limit, aerr := maxRecords(form, 50)
	if aerr != nil {
		return nil, aerr
	}
	var names []string
	if want := members(form, "AutoScalingGroupNames.member"); len(want) > 0 {
		for _, n := range want {
			if s.groups[n] != nil {
				names = append(names, n)
			}
		}
	} else {
		for n := range s.groups {
			names = append(names, n)
		}
	}
	filters, aerr := groupFilters(form)
	if aerr != nil {
		return nil, aerr
	}
	kept := names[:0]
	for _, n := range names {
		if matches(s.groups[n], filters) {
			kept = append(kept, n)
		}
	}
	sort.Strings(kept)
	window, next, aerr := page(kept, form.Get("NextToken"), limit)
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range window {
		if s.faults.describeFails(n) {
			return nil, &apiError{status: http.StatusInternalServerError, code: "InternalFailure", message: "An internal error occurred."}
		}
	}
	resp := &describeGroupsResponse{Xmlns: asgNamespace}
	resp.Result.NextToken = next
	for _, n := range window {
		resp.Result.Groups = append(resp.Result.Groups, s.xmlGroup(s.groups[n]))
	}
	return resp, nil
}

func (s *Server) xmlGroup(g *group) xmlGroup {
	x := xmlGroup{
		AutoScalingGroupName:             g.name,
		AutoScalingGroupARN:              g.arn,
		LaunchConfigurationName:          g.launchConfig,
		MinSize:                          g.min,
		MaxSize:                          g.max,
		DesiredCapacity:                  g.desired,
		DefaultCooldown:                  300,
		AvailabilityZones:                g.zones,
		NewInstancesProtectedFromScaleIn: g.newProtected,
		HealthCheckType:                  "EC2",
		HealthCheckGracePeriod:           300,
		CreatedTime:                      timestamp(g.created),
		TerminationPolicies:              []string{"Default"},
		ServiceLinkedRoleARN:             fmt.Sprintf("arn:aws:iam::%s:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling", s.cfg.AccountID),
		Instances:                        make([]xmlGroupInstance, 0, len(g.members)),
	}
	for _, in := range g.members {
		x.Instances = append(x.Instances, xmlGroupInstance{
			InstanceID: in.ID, InstanceType: in.InstanceType, AvailabilityZone: in.zone,
			LifecycleState: in.lifecycle, HealthStatus: "Healthy", LaunchConfigurationName: g.launchConfig,
			ProtectedFromScaleIn: in.protected,
		})
	}
	keys := make([]string, 0, len(g.tags))
	for k := range g.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.Tags = append(x.Tags, xmlTag{ResourceID: g.name, ResourceType: "auto-scaling-group", Key: k, Value: g.tags[k].value, PropagateAtLaunch: g.tags[k].propagate})
	}
	return x
}

type filter struct {
	name   string
	values []string
}

func groupFilters(form url.Values) ([]filter, *apiError) {
	var out []filter
	for i := 1; ; i++ {
		p := fmt.Sprintf("Filters.member.%d", i)
		name, ok := form[p+".Name"]
		if !ok {
			return out, nil
		}
		f := filter{name: name[0], values: members(form, p+".Values.member")}
		if f.name != "tag-key" && f.name != "tag-value" && !strings.HasPrefix(f.name, "tag:") {
			return nil, validation("Filter name %s is not supported; use tag-key, tag-value or tag:<key>", f.name)
		}
		out = append(out, f)
	}
}

// matches applies DescribeAutoScalingGroups filters: all filters must
// match, any value of one filter may.
func matches(g *group, filters []filter) bool {
	for _, f := range filters {
		ok := false
		for _, v := range f.values {
			switch {
			case f.name == "tag-key":
				_, ok = g.tags[v]
			case f.name == "tag-value":
				for _, t := range g.tags {
					ok = ok || t.value == v
				}
			default:
				t, has := g.tags[strings.TrimPrefix(f.name, "tag:")]
				ok = has && t.value == v
			}
			if ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (s *Server) setDesired(form url.Values) (any, *apiError) {
	name := form.Get("AutoScalingGroupName")
	g, ok := s.groups[name]
	if !ok {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
	}
	d, err := strconv.Atoi(form.Get("DesiredCapacity"))
	if err != nil {
		return nil, validation("DesiredCapacity must be an integer, got %q", form.Get("DesiredCapacity"))
	}
	switch {
	case d > g.max:
		return nil, validation("New SetDesiredCapacity value %d is above max value %d for the AutoScalingGroup.", d, g.max)
	case d < g.min:
		return nil, validation("New SetDesiredCapacity value %d is below min value %d for the AutoScalingGroup.", d, g.min)
	}
	if d != g.desired {
		s.log.Info("awssim sets desired capacity", "group", name, "from", g.desired, "to", d)
		g.desired = d
		s.reconcileLocked(g)
	}
	return &emptyResponse{XMLName: xml.Name{Local: "SetDesiredCapacityResponse"}, Xmlns: asgNamespace}, nil
}

type xmlActivity struct {
	ActivityID           string `xml:"ActivityId"`
	AutoScalingGroupName string `xml:"AutoScalingGroupName"`
	AutoScalingGroupARN  string `xml:"AutoScalingGroupARN"`
	Description          string `xml:"Description"`
	Cause                string `xml:"Cause"`
	StartTime            string `xml:"StartTime"`
	EndTime              string `xml:"EndTime,omitempty"`
	StatusCode           string `xml:"StatusCode"`
	StatusMessage        string `xml:"StatusMessage,omitempty"`
	Progress             int    `xml:"Progress"`
	Details              string `xml:"Details"`
}

func (s *Server) xmlActivity(g *group, a activity) xmlActivity {
	x := xmlActivity{
		ActivityID: a.id, AutoScalingGroupName: g.name, AutoScalingGroupARN: g.arn,
		Description: a.description, Cause: a.cause, StartTime: timestamp(a.start),
		StatusCode: a.status, StatusMessage: a.message,
		Details: fmt.Sprintf(`{"Subnet ID":"subnet-0a1b2c3d","Availability Zone":"%sa"}`, s.cfg.Region),
	}
	if !a.end.IsZero() {
		x.EndTime = timestamp(a.end)
		x.Progress = 100
	}
	return x
}

type terminateResponse struct {
	XMLName xml.Name `xml:"TerminateInstanceInAutoScalingGroupResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Activity xmlActivity `xml:"Activity"`
	} `xml:"TerminateInstanceInAutoScalingGroupResult"`
	Metadata responseMetadata `xml:"ResponseMetadata"`
}

func (r *terminateResponse) setRequestID(id string) { r.Metadata.RequestID = id }

func (s *Server) terminateInGroup(form url.Values) (any, *apiError) {
	if take(&s.faults.terminateFail) {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: "ServiceUnavailable", message: "The service is unavailable. Please try again shortly."}
	}
	id := form.Get("InstanceId")
	decrement := form.Get("ShouldDecrementDesiredCapacity") == "true"
	if form.Get("ShouldDecrementDesiredCapacity") == "" {
		return nil, validation("ShouldDecrementDesiredCapacity is required")
	}
	in, ok := s.instances[id]
	if !ok || (in.lifecycle != "InService" && in.lifecycle != "Pending") {
		// Gone, terminating or never known: the service no longer manages it.
		return nil, validation("Instance Id not found - No managed instance found for instance ID: %s", id)
	}
	g := s.groups[in.Group]
	if decrement && g.desired-1 < g.min {
		return nil, validation("Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.", g.min)
	}
	cause := "an instance was taken out of service in response to a user request"
	if decrement {
		g.desired--
		cause += fmt.Sprintf(", shrinking the capacity from %d to %d", g.desired+1, g.desired)
	}
	a := s.terminateLocked(g, in, cause)
	s.log.Info("awssim terminates", "group", g.name, "instance", id, "decrement", decrement, "desired", g.desired)
	if !decrement {
		s.reconcileLocked(g)
	}
	if take(&s.faults.terminateHalf) {
		s.log.Info("awssim fails a terminate after applying it", "instance", id)
		return nil, &apiError{status: http.StatusInternalServerError, code: "InternalFailure", message: "An internal error occurred; the request may or may not have been processed."}
	}
	resp := &terminateResponse{Xmlns: asgNamespace}
	resp.Result.Activity = s.xmlActivity(g, a)
	return resp, nil
}

type describeActivitiesResponse struct {
	XMLName xml.Name `xml:"DescribeScalingActivitiesResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Activities []xmlActivity `xml:"Activities>member"`
		NextToken  string        `xml:"NextToken,omitempty"`
	} `xml:"DescribeScalingActivitiesResult"`
	Metadata responseMetadata `xml:"ResponseMetadata"`
}

func (r *describeActivitiesResponse) setRequestID(id string) { r.Metadata.RequestID = id }

func (s *Server) describeActivities(form url.Values) (any, *apiError) {
	limit, aerr := maxRecords(form, 100)
	if aerr != nil {
		return nil, aerr
	}
	var gs []*group
	if name := form.Get("AutoScalingGroupName"); name != "" {
		if g, ok := s.groups[name]; ok {
			gs = append(gs, g)
		}
	} else {
		for _, g := range s.groups {
			gs = append(gs, g)
		}
	}
	type ref struct {
		g *group
		a activity
	}
	var all []ref
	for _, g := range gs {
		for i := len(g.activities) - 1; i >= 0; i-- {
			all = append(all, ref{g, g.activities[i]})
		}
	}
	// Newest first, as the service answers.
	sort.SliceStable(all, func(i, j int) bool { return all[i].a.start.After(all[j].a.start) })
	start := 0
	if tok := form.Get("NextToken"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(all) {
			return nil, &apiError{status: 400, code: "InvalidNextToken", message: "The token '" + tok + "' is invalid.", sender: true}
		}
		start = n
	}
	end := min(start+limit, len(all))
	resp := &describeActivitiesResponse{Xmlns: asgNamespace}
	for _, r := range all[start:end] {
		resp.Result.Activities = append(resp.Result.Activities, s.xmlActivity(r.g, r.a))
	}
	if end < len(all) {
		resp.Result.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

func (s *Server) createGroup(form url.Values) (any, *apiError) {
	atoi := func(k string, required bool) (int, *apiError) {
		v := form.Get(k)
		if v == "" && !required {
			return -1, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, validation("%s must be an integer, got %q", k, v)
		}
		return n, nil
	}
	minSize, aerr := atoi("MinSize", true)
	if aerr != nil {
		return nil, aerr
	}
	maxSize, aerr := atoi("MaxSize", true)
	if aerr != nil {
		return nil, aerr
	}
	desired, aerr := atoi("DesiredCapacity", false)
	if aerr != nil {
		return nil, aerr
	}
	if desired < 0 {
		desired = minSize
	}
	lc := form.Get("LaunchConfigurationName")
	instanceType := form.Get("InstanceType")
	if lc != "" {
		it, ok := s.configs[lc]
		if !ok {
			return nil, validation("Launch configuration name not found - Launch configuration %s not found", lc)
		}
		if instanceType == "" {
			instanceType = it
		}
	}
	name := form.Get("AutoScalingGroupName")
	tags := map[string]tag{}
	for i := 1; ; i++ {
		p := fmt.Sprintf("Tags.member.%d", i)
		k, ok := form[p+".Key"]
		if !ok {
			break
		}
		tags[k[0]] = tag{value: form.Get(p + ".Value"), propagate: form.Get(p+".PropagateAtLaunch") == "true"}
	}
	protect := false
	if v := form.Get("NewInstancesProtectedFromScaleIn"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, validation("NewInstancesProtectedFromScaleIn must be true or false, got %q", v)
		}
		protect = b
	}
	if aerr := s.createGroupLocked(name, minSize, maxSize, desired, instanceType, lc,
		members(form, "AvailabilityZones.member"), tags, protect); aerr != nil {
		return nil, aerr
	}
	return &emptyResponse{XMLName: xml.Name{Local: "CreateAutoScalingGroupResponse"}, Xmlns: asgNamespace}, nil
}

func (s *Server) createOrUpdateTags(form url.Values) (any, *apiError) {
	for i := 1; ; i++ {
		p := fmt.Sprintf("Tags.member.%d", i)
		k, ok := form[p+".Key"]
		if !ok {
			break
		}
		name := form.Get(p + ".ResourceId")
		g, ok := s.groups[name]
		if !ok || form.Get(p+".ResourceType") != "auto-scaling-group" {
			return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
		}
		g.tags[k[0]] = tag{value: form.Get(p + ".Value"), propagate: form.Get(p+".PropagateAtLaunch") == "true"}
	}
	return &emptyResponse{XMLName: xml.Name{Local: "CreateOrUpdateTagsResponse"}, Xmlns: asgNamespace}, nil
}
