// Package api is gpubroker's HTTP interface: the JSON REST API under
// /api/v1 for queue admins and operators, the embedded capacity dashboard,
// the OpenAPI 3 document, /healthz, /readyz and /metrics.
//
// Everything under /api/v1 except the OpenAPI document needs a bearer token
// (created with "gpubroker token create"). Roles: admin may do everything;
// tenant-admin reads its own tenant and the shared capacity and edits only
// its own tenant (queues, namespaces and quotas, not its base priority or
// admins); viewer reads everything; agent only posts node reports.
//
// What a tenant-admin reads (scope.go; readScopes decides every read route
// and a read route without a decision is refused to it): its own tenant's
// rows — its tenant, its demand pending and closed, the decisions, ops and
// plan actions that serve its demand, its workloads on nodes, its demand
// groups in /capacity and /capacity/series, its audit entries — and the
// aggregate capacity every tenant shares: sides, pools, nodes with their
// GPU counts and health, capacity samples (GPUs pending of all tenants
// summed). Aggregates are shown because a tenant's waits ("pool at max",
// "in flight") are only understandable against the cluster's capacity, and
// node and pool names are infrastructure, not tenant data. Other tenants'
// names, namespaces, queues and demand ids never appear: where its own row
// mentions them (a quota wait, a preemption's victims) they read "another
// tenant" and "another tenant's demand". Naming another tenant in a
// tenant= parameter or a path is 403. Filtering happens after any cache
// (the scope filters copy, never modify, what they are given). /metrics is
// public and names every tenant: expose it to the monitoring system only.
//
// A missing or unknown token is 401 with
// WWW-Authenticate: Bearer; a known token with the wrong role or tenant is
// 403. Tokens are never logged: requests are logged with the token's id and
// name.
//
// Errors are JSON: {"error":{"code":"invalid","field":"max_gpus","message":"..."}}.
// Versioned objects (tenants, pools, the policy) carry their version as a
// strong ETag ("3"). Updates must send it back in If-Match: without it the
// answer is 428 Precondition Required, with a version that is no longer
// current it is 412 Precondition Failed, so a concurrent edit is never
// silently lost; its error.changed_by names who made the change when the
// assembly gives the API an audit trail (Config.LastChange). 409 Conflict
// is kept for clashes with other objects (a queue already mapped to another
// tenant, a tenant still named by demand).
//
// GET /api/v1/demand/{id}/why is a demand's history (a tenant-admin's own
// tenant only); "gpubroker why" prints it.
//
// The package reaches the tick loop only through the Runtime interface,
// defined here where it is used.
//
// Serving it (what "gpubroker serve" and "gpubroker demo" do):
//
//	reg := prometheus.NewRegistry()
//	h, err := api.New(api.Config{Store: st, Runtime: loop, Logger: log, Registry: reg})
//	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: h, ReadHeaderTimeout: 5 * time.Second}
//
// The dashboard is at the root; open it as http://HOST:PORT/#token=<token>
// (the fragment never reaches the server; the page moves the token into
// the tab's sessionStorage) or paste a token into its sign-in box.
package api
