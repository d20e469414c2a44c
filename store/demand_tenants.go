package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// maxDemandTenantIDs bounds one DemandTenants lookup.
const maxDemandTenantIDs = 10000

// DemandTenants resolves demand IDs (broker.Demand.ID: "source/key") to
// the tenants they belong to, from the live ledger and its history. IDs it
// does not know (never seen, or pruned from the history) are left out.
// The API uses it to show a tenant-admin only the decisions, ops and plan
// actions that serve its own tenant's demand.
func (s *Store) DemandTenants(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	if len(ids) > maxDemandTenantIDs {
		return nil, broker.Invalid("demand", "at most %d demand ids per lookup, got %d", maxDemandTenantIDs, len(ids))
	}
	var srcs, keys []string
	for _, id := range ids {
		src, key, ok := strings.Cut(id, "/")
		if !ok || key == "" {
			continue // not a demand id: it belongs to no tenant
		}
		srcs, keys = append(srcs, src), append(keys, key)
	}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		WITH q AS (SELECT DISTINCT source, key FROM unnest($1::text[], $2::text[]) AS q(source, key))
		SELECT d.source, d.key, d.tenant FROM demand d JOIN q USING (source, key)
		UNION
		SELECT h.source, h.key, h.tenant FROM demand_history h JOIN q USING (source, key)`, srcs, keys)
	if err != nil {
		return nil, mapError("resolve demand tenants", err)
	}
	type row struct{ src, key, tenant string }
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.src, &x.key, &x.tenant)
	})
	if err != nil {
		return nil, mapError("resolve demand tenants", err)
	}
	for _, x := range rs {
		out[x.src+"/"+x.key] = x.tenant
	}
	return out, nil
}
