package yarnsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// HA serves one Sim as a ResourceManager HA pair: two web addresses over
// the same state (as two RMs over one state store), of which the active
// one serves the REST API and the other answers as Hadoop's standby does
// (StandbyHandler: a redirect to the active RM, or 503 while none is
// active). Failover moves the active role, as when ZooKeeper elects the
// other RM. With an admin server (SetAdmin), every transition to active
// rebuilds what the RM does not keep in its stores, as a real new active
// RM does (AdminServer.RestartRM): excluded hosts become placeholders and
// their NodeManagers shut down, decommissions are gone.
type HA struct {
	sim    *Sim
	mu     sync.Mutex
	urls   [2]string
	srvs   [2]*http.Server
	active int // index into urls; -1 while no RM is active
	moves  int
	admin  *AdminServer
}

// StartHA listens on two loopback ports for the pair; RM 0 is active.
func (s *Sim) StartHA() (*HA, error) {
	h := &HA{sim: s}
	api := s.Handler()
	for i := range h.urls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close(context.Background())
			return nil, fmt.Errorf("yarnsim: listen for RM %d: %w", i, err)
		}
		i := i
		standby := StandbyHandler(h.activeURL)
		h.srvs[i] = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.mu.Lock()
			isActive := h.active == i
			h.mu.Unlock()
			if isActive {
				api.ServeHTTP(w, r)
				return
			}
			standby.ServeHTTP(w, r)
		})}
		h.urls[i] = "http://" + l.Addr().String()
		go func() { _ = h.srvs[i].Serve(l) }()
	}
	return h, nil
}

// URLs are the two RMs' web addresses, for the client's RM list.
func (h *HA) URLs() []string { return []string{h.urls[0], h.urls[1]} }

func (h *HA) activeURL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active < 0 {
		return ""
	}
	return h.urls[h.active]
}

// Active returns the index of the active RM, -1 while none is.
func (h *HA) Active() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active
}

// SetActive makes RM i (0 or 1) the active one, or none while i is -1 (an
// election in progress: both answer 503).
func (h *HA) SetActive(i int) error {
	if i < -1 || i > 1 {
		return errors.New("yarnsim: HA has RMs 0 and 1")
	}
	h.mu.Lock()
	transition := i >= 0 && i != h.active
	if transition {
		h.moves++
	}
	h.active = i
	admin := h.admin
	h.mu.Unlock()
	if transition && admin != nil {
		// transitionToActive starts the RM's active services afresh.
		return admin.RestartRM()
	}
	return nil
}

// SetAdmin gives the pair the admin server whose exclude file and
// decommissions a transition to active rebuilds (AdminServer.RestartRM).
func (h *HA) SetAdmin(a *AdminServer) {
	h.mu.Lock()
	h.admin = a
	h.mu.Unlock()
}

// Failovers counts the times the active role moved.
func (h *HA) Failovers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.moves
}

// Close stops both RMs' listeners.
func (h *HA) Close(ctx context.Context) error {
	var errs []error
	for _, srv := range h.srvs {
		if srv != nil {
			errs = append(errs, srv.Shutdown(ctx))
		}
	}
	return errors.Join(errs...)
}

// NodeGPUs returns the yarn.io/gpu capacity the RM lists for host (after
// any updateNodeResource), 0 when it does not list the host.
func (s *Sim) NodeGPUs(host string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[host]; ok {
		return n.spec.GPUs
	}
	return 0
}
