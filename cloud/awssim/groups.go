package awssim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// group is one simulated autoscaling group.
type group struct {
	name         string
	arn          string
	launchConfig string
	instanceType string
	min, max     int
	desired      int
	zones        []string
	created      time.Time
	tags         map[string]tag
	members      []*instance // in the group, in launch order
	activities   []activity  // newest last
	retryPending bool
	// newProtected is NewInstancesProtectedFromScaleIn: launches start
	// protected from scale in.
	newProtected  bool
	activitySeq   int
	nextLaunchSeq int
}

type tag struct {
	value     string
	propagate bool
}

// instance is one simulated EC2 instance.
type instance struct {
	Instance
	lifecycle     string // autoscaling lifecycle state; "" once out of the group
	state         string // EC2 state name
	zone          string
	neverRegister bool
	registered    bool
	// protected is ProtectedFromScaleIn: a lower desired capacity never
	// picks this instance.
	protected bool
}

// activity is one scaling activity.
type activity struct {
	id, description, cause, status, message string
	start, end                              time.Time
}

const maxActivities = 1000

// GroupSpec describes a group created through the Go API (the demo).
type GroupSpec struct {
	Name         string
	Min, Max     int
	Desired      int
	InstanceType string
	// Tags are set with PropagateAtLaunch.
	Tags map[string]string
}

// CreateGroup creates a group as CreateAutoScalingGroup would.
func (s *Server) CreateGroup(spec GroupSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tags := map[string]tag{}
	for k, v := range spec.Tags {
		tags[k] = tag{value: v, propagate: true}
	}
	if err := s.createGroupLocked(spec.Name, spec.Min, spec.Max, spec.Desired, spec.InstanceType, "", nil, tags, false); err != nil {
		return err
	}
	return nil
}

// GroupState is a snapshot of one group for assertions.
type GroupState struct {
	Name               string
	Min, Max, Desired  int
	InService, Pending int
	Terminating        int
	Instances          []string
}

// Group returns the group's current state.
func (s *Server) Group(name string) (GroupState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[name]
	if !ok {
		return GroupState{}, false
	}
	st := GroupState{Name: g.name, Min: g.min, Max: g.max, Desired: g.desired}
	for _, in := range g.members {
		st.Instances = append(st.Instances, in.ID)
		switch in.lifecycle {
		case "InService":
			st.InService++
		case "Pending":
			st.Pending++
		case "Terminating":
			st.Terminating++
		}
	}
	return st, true
}

func (s *Server) createGroupLocked(name string, minSize, maxSize, desired int, instanceType, launchConfig string, zones []string, tags map[string]tag, protect bool) *apiError {
	switch {
	case name == "" || len(name) > 255:
		return validation("AutoScalingGroupName must be 1 to 255 characters")
	case s.groups[name] != nil:
		return &apiError{status: 400, code: "AlreadyExists", message: fmt.Sprintf("AutoScalingGroup by this name already exists - A group with the name %s already exists", name), sender: true}
	case minSize < 0 || maxSize < minSize:
		return validation("MinSize %d and MaxSize %d are not a valid range", minSize, maxSize)
	case desired < minSize || desired > maxSize:
		return validation("Desired capacity:%d must be between the specified min size:%d and max size:%d", desired, minSize, maxSize)
	}
	if instanceType == "" {
		instanceType = "p4d.24xlarge"
	}
	if len(zones) == 0 {
		zones = []string{s.cfg.Region + "a", s.cfg.Region + "b", s.cfg.Region + "c"}
	}
	g := &group{
		name:         name,
		arn:          fmt.Sprintf("arn:aws:autoscaling:%s:%s:autoScalingGroup:%08x-aaaa-4bbb-8ccc-%012x:autoScalingGroupName/%s", s.cfg.Region, s.cfg.AccountID, len(s.groups)+1, len(s.groups)+1, name),
		launchConfig: launchConfig,
		instanceType: instanceType,
		min:          minSize,
		max:          maxSize,
		desired:      desired,
		zones:        zones,
		created:      s.cfg.Now(),
		tags:         tags,
		newProtected: protect,
	}
	s.groups[name] = g
	s.reconcileLocked(g)
	return nil
}

// reconcileLocked launches or terminates instances until the group's
// members match its desired capacity, as the service's own loop does.
func (s *Server) reconcileLocked(g *group) {
	active := 0
	for _, in := range g.members {
		if in.lifecycle == "Pending" || in.lifecycle == "InService" {
			active++
		}
	}
	// Each missing instance is one launch attempt; a failed attempt is one
	// failed activity, so some launches of a scale-up may fail while others
	// succeed.
	missing := g.desired - active
	for range missing {
		if s.launchLocked(g, active) {
			active++
		}
	}
	if active > g.desired {
		// Scale-in chooses the newest instances first, never one protected
		// from scale in: with too few unprotected ones the group stays
		// above its desired capacity.
		cands := make([]*instance, 0, len(g.members))
		for _, in := range g.members {
			if (in.lifecycle == "Pending" || in.lifecycle == "InService") && !in.protected {
				cands = append(cands, in)
			}
		}
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].LaunchTime.After(cands[j].LaunchTime) })
		for _, in := range cands[:min(active-g.desired, len(cands))] {
			s.terminateLocked(g, in, fmt.Sprintf("an instance was taken out of service in response to a difference between desired and actual capacity, shrinking the capacity from %d to %d", active, g.desired))
		}
	}
}

// launchLocked starts one instance, or records a failed launch and
// schedules a retry. It reports whether an instance was started.
func (s *Server) launchLocked(g *group, active int) bool {
	now := s.cfg.Now()
	cause := fmt.Sprintf("At %s an instance was started in response to a difference between desired and actual capacity, increasing the capacity from %d to %d.",
		now.UTC().Format(time.RFC3339), active, g.desired)
	if lf, ok := s.faults.launchFailures[g.name]; ok && take(&lf.n) {
		if lf.n == 0 {
			delete(s.faults.launchFailures, g.name)
		} else {
			s.faults.launchFailures[g.name] = lf
		}
		msg := lf.message
		if msg == "" {
			r := s.cfg.Region
			msg = fmt.Sprintf(InsufficientCapacity, g.instanceType, r, g.instanceType, r, r)
		}
		s.addActivity(g, activity{
			description: "Launching a new EC2 instance.  Status Reason: " + msg,
			cause:       cause, status: "Failed", message: msg, start: now, end: now,
		})
		s.log.Info("awssim fails a launch", "group", g.name, "reason", msg)
		if !g.retryPending {
			g.retryPending = true
			time.AfterFunc(s.cfg.LaunchRetry, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				g.retryPending = false
				if !s.closed && s.groups[g.name] == g {
					s.reconcileLocked(g)
				}
			})
		}
		return false
	}

	n := len(s.instances) + 1
	g.nextLaunchSeq++
	zone := g.zones[g.nextLaunchSeq%len(g.zones)]
	ip := fmt.Sprintf("10.%d.%d.%d", (n>>16)&255, (n>>8)&255, n&255)
	dns := "ip-" + strings.ReplaceAll(ip, ".", "-") + "." + s.cfg.Region + ".compute.internal"
	if s.cfg.Region == "us-east-1" {
		dns = "ip-" + strings.ReplaceAll(ip, ".", "-") + ".ec2.internal"
	}
	in := &instance{
		Instance: Instance{
			ID:             fmt.Sprintf("i-%017x", 0x0a000000000+n),
			Group:          g.name,
			InstanceType:   g.instanceType,
			PrivateDNSName: dns,
			PrivateIP:      ip,
			LaunchTime:     now,
			Tags:           map[string]string{"aws:autoscaling:groupName": g.name},
		},
		lifecycle: "Pending",
		state:     "pending",
		zone:      zone,
		protected: g.newProtected,
	}
	for k, t := range g.tags {
		if t.propagate {
			in.Tags[k] = t.value
		}
	}
	if nr := s.faults.neverRegister[g.name]; take(&nr) {
		in.neverRegister = true
		if nr == 0 {
			delete(s.faults.neverRegister, g.name)
		} else {
			s.faults.neverRegister[g.name] = nr
		}
	}
	s.instances[in.ID] = in
	g.members = append(g.members, in)
	s.addActivity(g, activity{
		description: "Launching a new EC2 instance: " + in.ID,
		cause:       cause, status: "Successful", start: now, end: now,
	})
	s.log.Debug("awssim launches", "group", g.name, "instance", in.ID)

	delay := s.cfg.LaunchDelay
	if d, ok := s.faults.launchDelay[g.name]; ok {
		delay = d
	}
	s.after(delay, func() { s.inServiceLocked(in) })
	return true
}

// after runs f under the lock after d, or at once (the lock is held) when
// d is zero.
func (s *Server) after(d time.Duration, f func()) {
	if d <= 0 {
		f()
		return
	}
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			f()
		}
	})
}

func (s *Server) inServiceLocked(in *instance) {
	if in.lifecycle != "Pending" {
		return
	}
	in.lifecycle, in.state = "InService", "running"
	if in.neverRegister {
		s.log.Info("awssim instance will never register", "instance", in.ID)
		return
	}
	s.after(s.cfg.BootDelay, func() {
		if in.state != "running" || in.registered {
			return
		}
		in.registered = true
		if h := s.cfg.BootHook; h != nil {
			snap := in.snapshot()
			go h(snap)
		}
	})
}

// terminateLocked starts terminating an in-group instance.
func (s *Server) terminateLocked(g *group, in *instance, cause string) activity {
	now := s.cfg.Now()
	in.lifecycle, in.state = "Terminating", "shutting-down"
	a := s.addActivity(g, activity{
		description: "Terminating EC2 instance: " + in.ID,
		cause:       fmt.Sprintf("At %s %s.", now.UTC().Format(time.RFC3339), cause),
		status:      "InProgress", start: now,
	})
	s.after(s.cfg.TerminateDelay, func() {
		in.lifecycle, in.state = "", "terminated"
		for i, m := range g.members {
			if m == in {
				g.members = append(g.members[:i:i], g.members[i+1:]...)
				break
			}
		}
		for i := range g.activities {
			if g.activities[i].id == a.id {
				g.activities[i].status, g.activities[i].end = "Successful", s.cfg.Now()
			}
		}
		if h := s.cfg.TerminateHook; h != nil {
			snap := in.snapshot()
			go h(snap)
		}
	})
	return a
}

func (s *Server) addActivity(g *group, a activity) activity {
	g.activitySeq++
	a.id = fmt.Sprintf("%08x-%04x-4000-8000-%012x", len(g.name), g.activitySeq&0xffff, g.activitySeq)
	g.activities = append(g.activities, a)
	if len(g.activities) > maxActivities {
		g.activities = append([]activity(nil), g.activities[len(g.activities)-maxActivities:]...)
	}
	return a
}

func (in *instance) snapshot() Instance {
	out := in.Instance
	out.Tags = make(map[string]string, len(in.Tags))
	for k, v := range in.Tags {
		out.Tags[k] = v
	}
	return out
}
