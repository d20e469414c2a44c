package api

import (
	"context"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// Store is what the API needs from the database, declared here where it is
// used: *store.Store implements it, and the API depends on nothing else of
// it. Its row and filter types stay the store's.
type Store interface {
	// Ping reports whether the database answers (/readyz).
	Ping(ctx context.Context) error
	// Authenticate resolves a bearer token's secret.
	Authenticate(ctx context.Context, secret string) (store.Token, error)

	// Tenants.
	ListTenants(ctx context.Context) ([]broker.Tenant, error)
	GetTenant(ctx context.Context, name string) (broker.Tenant, error)
	CreateTenant(ctx context.Context, t broker.Tenant) (broker.Tenant, error)
	UpdateTenant(ctx context.Context, t broker.Tenant) (broker.Tenant, error)
	DeleteTenant(ctx context.Context, name string) error
	// DemandQueues lists the YARN queues of pending demand, to show what
	// a queue claim would take over (claims.go).
	DemandQueues(ctx context.Context) ([]string, error)

	// Pools and the policy.
	ListPools(ctx context.Context) ([]store.PoolRecord, error)
	GetPool(ctx context.Context, name string) (broker.Pool, error)
	UpdatePool(ctx context.Context, p broker.Pool) (broker.Pool, error)
	GetPolicy(ctx context.Context) (broker.Policy, error)
	UpdatePolicy(ctx context.Context, p broker.Policy) (broker.Policy, error)

	// Nodes and their agents' reports.
	ListNodes(ctx context.Context) ([]broker.Node, error)
	GetNode(ctx context.Context, name string) (broker.Node, error)
	SetNodeProtected(ctx context.Context, name string, protected bool) error
	SaveReport(ctx context.Context, r broker.NodeReport) (bool, error)
	LatestReport(ctx context.Context, node string) (broker.NodeReport, error)

	// Demand, its history and the audit.
	ListDemand(ctx context.Context, f store.DemandFilter) (store.DemandPage, error)
	ListClosed(ctx context.Context, f store.ClosedFilter) ([]store.ClosedDemand, error)
	DemandSummary(ctx context.Context) ([]store.DemandGroup, error)
	HandOvers(ctx context.Context, since time.Time) (map[string]int, error)
	DemandSeries(ctx context.Context, from, to time.Time, step time.Duration) ([]store.DemandPoint, error)
	ListDecisions(ctx context.Context, f store.DecisionFilter) ([]broker.Decision, error)
	ListOps(ctx context.Context, f store.OpFilter) ([]broker.Op, error)
	CountOps(ctx context.Context) ([]store.OpCount, error)
	// MigratedSince sums the tasks restarted by migrate ops journaled at
	// or after since.
	MigratedSince(ctx context.Context, since time.Time) (int, error)
	Samples(ctx context.Context, from, to time.Time) ([]broker.CapacitySample, error)
	// FindDemand and DemandDecisions answer /demand/{id}/why.
	FindDemand(ctx context.Context, l store.DemandLookup) ([]store.FoundDemand, error)
	DemandDecisions(ctx context.Context, id string, since time.Time) ([]broker.Decision, error)
	// DemandTenants resolves demand ids to tenants, to scope what a
	// tenant-admin reads (scope.go).
	DemandTenants(ctx context.Context, ids []string) (map[string]string, error)

	// NotifyChanged tells the other replicas' read models that the
	// answers changed (LISTEN/NOTIFY).
	NotifyChanged(ctx context.Context, payload string) error

	// The audit trail of writes.
	RecordAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error)
}

var _ Store = (*store.Store)(nil)
