package api

import (
	"net/http"
	"strconv"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// listDecisions serves the audit, newest first, paged by id ("before").
func (s *server) listDecisions(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "kind", "demand", "tenant", "pool", "node", "since", "limit", "before")
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	f := store.DecisionFilter{
		Kind:   p.oneOf("kind", broker.DecisionKinds()...),
		Demand: p.str("demand"), Tenant: p.str("tenant"), Pool: p.str("pool"), Node: p.str("node"),
		Since: p.time("since"), Limit: p.limit(), BeforeID: p.cursorID("before"),
	}
	if p.err == nil && f.Tenant != "" {
		f.Tenant, p.err = sc.tenantParam(f.Tenant)
	}
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	ds, err := s.st.ListDecisions(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := list[broker.Decision]{Items: items(ds)}
	if len(ds) == f.Limit {
		out.Next = strconv.FormatInt(ds[len(ds)-1].ID, 10)
	}
	if out.Items, err = sc.filterDecisions(r.Context(), out.Items); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
