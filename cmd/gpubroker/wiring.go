package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// seed writes the configuration's pools, tenants and policy into the
// store: pools are upserted (the file owns their definition, except the
// bounds of a pool already stored), tenants are created when missing (the
// API owns them afterwards), and the policy is stored only when none is
// (edits through the API win over the file).
//
// IMPORTANT: pool bounds have one owner, the store. The file seeds
// min_nodes and max_nodes of a new pool; for a stored pool the stored
// values (perhaps edited through the API) win, and a file value that
// differs is logged with both values, never silently applied or dropped.
func seed(ctx context.Context, st *store.Store, c *config, log *slog.Logger) error {
	for _, p := range c.pools {
		cur, err := st.GetPool(ctx, p.Name)
		switch {
		case err == nil:
			for _, f := range []struct {
				field        string
				file, stored int
			}{{"min_nodes", p.MinNodes, cur.MinNodes}, {"max_nodes", p.MaxNodes, cur.MaxNodes}} {
				if f.file != f.stored {
					log.Warn("pool bound in the configuration file differs from the stored one; keeping the stored value (pool bounds are edited through the API once a pool exists: PATCH /api/v1/pools/{name})",
						"pool", p.Name, "field", f.field, "file_value", f.file, "stored_value", f.stored)
				}
			}
			p.MinNodes, p.MaxNodes = cur.MinNodes, cur.MaxNodes
		case !errors.Is(err, broker.ErrNotFound):
			return fmt.Errorf("seed pool %s: %w", p.Name, err)
		}
		if _, err := st.UpsertPool(ctx, p); err != nil {
			return fmt.Errorf("seed pool %s: %w", p.Name, err)
		}
	}
	for _, t := range c.tenants {
		_, err := st.CreateTenant(ctx, t)
		if errors.Is(err, broker.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("seed tenant %s: %w", t.Name, err)
		}
		log.Info("tenant created from configuration", "tenant", t.Name)
	}
	cur, err := st.GetPolicy(ctx)
	if err != nil {
		return err
	}
	if cur.Version == 0 {
		if _, err := st.UpdatePolicy(ctx, c.policy); err != nil && !errors.Is(err, broker.ErrConflict) {
			return fmt.Errorf("seed policy: %w", err)
		}
	}
	return nil
}

// cloudPools converts the configured pools for the AWS provider.
func cloudPools(pools []broker.Pool) []cloud.PoolConfig {
	out := make([]cloud.PoolConfig, 0, len(pools))
	for _, p := range pools {
		minN, maxN := p.MinNodes, p.MaxNodes
		out = append(out, cloud.PoolConfig{Name: p.Name, Group: p.Group, MinNodes: &minN, MaxNodes: &maxN,
			GPUModel: p.GPUModel, GPUsPerNode: p.GPUsPerNode, Sides: p.Sides, PricePerHour: p.PricePerHour,
			ExpanderPriority: p.ExpanderPriority, Labels: p.Labels, Taints: p.Taints})
	}
	return out
}

// storeBounds reads pool bounds from the store for the cloud provider on
// every scaling call, so edits through the API apply at once.
func storeBounds(st *store.Store) func(ctx context.Context, pool string) (int, int, bool, error) {
	return func(ctx context.Context, pool string) (int, int, bool, error) {
		p, err := st.GetPool(ctx, pool)
		if errors.Is(err, broker.ErrNotFound) {
			return 0, 0, false, nil
		}
		if err != nil {
			return 0, 0, false, err
		}
		return p.MinNodes, p.MaxNodes, true, nil
	}
}

// kubeConfig is the adapter configuration from the file's kubernetes
// section; startup taints listed there are added to the built-in ones.
func kubeConfig(kc kubernetesConfig) k8s.Config {
	cfg := k8s.Config{NamespaceIsTenant: true, GPUModelLabel: kc.GPUModelLabel, SchedulerNames: kc.SchedulerNames,
		GPUNodeLabels: kc.GPUNodeLabels, StaleAfter: kc.StaleAfter.D()}
	if len(kc.StartupTaints) > 0 {
		cfg.StartupTaints = append(append([]string(nil), k8s.DefaultStartupTaints...), kc.StartupTaints...)
	}
	return cfg
}

// kubeClient builds a client from a kubeconfig file, or in-cluster.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// sides holds the adapters of both sides and the Kubernetes watch trigger.
type sides struct {
	observers []broker.SideObserver
	actions   []broker.SideActions
	trigger   <-chan struct{}
}

// kubeSide starts the Kubernetes informers and returns the side.
func kubeSide(ctx context.Context, client kubernetes.Interface, kc kubernetesConfig, log *slog.Logger) (*k8s.Side, <-chan struct{}, error) {
	cfg := kubeConfig(kc)
	obs, err := k8s.NewObserver(client, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	if err := obs.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start kubernetes informers: %w", err)
	}
	act, err := k8s.NewActuator(client, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	return k8s.NewSide(client, obs, act, 5*time.Second), obs.Unschedulable(), nil
}

// registering tells the cloud provider which machines became nodes, so it
// can report instances that never register within the max provision time.
type registering struct {
	broker.SideObserver
	provider *cloud.Provider
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
	return obs, nil
}

func withRegistration(p *cloud.Provider, obs []broker.SideObserver) []broker.SideObserver {
	mu := &sync.Mutex{}
	seen := map[broker.Source][]string{}
	out := make([]broker.SideObserver, len(obs))
	for i, o := range obs {
		out[i] = registering{SideObserver: o, provider: p, mu: mu, seen: seen}
	}
	return out
}

// apiRuntime lets the API reach the current runtime and leadership.
type apiRuntime struct {
	rt     atomic.Pointer[broker.Runtime]
	leader atomic.Bool
}

var _ api.Runtime = (*apiRuntime)(nil)

func (a *apiRuntime) DryRun(ctx context.Context) (broker.Plan, error) { return a.rt.Load().DryRun(ctx) }

func (a *apiRuntime) Status() api.RuntimeStatus {
	st := a.rt.Load().Status()
	return api.RuntimeStatus{Leader: a.leader.Load(), LastTick: st.LastTick, Stale: st.Stale}
}

func (a *apiRuntime) acting() (*broker.Runtime, error) {
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

// lead runs the tick loop while this replica holds the leader lock, and
// campaigns again when it loses it, until ctx ends. Each term gets a fresh
// runtime that resumes from the journal.
func lead(ctx context.Context, st *store.Store, ar *apiRuntime, newRuntime func() (*broker.Runtime, error), trigger <-chan struct{}, log *slog.Logger) error {
	for {
		lease, err := st.Lead(ctx, 2*time.Second, 2*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		rt, err := newRuntime()
		if err != nil {
			lease.Release(context.WithoutCancel(ctx))
			return err
		}
		ar.rt.Store(rt)
		ar.leader.Store(true)
		log.Info("leading: planning and acting")
		termCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lease.Lost():
				log.Warn("leader lock lost; stopping the tick loop")
			case <-termCtx.Done():
			}
			cancel()
		}()
		err = rt.Run(termCtx, trigger)
		cancel()
		ar.leader.Store(false)
		lease.Release(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.Error("tick loop stopped", "err", err)
		}
	}
}

// yarnSide builds the YARN observer for the configured RMs and, when the
// RM admin address and the exclude file are configured, the actions that
// decommission, recommission (with the NodeManager restart hook) and
// preempt (nil otherwise: the broker then only observes YARN, ownership
// transfer to and from YARN is off, and YARN node operations fail with a
// reason).
func yarnSide(yc yarnConfig, log *slog.Logger) (*yarn.Side, broker.SideActions, error) {
	return yarnSideWith(yc, log, nil)
}

// yarnSideWith is yarnSide with a NodeManager restart hook that replaces
// yarn.nodemanager_restart when not nil: the demo's restarts a simulated
// NodeManager.
func yarnSideWith(yc yarnConfig, log *slog.Logger, restartHook func(context.Context, string) error) (*yarn.Side, broker.SideActions, error) {
	client, err := yarn.NewClient(yarn.Config{RMs: yc.RM, User: yc.User, Timeout: yc.Timeout.D(), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	side := yarn.NewSide(client, yarn.MapOptions{})
	if len(yc.AdminAddress) == 0 && yc.ExcludeFile == "" {
		log.Warn("yarn.admin_address and yarn.exclude_file are not set: YARN has no actions, so ownership transfer to and from YARN is off and YARN nodes are observed but never moved, removed or preempted")
		return side, nil, nil
	}
	if len(yc.AdminAddress) == 0 || yc.ExcludeFile == "" {
		return nil, nil, usagef("config: yarn.admin_address and yarn.exclude_file go together: set both to let the broker decommission NodeManagers")
	}
	admin, err := rmadmin.New(rmadmin.Config{Addrs: yc.AdminAddress, User: yc.User})
	if err != nil {
		return nil, nil, usagef("config: yarn.admin_address: %s", err)
	}
	ex, err := yarn.NewExcludeFile(yc.ExcludeFile)
	if err != nil {
		return nil, nil, usagef("config: yarn.exclude_file: %s", err)
	}
	if !strings.HasSuffix(strings.ToLower(yc.ExcludeFile), ".xml") {
		log.Warn("yarn.exclude_file is in the plain form: per-host graceful timeouts (and draining by attrition) need the XML form, a path ending in .xml", "exclude_file", yc.ExcludeFile)
	}
	restart, err := nodeManagerRestart(yc.NodeManagerRestart)
	if err != nil {
		return nil, nil, err
	}
	if restartHook != nil {
		restart = restartHook
	}
	if restart == nil {
		log.Info("yarn.nodemanager_restart is not set: a recommissioned NodeManager must be restarted by its service manager (Restart=always)")
	}
	dec, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex, Logger: log,
		RestartNodeManager: restart, EvictGrace: yc.EvictGrace.D()})
	if err != nil {
		return nil, nil, err
	}
	return side, dec, nil
}

// nodeManagerRestart builds the yarn.nodemanager_restart hook; nil when no
// command is configured.
func nodeManagerRestart(c nodeManagerRestartConfig) (func(context.Context, string) error, error) {
	if len(c.Command) == 0 {
		return nil, nil
	}
	timeout := c.Timeout.D()
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	hook, err := yarn.NodeManagerRestartCommand(c.Command, timeout)
	if err != nil {
		return nil, usagef("config: yarn.nodemanager_restart: %s", err)
	}
	return hook, nil
}
