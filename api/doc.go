// Package api is gpubroker's HTTP interface: the JSON REST API under
// /api/v1 for queue admins and operators, the embedded capacity dashboard,
// the OpenAPI 3 document, /healthz, /readyz and /metrics.
//
// Everything under /api/v1 except the OpenAPI document needs a bearer token
// (created with "gpubroker token create"). Roles: admin may do everything;
// tenant-admin reads everything and edits only its own tenant (queues,
// namespaces and quotas, not its base priority or admins); viewer reads;
// agent only posts node reports. A missing or unknown token is 401 with
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
