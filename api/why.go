package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// whyDemand is one demand with its history of decisions, oldest first.
type whyDemand struct {
	store.FoundDemand
	ID            string            `json:"id"`
	WaitSeconds   float64           `json:"wait_seconds"`
	WaitedSeconds float64           `json:"waited_seconds,omitempty"`
	Decisions     []broker.Decision `json:"decisions"`
}

// whyAnswer is the body of GET /demand/{id}/why: every demand the id
// names (a YARN application id names each of its request priorities).
type whyAnswer struct {
	Query   string      `json:"query"`
	Demands []whyDemand `json:"demands"`
}

// whyForms says which ids /why understands, for its 400 and 404 answers.
const whyForms = "k8s/<pod uid>, k8s/<namespace>/<pod>, yarn/<application id>, " +
	"yarn/<application id>/<request priority> or a bare application_… id (percent-encode the slashes: k8s%2Fml%2Ftrainer-0)"

// parseDemandRef turns an id of the forms in whyForms into a store lookup.
func parseDemandRef(id string) (store.DemandLookup, error) {
	if strings.HasPrefix(id, "application_") {
		id = "yarn/" + id
	}
	src, rest, _ := strings.Cut(id, "/")
	if rest == "" || len(id) > 512 || strings.ContainsRune(id, 0) || !utf8.ValidString(id) {
		return store.DemandLookup{}, broker.Invalid("id", "must name a demand: %s; got %q", whyForms, id)
	}
	switch broker.Source(src) {
	case broker.SourceK8s:
		if strings.Contains(rest, "/") {
			return store.DemandLookup{Source: broker.SourceK8s, Name: rest}, nil
		}
		return store.DemandLookup{Source: broker.SourceK8s, Key: rest}, nil
	case broker.SourceYARN:
		if strings.Contains(rest, "/") {
			return store.DemandLookup{Source: broker.SourceYARN, Key: rest}, nil
		}
		return store.DemandLookup{Source: broker.SourceYARN, KeyPrefix: rest + "/"}, nil
	}
	return store.DemandLookup{}, broker.Invalid("id", "must start with k8s/ or yarn/ (or be an application_… id): %s; got %q", whyForms, id)
}

// whySlack widens the search for actions that served a demand to before
// it was first seen, for clocks a little apart.
const whySlack = time.Minute

// why serves a demand's history: what the ledger knows of it (pending or
// closed, with its wait) and every decision about it, oldest first. A
// tenant-admin sees only its own tenant's demand.
func (s *server) why(w http.ResponseWriter, r *http.Request) {
	if p := queryParams(r); p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil {
		s.fail(w, r, broker.Invalid("id", "is not a valid percent-encoded path segment: %s", err.Error()))
		return
	}
	ref, err := parseDemandRef(id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	found, err := s.st.FindDemand(r.Context(), ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tok, _ := principal(r)
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	now := s.cfg.Now()
	out := whyAnswer{Query: id, Demands: []whyDemand{}}
	hidden := 0
	for _, f := range found {
		if tok.Role == store.RoleTenantAdmin && f.Tenant != tok.Tenant {
			hidden++
			continue
		}
		did := f.ID()
		ds, err := s.st.DemandDecisions(r.Context(), did, f.FirstSeen.Add(-whySlack))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if ds, err = sc.filterDecisions(r.Context(), ds); err != nil {
			s.fail(w, r, err)
			return
		}
		f.WaitDetail = sc.redact(f.WaitDetail)
		wd := whyDemand{FoundDemand: f, ID: did, Decisions: items(ds)}
		if f.State == "closed" {
			wd.WaitedSeconds = seconds(f.Waited)
		} else {
			wd.WaitSeconds = seconds(f.Wait(now))
		}
		out.Demands = append(out.Demands, wd)
	}
	if len(out.Demands) == 0 {
		if hidden > 0 {
			writeErr(w, http.StatusForbidden, "forbidden", "",
				fmt.Sprintf("demand %s belongs to another tenant; a tenant-admin token of tenant %s sees only its own", id, tok.Tenant))
			return
		}
		writeErr(w, http.StatusNotFound, "not_found", "id",
			fmt.Sprintf("no demand %s in the ledger or its history (pending demand is listed at GET /api/v1/demand); ids look like %s", id, whyForms))
		return
	}
	writeJSON(w, http.StatusOK, out)
}
