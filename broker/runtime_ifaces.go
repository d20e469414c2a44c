package broker

import (
	"context"
	"time"
)

// SideObservation is one complete, successful observation of one side
// (YARN or Kubernetes): its pending demand and its GPU nodes.
type SideObservation struct {
	Source Source
	At     time.Time
	// Demand is every pending demand of the side that maps to a tenant.
	Demand []Demand
	// Closed gives, for demand keys the adapter knows left, why:
	// "scheduled", "finished", "deleted" or "preempted".
	Closed map[string]string
	// Nodes are the side's GPU nodes with their running work. Owner is the
	// side for schedulable nodes and OwnerNone for ones this side has
	// released (cordoned, decommissioned).
	Nodes []Node
	// Ignored explains pending GPU work that does not count as demand
	// (gated, nominated, other scheduler, unmapped namespace or queue).
	Ignored []Wait
}

// SideObserver observes one side. Observe must fail (wrapping ErrStale
// where it can) rather than return a partial observation: missing demand
// would be closed in the ledger as if it had been served.
type SideObserver interface {
	Source() Source
	Observe(ctx context.Context, tenants TenantIndex) (SideObservation, error)
}

// TenantIndex resolves YARN queues and namespaces to tenants.
type TenantIndex struct {
	Tenants    map[string]Tenant
	Queues     map[string]string // YARN queue → tenant
	Namespaces map[string]string // namespace → tenant
}

// ReleaseStatus says how far taking a node away from a side has come.
type ReleaseStatus struct {
	// Drained is true when no non-system work is left on the node.
	Drained bool
	// Remaining names the work still running.
	Remaining []string
	// BlockedBy names what holds the drain back, e.g. "PodDisruptionBudget ml/trainer".
	BlockedBy string
	// Unknown says why the side cannot tell how far the release has come
	// (the RM does not list the host, a refresh went to a standby). Unknown
	// is never drained: the executor keeps waiting until the op's deadline
	// and then fails the op; it never terminates such a node, whatever the
	// policy says about forcing after a drain timeout.
	Unknown string
}

// AdmitChecker is implemented by SideActions whose Admit takes effect only
// later, such as YARN, where a NodeManager must restart and re-register
// after a recommission. The executor keeps a hand-over open until Admitted
// reports true (the side lists the node schedulable with its GPUs), and
// past the op's deadline gives the node back and fails the op.
type AdmitChecker interface {
	// Admitted reports whether node is schedulable on this side with its
	// GPUs, and if not, what the side reports instead.
	Admitted(ctx context.Context, node string) (ok bool, why string, err error)
}

// Forgetter is implemented by SideActions that keep state about a node
// after it left them (YARN keeps a released host in its exclude file).
// After the node's machine is terminated the executor calls Forget instead
// of Admit, so nothing meant for a live node (the NodeManager restart
// hook) runs against a machine that is going away.
type Forgetter interface {
	// Forget drops what the side keeps about node, a terminated machine.
	Forget(ctx context.Context, node string) error
}

// SideActions changes node ownership on one side. Every method is
// idempotent: the executor calls it again after a crash or an error.
type SideActions interface {
	Source() Source
	// Release stops new work from landing on node (cordon and owner taint;
	// graceful decommission) and moves running work off it, waiting at most
	// until deadline for it to finish. Calling it again reports progress.
	Release(ctx context.Context, node string, deadline time.Time) (ReleaseStatus, error)
	// Cordon stops new work from landing on node without evicting any.
	Cordon(ctx context.Context, node string) error
	// Admit makes node schedulable for this side (uncordon; recommission).
	Admit(ctx context.Context, node string) error
	// Evict preempts one workload running on node. An error wrapping
	// ErrInProgress means the eviction is under way: call it again later.
	Evict(ctx context.Context, node string, w Workload) error
}

// CapacitySample is GPUs by state on one side at one time, for the
// dashboard's time series.
type CapacitySample struct {
	At           time.Time
	Side         string
	GPUsBusy     int
	GPUsIdle     int
	GPUsInFlight int
	GPUsPending  int
}

// Ledger is the durable state the tick loop reads and writes (the store).
type Ledger interface {
	TenantIndex(ctx context.Context) (TenantIndex, error)
	Policy(ctx context.Context) (Policy, error)
	// PoolSettings returns the configured pools and any recorded backoff.
	PoolSettings(ctx context.Context) ([]PoolState, error)
	SetPoolBackoff(ctx context.Context, pool string, until time.Time, reason string) error
	// DemandFirstSeen returns when each live demand (by ID) was first seen.
	DemandFirstSeen(ctx context.Context) (map[string]time.Time, error)
	// ApplyDemand persists one side's observation, closing vanished demand.
	ApplyDemand(ctx context.Context, obs SideObservation) error
	// StoredNodes returns what the broker remembers of nodes: protection,
	// underused-since, phase-since.
	StoredNodes(ctx context.Context) ([]Node, error)
	SaveNodes(ctx context.Context, nodes []Node, now time.Time) error
	OpenOps(ctx context.Context) ([]Op, error)
	// InsertOp journals an op; ErrConflict when one is already open for
	// the node or pool.
	InsertOp(ctx context.Context, op Op) (Op, error)
	AdvanceOp(ctx context.Context, op Op) (Op, error)
	RecordDecisions(ctx context.Context, ds []Decision) error
	SetWaitReasons(ctx context.Context, waits []Wait) error
	RecordSamples(ctx context.Context, ss []CapacitySample) error
	// LatestReports returns the newest node agent report per node.
	LatestReports(ctx context.Context) (map[string]NodeReport, error)
}

// Checkpoints tells how much work a preemption or drain would lose: the
// time since the newest checkpoint below dir, and false when it cannot be
// known (missing directory, unreachable storage) — never an error that
// blocks a tick. The HDFS reader in package yarn implements it.
type Checkpoints interface {
	WorkAtRisk(ctx context.Context, dir string) (time.Duration, bool)
}
