package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// newStore returns a store on a fresh, migrated database of its own.
func newStore(t testing.TB) (*store.Store, string) {
	t.Helper()
	url := pg.NewDatabase(t, store.Migrate)
	s, err := store.Open(context.Background(), store.Config{URL: url})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s, url
}

func mustTenant(t testing.TB, s *store.Store, name string, queues, namespaces []string) broker.Tenant {
	t.Helper()
	tn, err := s.CreateTenant(context.Background(), broker.Tenant{
		Name: name, MaxGPUs: 100, Weight: 1, YARNQueues: queues, Namespaces: namespaces,
	})
	if err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	return tn
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
