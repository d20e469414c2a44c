package yarnsim

import (
	"slices"
	"time"
)

// What a new active ResourceManager makes of the cluster, after an RM
// restart with work-preserving recovery or a failover to the standby of an
// HA pair (both build the RM's active services afresh). Measured on Hadoop
// 3.3.6 and 3.5.0 (test/hadoop, TestFailover) and read in their sources:
//
//   - RMNode state is not in the state store. NodesListManager.serviceInit
//     (setDecommissionedNMs) lists every host of the exclude file as a
//     placeholder node "host:-1" in DECOMMISSIONED: no rack, no HTTP
//     address, version "unknown", no resources.
//   - ResourceTrackerService answers SHUTDOWN to the NodeManager of an
//     excluded host (it holds no DECOMMISSIONING RMNode for it), at its
//     first heartbeat: the NodeManager kills its containers and stops. A
//     graceful decommission does not survive: its work is lost.
//   - Every other NodeManager resyncs and keeps its containers
//     (work-preserving recovery); a node that was DECOMMISSIONING but is no
//     longer excluded comes back RUNNING. Until its NodeManager's next
//     heartbeat the new RM does not list it at all, and a running
//     application is listed ACCEPTED until its AM re-registers
//     (Config.AMResync): both seen on Hadoop 3.3.6 and 3.5.0
//     (TestBrokerMigratesAtTheCheckpoint).
//   - Nodes whose NodeManager is down (DECOMMISSIONED, LOST, SHUTDOWN) and
//     whose host is not excluded are not listed: the new RM never heard of
//     them.
//   - The applications (state store), the cluster's node labels and each
//     node's label (label store) and the exclude file (on disk) survive.
//   - An updateNodeResource override survives too once the RM pushed the new
//     total to the NodeManager in a heartbeat answer, which it resyncs with
//     (a restart within a heartbeat of the change loses it: not modelled
//     here, the simulator has no heartbeats); only a NodeManager restart
//     drops it (nodemanager.go).

// RestartRM makes the simulator the new active RM after a restart or a
// failover, as described above. The REST and admin endpoints keep
// serving; HA.SetActive with an admin (SetAdmin) calls it on every
// transition to active.
func (a *AdminServer) RestartRM() error {
	ex, err := a.readExclude()
	if err != nil {
		return err
	}
	s := a.sim
	// IMPORTANT: the sim's lock before a.mu, as everywhere.
	s.mu.Lock()
	a.mu.Lock()
	a.until, a.start, a.timeout = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Duration{}
	var shutdown []string
	hosts := make([]string, 0, len(s.nodes))
	for h := range s.nodes {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		n := s.nodes[h]
		_, excluded := ex[h]
		up := n.state == "RUNNING" || n.state == "UNHEALTHY" || n.state == "DECOMMISSIONING"
		switch {
		case excluded:
			if up {
				shutdown = append(shutdown, h)
			}
		case !up:
			n.unlisted = true
		default:
			// The NodeManager resyncs with its containers and the total it
			// holds (an updateNodeResource the old RM pushed to it), at its
			// next heartbeat: until then the new RM does not list it.
			n.resync = s.cfg.Now().Add(s.cfg.Heartbeat)
			if n.state == "DECOMMISSIONING" {
				n.state = "RUNNING"
				s.freeByLabel[label(n.spec.Labels)] += n.freeGPUs()
			}
		}
	}
	runs := map[string][]string{}
	for _, h := range shutdown {
		runs[h] = a.runs[h]
		delete(a.runs, h)
	}
	a.mu.Unlock()
	s.live = nil
	s.mu.Unlock()

	// The excluded hosts' NodeManagers are told SHUTDOWN: their
	// containers die, their apps' other work goes on (an AM lost starts a
	// new attempt), RunOn's apps end with their container.
	for _, h := range shutdown {
		for _, id := range runs[h] {
			_ = s.Finish(id)
		}
		if err := s.SetNodeState(h, "DECOMMISSIONED"); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for _, h := range hosts {
		if _, excluded := ex[h]; excluded {
			n := s.nodes[h]
			n.placeholder, n.unlisted = true, false
			n.state = "DECOMMISSIONED"
			n.lastHealth = s.cfg.Now()
		}
	}
	// The recovered apps are ACCEPTED until their AMs re-register.
	if s.cfg.AMResync > 0 {
		until := s.cfg.Now().Add(s.cfg.AMResync)
		for _, a := range s.apps {
			if a.state == "RUNNING" {
				a.recovering = until
			}
		}
	}
	s.live = nil
	s.scheduleAll()
	s.mu.Unlock()
	return nil
}

// Placeholder reports whether the RM lists host only as the
// DECOMMISSIONED placeholder "host:-1" a new active RM makes of an
// excluded host.
func (s *Sim) Placeholder(host string) bool {
	s.mu.lockRead()
	defer s.mu.Unlock()
	n, ok := s.nodes[host]
	return ok && n.placeholder
}
