package api

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func (s *server) listPools(w http.ResponseWriter, r *http.Request) {
	if p := queryParams(r); p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	ps, err := s.st.ListPools(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, list[store.PoolRecord]{Items: items(filterPools(sc, ps))})
}

func (s *server) getPool(w http.ResponseWriter, r *http.Request) {
	p, err := s.st.GetPool(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(p.Version))
	writeJSON(w, http.StatusOK, p)
}

// poolPatch is what an operator may change on a pool through the API; the
// rest comes from configuration and the cloud.
type poolPatch struct {
	MinNodes *int `json:"min_nodes"`
	MaxNodes *int `json:"max_nodes"`
}

func (s *server) patchPool(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	want, err := ifMatch(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var patch poolPatch
	if err := s.decode(w, r, &patch, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if patch.MinNodes == nil && patch.MaxNodes == nil {
		s.fail(w, r, broker.Invalid("body", "must set min_nodes, max_nodes or both"))
		return
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"min_nodes", patch.MinNodes}, {"max_nodes", patch.MaxNodes}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			s.fail(w, r, broker.Invalid(f.name, "must not be negative, got %d", *f.v))
			return
		}
		if err := atMost(f.name, int64(*f.v), maxNodes); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	cur, err := s.st.GetPool(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if cur.Version != want {
		s.fail(w, r, stale("pool "+name, cur.Version, want))
		return
	}
	if cur.Fleet() {
		field := "min_nodes"
		if patch.MinNodes == nil {
			field = "max_nodes"
		}
		s.fail(w, r, broker.Invalid(field, "pool %s is a fleet pool: its size is its hosts present, not bounds; change its hosts in the configuration", name))
		return
	}
	before := cur
	if patch.MinNodes != nil {
		cur.MinNodes = *patch.MinNodes
	}
	if patch.MaxNodes != nil {
		cur.MaxNodes = *patch.MaxNodes
	}
	updated, err := s.st.UpdatePool(r.Context(), cur)
	if errors.Is(err, broker.ErrConflict) {
		if now, gerr := s.st.GetPool(r.Context(), name); gerr == nil && now.Version != want {
			err = stale("pool "+name, now.Version, want)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(before, updated)
	w.Header().Set("ETag", etag(updated.Version))
	writeJSON(w, http.StatusOK, updated)
}

func (s *server) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, err := s.st.GetPolicy(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(p.Version))
	writeJSON(w, http.StatusOK, p)
}

// patchPolicy merges the body into the current policy: fields left out
// keep their value. The policy's version is 0 until it is first stored.
func (s *server) patchPolicy(w http.ResponseWriter, r *http.Request) {
	want, err := ifMatch(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cur, err := s.st.GetPolicy(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	next := cur
	if cur.ModelMaxGPUs != nil {
		next.ModelMaxGPUs = make(map[string]int, len(cur.ModelMaxGPUs))
		for k, v := range cur.ModelMaxGPUs {
			next.ModelMaxGPUs[k] = v
		}
	}
	if err := s.decode(w, r, &next, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := policyBounds(next); err != nil {
		s.fail(w, r, err)
		return
	}
	if next.Version != cur.Version && next.Version != want {
		s.fail(w, r, broker.Invalid("version", "must be left out or equal the If-Match version %d, got %d", want, next.Version))
		return
	}
	if cur.Version != want {
		s.fail(w, r, stale("the policy", cur.Version, want))
		return
	}
	next.Version = want
	updated, err := s.st.UpdatePolicy(r.Context(), next)
	if errors.Is(err, broker.ErrConflict) {
		if now, gerr := s.st.GetPolicy(r.Context()); gerr == nil && now.Version != want {
			err = stale("the policy", now.Version, want)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(cur, updated)
	w.Header().Set("ETag", etag(updated.Version))
	writeJSON(w, http.StatusOK, updated)
}

// policyBounds checks the upper limits the OpenAPI document states.
func policyBounds(p broker.Policy) error {
	if err := atMost("cluster_min_gpus", int64(p.ClusterMinGPUs), maxGPUs); err != nil {
		return err
	}
	if err := atMost("cluster_max_gpus", int64(p.ClusterMaxGPUs), maxGPUs); err != nil {
		return err
	}
	if len(p.ModelMaxGPUs) > maxListItems {
		return broker.Invalid("model_max_gpus", "must name at most %d models, got %d", maxListItems, len(p.ModelMaxGPUs))
	}
	for m, n := range p.ModelMaxGPUs {
		if len(m) > maxItemLength {
			return broker.Invalid("model_max_gpus", "model names must be at most %d bytes long, got %d", maxItemLength, len(m))
		}
		if err := atMost("model_max_gpus."+m, int64(n), maxGPUs); err != nil {
			return err
		}
	}
	return nil
}
