package engine

import (
	"github.com/gpubroker/gpubroker/broker"

	"log/slog"
	"time"
)

// TickPhases is how long each phase of one tick took, for the debug log
// and the tick benchmark (test/bench). Observe is per side (the sides and
// the cloud are observed in parallel, so ObserveAll is the wall time of
// that step, not their sum); Persist is writing demand and nodes to the
// ledger; Merge is reading the ledger's state and merging nodes.
type TickPhases struct {
	Observe    map[broker.Source]time.Duration
	Cloud      time.Duration
	ObserveAll time.Duration
	Persist    time.Duration
	Merge      time.Duration
	Plan       time.Duration
	Validate   time.Duration
	Record     time.Duration
	Act        time.Duration
	Total      time.Duration
}

// LogAttrs are the phases as slog attributes in milliseconds.
func (p TickPhases) LogAttrs() []any {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := []any{slog.Float64("total_ms", ms(p.Total))}
	for _, src := range broker.Sources {
		if d, ok := p.Observe[src]; ok {
			out = append(out, slog.Float64("observe_"+string(src)+"_ms", ms(d)))
		}
	}
	return append(out, slog.Float64("observe_cloud_ms", ms(p.Cloud)), slog.Float64("observe_all_ms", ms(p.ObserveAll)),
		slog.Float64("persist_ms", ms(p.Persist)), slog.Float64("merge_ms", ms(p.Merge)),
		slog.Float64("plan_ms", ms(p.Plan)), slog.Float64("validate_ms", ms(p.Validate)),
		slog.Float64("record_ms", ms(p.Record)), slog.Float64("act_ms", ms(p.Act)))
}
