package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// planTimeout bounds one shared dry run: its callers may go away, so it
// runs on its own context.
const planTimeout = 2 * time.Minute

// planAnswer is the answer of POST /plan: the plan, when its observation
// was taken, and whether this call reused an earlier call's observation.
type planAnswer struct {
	broker.Plan
	ObservedAt time.Time `json:"observed_at"`
	Reused     bool      `json:"reused"`
}

// planGate makes dry runs single-flight and rate-bound: callers while one
// runs share it, and a call within interval of the last observation gets
// that observation's outcome (plan or error) again. Each dry run observes
// the ResourceManager, Kubernetes and the cloud API live, whose rate limits
// the tick loop needs; no caller can make the broker observe more than once
// per tick period.
type planGate struct {
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	inflight *planCall
	last     *planCall
	// joined counts callers that shared an in-flight run (tests read it).
	joined int
}

// planCall is one dry run; done closes when plan, err and at are set.
type planCall struct {
	done chan struct{}
	plan broker.Plan
	err  error
	at   time.Time
}

// do returns a plan: the last one when it was observed within interval,
// else the in-flight run's, else a new run of dry. reused says that the
// caller did not start the observation.
func (g *planGate) do(ctx context.Context, dry func(context.Context) (broker.Plan, error)) (c *planCall, reused bool, err error) {
	g.mu.Lock()
	if g.last != nil && g.now().Sub(g.last.at) < g.interval {
		c = g.last
		g.mu.Unlock()
		return c, true, nil
	}
	c = g.inflight
	if c != nil {
		g.joined++
		reused = true
	} else {
		c = &planCall{done: make(chan struct{}), at: g.now()}
		g.inflight = c
		go g.run(ctx, c, dry)
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c, reused, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// run carries out one dry run on a context its callers cannot cancel.
func (g *planGate) run(ctx context.Context, c *planCall, dry func(context.Context) (broker.Plan, error)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), planTimeout)
	defer cancel()
	c.plan, c.err = dry(ctx)
	g.mu.Lock()
	g.inflight, g.last = nil, c
	g.mu.Unlock()
	close(c.done)
}

// plan is a dry run: the plan the broker would make now, without acting.
// Admins only (routeRoles); see planGate.
func (s *server) plan(w http.ResponseWriter, r *http.Request) {
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		s.fail(w, r, err)
		return
	}
	rt, ok := s.runtime(w)
	if !ok {
		return
	}
	c, reused, err := s.planGate.do(r.Context(), rt.DryRun)
	if err == nil {
		err = c.err
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := planAnswer{Plan: c.plan, ObservedAt: c.at.UTC(), Reused: reused}
	if out.Actions == nil {
		out.Actions = []broker.Action{}
	}
	if out.Waits == nil {
		out.Waits = []broker.Wait{}
	}
	writeJSON(w, http.StatusOK, out)
}

// onlyAdmins lets only admin tokens through and answers the others 403
// with msg, which says where they can read instead.
func onlyAdmins(msg string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tok, _ := principal(r); tok.Role != store.RoleAdmin {
				writeErr(w, http.StatusForbidden, "forbidden", "", "role "+string(tok.Role)+" may not "+r.Method+" "+r.URL.Path+": "+msg)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
