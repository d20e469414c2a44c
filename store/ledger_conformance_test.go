package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine/ledgertest"
	"github.com/gpubroker/gpubroker/store"
)

// TestLedgerConformance runs the engine.Ledger contract against store.Ledger
// on a real PostgreSQL: the same suite the engine's in-memory ledger passes.
func TestLedgerConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, seed ledgertest.Seed) ledgertest.Ledger {
		ctx := context.Background()
		s, _ := newStore(t)
		if _, err := s.UpdatePolicy(ctx, seed.Policy); err != nil {
			t.Fatalf("seed policy: %v", err)
		}
		for _, p := range seed.Pools {
			if _, err := s.UpsertPool(ctx, p); err != nil {
				t.Fatalf("seed pool %s: %v", p.Name, err)
			}
		}
		for _, tn := range seed.Tenants {
			if _, err := s.CreateTenant(ctx, tn); err != nil {
				t.Fatalf("seed tenant %s: %v", tn.Name, err)
			}
		}
		return ledgertest.Ledger{
			Ledger: s.Ledger(),
			Closed: func(t *testing.T, id string) (string, bool) {
				src, key, _ := strings.Cut(id, "/")
				hist, err := s.ListHistory(ctx, store.HistoryFilter{Source: broker.Source(src), Limit: store.MaxPageSize})
				if err != nil {
					t.Fatalf("history: %v", err)
				}
				for _, h := range hist {
					if h.Key == key {
						return string(h.Reason), true
					}
				}
				return "", false
			},
			Decisions: func(t *testing.T) []broker.Decision {
				ds, err := s.ListDecisions(ctx, store.DecisionFilter{Limit: store.MaxPageSize})
				if err != nil {
					t.Fatalf("decisions: %v", err)
				}
				slices.Reverse(ds) // newest first → oldest first
				return ds
			},
			Waits: func(t *testing.T) map[string]broker.Wait {
				page, err := s.ListDemand(ctx, store.DemandFilter{Limit: store.MaxPageSize})
				if err != nil {
					t.Fatalf("demand: %v", err)
				}
				out := map[string]broker.Wait{}
				for _, r := range page.Rows {
					if r.WaitReason != "" {
						out[r.ID()] = broker.Wait{Demand: r.ID(), Reason: broker.WaitReason(r.WaitReason), Detail: r.WaitDetail}
					}
				}
				return out
			},
			Samples: func(t *testing.T) []broker.CapacitySample {
				ss, err := s.Samples(ctx, time.Time{}, time.Now().Add(24*365*time.Hour))
				if err != nil {
					t.Fatalf("samples: %v", err)
				}
				return ss
			},
			SaveReport: func(t *testing.T, r broker.NodeReport) {
				if _, err := s.SaveReport(ctx, r); err != nil {
					t.Fatalf("save report of %s: %v", r.Node, err)
				}
			},
		}
	})
}
