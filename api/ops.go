package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// opKinds and opStates are every kind and state an op can have.
var (
	opKinds  = []broker.ActionKind{broker.ActScaleUp, broker.ActScaleDown, broker.ActTransfer, broker.ActPreempt, broker.ActReplace, broker.ActMigrate}
	opStates = []broker.OpState{broker.OpPending, broker.OpRunning, broker.OpDone, broker.OpFailed, broker.OpCancelled}
)

// listOps serves the ops journal, newest first, paged by id ("before"):
// what is in flight, how far it got, and why an op failed.
func (s *server) listOps(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "state", "kind", "pool", "node", "limit", "before")
	states := []string{"open"}
	for _, st := range opStates {
		states = append(states, string(st))
	}
	kinds := make([]string, len(opKinds))
	for i, k := range opKinds {
		kinds[i] = string(k)
	}
	f := store.OpFilter{State: p.oneOf("state", states...), Kind: p.oneOf("kind", kinds...),
		Pool: p.str("pool"), Node: p.str("node"), Limit: p.limit(), BeforeID: p.cursorID("before")}
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	ops, err := s.st.ListOps(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := list[broker.Op]{Items: items(ops)}
	if len(ops) == f.Limit {
		out.Next = strconv.FormatInt(ops[len(ops)-1].ID, 10)
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	if out.Items, err = sc.filterOps(r.Context(), out.Items); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// opsGauge is gpubroker_ops{kind,state}: the journal's ops by kind and
// state, read from the store when /metrics is scraped. Every kind and
// state is set on each refresh (zero included), so no series goes missing
// or stale between scrapes.
type opsGauge struct{ g *prometheus.GaugeVec }

func newOpsGauge() *opsGauge {
	return &opsGauge{g: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubroker_ops",
		Help: "Ops in the journal by kind and state (pending and running are open; failed ones ended with a reason, see GET /api/v1/ops?state=failed).",
	}, []string{"kind", "state"})}
}

func (o *opsGauge) refresh(ctx context.Context, st Store) error {
	counts, err := st.CountOps(ctx)
	if err != nil {
		return err
	}
	n := map[[2]string]int{}
	for _, c := range counts {
		n[[2]string{string(c.Kind), string(c.State)}] = c.Count
	}
	for _, k := range opKinds {
		for _, s := range opStates {
			o.g.WithLabelValues(string(k), string(s)).Set(float64(n[[2]string{string(k), string(s)}]))
		}
	}
	return nil
}

// metricsHandler refreshes the store-backed gauges with the scrape's
// context, then serves the registry.
func (s *server) metricsHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.ops.refresh(r.Context(), s.st); err != nil && r.Context().Err() == nil {
			s.log.WarnContext(r.Context(), "refresh ops metric", "err", err)
		}
		if err := s.state.refresh(r.Context(), s); err != nil && r.Context().Err() == nil {
			s.log.WarnContext(r.Context(), "refresh state metrics", "err", err)
		}
		next.ServeHTTP(w, r)
	})
}
