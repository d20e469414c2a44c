package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// pendingDemand is one live ledger row with how long it has waited and why.
type pendingDemand struct {
	store.DemandRow
	WaitSeconds float64 `json:"wait_seconds"`
}

// closedDemand is one history row with its wait in seconds.
type closedDemand struct {
	store.ClosedDemand
	WaitedSeconds float64 `json:"waited_seconds"`
}

var closeReasons = []string{string(store.CloseScheduled), string(store.CloseFinished), string(store.CloseDeleted),
	string(store.ClosePreempted), string(store.CloseVanished)}

// listDemand serves the ledger. state=pending (default) pages the live
// demand oldest first with an opaque cursor; state=closed pages the history
// newest first with an id cursor.
func (s *server) listDemand(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "state", "source", "tenant", "min_wait", "min_priority", "reason", "limit", "after")
	state := p.oneOf("state", "pending", "closed")
	src := p.oneOf("source", string(broker.SourceYARN), string(broker.SourceK8s))
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	tenant, err := sc.tenantParam(p.str("tenant"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	minWait := p.duration("min_wait")
	limit := p.limit()
	reason := p.str("reason")
	now := s.cfg.Now()
	if state == "closed" {
		reason = p.oneOf("reason", closeReasons...)
		before := p.cursorID("after")
		if _, set := p.int64("min_priority"); set && p.err == nil {
			p.err = broker.Invalid("min_priority", "applies to pending demand only")
		}
		if p.err != nil {
			s.fail(w, r, p.err)
			return
		}
		rows, err := s.st.ListClosed(r.Context(), store.ClosedFilter{MinWait: minWait, HistoryFilter: store.HistoryFilter{
			Source: broker.Source(src), Tenant: tenant, Reason: store.CloseReason(reason), Limit: limit, BeforeID: before}})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out := list[closedDemand]{Items: []closedDemand{}}
		for _, c := range filterClosed(sc, rows) {
			out.Items = append(out.Items, closedDemand{ClosedDemand: c, WaitedSeconds: c.Waited.Seconds()})
		}
		if len(rows) == limit {
			out.Next = strconv.FormatInt(rows[len(rows)-1].ID, 10)
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	f := store.DemandFilter{Source: broker.Source(src), Tenant: tenant, MinWait: minWait, Now: now,
		WaitReason: reason, Limit: limit, After: p.str("after")}
	if prio, set := p.int64("min_priority"); set {
		f.MinPriority = &prio
	}
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	page, err := s.st.ListDemand(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := list[pendingDemand]{Items: []pendingDemand{}, Next: page.Next}
	for _, d := range filterDemandRows(sc, page.Rows) {
		out.Items = append(out.Items, pendingDemand{DemandRow: d, WaitSeconds: seconds(d.Wait(now))})
	}
	writeJSON(w, http.StatusOK, out)
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
