package api

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

// readScopes is, for every read route, what a tenant-admin token sees
// there. Admins and viewers see everything; agents read nothing. A
// tenant-admin reading a route missing here is refused (scopeGuard), and a
// test walks the router so that every read route has an entry and is
// checked: a new route cannot leak other tenants by omission.
//
// The rule: a tenant-admin sees its own tenant's rows (tenant, demand,
// decisions and ops that serve its demand, its workloads on nodes) and the
// cluster's aggregate capacity (sides, pools, nodes and their GPU counts,
// which every tenant shares and needs to judge its waits), never another
// tenant's name, namespaces, queues, demand ids or workloads: where a row
// of its own mentions them (a wait detail, a preemption's victims), they
// read "another tenant".
var readScopes = map[string]string{
	"GET /healthz":             "public, no token: no tenant data",
	"GET /readyz":              "public, no token: store and source state, no tenant data",
	"GET /metrics":             "public, no token, for Prometheus: names every tenant (pending demand by tenant); expose it to the monitoring system only",
	"GET /*":                   "public: the dashboard's static assets; the data it shows comes from the scoped routes",
	"GET /api/v1/openapi.json": "public: the API document, no tenant data",
	"GET /api/v1/whoami":       "the token itself",

	"GET /api/v1/tenants":        "its own tenant only",
	"GET /api/v1/tenants/{name}": "its own tenant; any other name is 403 (whether or not it exists)",
	"GET /api/v1/pools":          "every pool: pools are shared capacity (backoff reasons redacted)",
	"GET /api/v1/pools/{name}":   "every pool: pools are shared capacity",
	"GET /api/v1/policy":         "the policy: cluster-wide, no tenant data",

	"GET /api/v1/demand":          "its own tenant's demand, pending and closed; tenant=<other> is 403",
	"GET /api/v1/demand/{id}/why": "its own tenant's demand; another tenant's is 403",

	"GET /api/v1/nodes":        "every node with its GPU counts (shared capacity); work lists only its own tenant's workloads",
	"GET /api/v1/nodes/{name}": "every node with its GPU counts and agent report; work lists only its own tenant's workloads",

	"GET /api/v1/decisions": "decisions about its own tenant's demand (waits, and actions serving it); cluster housekeeping (scale-down, kept, conflicts) is not shown; tenant=<other> is 403; pages may hold fewer than limit items, follow next",
	"GET /api/v1/ops":       "ops that serve its own tenant's demand; pages may hold fewer than limit items, follow next",
	"POST /api/v1/plan":     "nothing: admins only (routeRoles, planRule); it reads its demand's decisions at GET /decisions and GET /demand/{id}/why",

	"GET /api/v1/capacity":        "sides and pools (aggregate, shared); demand groups and pending_gpus of its own tenant only",
	"GET /api/v1/capacity/series": "capacity by side over time (aggregate, pending GPUs of every tenant summed, no names); the demand series of its own tenant only",

	"GET /api/v1/audit": "the audit entries of its own tenant",
}

// scopeGuard refuses a tenant-admin a read route that has no entry in
// readScopes: unscoped answers would show every tenant.
func (s *server) scopeGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := principal(r)
		route := r.Method + " " + routePattern(r)
		if tok.Role == store.RoleTenantAdmin && r.Method == http.MethodGet && readScopes[route] == "" {
			writeErr(w, http.StatusForbidden, "forbidden", "",
				"this route has no tenant scope yet, so a tenant-admin token may not read it; use an admin or viewer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// anotherTenant replaces another tenant's names in what a tenant-admin
// reads; anotherDemand replaces its demand ids.
const (
	anotherTenant = "another tenant"
	anotherDemand = "another tenant's demand"
)

// scope is what one request may see. The zero scope (admins, viewers)
// sees everything and every filter returns its input.
type scope struct {
	// tenant is the tenant-admin's tenant; "" sees everything.
	tenant string
	// words are the other tenants' names, namespaces and queues, longest
	// first, replaced in free text.
	words []string
	st    Store
}

// scopeFor returns the scope of a request's token. For a tenant-admin it
// reads the tenants, to know which names are others'.
func (s *server) scopeFor(r *http.Request) (*scope, error) {
	tok, _ := principal(r)
	if tok.Role != store.RoleTenantAdmin {
		return &scope{}, nil
	}
	ts, err := s.st.ListTenants(r.Context())
	if err != nil {
		return nil, err
	}
	return newScope(tok.Tenant, ts, s.st), nil
}

func newScope(tenant string, ts []broker.Tenant, st Store) *scope {
	own := map[string]bool{tenant: true}
	for _, t := range ts {
		if t.Name == tenant {
			for _, n := range slices.Concat(t.Namespaces, t.YARNQueues) {
				own[n] = true
			}
		}
	}
	seen := map[string]bool{}
	var words []string
	for _, t := range ts {
		if t.Name == tenant {
			continue
		}
		for _, n := range slices.Concat([]string{t.Name}, t.Namespaces, t.YARNQueues) {
			if n != "" && !own[n] && !seen[n] {
				seen[n] = true
				words = append(words, n)
			}
		}
	}
	sort.Slice(words, func(i, j int) bool {
		return len(words[i]) > len(words[j]) || len(words[i]) == len(words[j]) && words[i] < words[j]
	})
	return &scope{tenant: tenant, words: words, st: st}
}

// all reports whether the scope sees everything.
func (sc *scope) all() bool { return sc.tenant == "" }

// forbiddenError is a read of another tenant's data (403).
type forbiddenError struct{ field, msg string }

func (e *forbiddenError) Error() string { return e.msg }

// tenantParam checks a tenant query parameter: a tenant-admin may name
// only its own tenant, and gets it when it names none.
func (sc *scope) tenantParam(v string) (string, error) {
	if sc.all() || v == sc.tenant {
		return v, nil
	}
	if v == "" {
		return sc.tenant, nil
	}
	return "", &forbiddenError{field: "tenant", msg: "a tenant-admin token of tenant " + sc.tenant +
		" sees only its own tenant; leave tenant out or set it to " + sc.tenant}
}

// mayRead checks a read of one tenant by name.
func (sc *scope) mayRead(tenant string) error {
	if sc.all() || tenant == sc.tenant {
		return nil
	}
	return &forbiddenError{msg: "a tenant-admin token of tenant " + sc.tenant + " may read only tenant " + sc.tenant}
}

// nameChar reports whether c continues a tenant, namespace or queue name,
// so that "ml" is not found inside "ml-team" or "html".
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// redact replaces other tenants' names, namespaces and queues in text.
func (sc *scope) redact(text string) string {
	if sc.all() || text == "" {
		return text
	}
	for _, w := range sc.words {
		if !strings.Contains(text, w) {
			continue
		}
		var b strings.Builder
		for i := 0; i < len(text); {
			j := strings.Index(text[i:], w)
			if j < 0 {
				b.WriteString(text[i:])
				break
			}
			j += i
			end := j + len(w)
			if (j > 0 && nameChar(text[j-1])) || (end < len(text) && nameChar(text[end])) {
				b.WriteString(text[i : j+1])
				i = j + 1
				continue
			}
			b.WriteString(text[i:j])
			b.WriteString(anotherTenant)
			i = end
			if i < len(text) && text[i] == '/' {
				// namespace/pod: the pod's name is the other tenant's too.
				i++
				for i < len(text) && (nameChar(text[i]) || text[i] == '.') {
					i++
				}
			}
		}
		text = b.String()
	}
	return text
}

// redactText is redact that also replaces the ids of other tenants'
// demand that tenants resolved.
func (sc *scope) redactText(text string, tenants map[string]string) string {
	if sc.all() || text == "" {
		return text
	}
	for id, t := range tenants {
		if t != sc.tenant {
			text = strings.ReplaceAll(text, id, anotherDemand)
		}
	}
	return sc.redact(text)
}

// demandOf resolves the tenants of demand ids (nil for a full scope).
func (sc *scope) demandOf(ctx context.Context, ids []string) (map[string]string, error) {
	if sc.all() || len(ids) == 0 {
		return map[string]string{}, nil
	}
	slices.Sort(ids)
	return sc.st.DemandTenants(ctx, slices.Compact(ids))
}

// serves reports whether some id is the scope's tenant's demand.
func (sc *scope) serves(tenants map[string]string, ids ...string) bool {
	for _, id := range ids {
		if id != "" && tenants[id] == sc.tenant {
			return true
		}
	}
	return false
}

// redactIDs replaces the ids of demand that is not the scope's tenant's.
func (sc *scope) redactIDs(tenants map[string]string, ids []string) []string {
	if sc.all() || ids == nil {
		return ids
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if tenants[id] != sc.tenant {
			out[i] = anotherDemand
		}
	}
	return out
}

// redactJSON rewrites structured detail (a decision's action or wait, an
// op's step data) for the scope: an object naming another tenant keeps only
// its numbers and flags, another tenant's demand ids and names are
// replaced. Detail that does not decode is dropped.
func (sc *scope) redactJSON(raw json.RawMessage, tenants map[string]string) json.RawMessage {
	if sc.all() || len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	b, err := json.Marshal(sc.redactValue(v, tenants))
	if err != nil {
		return nil
	}
	return b
}

func (sc *scope) redactValue(v any, tenants map[string]string) any {
	switch x := v.(type) {
	case string:
		if t, ok := tenants[x]; ok && t != sc.tenant {
			return anotherDemand
		}
		return sc.redactText(x, tenants)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sc.redactValue(e, tenants)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		if t, ok := x["tenant"].(string); ok && t != "" && t != sc.tenant {
			for k, e := range x {
				switch e.(type) {
				case json.Number, bool:
					out[k] = e
				}
			}
			out["tenant"] = anotherTenant
			return out
		}
		for k, e := range x {
			out[sc.redact(k)] = sc.redactValue(e, tenants)
		}
		return out
	}
	return v
}

// filterTenants keeps the scope's own tenant.
func filterTenants(sc *scope, ts []broker.Tenant) []broker.Tenant {
	if sc.all() {
		return ts
	}
	return slices.DeleteFunc(slices.Clone(ts), func(t broker.Tenant) bool { return t.Name != sc.tenant })
}

// filterDemandRows keeps the scope's tenant's pending demand and redacts
// its wait details (a quota wait may name the tenant that holds the room).
func filterDemandRows(sc *scope, rows []store.DemandRow) []store.DemandRow {
	if sc.all() {
		return rows
	}
	out := make([]store.DemandRow, 0, len(rows))
	for _, d := range rows {
		if d.Tenant == sc.tenant {
			d.WaitDetail = sc.redact(d.WaitDetail)
			out = append(out, d)
		}
	}
	return out
}

// filterClosed keeps the scope's tenant's closed demand.
func filterClosed(sc *scope, rows []store.ClosedDemand) []store.ClosedDemand {
	if sc.all() {
		return rows
	}
	return slices.DeleteFunc(slices.Clone(rows), func(c store.ClosedDemand) bool { return c.Tenant != sc.tenant })
}

// filterCapacity keeps the aggregate sides and pools and the scope's
// tenant's demand groups; pending_gpus is the sum of what remains. The
// input (possibly a cached summary) is not modified.
func filterCapacity(sc *scope, c capacitySummary) capacitySummary {
	if sc.all() {
		return c
	}
	out := c
	out.Pools = make([]poolCapacity, len(c.Pools))
	for i, p := range c.Pools {
		p.GPUsBySide, p.NodesBySide = maps.Clone(p.GPUsBySide), maps.Clone(p.NodesBySide)
		p.BackoffReason = sc.redact(p.BackoffReason)
		out.Pools[i] = p
	}
	out.Demand, out.PendingGPUs = []demandGroup{}, 0
	for _, g := range c.Demand {
		if g.Tenant == sc.tenant {
			out.Demand = append(out.Demand, g)
			out.PendingGPUs += g.GPUs
		}
	}
	return out
}

// filterPools redacts pools' backoff reasons.
func filterPools(sc *scope, ps []store.PoolRecord) []store.PoolRecord {
	if sc.all() {
		return ps
	}
	out := slices.Clone(ps)
	for i := range out {
		out[i].BackoffReason = sc.redact(out[i].BackoffReason)
	}
	return out
}

// filterDemandPoints keeps the scope's tenant's demand series.
func filterDemandPoints(sc *scope, ps []store.DemandPoint) []store.DemandPoint {
	if sc.all() {
		return ps
	}
	return slices.DeleteFunc(slices.Clone(ps), func(p store.DemandPoint) bool { return p.Tenant != sc.tenant })
}

// filterNode keeps a node's shared facts (GPU counts, phase, health) and
// only the scope's tenant's workloads; gpus_allocated still counts all.
func filterNode(sc *scope, n broker.Node) broker.Node {
	if sc.all() {
		return n
	}
	var work []broker.Workload
	for _, w := range n.Work {
		if w.Tenant == sc.tenant {
			work = append(work, w)
		}
	}
	n.Work = work
	if n.Labels != nil {
		labels := make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			labels[sc.redact(k)] = sc.redact(v)
		}
		n.Labels = labels
	}
	if n.Taints != nil {
		n.Taints = slices.Clone(n.Taints)
		for i := range n.Taints {
			n.Taints[i].Key, n.Taints[i].Value = sc.redact(n.Taints[i].Key), sc.redact(n.Taints[i].Value)
		}
	}
	n.HealthReason, n.Down = sc.redact(n.HealthReason), sc.redact(n.Down)
	return n
}

// filterNodes applies filterNode to every node.
func filterNodes(sc *scope, ns []nodeView) []nodeView {
	if sc.all() {
		return ns
	}
	out := make([]nodeView, len(ns))
	for i, n := range ns {
		n.Node = filterNode(sc, n.Node)
		out[i] = n
	}
	return out
}

// decisionIDs lists the demand a decision is about: its demand and, for
// an action, every demand it serves.
func decisionIDs(d broker.Decision) []string {
	ids := []string{d.Demand}
	var a struct {
		Serves []string `json:"serves"`
	}
	if len(d.Detail) > 0 && json.Unmarshal(d.Detail, &a) == nil {
		ids = append(ids, a.Serves...)
	}
	return ids
}

// filterDecisions keeps the decisions about the scope's tenant's demand,
// redacted.
func (sc *scope) filterDecisions(ctx context.Context, ds []broker.Decision) ([]broker.Decision, error) {
	if sc.all() {
		return ds, nil
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, decisionIDs(d)...)
	}
	tenants, err := sc.demandOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := []broker.Decision{}
	for _, d := range ds {
		if d.Tenant != sc.tenant && (d.Tenant != "" || !sc.serves(tenants, decisionIDs(d)...)) {
			continue
		}
		if t, ok := tenants[d.Demand]; ok && t != sc.tenant {
			d.Demand = anotherDemand
		}
		d.Reason, d.Detail = sc.redactText(d.Reason, tenants), sc.redactJSON(d.Detail, tenants)
		out = append(out, d)
	}
	return out, nil
}

// filterOps keeps the ops that serve the scope's tenant's demand, redacted.
func (sc *scope) filterOps(ctx context.Context, ops []broker.Op) ([]broker.Op, error) {
	if sc.all() {
		return ops, nil
	}
	var ids []string
	for _, o := range ops {
		ids = append(ids, o.Serves...)
	}
	tenants, err := sc.demandOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := []broker.Op{}
	for _, o := range ops {
		if !sc.serves(tenants, o.Serves...) {
			continue
		}
		o.Serves = sc.redactIDs(tenants, o.Serves)
		o.Reason, o.LastError = sc.redactText(o.Reason, tenants), sc.redactText(o.LastError, tenants)
		o.Data = sc.redactJSON(o.Data, tenants)
		out = append(out, o)
	}
	return out, nil
}

// scoped returns the request's scope, or answers the error and returns
// false.
func (s *server) scoped(w http.ResponseWriter, r *http.Request) (*scope, bool) {
	sc, err := s.scopeFor(r)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return sc, true
}

// routeRoles is the role table of every authenticated route: which roles
// the router lets through (allow) and why. TestRouteRoles walks the router
// and calls every route with a token of each role, so a route missing here,
// or let through for a role this table does not name, fails. What a
// tenant-admin then sees of a read is readScopes; which fields of a tenant
// it may change is tenantFieldRules.
var routeRoles = map[string]struct {
	roles []store.Role
	why   string
}{
	"GET /api/v1/whoami":         {readers, "the token itself"},
	"GET /api/v1/tenants":        {readers, "scoped by readScopes"},
	"GET /api/v1/tenants/{name}": {readers, "scoped by readScopes"},
	"POST /api/v1/tenants":       {admins, "a new tenant claims queues and namespaces and a share of the cluster"},
	"PUT /api/v1/tenants/{name}": {editors, "a tenant-admin only on its own tenant, and only the fields tenantFieldRules gives it"},
	"DELETE /api/v1/tenants/{name}": {admins,
		"deleting a tenant frees its queues and namespaces for others to claim"},
	"GET /api/v1/pools":          {readers, "scoped by readScopes"},
	"GET /api/v1/pools/{name}":   {readers, "scoped by readScopes"},
	"PATCH /api/v1/pools/{name}": {admins, "pool bounds are capacity every tenant shares"},
	"GET /api/v1/policy":         {readers, "cluster-wide, no tenant data"},
	"PATCH /api/v1/policy":       {admins, "the policy rules every tenant"},
	"GET /api/v1/demand":         {readers, "scoped by readScopes"},
	"GET /api/v1/demand/{id}/why": {readers,
		"scoped by readScopes; it is where a tenant-admin or viewer learns why its demand waits"},
	"GET /api/v1/nodes":                   {readers, "scoped by readScopes"},
	"GET /api/v1/nodes/{name}":            {readers, "scoped by readScopes"},
	"POST /api/v1/nodes/{name}/cordon":    {admins, "a node is capacity every tenant shares"},
	"POST /api/v1/nodes/{name}/drain":     {admins, "a drain stops every tenant's work on the node"},
	"POST /api/v1/nodes/{name}/transfer":  {admins, "moves capacity between the sides"},
	"PUT /api/v1/nodes/{name}/protection": {admins, "protection keeps a node from every tenant's reclaim"},
	"POST /api/v1/nodes/{name}/report":    {agents, "node telemetry; an agent credential reports only for its nodes"},
	"GET /api/v1/decisions":               {readers, "scoped by readScopes"},
	"GET /api/v1/ops":                     {readers, "scoped by readScopes"},
	"POST /api/v1/plan":                   {admins, planRule},
	"GET /api/v1/capacity":                {readers, "scoped by readScopes"},
	"GET /api/v1/capacity/series":         {readers, "scoped by readScopes"},
	"GET /api/v1/audit":                   {editors, "a tenant-admin reads its own tenant's entries (readScopes)"},
}

// planRule is why POST /plan is the admin's: each call is a live
// observation of the ResourceManager (per-app calls, tens of MB at scale),
// Kubernetes and the cloud API, whose rate limits the tick loop needs.
const planRule = "a dry run observes the ResourceManager, Kubernetes and the cloud API live; " +
	"it is single-flight and observes at most once per tick period"

// planRefusal is the 403 of POST /plan for the other roles.
const planRefusal = "POST /api/v1/plan is for admins only: " + planRule +
	". Read what the broker decided and why with GET /api/v1/decisions and GET /api/v1/demand/{id}/why"

// Who may change a field of a tenant.
const (
	byAdmin  = "admin"
	byServer = "server"
	byNobody = "nobody"
)

// tenantFieldRules is, for every field of a tenant, who may change it and
// the rule why. A tenant-admin may change only what orders demand inside
// its own tenant; every field below ranks or sizes the tenant against the
// others, or decides whose work it is, so none is the tenant-admin's:
// updateTenant answers a tenant-admin's change of any of them 403 naming
// the field and this rule. A field missing here is treated as admin-only,
// and a test walks broker.Tenant's JSON fields so that none is missing.
var tenantFieldRules = map[string]struct{ who, rule string }{
	"name":          {byNobody, "the path names the tenant; create another tenant instead"},
	"base_priority": {byAdmin, "it ranks the tenant's YARN demand against every other tenant's"},
	"guaranteed_gpus": {byAdmin, "demand within a guarantee is admitted before all other demand whatever its priority, " +
		"so raising it outranks every tenant"},
	"max_gpus": {byAdmin, "it bounds how much of the shared cluster the tenant may take from the others"},
	"weight":   {byAdmin, "it sets the tenant's fair share against the other tenants between guaranteed and max"},
	"yarn_queues": {byAdmin, "a queue claim charges that queue's apps to the tenant and shows it their apps; " +
		"a parent path (root, root.x) also takes every queue under it that no tenant claims more exactly"},
	"namespaces": {byAdmin, "a namespace claim charges that namespace's pods to the tenant and shows it their workloads"},
	"admins":     {byAdmin, "it says who administers the tenant"},
	"evict_grace": {byAdmin, "it is how long the tenant's preempted YARN containers keep their GPUs while " +
		"another tenant's higher-priority demand waits for them"},
	"version": {byServer, "the server counts versions; send the one you read in If-Match"},
}

// tenantFieldChange names the first field (in JSON name order) that a
// tenant-admin changed from cur to next but may not, with its rule; ""
// when it changed none. Lists compare as sets.
func tenantFieldChange(cur, next broker.Tenant) (field, rule string) {
	a, b := tenantFieldsJSON(cur), tenantFieldsJSON(next)
	names := slices.Sorted(maps.Keys(b))
	for _, name := range names {
		if bytes.Equal(a[name], b[name]) {
			continue
		}
		r, ok := tenantFieldRules[name]
		if !ok {
			r.rule = "the field has no rule in the API's role table, so only an admin may change it"
		}
		if r.who == byServer {
			continue // the handler checks version against If-Match
		}
		return name, r.rule
	}
	return "", ""
}

// tenantFieldsJSON is t's JSON fields, lists sorted and nil lists empty.
func tenantFieldsJSON(t broker.Tenant) map[string]json.RawMessage {
	for _, l := range []*[]string{&t.YARNQueues, &t.Namespaces, &t.Admins} {
		*l = sorted(*l)
		if *l == nil {
			*l = []string{}
		}
	}
	b, _ := json.Marshal(t)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return m
}
