package engine

import (
	"context"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// SideObserver observes one side. Observe must fail (wrapping ErrStale
// where it can) rather than return a partial observation: missing demand
// would be closed in the ledger as if it had been served.
type SideObserver interface {
	Source() broker.Source
	Observe(ctx context.Context, tenants broker.TenantIndex) (broker.SideObservation, error)
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

// SideCaps is what a side's actions can do that the engine must know, so
// the engine asks the side instead of switching on which side it is.
type SideCaps struct {
	// CountsAllWork: any work that lands on a fenced node counts, not
	// only GPU work (YARN: a CPU container or an ApplicationMaster dies
	// with a decommission as surely as a GPU container).
	CountsAllWork bool
	// ReleasesByAttrition: the side's own Release, given no deadline,
	// holds a busy node without evicting anything until its work has
	// ended (YARN: the cordon, then the exclude file only once empty), so
	// an attrition needs no fence; without it the engine cordons and
	// waits for the work itself.
	ReleasesByAttrition bool
	// ShowsFence: the side's observation of a node shows its fence
	// (Kubernetes: the owner taint the cordon sets, so the node no longer
	// reads as Kubernetes'); one that does not show it was read from a
	// cache that has not caught up, and cannot tell what was bound before
	// the fence. Other sides' fences are their own release's to check.
	ShowsFence bool
	// CordonsVictims: a preemption that takes a busy node to the other
	// side, and a migration off the node, hold it with the side's
	// journaled cordon (its Cordoner's) and tell every victim to stop at
	// once; the node stays schedulable-but-cordoned, so the side still
	// delivers the stop signals (the RM drops them for a DECOMMISSIONING
	// node), and the release that follows waits for work the op does not
	// name instead of evicting it (YARN). Without it, the side's plain
	// Cordon holds the node and the victims are evicted one by one
	// (Kubernetes).
	CordonsVictims bool
	// FencesByRelease: where the side's cordon is unavailable, its fence
	// is its own release, which stops placement and stops nothing that
	// runs (YARN: a graceful decommission, once the RM confirms it).
	// Without it, the fence is the side's plain Cordon.
	FencesByRelease bool
}

// Capable is implemented by SideActions with capabilities (SideCaps); a
// side without it has none.
type Capable interface {
	Capabilities() SideCaps
}

// caps returns side's capabilities.
func (r *Runtime) caps(side broker.Source) SideCaps {
	if c, ok := r.actions[side].(Capable); ok {
		return c.Capabilities()
	}
	return SideCaps{}
}

// Cordoner is implemented by SideActions whose cordon replaces state of
// the node that undoing it must restore exactly, and which the cluster may
// not offer: YARN, whose cordon is an exclusive node label replacing the
// host's partition label. The executor journals CordonPrior in the op
// before it calls Cordon, undoes the cordon with Uncordon and that prior,
// and calls EnsureCordon for every cordon it holds after each observation.
// Where CordonAvailable is false, busy nodes of that side are left alone:
// no drain by attrition, no fence, and no preemption that must hold the
// node while its victims exit.
type Cordoner interface {
	// CordonAvailable reports whether the side can cordon, and if not,
	// what is missing.
	CordonAvailable(ctx context.Context) (ok bool, why string)
	// CordonPrior returns what Cordon would replace on node.
	CordonPrior(ctx context.Context, node string) ([]string, error)
	// Uncordon ends the cordon, restoring prior.
	Uncordon(ctx context.Context, node string, prior []string) error
	// EnsureCordon re-applies the cordon when the side's latest
	// observation shows node without it, and reports whether it did.
	EnsureCordon(ctx context.Context, node string) (bool, error)
}

// SideActions changes node ownership on one side. Every method is
// idempotent: the executor calls it again after a crash or an error.
type SideActions interface {
	Source() broker.Source
	// Release stops new work from landing on node (cordon and owner taint;
	// graceful decommission) and moves running work off it, waiting at most
	// until deadline for it to finish. Calling it again reports progress.
	Release(ctx context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error)
	// Cordon stops new work from landing on node without evicting any.
	Cordon(ctx context.Context, node string) error
	// Admit makes node schedulable for this side (uncordon; recommission).
	Admit(ctx context.Context, node string) error
	// Evict preempts one workload running on node. An error wrapping
	// ErrInProgress means the eviction is under way: call it again later.
	Evict(ctx context.Context, node string, w broker.Workload) error
}

// MigrationEvicter is a side that stops work for a migration
// differently from a preemption, e.g. with an Event that says the pod was
// moved right after its checkpoint (k8s.Side). A side without it is
// asked to Evict.
type MigrationEvicter interface {
	EvictForMigration(ctx context.Context, node string, w broker.Workload) error
}

// PoolMemoryLearner is a ledger that remembers what a pool's live nodes
// say each GPU's memory is, for a pool that does not state it, and
// returns it as the pool's GPUMemoryMiB from PoolSettings from then on (the
// store). A ledger without it (plan's preview) learns nothing.
type PoolMemoryLearner interface {
	LearnPoolGPUMemory(ctx context.Context, pool string, mib int) error
}

// Ledger is the durable state the tick loop reads and writes (the store).
type Ledger interface {
	TenantIndex(ctx context.Context) (broker.TenantIndex, error)
	Policy(ctx context.Context) (broker.Policy, error)
	// PoolSettings returns the configured pools and any recorded backoff.
	PoolSettings(ctx context.Context) ([]broker.PoolState, error)
	SetPoolBackoff(ctx context.Context, pool string, until time.Time, reason string) error
	// DemandFirstSeen returns when each live demand (by ID) was first
	// seen: the time of the first observation that held it, kept until it
	// leaves. The ledger is the only owner of these times.
	DemandFirstSeen(ctx context.Context) (map[string]time.Time, error)
	// ApplyDemand persists one side's observation and closes the side's
	// demand it no longer holds, with the reason obs.Closed names, else
	// obs.Departed gives, else "vanished". It refuses an unknown reason
	// and an observation older than the applied one (ErrConflict), and
	// changes nothing then. ledgertest.Run is the contract.
	ApplyDemand(ctx context.Context, obs broker.SideObservation) error
	// StoredNodes returns what the broker remembers of nodes: protection,
	// underused-since, phase-since.
	StoredNodes(ctx context.Context) ([]broker.Node, error)
	SaveNodes(ctx context.Context, nodes []broker.Node, now time.Time) error
	OpenOps(ctx context.Context) ([]broker.Op, error)
	// MigratedSince sums the tasks restarted by migrate ops journaled at
	// or after since (broker.MigratedTasks), open or ended.
	MigratedSince(ctx context.Context, since time.Time) (int, error)
	// InsertOp journals an op; ErrConflict when one is already open for
	// the node or pool.
	InsertOp(ctx context.Context, op broker.Op) (broker.Op, error)
	AdvanceOp(ctx context.Context, op broker.Op) (broker.Op, error)
	RecordDecisions(ctx context.Context, ds []broker.Decision) error
	SetWaitReasons(ctx context.Context, waits []broker.Wait) error
	RecordSamples(ctx context.Context, ss []broker.CapacitySample) error
	// LatestReports returns the newest node agent report per node.
	LatestReports(ctx context.Context) (map[string]broker.NodeReport, error)
}

// Checkpoints tells how much work a preemption or drain would lose: the
// time since the newest checkpoint below dir, and false when it cannot be
// known (missing directory, unreachable storage) — never an error that
// blocks a tick. The HDFS reader in package yarn implements it.
type Checkpoints interface {
	WorkAtRisk(ctx context.Context, dir string) (time.Duration, bool)
}
