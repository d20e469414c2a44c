package app

import (
	"context"
	"time"

	"github.com/gpubroker/gpubroker/api"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// publishReads makes the API's read model follow the state: the leader's
// runtimes start a new generation after each tick and notify the other
// replicas through PostgreSQL (store.NotifyChanged), and every replica
// listens for those notifications until ctx ends. Call it before the first
// NewRuntime.
func (m *Main) publishReads(ctx context.Context) *api.ReadModel {
	model := api.NewReadModel(api.ReadModelConfig{MaxAge: 2 * m.period()})
	m.afterTick = func(ctx context.Context, _ *engine.TickReport, _ error) {
		if err := m.st.NotifyChanged(ctx, model.Changed()); err != nil && ctx.Err() == nil {
			m.log.Warn("notify replicas of a tick", "err", err)
		}
	}
	go m.st.ListenChanged(ctx, 5*time.Second, model.Notified)
	return model
}

// period is the tick interval the runtimes use.
func (m *Main) period() time.Duration {
	if m.cfg.Period > 0 {
		return m.cfg.Period
	}
	return 5 * time.Second
}
