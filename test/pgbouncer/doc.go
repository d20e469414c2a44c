// Package pgbouncer runs PgBouncer in front of a test PostgreSQL, so the
// store's tests can check what a connection pooler does to the leader lock:
// in transaction mode each transaction may run on another server session,
// which breaks session advisory locks. Install runs install.sh (a
// pgbouncer on PATH, or the distribution's package unpacked into the
// cache); Start runs one on a free loopback port.
package pgbouncer
