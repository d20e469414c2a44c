package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// Run serves the API (when Config.Listen is set) and, while this replica
// holds the leader lock, the tick loop, until ctx ends. It returns only
// once the leader loop and the pruner have stopped: nothing it started
// acts or logs after it.
func (m *Main) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() {
		stop()
		loops.Wait()
	}()
	model := m.publishReads(ctx)
	first, err := m.NewRuntime()
	if err != nil {
		return err
	}
	ar := &apiRuntime{}
	ar.rt.Store(first)
	errc := make(chan error, 2)
	var srv *http.Server
	if m.cfg.Listen != "" {
		reg := m.cfg.Registry
		if reg == nil {
			reg = prometheus.NewRegistry()
		}
		cfg := api.Config{Store: m.st, Runtime: ar, Logger: m.log, Registry: reg, ReadModel: model, PlanInterval: m.period(),
			AgentAnyNode: m.cfg.TLS.AgentAnyNode}
		if m.reviewer != nil {
			cfg.AgentReviewer = m.reviewer
		}
		handler, err := api.New(cfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", m.cfg.Listen)
		if err != nil {
			return usagef("listen on %s: %s", m.cfg.Listen, err)
		}
		srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn)}
		scheme, err := m.serveTLS(srv)
		if err != nil {
			ln.Close()
			return err
		}
		go func() {
			if scheme == "https" {
				errc <- srv.ServeTLS(ln, "", "")
			} else {
				errc <- srv.Serve(ln)
			}
		}()
		m.log.Info("serving the API and dashboard", "address", scheme+"://"+ln.Addr().String())
		if m.cfg.Ready != nil {
			m.cfg.Ready(ln.Addr().String())
		}
	}
	loops.Add(2)
	go func() {
		defer loops.Done()
		errc <- lead(ctx, m.st, ar, m.NewRuntime, m.trigger, m.log)
	}()
	go func() {
		defer loops.Done()
		prune(ctx, m.st, ar, m.auditRetention(), m.log)
	}()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if srv != nil {
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// retention is how long capacity samples and decisions are kept.
const retention = 7 * 24 * time.Hour

// prune deletes samples and decisions older than the retention, and audit
// entries older than audit, hourly, on the leader, so the tables stay
// bounded.
func prune(ctx context.Context, st *store.Store, ar *apiRuntime, audit time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !ar.leader.Load() {
			continue
		}
		if err := st.PruneSamples(ctx, time.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			log.Warn("prune samples and decisions", "err", err)
		}
		if n, err := st.PruneReports(ctx, time.Now().Add(-store.ReportRetention)); err != nil && ctx.Err() == nil {
			log.Warn("prune node reports", "err", err)
		} else if n > 0 {
			log.Info("pruned node reports", "reports", n, "retention", store.ReportRetention.String())
		}
		if n, err := st.PruneAudit(ctx, time.Now().Add(-audit)); err != nil && ctx.Err() == nil {
			log.Warn("prune audit entries", "err", err)
		} else if n > 0 {
			log.Info("pruned audit entries", "entries", n, "retention", audit.String())
		}
	}
}

// registrar is told which machines became nodes (the cloud provider), so
// it can report instances that never register within the max provision
// time.
type registrar interface {
	ObserveRegistered(names []string)
}

// registering tells the registrar the nodes each side observes.
type registering struct {
	engine.SideObserver
	provider registrar
	mu       *sync.Mutex
	seen     map[broker.Source][]string
}

func (r registering) Observe(ctx context.Context, idx broker.TenantIndex) (broker.SideObservation, error) {
	obs, err := r.SideObserver.Observe(ctx, idx)
	if err != nil {
		return obs, err
	}
	names := make([]string, 0, len(obs.Nodes))
	for _, n := range obs.Nodes {
		names = append(names, n.Name)
		if n.InstanceID != "" {
			names = append(names, n.InstanceID)
		}
	}
	r.mu.Lock()
	r.seen[obs.Source] = names
	var all []string
	for _, ns := range r.seen {
		all = append(all, ns...)
	}
	r.mu.Unlock()
	r.provider.ObserveRegistered(all)
	if nr, ok := r.provider.(nodeRegistrar); ok {
		nr.ObserveNodes(obs.Source, obs.Nodes)
	}
	return obs, nil
}

// nodeRegistrar is a registrar that also wants the nodes each side lists
// (a fleet naming members by labels or partition).
type nodeRegistrar interface {
	ObserveNodes(src broker.Source, nodes []broker.Node)
}

func withRegistration(p registrar, obs []engine.SideObserver) []engine.SideObserver {
	mu := &sync.Mutex{}
	seen := map[broker.Source][]string{}
	out := make([]engine.SideObserver, len(obs))
	for i, o := range obs {
		out[i] = registering{SideObserver: o, provider: p, mu: mu, seen: seen}
	}
	return out
}

// apiRuntime lets the API reach the current runtime and leadership.
type apiRuntime struct {
	rt     atomic.Pointer[engine.Runtime]
	leader atomic.Bool
}

var _ api.Runtime = (*apiRuntime)(nil)

func (a *apiRuntime) DryRun(ctx context.Context) (broker.Plan, error) { return a.rt.Load().DryRun(ctx) }

func (a *apiRuntime) Status() engine.RuntimeStatus {
	st := a.rt.Load().Status()
	st.Leader = a.leader.Load()
	return st
}

func (a *apiRuntime) acting() (*engine.Runtime, error) {
	if !a.leader.Load() {
		return nil, fmt.Errorf("this replica is a follower; send node operations to the leader: %w", broker.ErrConflict)
	}
	return a.rt.Load(), nil
}

func (a *apiRuntime) Cordon(ctx context.Context, node string) error {
	rt, err := a.acting()
	if err != nil {
		return err
	}
	return rt.Cordon(ctx, node)
}

func (a *apiRuntime) Drain(ctx context.Context, node string) error {
	rt, err := a.acting()
	if err != nil {
		return err
	}
	return rt.Drain(ctx, node)
}

func (a *apiRuntime) Transfer(ctx context.Context, node string, to broker.Owner) error {
	rt, err := a.acting()
	if err != nil {
		return err
	}
	return rt.Transfer(ctx, node, to)
}

// Leader lease timings: the lease is proved every leaseCheck and a proof
// stays valid for store.LeaseBoundFactor of them (3 s), the longest a
// replica that lost the lock may go on acting; a standby campaigns every
// leadRetry.
const (
	leaseCheck = time.Second
	leadRetry  = 2 * time.Second
)

// lead runs the tick loop while this replica holds the leader lock, and
// campaigns again when it loses it, until ctx ends. Each term gets a fresh
// runtime that resumes from the journal.
//
// IMPORTANT: the runtime runs under the lease's context, which is
// cancelled the moment the lease cannot be proved (a failed check, no
// proof within the bound, an op write fenced by a newer epoch): no cloud
// call, drain, decommission or signal starts on a proof older than the
// bound. A new leader first waits out the bound (Settle), so a replica
// that lost the lock without knowing it has stopped before this one acts.
func lead(ctx context.Context, st *store.Store, ar *apiRuntime, newRuntime func() (*engine.Runtime, error), trigger <-chan struct{}, log *slog.Logger) error {
	for {
		lease, err := st.Lead(ctx, leadRetry, leaseCheck)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// Releasing talks to the database, which may be unreachable (that
		// may be why the lease was lost): it must not hold the campaign up.
		release := func() {
			rctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer done()
			lease.Release(rctx)
		}
		termCtx, cancel := lease.Context(ctx)
		if err := lease.Settle(termCtx); err != nil {
			cancel()
			release()
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("leader lease lost before acting", "err", err)
			continue
		}
		rt, err := newRuntime()
		if err != nil {
			cancel()
			release()
			return err
		}
		ar.rt.Store(rt)
		ar.leader.Store(true)
		log.Info("leading: planning and acting", "epoch", lease.Epoch(), "lease_bound", lease.Bound().String())
		err = rt.Run(termCtx, trigger)
		if cause := context.Cause(termCtx); errors.Is(cause, store.ErrLeaseLost) {
			log.Warn("leader lease lost; stopped the tick loop", "err", cause)
		}
		cancel()
		ar.leader.Store(false)
		release()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("tick loop stopped", "err", err)
		}
	}
}
