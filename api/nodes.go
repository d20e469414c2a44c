package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// nodeView is a node with its free GPUs and whether it is capacity on its way.
type nodeView struct {
	broker.Node
	FreeGPUs int  `json:"free_gpus"`
	InFlight bool `json:"in_flight"`
}

func viewNode(n broker.Node) nodeView {
	return nodeView{Node: n, FreeGPUs: n.FreeGPUs(), InFlight: n.Phase.InFlight()}
}

var ownerNames = []string{string(broker.OwnerYARN), string(broker.OwnerK8s), string(broker.OwnerNone)}

func phaseNames() []string {
	out := make([]string, len(broker.Phases))
	for i, p := range broker.Phases {
		out[i] = string(p)
	}
	return out
}

// Pages of GET /nodes: 500 nodes unless limit says otherwise (kubectl's
// default chunk size), at most store.MaxPageSize.
const (
	defaultNodePage = 500
	maxNodePage     = store.MaxPageSize
)

// listNodes pages the nodes by name. Every page of a read-model generation
// is cut from one node list (nodeList), so following next within a
// generation reads each node once; the cursor is the last name, so a
// page of a later generation goes on after it without repeating or
// skipping a node that stayed.
func (s *server) listNodes(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "owner", "phase", "pool", "healthy", "limit", "after")
	owner := p.oneOf("owner", ownerNames...)
	phase := p.oneOf("phase", phaseNames()...)
	pool := p.str("pool")
	healthy := p.oneOf("healthy", "true", "false")
	limit := nodePageLimit(p)
	after := p.str("after")
	if after != "" && p.err == nil {
		after, p.err = decodeNodeCursor(after)
	}
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	if pool != "" {
		// Every node's pool is a stored pool (a foreign key): another
		// name is a typo, not an empty pool.
		if _, err := s.st.GetPool(r.Context(), pool); errors.Is(err, broker.ErrNotFound) {
			s.fail(w, r, broker.Invalid("pool", "names no pool, got %q; GET /api/v1/pools lists them", pool))
			return
		} else if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	ns, err := s.nodeList(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// ns is sorted by name: the page starts after the cursor's name.
	i, _ := slices.BinarySearchFunc(ns, after, func(n broker.Node, name string) int { return strings.Compare(n.Name, name) })
	out := list[nodeView]{Items: []nodeView{}}
	for ; i < len(ns); i++ {
		n := ns[i]
		if n.Name <= after || (owner != "" && string(n.Owner) != owner) || (phase != "" && string(n.Phase) != phase) ||
			(pool != "" && n.Pool != pool) || (healthy != "" && strconv.FormatBool(nodeHealthy(n)) != healthy) {
			continue
		}
		if len(out.Items) == limit {
			out.Next = encodeNodeCursor(out.Items[limit-1].Name)
			break
		}
		out.Items = append(out.Items, viewNode(n))
	}
	out.Items = filterNodes(sc, out.Items)
	writeJSON(w, http.StatusOK, out)
}

// nodeHealthy is what healthy= filters on: the agent reports no XID or ECC
// failures and the node's side does not report it down (as the
// gpubroker_node_unhealthy metric).
func nodeHealthy(n broker.Node) bool { return n.Healthy && n.Down == "" }

// nodePageLimit reads the page size of /nodes.
func nodePageLimit(p *params) int {
	n, ok := p.int64("limit")
	if !ok {
		return defaultNodePage
	}
	if (n < 1 || n > maxNodePage) && p.err == nil {
		p.err = broker.Invalid("limit", "must be between 1 and %d nodes per page (default %d), got %d; follow next for more",
			maxNodePage, defaultNodePage, n)
	}
	return int(n)
}

// nodeCursorPrefix marks a /nodes cursor, so that another list's cursor
// or a made-up string is refused rather than read as a name.
const nodeCursorPrefix = "node:"

func encodeNodeCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(nodeCursorPrefix + name))
}

func decodeNodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	name, ok := strings.CutPrefix(string(b), nodeCursorPrefix)
	if err != nil || !ok || name == "" {
		return "", broker.Invalid("after", "is not the next cursor of a previous /nodes page; start again without after")
	}
	return name, nil
}

// nodeList is every node that is not gone, sorted by name: one store read
// per read-model generation (ReadModel.share), or per request without a
// read model.
func (s *server) nodeList(ctx context.Context) ([]broker.Node, error) {
	load := func(ctx context.Context) (any, error) {
		ns, err := s.st.ListNodes(ctx)
		if err != nil {
			return nil, err
		}
		// Byte order, as the cursor compares; the store's ORDER BY may
		// follow a collation.
		slices.SortFunc(ns, func(a, b broker.Node) int { return strings.Compare(a.Name, b.Name) })
		return ns, nil
	}
	var v any
	var err error
	if m := s.cfg.ReadModel; m != nil {
		v, err = m.share(ctx, "nodes", load)
	} else {
		v, err = load(ctx)
	}
	if err != nil {
		return nil, err
	}
	return v.([]broker.Node), nil
}

// nodeDetail is one node with its agent's latest report (null if none).
type nodeDetail struct {
	nodeView
	Report *broker.NodeReport `json:"report"`
}

func (s *server) getNode(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	n, err := s.st.GetNode(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	out := nodeDetail{nodeView: viewNode(filterNode(sc, n))}
	rep, err := s.st.LatestReport(r.Context(), name)
	switch {
	case err == nil:
		if rep.GPUs == nil {
			rep.GPUs = []broker.GPUReport{}
		}
		out.Report = &rep
	case !errors.Is(err, broker.ErrNotFound):
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// accepted is the answer to a manual node operation: journaled, not done.
type accepted struct {
	Node   string       `json:"node"`
	Action string       `json:"action"`
	To     broker.Owner `json:"to,omitempty"`
	Status string       `json:"status"`
}

// nodeAction checks the node exists, runs op and answers 202.
func (s *server) nodeAction(w http.ResponseWriter, r *http.Request, action string, to broker.Owner,
	op func(rt Runtime, node string) error) {
	name := chi.URLParam(r, "name")
	rt, ok := s.runtime(w)
	if !ok {
		return
	}
	n, err := s.st.GetNode(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := op(rt, name); err != nil {
		s.fail(w, r, err)
		return
	}
	tok, _ := principal(r)
	s.log.InfoContext(r.Context(), "manual node operation accepted", "node", name, "action", action,
		"to", string(to), "token_id", tok.ID, "token_name", tok.Name)
	out := accepted{Node: name, Action: action, To: to, Status: "accepted"}
	audited(r).values(viewNode(n), out)
	writeJSON(w, http.StatusAccepted, out)
}

func (s *server) cordon(w http.ResponseWriter, r *http.Request) {
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		s.fail(w, r, err)
		return
	}
	s.nodeAction(w, r, "cordon", "", func(rt Runtime, n string) error { return rt.Cordon(r.Context(), n) })
}

func (s *server) drain(w http.ResponseWriter, r *http.Request) {
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		s.fail(w, r, err)
		return
	}
	s.nodeAction(w, r, "drain", "", func(rt Runtime, n string) error { return rt.Drain(r.Context(), n) })
}

type transferBody struct {
	To broker.Owner `json:"to"`
}

func (s *server) transfer(w http.ResponseWriter, r *http.Request) {
	var b transferBody
	if err := s.decode(w, r, &b, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if b.To != broker.OwnerYARN && b.To != broker.OwnerK8s {
		s.fail(w, r, broker.Invalid("to", "must be %q or %q, got %q", broker.OwnerYARN, broker.OwnerK8s, b.To))
		return
	}
	n, err := s.st.GetNode(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if n.Owner == b.To {
		// The request is well formed; the node's state clashes with it.
		s.fail(w, r, fmt.Errorf("node %s already belongs to %s; transfer it to the other side: %w", n.Name, b.To, broker.ErrConflict))
		return
	}
	s.nodeAction(w, r, "transfer", b.To, func(rt Runtime, n string) error { return rt.Transfer(r.Context(), n, b.To) })
}

type protectionBody struct {
	Protected *bool `json:"protected"`
}

func (s *server) protect(w http.ResponseWriter, r *http.Request) {
	var b protectionBody
	if err := s.decode(w, r, &b, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if b.Protected == nil {
		s.fail(w, r, broker.Invalid("protected", "must be true or false"))
		return
	}
	name := chi.URLParam(r, "name")
	before, err := s.st.GetNode(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.st.SetNodeProtected(r.Context(), name, *b.Protected); err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := s.st.GetNode(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	audited(r).values(viewNode(before), viewNode(n))
	writeJSON(w, http.StatusOK, viewNode(n))
}

// report stores an agent's report as the node's latest. The node need not
// be known yet: an agent may report before the node registers anywhere.
func (s *server) report(w http.ResponseWriter, r *http.Request) {
	var rep broker.NodeReport
	if err := s.decode(w, r, &rep, false); err != nil {
		s.fail(w, r, err)
		return
	}
	name := chi.URLParam(r, "name")
	if !s.mayReportFor(w, r, name) {
		return
	}
	// IMPORTANT: freshness is the server's receive time; a report dated
	// ahead of the server is a wrong clock or a forgery, and would
	// otherwise win over every honest report until its date came.
	if now := s.cfg.Now(); rep.At.After(now.Add(broker.MaxReportSkew)) {
		s.fail(w, r, broker.Invalid("at", "is %s ahead of the server's clock (%s); at most %s ahead is accepted: fix the agent's clock (NTP)",
			rep.At.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339), broker.MaxReportSkew))
		return
	}
	rep.ReceivedAt = time.Time{} // the store stamps its own
	if rep.Node == "" {
		rep.Node = name // the path names the node; the body may leave it out
	}
	if rep.Node != name {
		s.fail(w, r, broker.Invalid("node", "must equal the node in the path (%q), got %q", name, rep.Node))
		return
	}
	latest, err := s.st.SaveReport(r.Context(), rep)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"node": name, "latest": latest})
}
