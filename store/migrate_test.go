package store_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/store"
)

func TestMigrateUpStatusIdempotent(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t, nil)
	m, err := store.NewMigrations(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil || len(st) == 0 || st[0].Applied {
		t.Fatalf("status of an empty database: %+v %v", st, err)
	}
	if v, err := m.Version(ctx); err != nil || v != 0 {
		t.Fatalf("version of an empty database: %d %v", v, err)
	}
	// Reading the status is a dry run's check: it must leave an empty
	// database empty (goose creates its version table when asked).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var tables int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").Scan(&tables)
	conn.Close(ctx)
	if err != nil || tables != 0 {
		t.Fatalf("reading the status of an empty database created %d table(s) (err %v)", tables, err)
	}
	applied, err := m.Up(ctx)
	if err != nil || len(applied) != len(st) {
		t.Fatalf("up: applied %v, err %v", applied, err)
	}
	applied, err = m.Up(ctx)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second up must do nothing: %v %v", applied, err)
	}
	st, _ = m.Status(ctx)
	for _, s := range st {
		if !s.Applied || s.AppliedAt.IsZero() {
			t.Fatalf("not applied after up: %+v", s)
		}
	}
}

func TestFailedMigrationLeavesPreviousVersion(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t, nil)
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
		"00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\nINSERT INTO b VALUES ('not a number');\n-- +goose Down\nDROP TABLE b;\n")},
	}
	m, err := store.NewMigrations(ctx, url, fsys)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	applied, err := m.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), "migration 2") {
		t.Fatalf("want migration 2 to fail, got %v", err)
	}
	if len(applied) != 1 || applied[0] != 1 {
		t.Fatalf("applied %v, want [1]", applied)
	}
	v, err := m.Version(ctx)
	if err != nil || v != 1 {
		t.Fatalf("version after failure: %d %v, want 1", v, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	conn.QueryRow(ctx, "SELECT to_regclass('b') IS NOT NULL").Scan(&exists)
	if exists {
		t.Fatal("table b from the failed migration must be rolled back")
	}
}
