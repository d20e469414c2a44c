package yarnsim

import (
	"context"
	"fmt"
)

// The NodeManager lifecycle as the RM sees it. A NodeManager that a
// decommission ends (DECOMMISSIONED) has shut down: the node stays
// DECOMMISSIONED, whatever refreshNodes does, until a service manager or
// the broker's restart hook starts the NodeManager again; it then
// registers with the resources it is configured with (an
// updateNodeResource override is gone), RUNNING unless its host is still
// excluded, in which case the RM turns it away (DECOMMISSIONED).

// StartNodeManager registers a new NodeManager for spec.Host, as a freshly
// booted machine's NodeManager does: RUNNING, or DECOMMISSIONED when the
// host is in the exclude file (the RM refuses it, and the host waits for a
// recommission).
func (a *AdminServer) StartNodeManager(spec NodeSpec) error {
	ex, err := a.readExclude()
	if err != nil {
		return err
	}
	if err := a.sim.AddNode(spec); err != nil {
		return err
	}
	a.mu.Lock()
	a.registered[spec.Host] = a.sim.nodeSpec(spec.Host)
	a.mu.Unlock()
	if _, excluded := ex[spec.Host]; excluded {
		return a.sim.SetNodeState(spec.Host, "DECOMMISSIONED")
	}
	return nil
}

// RestartNodeManager stops host's NodeManager if it still runs (its
// containers are lost, as without NodeManager recovery) and starts it
// again: it registers with its configured resources, RUNNING unless the
// host is excluded. Its signature fits yarn.DecommissionConfig's
// RestartNodeManager hook.
func (a *AdminServer) RestartNodeManager(_ context.Context, host string) error {
	ex, err := a.readExclude()
	if err != nil {
		return err
	}
	spec, ok := a.sim.nodeState(host)
	if !ok {
		return fmt.Errorf("yarnsim: restart nodemanager of %s: no such host", host)
	}
	if spec != "DECOMMISSIONED" && spec != "SHUTDOWN" && spec != "LOST" {
		// A running NodeManager stops first: the RM marks it SHUTDOWN and
		// its containers are lost.
		a.mu.Lock()
		runs := a.runs[host]
		delete(a.runs, host)
		a.mu.Unlock()
		for _, id := range runs {
			_ = a.sim.Finish(id)
		}
		if err := a.sim.SetNodeState(host, "SHUTDOWN"); err != nil {
			return err
		}
	}
	if _, excluded := ex[host]; !excluded {
		a.sim.registerAgain(host)
	}
	a.mu.Lock()
	reg, override := a.registered[host]
	a.mu.Unlock()
	if override {
		if err := a.updateNodeResource(host, reg.MemoryMB, reg.VCores, reg.GPUs); err != nil {
			return err
		}
	}
	if _, excluded := ex[host]; excluded {
		return a.sim.SetNodeState(host, "DECOMMISSIONED")
	}
	return a.sim.SetNodeState(host, "RUNNING")
}

// registerAgain turns a placeholder or unlisted node into the entry of a
// NodeManager that registers: a real node id with a new port.
func (s *Sim) registerAgain(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[host]
	if !ok || !n.placeholder && !n.unlisted {
		return
	}
	if n.placeholder {
		s.nextPort++
		n.port = s.nextPort
	}
	n.placeholder, n.unlisted = false, false
	s.live = nil
}

// nodeSpec returns host's current spec.
func (s *Sim) nodeSpec(host string) NodeSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[host]; ok {
		return n.spec
	}
	return NodeSpec{}
}

// nodeState returns host's state and whether the RM lists it.
func (s *Sim) nodeState(host string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[host]; ok {
		return n.state, true
	}
	return "", false
}

// NodeState returns host's state as the RM lists it ("" when it does not).
func (s *Sim) NodeState(host string) string {
	st, _ := s.nodeState(host)
	return st
}

// NodeContainers returns how many containers (of any app, AMs included)
// run on host; 0 when the RM does not list it.
func (s *Sim) NodeContainers(host string) int {
	s.mu.lockRead()
	defer s.mu.Unlock()
	if n, ok := s.nodes[host]; ok {
		return n.containers
	}
	return 0
}
