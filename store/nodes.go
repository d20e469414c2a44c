package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// UpsertNodes writes the merged view of nodes from one tick in a single
// statement. PhaseSince moves only when the phase changes.
func (s *Store) UpsertNodes(ctx context.Context, nodes []broker.Node, now time.Time) error {
	if len(nodes) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for i, n := range nodes {
		if n.Name == "" {
			return broker.Invalid(fmt.Sprintf("nodes[%d].name", i), "must not be empty")
		}
		if !n.Phase.Valid() {
			return broker.Invalid(fmt.Sprintf("nodes[%d].phase", i), "unknown phase %q", n.Phase)
		}
		if !n.Owner.Valid() {
			return broker.Invalid(fmt.Sprintf("nodes[%d].owner", i), "unknown owner %q", n.Owner)
		}
		labels, taints, err := encodeLabelsTaints(n.Labels, n.Taints)
		if err != nil {
			return err
		}
		work, err := json.Marshal(nonNilWork(n.Work))
		if err != nil {
			return err
		}
		var inst, pool, under, downSince any
		if !n.DownSince.IsZero() {
			downSince = n.DownSince
		}
		if n.InstanceID != "" {
			inst = n.InstanceID
		}
		if n.Pool != "" {
			pool = n.Pool
		}
		if !n.UnderusedSince.IsZero() {
			under = n.UnderusedSince
		}
		b.Queue(`
			INSERT INTO nodes (name, instance_id, pool, owner, phase, phase_since, gpu_model, gpus_total,
				gpus_allocated, labels, taints, utilisation, healthy, health_reason, protected,
				underused_since, work, updated_at, down, down_since, mig_profile, gpu_memory_mib)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $6, $18, $19, $20, $21)
			ON CONFLICT (name) DO UPDATE SET instance_id = excluded.instance_id, pool = excluded.pool,
				owner = excluded.owner,
				phase_since = CASE WHEN nodes.phase = excluded.phase THEN nodes.phase_since ELSE excluded.phase_since END,
				phase = excluded.phase, gpu_model = excluded.gpu_model, gpus_total = excluded.gpus_total,
				gpus_allocated = excluded.gpus_allocated, labels = excluded.labels, taints = excluded.taints,
				utilisation = excluded.utilisation, healthy = excluded.healthy,
				health_reason = excluded.health_reason, underused_since = excluded.underused_since,
				work = excluded.work, updated_at = excluded.updated_at,
				down = excluded.down, down_since = excluded.down_since,
				mig_profile = excluded.mig_profile, gpu_memory_mib = excluded.gpu_memory_mib`,
			n.Name, inst, pool, string(n.Owner), string(n.Phase), now, n.GPUModel, n.GPUsTotal,
			n.GPUsAllocated, labels, taints, n.Utilisation, n.Healthy, n.HealthReason, n.Protected,
			under, string(work), n.Down, downSince, n.MIGProfile, n.GPUMemoryMiB)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	return mapError("upsert nodes", err)
}

// SetNodeProtected marks a node as protected from scale-down, or not.
func (s *Store) SetNodeProtected(ctx context.Context, name string, protected bool) error {
	tag, err := s.pool.Exec(ctx, `UPDATE nodes SET protected = $2, updated_at = now() WHERE name = $1`, name, protected)
	if err != nil {
		return mapError(fmt.Sprintf("node %q", name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("node %q: %w", name, broker.ErrNotFound)
	}
	return nil
}

// ListNodes reads every node that is not gone, by name.
func (s *Store) ListNodes(ctx context.Context) ([]broker.Node, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, coalesce(instance_id, ''), coalesce(pool, ''), owner, phase, phase_since, gpu_model,
			gpus_total, gpus_allocated, labels, taints, utilisation, healthy, health_reason, protected,
			underused_since, work, down, down_since, mig_profile, gpu_memory_mib
		FROM nodes WHERE phase <> 'gone' ORDER BY name`)
	if err != nil {
		return nil, mapError("list nodes", err)
	}
	ns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (broker.Node, error) {
		var n broker.Node
		var owner, phase string
		var labels, taints, work []byte
		var under, downSince *time.Time
		if err := r.Scan(&n.Name, &n.InstanceID, &n.Pool, &owner, &phase, &n.PhaseSince, &n.GPUModel,
			&n.GPUsTotal, &n.GPUsAllocated, &labels, &taints, &n.Utilisation, &n.Healthy, &n.HealthReason,
			&n.Protected, &under, &work, &n.Down, &downSince, &n.MIGProfile, &n.GPUMemoryMiB); err != nil {
			return n, err
		}
		if downSince != nil {
			n.DownSince = *downSince
		}
		n.Owner, n.Phase = broker.Owner(owner), broker.Phase(phase)
		if under != nil {
			n.UnderusedSince = *under
		}
		for _, part := range []struct {
			b []byte
			v any
		}{{labels, &n.Labels}, {taints, &n.Taints}, {work, &n.Work}} {
			if err := json.Unmarshal(part.b, part.v); err != nil {
				return n, fmt.Errorf("decode node %q: %w", n.Name, err)
			}
		}
		return n, nil
	})
	return ns, mapError("list nodes", err)
}

func nonNilWork(w []broker.Workload) []broker.Workload {
	if w == nil {
		return []broker.Workload{}
	}
	return w
}
