// Package pgtest gives tests a real PostgreSQL server without setup by hand.
//
// With DATABASE_URL set, tests use that server. Otherwise Start runs a
// private server through store/pgserver (initdb and postgres from the
// Debian server binaries, or PG_BIN, in a temporary directory, on a free
// loopback port, as "nobody" when root). One server serves a whole test package
// and is removed when the package's tests end. Each test gets its own
// database, cloned from a template that already holds the migrated schema,
// so tests are isolated and may run in parallel.
package pgtest
