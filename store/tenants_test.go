package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func TestTenantCRUDAndVersions(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	tn, err := s.CreateTenant(ctx, broker.Tenant{Name: "training", BasePriority: 1000000, GuaranteedGPUs: 4,
		MaxGPUs: 20, Weight: 2, YARNQueues: []string{"root.training"}, Namespaces: []string{"ml", "batch"},
		EvictGrace: broker.Duration(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if tn.Version != 1 || !cmp.Equal(tn.Namespaces, []string{"batch", "ml"}) || tn.EvictGrace.D() != 2*time.Minute {
		t.Fatalf("created: %+v, want version 1, namespaces batch and ml, evict grace 2m kept", tn)
	}
	// A second tenant may not claim a queue or namespace already mapped.
	_, err = s.CreateTenant(ctx, broker.Tenant{Name: "other", MaxGPUs: 1, Weight: 1, Namespaces: []string{"ml"}})
	if !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("namespace taken twice: got %v, want ErrConflict", err)
	}
	if _, err := s.GetTenant(ctx, "other"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("failed create must leave nothing: %v", err)
	}
	// Duplicate name.
	if _, err := s.CreateTenant(ctx, broker.Tenant{Name: "training", MaxGPUs: 1, Weight: 1}); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("duplicate name: got %v", err)
	}

	// Two admins read version 1; the first update wins, the second conflicts.
	a, b := tn, tn
	a.MaxGPUs = 30
	a.Namespaces = []string{"ml"}
	a.EvictGrace = 0
	updated, err := s.UpdateTenant(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if updated.Version != 2 || updated.MaxGPUs != 30 || !cmp.Equal(updated.Namespaces, []string{"ml"}) || updated.EvictGrace != 0 {
		t.Fatalf("updated: %+v", updated)
	}
	b.MaxGPUs = 10
	if _, err := s.UpdateTenant(ctx, b); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("stale version: got %v, want ErrConflict", err)
	}
	cur, _ := s.GetTenant(ctx, "training")
	if cur.MaxGPUs != 30 {
		t.Fatalf("lost update: max is %d, want 30", cur.MaxGPUs)
	}
	if _, err := s.UpdateTenant(ctx, broker.Tenant{Name: "ghost", MaxGPUs: 1, Weight: 1, Version: 1}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("update of a missing tenant: got %v", err)
	}

	// A tenant with live demand cannot be deleted; once it is gone, it can.
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0, Demand: []broker.Demand{pod("a", "training", 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "training"); !errors.Is(err, broker.ErrConflict) || !strings.Contains(err.Error(), "still in use by demand") {
		t.Fatalf("delete with live demand: got %v, want ErrConflict saying it is in use", err)
	}
	if _, err := s.ApplyObservation(ctx, store.Observation{Source: broker.SourceK8s, At: t0.Add(1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "training"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "training"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second delete: got %v", err)
	}
	_, queues, namespaces, err := s.TenantMap(ctx)
	if err != nil || len(queues)+len(namespaces) != 0 {
		t.Fatalf("mappings must go with the tenant: %v %v %v", queues, namespaces, err)
	}
}

// TestSchemaConstraints writes bad rows straight through SQL, past the Go
// validation, to show the schema itself refuses them and that the store
// maps each violation to the field it guards.
func TestSchemaConstraints(t *testing.T) {
	ctx := context.Background()
	_, url := newStore(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cases := []struct {
		sql   string
		field string
	}{
		{`INSERT INTO tenants (name, max_gpus, guaranteed_gpus) VALUES ('a', 1, 2)`, "max_gpus"},
		{`INSERT INTO tenants (name, max_gpus, guaranteed_gpus) VALUES ('a', 1, -1)`, "guaranteed_gpus"},
		{`INSERT INTO tenants (name, max_gpus, weight) VALUES ('a', 1, 0)`, "weight"},
		{`INSERT INTO tenants (name, max_gpus) VALUES ('Not A Name', 1)`, "name"},
		{`INSERT INTO pools (name, gpus_per_node, min_nodes, max_nodes) VALUES ('p', 4, 3, 2)`, "max_nodes"},
		{`INSERT INTO pools (name, gpus_per_node, max_nodes) VALUES ('p', -4, 2)`, "gpus_per_node"},
		{`INSERT INTO pools (name, gpus_per_node, max_nodes, sides) VALUES ('p', 4, 2, 'both')`, "sides"},
		{`INSERT INTO nodes (name, phase) VALUES ('n', 'flying')`, "phase"},
		{`INSERT INTO nodes (name, phase, gpus_total) VALUES ('n', 'active', -1)`, "gpus_total"},
		{`INSERT INTO api_tokens (hash, role) VALUES (decode(repeat('00', 32), 'hex'), 'tenant-admin')`, "tenant"},
	}
	for _, tc := range cases {
		_, err := conn.Exec(ctx, tc.sql)
		if err == nil {
			t.Errorf("%s: accepted, want a check violation", tc.sql)
			continue
		}
		var ve *broker.ValidationError
		if got := store.MapErrorForTest("write", err); !errors.As(got, &ve) || ve.Field != tc.field {
			t.Errorf("%s: mapped to %v, want a validation error on %s", tc.sql, got, tc.field)
		}
	}
	// Foreign keys: demand for a missing tenant is a conflict.
	_, err = conn.Exec(ctx, `INSERT INTO demand (source, key, tenant, gpus_per_unit, units, first_seen) VALUES ('k8s', 'x', 'missing', 1, 1, now())`)
	if got := store.MapErrorForTest("write", err); !errors.Is(got, broker.ErrConflict) {
		t.Fatalf("missing tenant: %v", got)
	}
}

func TestPoolsAndPolicy(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	p := broker.Pool{Name: "gpu-training-group", Provider: "aws", Group: "gpu-training-group", GPUModel: "A10G",
		GPUsPerNode: 4, MinNodes: 0, MaxNodes: 5, Sides: broker.PoolShared, Partition: "fast",
		Labels: map[string]string{"infra-type": "gpu", "gpu.vendor": "nvidia"},
		Taints: []broker.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}}
	got, err := s.UpsertPool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Version = 1
	if diff := cmp.Diff(p, got); diff != "" {
		t.Fatalf("pool round trip (-want +got):\n%s", diff)
	}
	edit := got
	edit.MaxNodes, edit.Partition = 8, ""
	if got, err = s.UpdatePool(ctx, edit); err != nil || got.MaxNodes != 8 || got.Version != 2 || got.Partition != "" {
		t.Fatalf("update: %+v %v", got, err)
	}
	if _, err := s.UpdatePool(ctx, edit); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("stale pool edit: %v", err)
	}
	edit.MinNodes, edit.Version = 9, 2
	var ve *broker.ValidationError
	if _, err := s.UpdatePool(ctx, edit); !errors.As(err, &ve) || ve.Field != "max_nodes" {
		t.Fatalf("min > max: %v", err)
	}
	until := t0.Add(5 * 60e9)
	if err := s.SetPoolBackoff(ctx, p.Name, until, "InsufficientInstanceCapacity"); err != nil {
		t.Fatal(err)
	}
	recs, _ := s.ListPools(ctx)
	if len(recs) != 1 || !recs[0].BackoffUntil.Equal(until) || recs[0].BackoffReason != "InsufficientInstanceCapacity" {
		t.Fatalf("backoff: %+v", recs)
	}

	pol, err := s.GetPolicy(ctx)
	if err != nil || pol.Version != 0 || pol.Expander != broker.ExpanderLeastWaste {
		t.Fatalf("default policy: %+v %v", pol, err)
	}
	pol.Expander = broker.ExpanderMostPods
	stored, err := s.UpdatePolicy(ctx, pol)
	if err != nil || stored.Version != 1 || stored.Expander != broker.ExpanderMostPods {
		t.Fatalf("store policy: %+v %v", stored, err)
	}
	if _, err := s.UpdatePolicy(ctx, pol); !errors.Is(err, broker.ErrConflict) {
		t.Fatalf("second create from version 0: %v", err)
	}
	stored.ScaleDownUtilisation = 0.3
	if stored, err = s.UpdatePolicy(ctx, stored); err != nil || stored.Version != 2 || stored.ScaleDownUtilisation != 0.3 {
		t.Fatalf("update policy: %+v %v", stored, err)
	}
}
