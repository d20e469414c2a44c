package yarnsim

import (
	"net"
	"net/http"
	"slices"
	"strconv"
)

// NodeManagerHandler returns the NodeManagers' REST API, one handler for
// all of them: the node is the request's Host (its nodeHTTPAddress,
// host:8042). It serves GET /ws/v1/node/containers, in the documented
// wrapped form ({"containers": {"container": [...]}}), and, unless the
// NoGPUPlugin quirk is set, GET /ws/v1/node/resources/yarn.io%2Fgpu with
// one assigned device per GPU a container holds.
func (s *Sim) NodeManagerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws/v1/node/containers", s.serveNMContainers)
	mux.HandleFunc("GET /ws/v1/node/resources/{resource}", s.serveNMResource)
	return mux
}

// nmNode returns the node a NodeManager request is for, locked.
func (s *Sim) nmNode(r *http.Request) *node {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	n := s.nodes[host]
	if n == nil || n.state == "LOST" || n.state == "SHUTDOWN" || n.state == "DECOMMISSIONED" {
		return nil
	}
	return n
}

func (s *Sim) nmContainers(n *node) []*container {
	cs := make([]*container, 0, len(n.conts))
	for _, c := range n.conts {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *container) int {
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	return cs
}

func (s *Sim) serveNMContainers(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := s.nmNode(r)
	var out []map[string]any
	if n != nil {
		for _, c := range s.nmContainers(n) {
			_, mem, vcores := c.size()
			out = append(out, map[string]any{
				"id": c.id, "state": "RUNNING", "exitCode": -1000, "diagnostics": "", "user": c.app.spec.User,
				"totalMemoryNeededMB": mem, "totalVCoresNeeded": vcores, "executionType": "GUARANTEED",
				"containerLogsLink": "http://" + n.spec.Host + ":8042/node/containerlogs/" + c.id + "/" + c.app.spec.User,
				"nodeId":            n.spec.Host + ":" + strconv.Itoa(n.port), "containerLogFiles": []string{"stdout", "stderr"},
			})
		}
	}
	s.mu.Unlock()
	if n == nil {
		http.Error(w, "connection refused", http.StatusBadGateway)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"containers": wrapper(s.cfg.Quirks, "container", out)})
}

func (s *Sim) serveNMResource(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("resource") != "yarn.io/gpu" || s.cfg.Quirks.NoGPUPlugin {
		notFound(w, "resource plugin for "+r.PathValue("resource")+" not found")
		return
	}
	s.mu.Lock()
	n := s.nmNode(r)
	var total, assigned []map[string]any
	if n != nil {
		for i := range n.spec.GPUs {
			total = append(total, map[string]any{"index": i, "minorNumber": i})
		}
		next := 0
		for _, c := range s.nmContainers(n) {
			gpus, _, _ := c.size()
			for range gpus {
				assigned = append(assigned, map[string]any{"index": next, "minorNumber": next, "containerId": c.id})
				next++
			}
		}
	}
	s.mu.Unlock()
	if n == nil {
		http.Error(w, "connection refused", http.StatusBadGateway)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"gpuDeviceInformation": map[string]any{}, "totalGpuDevices": total, "assignedGpuDevices": assigned})
}
