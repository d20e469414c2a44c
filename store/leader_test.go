package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/store"
)

func TestLeaderLockOneHolderAndReleasedOnConnectionLoss(t *testing.T) {
	ctx := context.Background()
	_, url := newStore(t)
	open := func() *store.Store {
		s, err := store.Open(ctx, store.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b := open(), open()

	la, err := a.TryLead(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("first replica: %v", err)
	}
	if _, err := b.TryLead(ctx, 100*time.Millisecond); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("second replica while the first leads: got %v, want ErrNotLeader", err)
	}

	// Kill the leader's connection from outside, as a crash or a network
	// partition would. The server drops its session locks; the lease notices.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var killed bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", la.BackendPID()).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate leader backend: %v %v", killed, err)
	}
	select {
	case <-la.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease did not report the lost connection within 10s")
	}

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lb, err := b.Lead(waitCtx, 50*time.Millisecond, time.Second)
	if err != nil {
		t.Fatalf("second replica did not take over: %v", err)
	}
	if _, err := a.TryLead(ctx, time.Second); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("former leader retaking while the new one holds: got %v", err)
	}

	// A clean release hands the lock on at once.
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lb.Lost():
	default:
		t.Fatal("a released lease must report Lost")
	}
	lc, err := a.TryLead(ctx, time.Second)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	lc.Release(ctx)
}
