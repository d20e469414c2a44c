package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestConfigMigrate: consolidation.migrate and its bounds reach the
// policy; a mode that does not exist is refused naming the field.
func TestConfigMigrate(t *testing.T) {
	c, err := parseConfig("m.yaml", []byte(`
policy:
  consolidation:
    migrate: checkpointed
    migrate_window: 2m
    max_migrations_per_hour: 4
    no_migrate_tenants: [inference]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.policy
	if p.Migrate != broker.MigrateCheckpointed || p.MigrateWindow.D() != 2*time.Minute || p.MaxMigrationsPerHour != 4 ||
		len(p.NoMigrateTenants) != 1 || p.NoMigrateTenants[0] != "inference" {
		t.Fatalf("policy %+v, want migrate checkpointed, 2m window, 4 an hour, inference opted out", p)
	}
	if d, err := parseConfig("d.yaml", []byte("policy:\n  preemption: true\n")); err != nil || d.policy.Migrate != broker.MigrateOff {
		t.Fatalf("default migrate %q (%v), want off", d.policy.Migrate, err)
	}
	_, err = parseConfig("m.yaml", []byte("policy:\n  consolidation:\n    migrate: always\n"))
	if err == nil || !strings.Contains(err.Error(), "consolidation_migrate") || !strings.Contains(err.Error(), "off or checkpointed") {
		t.Fatalf("migrate: always gave %v, want an error naming consolidation_migrate and its values", err)
	}
}
