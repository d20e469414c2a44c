package store

import (
	"context"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// MapErrorForTest exposes mapError to the external tests.
var MapErrorForTest = mapError

// SetTraceApplyForTest sets the step timer of ApplyObservation (nil: off).
func SetTraceApplyForTest(f func(step string, took time.Duration)) { traceApply = f }

// AddSeenKeyForTest makes the cache of the last applied observation of src
// hold a key the ledger does not have, as a cache out of step would.
func AddSeenKeyForTest(s *Store, src broker.Source, key string) bool {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	r := s.seen.src[src]
	if r == nil {
		return false
	}
	r.rows[key] = "x"
	return true
}

// SeenCachedForTest reports whether the Store caches an observation of src.
func SeenCachedForTest(s *Store, src broker.Source) bool {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	return s.seen.src[src] != nil
}

// UnlockLeaseForTest releases the leader lock on the lease's own session
// while the lease lives on, as a session that lost its lock without
// losing its connection would be.
func UnlockLeaseForTest(l *Lease) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", LeaderLockKey)
	return err
}

// MoveLeaseBackendForTest makes the lease believe it took the lock on
// another server backend than the one its connection now reaches, as a
// pooler that hands the client another server session would.
func MoveLeaseBackendForTest(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pid++
}
