package awssim

import (
	"time"
)

// InsufficientCapacity is the status message AWS records on a launch that
// failed for lack of capacity of the instance type.
const InsufficientCapacity = "We currently do not have sufficient %s capacity in the Availability Zone you requested (%sa). " +
	"Our system will be working on provisioning additional capacity. You can currently get %s capacity by not " +
	"specifying an Availability Zone in your request or choosing %sb, %sc. Launching EC2 instance failed."

// faults holds the injected failures. Counts below zero mean "until
// cleared". Guarded by Server.mu.
type faults struct {
	throttles      map[string]int // by action; "" is any action
	launchFailures map[string]launchFailure
	launchDelay    map[string]time.Duration
	neverRegister  map[string]int
	terminateHalf  int
	terminateFail  int
	describeFail   map[string]int // by group
}

type launchFailure struct {
	n       int
	message string
}

func newFaults() faults {
	return faults{
		throttles:      map[string]int{},
		launchFailures: map[string]launchFailure{},
		launchDelay:    map[string]time.Duration{},
		neverRegister:  map[string]int{},
		describeFail:   map[string]int{},
	}
}

// take decrements a positive count and reports whether the fault fires.
func take(n *int) bool {
	switch {
	case *n > 0:
		*n--
		return true
	case *n < 0:
		return true
	}
	return false
}

func (f *faults) throttle(action string) bool {
	for _, k := range [...]string{action, ""} {
		if n, ok := f.throttles[k]; ok {
			fire := take(&n)
			if n == 0 {
				delete(f.throttles, k)
			} else {
				f.throttles[k] = n
			}
			if fire {
				return true
			}
		}
	}
	return false
}

// Throttle makes the next n requests for action (any action when action is
// "") answer with throttling: Throttling (HTTP 400) on autoscaling,
// RequestLimitExceeded (HTTP 503) on EC2. n < 0 throttles until
// Throttle(action, 0) clears it.
func (s *Server) Throttle(action string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 {
		delete(s.faults.throttles, action)
		return
	}
	s.faults.throttles[action] = n
}

// FailLaunches makes the next n launches of group fail, each recorded as a
// Failed scaling activity with message (InsufficientCapacity for the
// group's instance type when empty; the group need not exist yet), and retried after LaunchRetry as AWS
// does. n < 0 fails every launch until FailLaunches(group, 0, "") clears it.
// Failing some launches of a scale-up gives a partial failure.
func (s *Server) FailLaunches(group string, n int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 {
		delete(s.faults.launchFailures, group)
		if g, ok := s.groups[group]; ok {
			s.reconcileLocked(g)
		}
		return
	}
	s.faults.launchFailures[group] = launchFailure{n: n, message: message}
}

// SlowLaunches keeps the group's new instances Pending for d instead of
// the configured LaunchDelay; d == 0 goes back to LaunchDelay.
func (s *Server) SlowLaunches(group string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == 0 {
		delete(s.faults.launchDelay, group)
		return
	}
	s.faults.launchDelay[group] = d
}

// NeverRegister makes the group's next n launched instances boot without
// the BootHook ever being called: machines that never become nodes.
func (s *Server) NeverRegister(group string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.neverRegister[group] = n
}

// FailTerminateHalfway makes the next n TerminateInstanceInAutoScalingGroup
// calls take effect (the instance starts terminating, the desired capacity
// drops) and then answer HTTP 500 InternalFailure, as when a response is
// lost. The SDK retries such a call.
func (s *Server) FailTerminateHalfway(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.terminateHalf = n
}

// FailTerminate makes the next n TerminateInstanceInAutoScalingGroup
// calls answer HTTP 503 ServiceUnavailable without taking effect: the
// instance keeps running and the desired capacity is unchanged. The SDK
// retries such a call, so n beyond its attempts fails the operation.
func (s *Server) FailTerminate(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.terminateFail = n
}

// FailDescribe makes the next n DescribeAutoScalingGroups calls whose
// answer would include group answer HTTP 500 InternalFailure instead, as
// during a partial outage of the service; the SDK retries each. n < 0
// fails them until FailDescribe(group, 0) clears it.
func (s *Server) FailDescribe(group string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 {
		delete(s.faults.describeFail, group)
		return
	}
	s.faults.describeFail[group] = n
}

// describeFails reports whether a describe that includes group fails now.
func (f *faults) describeFails(group string) bool {
	n, ok := f.describeFail[group]
	if !ok {
		return false
	}
	fire := take(&n)
	if n == 0 {
		delete(f.describeFail, group)
	} else {
		f.describeFail[group] = n
	}
	return fire
}
