package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/gpubroker/gpubroker/migrations"
)

// MigrationStatus is one migration's version and whether it is applied.
type MigrationStatus struct {
	Version   int64     `json:"version"`
	Name      string    `json:"name"`
	Applied   bool      `json:"applied"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
}

// Migrations applies versioned SQL migrations to one database.
//
// It uses pressly/goose's Provider: no global state, each migration file in
// its own transaction, and a PostgreSQL session advisory lock so that two
// replicas starting together do not both migrate.
type Migrations struct {
	db       *sql.DB
	provider *goose.Provider
	url      string
}

// NewMigrations opens a migrator for the database at url over the files in
// fsys (nil means gpubroker's embedded migrations).
func NewMigrations(ctx context.Context, url string, fsys fs.FS) (*Migrations, error) {
	if fsys == nil {
		fsys = migrations.FS
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("open database at %s: %w", Address(url), err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, &connectError{addr: Address(url), err: err}
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrations{db: db, provider: p, url: url}, nil
}

// Close releases the connection.
func (m *Migrations) Close() error { return m.db.Close() }

// Up applies every pending migration and returns the versions applied. A
// migration that fails is rolled back whole, leaving the schema at the
// version before it.
func (m *Migrations) Up(ctx context.Context) ([]int64, error) {
	results, err := m.provider.Up(ctx)
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	if err != nil {
		var pe *goose.PartialError
		if errors.As(err, &pe) && pe.Failed != nil {
			for _, r := range pe.Applied {
				applied = append(applied, r.Source.Version)
			}
			return applied, fmt.Errorf("migration %d (%s) failed and was rolled back: %w", pe.Failed.Source.Version, pe.Failed.Source.Path, pe.Err)
		}
		return applied, fmt.Errorf("migrate database at %s: %w", Address(m.url), err)
	}
	return applied, nil
}

// versionTable is goose's bookkeeping table.
const versionTable = "goose_db_version"

// hasVersionTable reports whether goose's version table exists. goose's
// Status and GetDBVersion create it when it is missing, so a read-only
// caller (plan, a dry run) asks first and leaves an empty database empty.
func (m *Migrations) hasVersionTable(ctx context.Context) (bool, error) {
	var exists bool
	err := m.db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", versionTable).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look for the schema version table at %s: %w", Address(m.url), err)
	}
	return exists, nil
}

// Version returns the current schema version (0 for an empty database). It
// writes nothing.
func (m *Migrations) Version(ctx context.Context) (int64, error) {
	if ok, err := m.hasVersionTable(ctx); err != nil || !ok {
		return 0, err
	}
	v, err := m.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version at %s: %w", Address(m.url), err)
	}
	return v, nil
}

// Status lists every known migration and whether it is applied. It writes
// nothing: on a database that was never migrated every migration is
// pending and the database stays empty.
func (m *Migrations) Status(ctx context.Context) ([]MigrationStatus, error) {
	ok, err := m.hasVersionTable(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		src := m.provider.ListSources()
		out := make([]MigrationStatus, 0, len(src))
		for _, s := range src {
			out = append(out, MigrationStatus{Version: s.Version, Name: s.Path})
		}
		return out, nil
	}
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status at %s: %w", Address(m.url), err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationStatus{
			Version:   s.Source.Version,
			Name:      s.Source.Path,
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}

// Migrate applies gpubroker's embedded migrations to the database at url.
func Migrate(ctx context.Context, url string) error {
	m, err := NewMigrations(ctx, url, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
