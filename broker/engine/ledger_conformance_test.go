package engine_test

import (
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/broker/engine/ledgertest"
)

// TestMemLedgerConformance runs the engine.Ledger contract against the
// in-memory ledger the runtime's tests use: the same suite store.Ledger
// passes on a real PostgreSQL, so the runtime's tests see the store's
// semantics.
func TestMemLedgerConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, seed ledgertest.Seed) ledgertest.Ledger {
		l := engine.NewMemLedger(seed.Policy, seed.Pools, seed.Tenants)
		return ledgertest.Ledger{
			Ledger:     l,
			Closed:     func(_ *testing.T, id string) (string, bool) { return l.ClosedReason(id) },
			Decisions:  func(*testing.T) []broker.Decision { return l.RecordedDecisions() },
			Waits:      func(*testing.T) map[string]broker.Wait { return l.RecordedWaits() },
			Samples:    func(*testing.T) []broker.CapacitySample { return l.RecordedSamples() },
			SaveReport: func(_ *testing.T, r broker.NodeReport) { l.SaveReport(r) },
		}
	})
}
