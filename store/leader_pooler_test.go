package store_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgbouncer"
)

// behindPooler starts PgBouncer in mode in front of a fresh database and
// opens a store through it.
func behindPooler(t *testing.T, mode string) *store.Store {
	t.Helper()
	raw := pg.NewDatabase(t, store.Migrate)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgbouncer.Start(t.Context(), pgbouncer.Config{Upstream: u.Host, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	s, err := store.Open(t.Context(), store.Config{URL: b.URL(strings.TrimPrefix(u.Path, "/"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestLeaderRefusesTransactionPooler: behind PgBouncer in transaction mode
// the advisory lock would elect nobody (the lock stays on whichever server
// session ran the statement, and another replica's statement may run
// there and "take" it again), so taking the lead is refused with
// ErrSessionPooler and a message naming the fix, and Lead does not retry.
// In session mode the lock works: one leader, the other refused.
func TestLeaderRefusesTransactionPooler(t *testing.T) {
	ctx := context.Background()
	s := behindPooler(t, "transaction")
	_, err := s.TryLead(ctx, 0)
	if !errors.Is(err, store.ErrSessionPooler) || !strings.Contains(err.Error(), "pool_mode=session") {
		t.Fatalf("lead behind a transaction pooler: got %v, want ErrSessionPooler naming the fix", err)
	}
	if _, err := s.Lead(ctx, 0, 0); !errors.Is(err, store.ErrSessionPooler) {
		t.Fatalf("Lead must give up at once behind a transaction pooler, got %v", err)
	}

	a := behindPooler(t, "session")
	l, err := a.TryLead(ctx, 0)
	if err != nil {
		t.Fatalf("lead behind a session pooler: %v", err)
	}
	defer l.Release(ctx)
}
