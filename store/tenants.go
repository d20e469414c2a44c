package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// CreateTenant inserts a tenant with its queue and namespace mappings and
// returns it with Version 1. A name, queue or namespace already taken is a
// conflict.
func (s *Store) CreateTenant(ctx context.Context, t broker.Tenant) (broker.Tenant, error) {
	if err := t.Validate(); err != nil {
		return broker.Tenant{}, err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO tenants (name, base_priority, guaranteed_gpus, max_gpus, weight, admins, evict_grace_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			t.Name, t.BasePriority, t.GuaranteedGPUs, t.MaxGPUs, t.Weight, nonNil(t.Admins), t.EvictGrace.D().Milliseconds()); err != nil {
			return err
		}
		return writeMappings(ctx, tx, t)
	})
	if err != nil {
		return broker.Tenant{}, mapError(fmt.Sprintf("create tenant %q", t.Name), err)
	}
	return s.GetTenant(ctx, t.Name)
}

// UpdateTenant replaces a tenant's settings and mappings if its stored
// version is still t.Version, and returns it with the next version. A
// different version means someone else changed it: ErrConflict, nothing lost.
func (s *Store) UpdateTenant(ctx context.Context, t broker.Tenant) (broker.Tenant, error) {
	if err := t.Validate(); err != nil {
		return broker.Tenant{}, err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE tenants SET base_priority = $2, guaranteed_gpus = $3, max_gpus = $4, weight = $5,
				admins = $6, evict_grace_ms = $8, version = version + 1, updated_at = now()
			WHERE name = $1 AND version = $7`,
			t.Name, t.BasePriority, t.GuaranteedGPUs, t.MaxGPUs, t.Weight, nonNil(t.Admins), t.Version, t.EvictGrace.D().Milliseconds())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return versionMismatch(ctx, tx, "tenants", t.Name, t.Version)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenant_yarn_queues WHERE tenant = $1`, t.Name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenant_namespaces WHERE tenant = $1`, t.Name); err != nil {
			return err
		}
		return writeMappings(ctx, tx, t)
	})
	if err != nil {
		return broker.Tenant{}, mapError(fmt.Sprintf("update tenant %q", t.Name), err)
	}
	return s.GetTenant(ctx, t.Name)
}

func writeMappings(ctx context.Context, tx pgx.Tx, t broker.Tenant) error {
	if len(t.YARNQueues) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_yarn_queues (queue, tenant) SELECT unnest($1::text[]), $2`, t.YARNQueues, t.Name); err != nil {
			return err
		}
	}
	if len(t.Namespaces) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_namespaces (namespace, tenant) SELECT unnest($1::text[]), $2`, t.Namespaces, t.Name); err != nil {
			return err
		}
	}
	return nil
}

// versionMismatch explains why a versioned update touched no row.
func versionMismatch(ctx context.Context, tx pgx.Tx, table, name string, want int64) error {
	var have int64
	err := tx.QueryRow(ctx, "SELECT version FROM "+table+" WHERE name = $1", name).Scan(&have)
	if err == pgx.ErrNoRows {
		return fmt.Errorf("%q: %w", name, broker.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%q was changed by someone else (version %d, you sent %d); read it again and reapply your edit: %w", name, have, want, broker.ErrConflict)
}

// DeleteTenant removes a tenant and its mappings. A tenant with live demand
// in the ledger cannot be deleted (ErrConflict).
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tenants WHERE name = $1`, name)
	if err != nil {
		return mapError(fmt.Sprintf("delete tenant %q", name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("tenant %q: %w", name, broker.ErrNotFound)
	}
	return nil
}

const tenantSelect = `
	SELECT t.name, t.base_priority, t.guaranteed_gpus, t.max_gpus, t.weight, t.admins, t.version, t.evict_grace_ms,
		coalesce((SELECT array_agg(queue ORDER BY queue) FROM tenant_yarn_queues q WHERE q.tenant = t.name), '{}'),
		coalesce((SELECT array_agg(namespace ORDER BY namespace) FROM tenant_namespaces n WHERE n.tenant = t.name), '{}')
	FROM tenants t`

func scanTenant(r pgx.CollectableRow) (broker.Tenant, error) {
	var t broker.Tenant
	var graceMS int64
	err := r.Scan(&t.Name, &t.BasePriority, &t.GuaranteedGPUs, &t.MaxGPUs, &t.Weight, &t.Admins,
		&t.Version, &graceMS, &t.YARNQueues, &t.Namespaces)
	t.EvictGrace = broker.Duration(time.Duration(graceMS) * time.Millisecond)
	return t, err
}

// GetTenant reads one tenant.
func (s *Store) GetTenant(ctx context.Context, name string) (broker.Tenant, error) {
	rows, err := s.pool.Query(ctx, tenantSelect+` WHERE t.name = $1`, name)
	if err != nil {
		return broker.Tenant{}, mapError(fmt.Sprintf("tenant %q", name), err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	return t, mapError(fmt.Sprintf("tenant %q", name), err)
}

// ListTenants reads all tenants, by name.
func (s *Store) ListTenants(ctx context.Context) ([]broker.Tenant, error) {
	rows, err := s.pool.Query(ctx, tenantSelect+` ORDER BY t.name`)
	if err != nil {
		return nil, mapError("list tenants", err)
	}
	ts, err := pgx.CollectRows(rows, scanTenant)
	return ts, mapError("list tenants", err)
}

// TenantMap returns tenants by name and the queue and namespace mappings,
// for adapters that turn observations into demand.
func (s *Store) TenantMap(ctx context.Context) (tenants map[string]broker.Tenant, queues, namespaces map[string]string, err error) {
	ts, err := s.ListTenants(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	x := broker.NewTenantIndex(ts)
	return x.Tenants, x.Queues, x.Namespaces, nil
}

func nonNil(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
