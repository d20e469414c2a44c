package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpubroker/gpubroker/broker"
)

// constraintFields maps each named check constraint of the schema to the
// API field it guards and what is allowed, so a violation that slips past
// Go validation still reaches the user as a precise field error.
var constraintFields = map[string]struct{ field, problem string }{
	"tenants_name_format":                  {"name", "must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)"},
	"tenants_guaranteed_gpus_nonnegative":  {"guaranteed_gpus", "must not be negative"},
	"tenants_max_gpus_nonnegative":         {"max_gpus", "must not be negative"},
	"tenants_weight_positive":              {"weight", "must be greater than 0 and at most 1000000"},
	"tenants_max_ge_guaranteed":            {"max_gpus", "must be at least guaranteed_gpus"},
	"tenant_yarn_queues_not_empty":         {"yarn_queues", "must not contain an empty queue name"},
	"tenant_namespaces_not_empty":          {"namespaces", "must not contain an empty namespace"},
	"pools_name_format":                    {"name", "must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)"},
	"pools_gpus_per_node_nonnegative":      {"gpus_per_node", "must not be negative"},
	"pools_min_nodes_nonnegative":          {"min_nodes", "must not be negative"},
	"pools_max_ge_min":                     {"max_nodes", "must be at least min_nodes"},
	"pools_sides_valid":                    {"sides", "must be yarn, k8s or shared"},
	"pools_price_nonnegative":              {"price_per_hour", "must not be negative"},
	"pools_mig_per_gpu_range":              {"mig_per_gpu", "must be 0 to 7"},
	"pools_gpu_memory_nonnegative":         {"gpu_memory_mib", "must not be negative"},
	"pools_learned_gpu_memory_nonnegative": {"learned_gpu_memory_mib", "must not be negative"},
	"nodes_name_not_empty":                 {"name", "must not be empty"},
	"nodes_owner_valid":                    {"owner", "must be yarn, k8s or none"},
	"nodes_phase_valid":                    {"phase", "must be a lifecycle phase (requested … gone)"},
	"nodes_gpus_total_nonnegative":         {"gpus_total", "must not be negative"},
	"nodes_gpus_allocated_nonnegative":     {"gpus_allocated", "must not be negative"},
	"nodes_utilisation_range":              {"utilisation", "must be between 0 and 1, or -1 for unknown"},
	"demand_source_valid":                  {"source", "must be yarn or k8s"},
	"demand_key_not_empty":                 {"key", "must not be empty"},
	"demand_gpus_per_unit_positive":        {"gpus_per_unit", "must be positive"},
	"demand_units_positive":                {"units", "must be positive"},
	"demand_history_reason_valid":          {"reason", "must be scheduled, finished, deleted, preempted or vanished"},
	"ops_kind_valid":                       {"kind", "must be scale-up, scale-down, transfer, preempt, replace or migrate"},
	"ops_target_nonnegative":               {"target", "must not be negative"},
	"ops_state_valid":                      {"state", "must be pending, running, done, failed or cancelled"},
	"capacity_samples_side_valid":          {"side", "must be yarn, k8s or none"},
	"api_tokens_role_valid":                {"role", "must be admin, tenant-admin, viewer or agent"},
	"api_tokens_tenant_admin_has_tenant":   {"tenant", "must be set for role tenant-admin and only for it"},
	"api_tokens_binding_agent_only":        {"node", "only agent tokens are bound to nodes or a pool"},
	"api_tokens_binding_one":               {"pool", "bind an agent token to nodes or to a pool, not both"},
}

// mapError turns PostgreSQL errors into broker errors; what names the
// object being written, for the message.
func mapError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, broker.ErrNotFound)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch pe.Code {
	case "23505": // unique_violation
		return fmt.Errorf("%s: already exists (%s): %w", what, pe.ConstraintName, broker.ErrConflict)
	case "23503": // foreign_key_violation
		if strings.Contains(pe.Detail, "still referenced") {
			// A delete or rename of a row others point at.
			return fmt.Errorf("%s: still in use by %s; remove those first: %w", what, pe.TableName, broker.ErrConflict)
		}
		if pe.ConstraintName == "demand_tenant_fkey" {
			return fmt.Errorf("%s: a tenant named by demand does not exist: %w", what, broker.ErrConflict)
		}
		return fmt.Errorf("%s: %s (%s): %w", what, pe.Detail, pe.ConstraintName, broker.ErrConflict)
	case "23514": // check_violation
		if f, ok := constraintFields[pe.ConstraintName]; ok {
			return &broker.ValidationError{Field: f.field, Problem: f.problem}
		}
		return &broker.ValidationError{Field: pe.ColumnName, Problem: "violates " + pe.ConstraintName}
	case "23502": // not_null_violation
		return &broker.ValidationError{Field: pe.ColumnName, Problem: "must be set"}
	case "40001", "40P01": // serialization failure, deadlock
		return fmt.Errorf("%s: concurrent change, retry: %w", what, broker.ErrConflict)
	}
	return fmt.Errorf("%s: %w", what, err)
}
