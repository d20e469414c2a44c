// Package store keeps gpubroker's state in PostgreSQL through pgx: the
// demand ledger and its closed history, tenants with their queue and
// namespace mappings, pools, nodes, the ops journal, decisions, capacity
// samples and hashed API tokens. It also applies the embedded migrations
// and holds the leader lock.
//
// PostgreSQL errors become broker errors at this boundary: a unique or
// foreign-key violation wraps broker.ErrConflict, a check violation becomes
// a *broker.ValidationError naming the field, a missing row wraps
// broker.ErrNotFound.
package store
