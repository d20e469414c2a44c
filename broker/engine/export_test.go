package engine

import (
	"slices"

	"github.com/gpubroker/gpubroker/broker"
)

// The in-memory ledger the runtime's tests use, opened for the Ledger
// conformance suite (ledger_conformance_test.go, package engine_test), with
// the read-backs the suite needs.

// NewMemLedger returns the tests' in-memory ledger holding the seed.
func NewMemLedger(policy broker.Policy, pools []broker.Pool, tenants []broker.Tenant) *rtLedger {
	ps := make([]broker.PoolState, len(pools))
	for i, p := range pools {
		ps[i] = broker.PoolState{Pool: p}
	}
	return newRTLedger(policy, ps, tenants...)
}

// ClosedReason reports why demand id left, and whether it did.
func (l *rtLedger) ClosedReason(id string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.closed[id]
	return r, ok
}

// RecordedDecisions returns the decisions, oldest first.
func (l *rtLedger) RecordedDecisions() []broker.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.decisions)
}

// RecordedWaits returns the wait reasons of live demand.
func (l *rtLedger) RecordedWaits() map[string]broker.Wait {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]broker.Wait{}
	for k, w := range l.waits {
		if _, live := l.demand[k]; live {
			out[k] = w
		}
	}
	return out
}

// RecordedSamples returns the capacity samples, oldest first.
func (l *rtLedger) RecordedSamples() []broker.CapacitySample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples)
}

// SaveReport stores r as its node's latest unless a newer one is stored.
func (l *rtLedger) SaveReport(r broker.NodeReport) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.reports[r.Node]; !ok || !r.At.Before(old.At) {
		l.reports[r.Node] = r
	}
}
