package awssim

import (
	"encoding/xml"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// maxProtectionIDs is how many instances one SetInstanceProtection call
// may name ("If you exceed your maximum limit of instance IDs, which is 50
// per Auto Scaling group, the call fails").
const maxProtectionIDs = 50

// setInstanceProtection answers SetInstanceProtection: it marks instances
// of one group as protected from scale in, or not. A protected instance is
// never chosen when the group shrinks to a lower desired capacity (the
// capacity is lowered, the instance stays, as AWS documents: "the Auto
// Scaling group can't terminate the required number of instances until
// their instance scale-in protection settings are disabled"), while
// TerminateInstanceInAutoScalingGroup still terminates it.
func (s *Server) setInstanceProtection(form url.Values) (any, *apiError) {
	name := form.Get("AutoScalingGroupName")
	if name == "" {
		return nil, validation("1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	flag := form.Get("ProtectedFromScaleIn")
	if flag == "" {
		return nil, validation("1 validation error detected: Value null at 'protectedFromScaleIn' failed to satisfy constraint: Member must not be null")
	}
	protect, err := strconv.ParseBool(flag)
	if err != nil {
		return nil, validation("ProtectedFromScaleIn must be true or false, got %q", flag)
	}
	ids := members(form, "InstanceIds.member")
	if len(ids) == 0 {
		return nil, validation("1 validation error detected: Value null at 'instanceIds' failed to satisfy constraint: Member must not be null")
	}
	if len(ids) > maxProtectionIDs {
		return nil, validation("The number of instance IDs %d exceeds the limit of %d per request", len(ids), maxProtectionIDs)
	}
	g, ok := s.groups[name]
	if !ok {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
	}
	var targets []*instance
	for _, id := range ids {
		var found *instance
		for _, in := range g.members {
			if in.ID == id {
				found = in
				break
			}
		}
		if found == nil {
			return nil, validation("The instance %s is not part of Auto Scaling group %s.", id, name)
		}
		targets = append(targets, found)
	}
	for _, in := range targets {
		in.protected = protect
	}
	s.log.Info("awssim sets instance protection", "group", name, "instances", strings.Join(ids, ","), "protected", protect)
	return &setInstanceProtectionResponse{Xmlns: asgNamespace}, nil
}

type setInstanceProtectionResponse struct {
	XMLName  xml.Name         `xml:"SetInstanceProtectionResponse"`
	Xmlns    string           `xml:"xmlns,attr"`
	Result   struct{}         `xml:"SetInstanceProtectionResult"`
	Metadata responseMetadata `xml:"ResponseMetadata"`
}

func (r *setInstanceProtectionResponse) setRequestID(id string) { r.Metadata.RequestID = id }

// updateParams are the UpdateAutoScalingGroup parameters awssim
// simulates; any other is refused by name rather than ignored.
var updateParams = map[string]bool{
	"Action": true, "Version": true, "AutoScalingGroupName": true,
	"MinSize": true, "MaxSize": true, "DesiredCapacity": true, "NewInstancesProtectedFromScaleIn": true,
}

// updateGroup answers UpdateAutoScalingGroup for the size limits, the
// desired capacity and NewInstancesProtectedFromScaleIn, with the service's
// rule for a new size limit given without a desired capacity: the desired
// capacity moves inside the new limits.
func (s *Server) updateGroup(form url.Values) (any, *apiError) {
	for k := range form {
		if !updateParams[k] {
			return nil, validation("awssim does not simulate the UpdateAutoScalingGroup parameter %s", k)
		}
	}
	name := form.Get("AutoScalingGroupName")
	g, ok := s.groups[name]
	if !ok {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
	}
	opt := func(k string, cur int) (int, bool, *apiError) {
		v := form.Get(k)
		if v == "" {
			return cur, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, false, validation("%s must be a non-negative integer, got %q", k, v)
		}
		return n, true, nil
	}
	minSize, _, aerr := opt("MinSize", g.min)
	if aerr != nil {
		return nil, aerr
	}
	maxSize, _, aerr := opt("MaxSize", g.max)
	if aerr != nil {
		return nil, aerr
	}
	desired, set, aerr := opt("DesiredCapacity", g.desired)
	if aerr != nil {
		return nil, aerr
	}
	if maxSize < minSize {
		return nil, validation("Max bound, %d, must be greater than or equal to min bound, %d", maxSize, minSize)
	}
	if !set {
		desired = min(max(desired, minSize), maxSize)
	}
	if desired < minSize || desired > maxSize {
		return nil, validation("Desired capacity:%d must be between the specified min size:%d and max size:%d", desired, minSize, maxSize)
	}
	if v := form.Get("NewInstancesProtectedFromScaleIn"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, validation("NewInstancesProtectedFromScaleIn must be true or false, got %q", v)
		}
		g.newProtected = b
	}
	g.min, g.max = minSize, maxSize
	if desired != g.desired {
		s.log.Info("awssim updates desired capacity", "group", name, "from", g.desired, "to", desired)
		g.desired = desired
		s.reconcileLocked(g)
	}
	return &emptyResponse{XMLName: xml.Name{Local: "UpdateAutoScalingGroupResponse"}, Xmlns: asgNamespace}, nil
}

// Protected reports whether an instance is protected from scale in, for
// assertions.
func (s *Server) Protected(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return false, fmt.Errorf("instance %s not found", id)
	}
	return in.protected, nil
}
