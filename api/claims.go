package api

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// defaultWeight is a tenant's fair-share weight when a create or update
// leaves it out, as in the configuration file.
const defaultWeight = 1

// queuePathRE matches a full YARN queue path: root, or root followed by
// dot-separated names of letters, digits, '-' and '_' (what queue names
// use in practice; the OpenAPI document states the same pattern, which
// every regular expression dialect reads alike).
var queuePathRE = regexp.MustCompile(`^root(\.[A-Za-z0-9_-]+)*$`)

// newClaims checks the queues next claims that cur did not: through the
// API a claim is an exact path from root (root.a.b), never a leaf name
// that would take every queue of that name anywhere in the tree. Claims a
// tenant already holds (a leaf name from the configuration file) may stay.
func newClaims(cur, next broker.Tenant) error {
	for i, q := range next.YARNQueues {
		if slices.Contains(cur.YARNQueues, q) {
			continue
		}
		if !queuePathRE.MatchString(q) {
			return broker.Invalid("yarn_queues["+strconv.Itoa(i)+"]",
				"must be a full queue path from root such as root.%s, got %q: a claim is an exact path, not a leaf name", leafOf(q), q)
		}
	}
	return nil
}

func leafOf(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.LastIndexByte(q, '.'); i >= 0 {
		q = q[i+1:]
	}
	if q == "" || q == "root" {
		return "team"
	}
	return q
}

// queueCapture is a known queue that a tenant's claims would take over.
type queueCapture struct {
	// Queue is the queue path (from pending demand or another tenant's
	// claim).
	Queue string `json:"queue"`
	// From is the tenant it belongs to now.
	From string `json:"from"`
}

// claimReport says what a tenant's queue claims take: Captures, the known
// queues that would move to it from other tenants; ParentClaims, its
// claims that are parents of other queues (root, or a path with known
// queues under it), which also take every queue under them that no tenant
// claims more exactly, now or later.
type claimReport struct {
	Captures     []queueCapture `json:"captures,omitempty"`
	ParentClaims []string       `json:"parent_claims,omitempty"`
}

// tenantAnswer is the answer of a tenant create or update: the tenant as
// stored, and for an admin what its queue claims take.
type tenantAnswer struct {
	broker.Tenant
	claimReport
}

// tenantDryRun is the answer of a create or update with dry_run=true.
type tenantDryRun struct {
	Tenant broker.Tenant `json:"tenant"`
	claimReport
}

// dryRunAnswer is t as the store would answer it (lists empty, not null)
// with what its claims take.
func dryRunAnswer(t broker.Tenant, c claimReport) tenantDryRun {
	for _, l := range []*[]string{&t.YARNQueues, &t.Namespaces, &t.Admins} {
		if *l == nil {
			*l = []string{}
		}
	}
	return tenantDryRun{Tenant: t, claimReport: c}
}

// claimReport computes what t's queue claims would take from the other
// tenants, against the stored tenants and the queues of pending demand.
// Only an admin gets it: it names other tenants, and only an admin may
// change queue claims.
func (s *server) claimReport(r *http.Request, t broker.Tenant) (claimReport, error) {
	var out claimReport
	if tok, _ := principal(r); tok.Role != store.RoleAdmin || len(t.YARNQueues) == 0 {
		return out, nil
	}
	ts, err := s.st.ListTenants(r.Context())
	if err != nil {
		return out, err
	}
	known, err := s.st.DemandQueues(r.Context())
	if err != nil {
		return out, err
	}
	candidates := map[string]bool{}
	for _, q := range known {
		candidates[q] = true
	}
	others := make([]broker.Tenant, 0, len(ts)+1)
	for _, o := range ts {
		for _, q := range o.YARNQueues {
			candidates[q] = true
		}
		if o.Name != t.Name {
			others = append(others, o)
		}
	}
	before := broker.NewTenantIndex(ts)
	after := broker.NewTenantIndex(append(others, t))
	qs := make([]string, 0, len(candidates))
	for q := range candidates {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	for _, q := range qs {
		a, ok := after.QueueTenant(q)
		if !ok || a.Name != t.Name {
			continue
		}
		b, ok := before.QueueTenant(q)
		if !ok || b.Name == t.Name {
			continue
		}
		out.Captures = append(out.Captures, queueCapture{Queue: q, From: b.Name})
	}
	for _, c := range sorted(t.YARNQueues) {
		parent := c == "root"
		for _, q := range qs {
			if parent {
				break
			}
			parent = strings.HasPrefix(q, c+".")
		}
		if parent {
			out.ParentClaims = append(out.ParentClaims, c)
		}
	}
	return out, nil
}
