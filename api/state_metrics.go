package api

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/broker"
)

// stateMetrics exports the broker's state for alerting and dashboards
// (deploy/prometheus, deploy/grafana): capacity by side and pool, pending
// demand by tenant, node health, pool backoff from the store, and
// leadership, staleness and claim conflicts from the runtime. refresh reads
// it once per scrape, with the scrape's context; Collect only reports the
// last reading, so a scrape never sees a half-updated set of series.
//
// Every replica reads the same store, so the store-backed series are equal
// on all of them (alerts take max by their labels). Staleness, the last
// tick and claim conflicts are the tick loop's and only the leader
// reports them: a follower's runtime does not observe, and one that led
// before would report what it saw then.
type stateMetrics struct {
	mu   sync.Mutex
	last []prometheus.Metric
}

// The descriptors of stateMetrics.
var (
	descLeader = prometheus.NewDesc("gpubroker_leader",
		"1 on the replica that holds the leader lock and runs the tick loop, 0 on a follower.", nil, nil)
	descLastTick = prometheus.NewDesc("gpubroker_last_tick_timestamp_seconds",
		"When the leader's last tick finished (Unix seconds); leader only.", nil, nil)
	descSourceStale = prometheus.NewDesc("gpubroker_source_stale",
		"1 while a side's observation failed or is too old (nothing destructive happens on that side), else 0; leader only.",
		[]string{"source"}, nil)
	descPoolStale = prometheus.NewDesc("gpubroker_pool_stale",
		"1 while the cloud could not show a pool's group in the last tick (the pool neither grows nor shrinks), else 0; leader only.",
		[]string{"pool"}, nil)
	descPoolHostsMissing = prometheus.NewDesc("gpubroker_pool_hosts_missing",
		"Hosts a fleet pool names that neither YARN nor Kubernetes listed in the last tick (off, or not installed yet: no capacity); GET /api/v1/capacity names them; leader only, fleet pools only.",
		[]string{"pool"}, nil)
	descClaimConflicts = prometheus.NewDesc("gpubroker_claim_conflicts_total",
		"Ticks' detections of a node that both YARN and Kubernetes list as schedulable, since this replica began leading; leader only.",
		nil, nil)
	descSideGPUs = prometheus.NewDesc("gpubroker_side_gpus",
		"GPUs by side (yarn, k8s, none for nodes in transfer or unregistered) and state: total, busy, idle, in_flight (ordered, not yet offered).",
		[]string{"side", "state"}, nil)
	descSideNodes = prometheus.NewDesc("gpubroker_side_nodes",
		"Nodes by side, in flight ones included (terminating and gone ones excluded).", []string{"side"}, nil)
	descPoolGPUs = prometheus.NewDesc("gpubroker_pool_gpus",
		"GPUs of a pool by state: total, busy, in_flight.", []string{"pool", "state"}, nil)
	descPoolNodes = prometheus.NewDesc("gpubroker_pool_nodes",
		"Nodes of a pool, in flight ones included.", []string{"pool"}, nil)
	descPoolMaxNodes = prometheus.NewDesc("gpubroker_pool_max_nodes",
		"A pool's configured maximum number of nodes.", []string{"pool"}, nil)
	descPoolMinNodes = prometheus.NewDesc("gpubroker_pool_min_nodes",
		"A pool's configured minimum number of nodes.", []string{"pool"}, nil)
	descPoolBackoff = prometheus.NewDesc("gpubroker_pool_backoff",
		"1 while a pool backs off (a purchase failed or timed out; it does not grow), else 0; the reason is in GET /api/v1/pools/{name}.",
		[]string{"pool"}, nil)
	descPoolRepairsPaused = prometheus.NewDesc("gpubroker_pool_repairs_paused",
		"1 while more than 20% of a pool's nodes are unhealthy, so the broker replaces none of them (a fleet-wide false alarm must not drain the pool), else 0; GET /api/v1/decisions?kind=kept names each node left unrepaired and why.",
		[]string{"pool"}, nil)
	descDemandGPUs = prometheus.NewDesc("gpubroker_demand_pending_gpus",
		"GPUs of pending demand by tenant and wait reason (over-quota, pool-backoff, in-flight, ...; none: no plan has given it a reason).",
		[]string{"tenant", "wait_reason"}, nil)
	descDemandUnits = prometheus.NewDesc("gpubroker_demand_pending",
		"Pending demand rows (a pod, or a YARN app's request) by tenant and wait reason.", []string{"tenant", "wait_reason"}, nil)
	descDemandWait = prometheus.NewDesc("gpubroker_demand_oldest_wait_seconds",
		"How long the oldest pending demand of a tenant with a wait reason has waited, in seconds.",
		[]string{"tenant", "wait_reason"}, nil)
	descNodeUnhealthy = prometheus.NewDesc("gpubroker_node_unhealthy",
		"1 while a node's agent reports it unhealthy (XID or ECC failures: health_reason) or its side reports it down (kubelet NotReady, NodeManager LOST or UNHEALTHY: down, down_since); GET /api/v1/nodes/{name} says which. Else 0.",
		[]string{"node", "pool"}, nil)
	descNodeClaimConflict = prometheus.NewDesc("gpubroker_node_claim_conflict",
		"1 while both YARN and Kubernetes list the node as schedulable (the last tick's observation; the broker cordons one side), else 0; leader only.",
		[]string{"node"}, nil)
	descMigratedLastHour = prometheus.NewDesc("gpubroker_migrated_tasks_last_hour",
		"Tasks restarted by migrate ops journaled in the last hour (what consolidation.max_migrations_per_hour bounds).", nil, nil)
	descMigrationBudget = prometheus.NewDesc("gpubroker_migration_budget_per_hour",
		"consolidation.max_migrations_per_hour while consolidation.migrate is on; 0 while it is off.", nil, nil)
	descNodes = prometheus.NewDesc("gpubroker_nodes",
		"Nodes that are not gone, by pool, owner side and lifecycle phase.", []string{"pool", "owner", "phase"}, nil)
)

var stateDescs = []*prometheus.Desc{descLeader, descLastTick, descSourceStale, descPoolStale, descPoolHostsMissing, descClaimConflicts,
	descSideGPUs, descSideNodes, descPoolGPUs, descPoolNodes, descPoolMaxNodes, descPoolMinNodes, descPoolBackoff,
	descPoolRepairsPaused, descDemandGPUs, descDemandUnits, descDemandWait, descNodeUnhealthy, descNodeClaimConflict, descNodes,
	descMigratedLastHour, descMigrationBudget}

// Describe implements prometheus.Collector.
func (m *stateMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the series of the last refresh.
func (m *stateMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	last := m.last
	m.mu.Unlock()
	for _, s := range last {
		ch <- s
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noWaitReason labels demand that no plan has given a wait reason (the
// ledger's empty one), so its series keep a wait_reason label.
const noWaitReason = "none"

// refresh reads the store and the runtime status and replaces the series.
// On an error the previous series stay.
func (m *stateMetrics) refresh(ctx context.Context, s *server) error {
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return err
	}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return err
	}
	groups, err := s.st.DemandSummary(ctx)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return err
	}
	migrated, err := s.st.MigratedSince(ctx, now.Add(-time.Hour))
	if err != nil {
		return err
	}
	sum := summarise(now, nodes, pools, groups)
	var out []prometheus.Metric
	budget := 0
	if pol.Migrate == broker.MigrateCheckpointed {
		budget = pol.WithDefaults().MaxMigrationsPerHour
	}
	out = append(out, gauge(descMigratedLastHour, float64(migrated)), gauge(descMigrationBudget, float64(budget)))

	if s.rt != nil {
		st := s.rt.Status()
		out = append(out, gauge(descLeader, flag(st.Leader)))
		if st.Leader {
			if !st.LastTick.IsZero() {
				out = append(out, gauge(descLastTick, float64(st.LastTick.UnixNano())/1e9))
			}
			for _, src := range broker.Sources {
				_, stale := st.Stale[src]
				out = append(out, gauge(descSourceStale, flag(stale), string(src)))
			}
			for _, p := range pools {
				_, stale := st.StalePools[p.Name]
				out = append(out, gauge(descPoolStale, flag(stale), p.Name))
				if p.Fleet() {
					out = append(out, gauge(descPoolHostsMissing, float64(len(st.MissingHosts[p.Name])), p.Name))
				}
			}
			out = append(out, prometheus.MustNewConstMetric(descClaimConflicts, prometheus.CounterValue, float64(st.ClaimConflicts)))
			out = append(out, claimConflictSeries(nodes, st.ClaimConflictNodes)...)
		}
	}

	for _, sc := range sum.Sides {
		side := string(sc.Side)
		out = append(out,
			gauge(descSideGPUs, float64(sc.GPUsTotal), side, "total"),
			gauge(descSideGPUs, float64(sc.GPUsBusy), side, "busy"),
			gauge(descSideGPUs, float64(sc.GPUsIdle), side, "idle"),
			gauge(descSideGPUs, float64(sc.GPUsInFlight), side, "in_flight"),
			gauge(descSideNodes, float64(sc.Nodes), side))
	}
	paused := broker.PausedRepairs(nodes)
	for _, pc := range sum.Pools {
		_, p := paused[pc.Name]
		out = append(out, gauge(descPoolRepairsPaused, flag(p), pc.Name))
		out = append(out,
			gauge(descPoolGPUs, float64(pc.GPUsTotal), pc.Name, "total"),
			gauge(descPoolGPUs, float64(pc.GPUsBusy), pc.Name, "busy"),
			gauge(descPoolGPUs, float64(pc.GPUsInFlight), pc.Name, "in_flight"),
			gauge(descPoolNodes, float64(pc.Nodes), pc.Name),
			gauge(descPoolMinNodes, float64(pc.MinNodes), pc.Name),
			gauge(descPoolMaxNodes, float64(pc.MaxNodes), pc.Name),
			gauge(descPoolBackoff, flag(pc.BackoffUntil.After(now)), pc.Name))
	}

	// Demand by tenant and reason: the summary splits it by priority too,
	// which would give a series per PriorityClass value.
	type tr struct{ tenant, reason string }
	type agg struct {
		gpus, units int
		wait        float64
	}
	demand := map[tr]*agg{}
	for _, g := range sum.Demand {
		k := tr{g.Tenant, g.WaitReason}
		if k.reason == "" {
			k.reason = noWaitReason
		}
		a := demand[k]
		if a == nil {
			a = &agg{}
			demand[k] = a
		}
		a.gpus += g.GPUs
		a.units += g.Count
		a.wait = max(a.wait, g.OldestWaitSeconds)
	}
	keys := make([]tr, 0, len(demand))
	for k := range demand {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].tenant < keys[j].tenant || keys[i].tenant == keys[j].tenant && keys[i].reason < keys[j].reason
	})
	for _, k := range keys {
		a := demand[k]
		out = append(out,
			gauge(descDemandGPUs, float64(a.gpus), k.tenant, k.reason),
			gauge(descDemandUnits, float64(a.units), k.tenant, k.reason),
			gauge(descDemandWait, a.wait, k.tenant, k.reason))
	}

	type pop struct{ pool, owner, phase string }
	phases := map[pop]int{}
	for _, n := range nodes {
		out = append(out, gauge(descNodeUnhealthy, flag(!n.Healthy || n.Down != ""), n.Name, n.Pool))
		phases[pop{n.Pool, string(n.Owner), string(n.Phase)}]++
	}
	for k, c := range phases {
		out = append(out, gauge(descNodes, float64(c), k.pool, k.owner, k.phase))
	}

	m.mu.Lock()
	m.last = out
	m.mu.Unlock()
	return nil
}

// claimConflictSeries is gpubroker_node_claim_conflict: 1 for each node the
// last tick saw claimed by both sides, 0 for every other stored node, so a
// node's series stays put between conflicts.
func claimConflictSeries(nodes []broker.Node, claimed []string) []prometheus.Metric {
	both := map[string]bool{}
	for _, n := range claimed {
		both[n] = true
	}
	var out []prometheus.Metric
	for _, n := range nodes {
		out = append(out, gauge(descNodeClaimConflict, flag(both[n.Name]), n.Name))
		delete(both, n.Name)
	}
	for _, n := range claimed {
		if both[n] { // claimed but not (yet) in the node table
			out = append(out, gauge(descNodeClaimConflict, 1, n))
			delete(both, n)
		}
	}
	return out
}
