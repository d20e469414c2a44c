// Package migrations holds gpubroker's versioned SQL migrations, embedded in
// the binary. They are applied by store.Migrate (the "gpubroker migrate"
// command) through pressly/goose: each file is one version, runs in one
// transaction (PostgreSQL DDL is transactional, so a failing migration
// leaves the schema at the previous version), and a session advisory lock
// keeps two replicas starting at once from migrating together.
//
// Files are named NNNNN_description.sql and never edited once released;
// a change is a new file.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
