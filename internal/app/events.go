package app

import (
	"context"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// decisionSink receives every batch of decisions the runtime records, after
// the ledger has them (k8s.PodEvents turns them into pod Events).
type decisionSink interface {
	Decisions(ctx context.Context, ds []broker.Decision)
}

// sinkTimeout bounds how long one batch may hold a tick up in its sinks.
const sinkTimeout = 5 * time.Second

// decisionTap is the runtime's ledger with its recorded decisions also
// handed to sinks: the one place decisions are produced stays the tick
// loop, the one place they are kept stays the store.
type decisionTap struct {
	engine.Ledger
	sinks []decisionSink
}

// RecordDecisions records ds, then hands them to every sink, best effort:
// a sink never fails the tick.
func (t decisionTap) RecordDecisions(ctx context.Context, ds []broker.Decision) error {
	err := t.Ledger.RecordDecisions(ctx, ds)
	if len(ds) == 0 {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, sinkTimeout)
	defer cancel()
	for _, s := range t.sinks {
		s.Decisions(sctx, ds)
	}
	return err
}

// withDecisionSinks wraps ledger so the assembled sinks see its decisions;
// plan (Preview) and a broker without sinks get ledger unchanged.
func (m *Main) withDecisionSinks(ledger engine.Ledger) engine.Ledger {
	if m.cfg.Preview || len(m.sinks) == 0 {
		return ledger
	}
	return decisionTap{Ledger: ledger, sinks: m.sinks}
}

// provisionTime is the stored policy's max provision time (its one
// owner), or the configured one when the store cannot say: the ETA a
// ScaleUpTriggered event gives.
func (m *Main) provisionTime(ctx context.Context) time.Duration {
	if p, err := m.st.GetPolicy(ctx); err == nil && p.MaxProvisionTime > 0 {
		return p.MaxProvisionTime.D()
	}
	return m.cfg.Policy.WithDefaults().MaxProvisionTime.D()
}
