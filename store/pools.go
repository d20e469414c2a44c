package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// UpsertPool creates a pool or replaces its definition (used when seeding
// from configuration). Use UpdatePool for edits that must not overwrite a
// concurrent change.
func (s *Store) UpsertPool(ctx context.Context, p broker.Pool) (broker.Pool, error) {
	if err := p.Validate(); err != nil {
		return broker.Pool{}, err
	}
	labels, taints, err := encodeLabelsTaints(p.Labels, p.Taints)
	if err != nil {
		return broker.Pool{}, err
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO pools (name, provider, grp, gpu_model, gpus_per_node, min_nodes, max_nodes,
			labels, taints, sides, price_per_hour, expander_priority, partition,
			mig_profile, mig_per_gpu, gpu_memory_mib)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
		ON CONFLICT (name) DO UPDATE SET provider = excluded.provider, grp = excluded.grp,
			gpu_model = excluded.gpu_model, gpus_per_node = excluded.gpus_per_node,
			min_nodes = excluded.min_nodes, max_nodes = excluded.max_nodes,
			labels = excluded.labels, taints = excluded.taints, sides = excluded.sides,
			price_per_hour = excluded.price_per_hour, expander_priority = excluded.expander_priority,
			partition = excluded.partition, mig_profile = excluded.mig_profile,
			mig_per_gpu = excluded.mig_per_gpu, gpu_memory_mib = excluded.gpu_memory_mib,
			version = pools.version + 1, updated_at = now()`,
		p.Name, p.Provider, p.Group, p.GPUModel, p.GPUsPerNode, p.MinNodes, p.MaxNodes,
		labels, taints, string(p.Sides), p.PricePerHour, p.ExpanderPriority, p.Partition,
		p.MIGProfile, p.MIGPerGPU, p.GPUMemoryMiB)
	if err != nil {
		return broker.Pool{}, mapError(fmt.Sprintf("upsert pool %q", p.Name), err)
	}
	return s.GetPool(ctx, p.Name)
}

// UpdatePool changes a pool if its stored version is still p.Version.
func (s *Store) UpdatePool(ctx context.Context, p broker.Pool) (broker.Pool, error) {
	if err := p.Validate(); err != nil {
		return broker.Pool{}, err
	}
	labels, taints, err := encodeLabelsTaints(p.Labels, p.Taints)
	if err != nil {
		return broker.Pool{}, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE pools SET provider = $2, grp = $3, gpu_model = $4, gpus_per_node = $5,
				min_nodes = $6, max_nodes = $7, labels = $8, taints = $9, sides = $10,
				price_per_hour = $11, expander_priority = $12, partition = $14,
				mig_profile = $15, mig_per_gpu = $16, gpu_memory_mib = $17, version = version + 1, updated_at = now()
			WHERE name = $1 AND version = $13`,
			p.Name, p.Provider, p.Group, p.GPUModel, p.GPUsPerNode, p.MinNodes, p.MaxNodes,
			labels, taints, string(p.Sides), p.PricePerHour, p.ExpanderPriority, p.Version, p.Partition,
			p.MIGProfile, p.MIGPerGPU, p.GPUMemoryMiB)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return versionMismatch(ctx, tx, "pools", p.Name, p.Version)
		}
		return nil
	})
	if err != nil {
		return broker.Pool{}, mapError(fmt.Sprintf("update pool %q", p.Name), err)
	}
	return s.GetPool(ctx, p.Name)
}

// SetPoolBackoff records that a pool must not grow until until, and why.
// A zero until clears the backoff.
func (s *Store) SetPoolBackoff(ctx context.Context, name string, until time.Time, reason string) error {
	var u any
	if !until.IsZero() {
		u = until
	}
	tag, err := s.pool.Exec(ctx, `UPDATE pools SET backoff_until = $2, backoff_reason = $3 WHERE name = $1`, name, u, reason)
	if err != nil {
		return mapError(fmt.Sprintf("pool %q backoff", name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pool %q: %w", name, broker.ErrNotFound)
	}
	return nil
}

// PoolRecord is a stored pool with its recorded backoff.
type PoolRecord struct {
	broker.Pool
	BackoffUntil  time.Time `json:"backoff_until,omitzero"`
	BackoffReason string    `json:"backoff_reason,omitempty"`
	// LearnedGPUMemoryMiB is each GPU's memory as the pool's live nodes
	// showed it, for a pool whose gpu_memory_mib is not stated (0 until
	// a node showed it).
	LearnedGPUMemoryMiB int `json:"learned_gpu_memory_mib,omitempty"`
}

// SetPoolLearnedGPUMemory remembers what a pool's live nodes say each GPU's
// memory is, for a pool that does not state it (a stated value wins and
// is left alone). The value only goes down: a node with less memory than
// the pool's earlier nodes lowers it, so the pool never promises more
// than its smallest node showed.
func (s *Store) SetPoolLearnedGPUMemory(ctx context.Context, name string, mib int) error {
	if mib <= 0 {
		return broker.Invalid("learned_gpu_memory_mib", "must be positive, got %d", mib)
	}
	_, err := s.pool.Exec(ctx, `UPDATE pools SET learned_gpu_memory_mib = $2
		WHERE name = $1 AND gpu_memory_mib = 0 AND (learned_gpu_memory_mib = 0 OR learned_gpu_memory_mib > $2)`, name, mib)
	return mapError(fmt.Sprintf("pool %q learned GPU memory", name), err)
}

const poolSelect = `SELECT name, provider, grp, gpu_model, gpus_per_node, min_nodes, max_nodes,
	labels, taints, sides, price_per_hour, expander_priority, version, backoff_until, backoff_reason, partition,
	mig_profile, mig_per_gpu, gpu_memory_mib, learned_gpu_memory_mib FROM pools`

func scanPool(r pgx.CollectableRow) (PoolRecord, error) {
	var p PoolRecord
	var labels, taints []byte
	var sides string
	var until *time.Time
	if err := r.Scan(&p.Name, &p.Provider, &p.Group, &p.GPUModel, &p.GPUsPerNode, &p.MinNodes, &p.MaxNodes,
		&labels, &taints, &sides, &p.PricePerHour, &p.ExpanderPriority, &p.Version, &until, &p.BackoffReason, &p.Partition,
		&p.MIGProfile, &p.MIGPerGPU, &p.GPUMemoryMiB, &p.LearnedGPUMemoryMiB); err != nil {
		return p, err
	}
	p.Sides = broker.PoolSides(sides)
	if until != nil {
		p.BackoffUntil = *until
	}
	if err := json.Unmarshal(labels, &p.Labels); err != nil {
		return p, fmt.Errorf("decode labels of pool %q: %w", p.Name, err)
	}
	if err := json.Unmarshal(taints, &p.Taints); err != nil {
		return p, fmt.Errorf("decode taints of pool %q: %w", p.Name, err)
	}
	return p, nil
}

// GetPool reads one pool definition.
func (s *Store) GetPool(ctx context.Context, name string) (broker.Pool, error) {
	rows, err := s.pool.Query(ctx, poolSelect+` WHERE name = $1`, name)
	if err != nil {
		return broker.Pool{}, mapError(fmt.Sprintf("pool %q", name), err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPool)
	return p.Pool, mapError(fmt.Sprintf("pool %q", name), err)
}

// ListPools reads every pool, by name.
func (s *Store) ListPools(ctx context.Context) ([]PoolRecord, error) {
	rows, err := s.pool.Query(ctx, poolSelect+` ORDER BY name`)
	if err != nil {
		return nil, mapError("list pools", err)
	}
	ps, err := pgx.CollectRows(rows, scanPool)
	return ps, mapError("list pools", err)
}

func encodeLabelsTaints(labels map[string]string, taints []broker.Taint) (string, string, error) {
	if labels == nil {
		labels = map[string]string{}
	}
	if taints == nil {
		taints = []broker.Taint{}
	}
	l, err := json.Marshal(labels)
	if err != nil {
		return "", "", err
	}
	t, err := json.Marshal(taints)
	return string(l), string(t), err
}

// GetPolicy reads the policy, or the default policy (Version 0) if none was
// stored yet.
func (s *Store) GetPolicy(ctx context.Context) (broker.Policy, error) {
	var body []byte
	var version int64
	err := s.pool.QueryRow(ctx, `SELECT body, version FROM policy WHERE id = 1`).Scan(&body, &version)
	if err == pgx.ErrNoRows {
		return broker.DefaultPolicy(), nil
	}
	if err != nil {
		return broker.Policy{}, mapError("read policy", err)
	}
	p := broker.DefaultPolicy()
	if err := json.Unmarshal(body, &p); err != nil {
		return broker.Policy{}, fmt.Errorf("decode stored policy: %w", err)
	}
	p.Version = version
	return p, nil
}

// UpdatePolicy stores p if the stored version is still p.Version (0 when
// none was stored yet) and returns it with the next version.
func (s *Store) UpdatePolicy(ctx context.Context, p broker.Policy) (broker.Policy, error) {
	if err := p.Validate(); err != nil {
		return broker.Policy{}, err
	}
	want := p.Version
	p.Version = 0
	body, err := json.Marshal(p)
	if err != nil {
		return broker.Policy{}, err
	}
	var tag interface{ RowsAffected() int64 }
	if want == 0 {
		tag, err = s.pool.Exec(ctx, `INSERT INTO policy (id, body) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, body)
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE policy SET body = $1, version = version + 1, updated_at = now() WHERE id = 1 AND version = $2`, body, want)
	}
	if err != nil {
		return broker.Policy{}, mapError("update policy", err)
	}
	if tag.RowsAffected() == 0 {
		cur, err := s.GetPolicy(ctx)
		if err != nil {
			return broker.Policy{}, err
		}
		return broker.Policy{}, fmt.Errorf("policy was changed by someone else (version %d, you sent %d); read it again and reapply your edit: %w", cur.Version, want, broker.ErrConflict)
	}
	return s.GetPolicy(ctx)
}
