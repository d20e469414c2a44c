package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// Runtime is what the API needs from the broker's tick loop. The loop's
// implementation lives elsewhere; tests fill this with fakes.
type Runtime interface {
	// DryRun plans against fresh observations without acting.
	DryRun(ctx context.Context) (broker.Plan, error)
	// Status says whether this replica leads and how fresh its sources are.
	Status() engine.RuntimeStatus
	// Cordon, Drain and Transfer journal a manual operation on a node and
	// return once it is accepted; the executor carries it out.
	Cordon(ctx context.Context, node string) error
	Drain(ctx context.Context, node string) error
	Transfer(ctx context.Context, node string, to broker.Owner) error
}

// Config configures the API handler.
type Config struct {
	// Store is the database (required).
	Store Store
	// Runtime is the tick loop; nil serves reads only (plan and node
	// actions answer 503).
	Runtime Runtime
	// Logger receives one line per request (default: discard).
	Logger *slog.Logger
	// Registry receives the API's metrics and is served at /metrics
	// (default: a new registry of the handler's own; never the global one).
	Registry *prometheus.Registry
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// LastChange names who last changed a tenant, pool or the policy: a
	// 412 carries it as error.changed_by. Default: the audit trail's newest
	// successful write to it.
	LastChange LastChangeFunc
	// AuthCacheTTL is how long an authenticated token is trusted without
	// asking the database again (default 10s; negative disables caching).
	// A revoked token stops working within this time.
	AuthCacheTTL time.Duration
	// CapacityCacheTTL is how long a computed /capacity summary is served
	// again (default 1s; negative disables caching).
	CapacityCacheTTL time.Duration
	// ReadyTimeout bounds the store ping of /readyz (default 2s).
	ReadyTimeout time.Duration
	// SeriesWindow is the default window of /capacity/series (default 1h).
	SeriesWindow time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// PlanInterval is the least time between two live observations of
	// POST /plan: the tick period (default 5s). A call within it gets the
	// last observation's plan, saying when it was observed.
	PlanInterval time.Duration
	// ReadModel, when set, serves /capacity, /demand and /nodes from
	// memory with ETags (see ReadModel); nil: every read asks the store.
	ReadModel *ReadModel
	// AgentAnyNode lets a client certificate with a wildcard DNS name
	// (*.ec2.internal) report for every node it matches
	// (api.tls.agent_any_node). Off by default: a certificate reports only
	// for the node its common name or DNS names name exactly, so one
	// stolen certificate cannot condemn the fleet.
	AgentAnyNode bool
	// AgentReviewer, when set, authenticates agents by a credential their
	// platform issued for their node (a Kubernetes service-account token
	// bound to the agent's pod): a bearer token that is not a gpubroker
	// token is reviewed, and authenticates role agent for that node only.
	AgentReviewer AgentReviewer
}

// AgentReviewer says which node a platform-issued agent credential belongs
// to. It answers broker.ErrNotFound for a credential that authenticates
// nobody.
type AgentReviewer interface {
	ReviewAgent(ctx context.Context, token string) (node, who string, err error)
}

// DefaultAuthCacheTTL is how long a checked token is trusted by default:
// a revoked token stops working within this time.
const DefaultAuthCacheTTL = 10 * time.Second

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return broker.Invalid("store", "must be set")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.LastChange == nil {
		c.LastChange = auditLastChange(c.Store)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxBodyBytes < 0 {
		return broker.Invalid("max_body_bytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	if c.AuthCacheTTL == 0 {
		c.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if c.CapacityCacheTTL == 0 {
		c.CapacityCacheTTL = time.Second
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 2 * time.Second
	}
	if c.ReadyTimeout < 0 {
		return broker.Invalid("ready_timeout", "must be positive, got %s", c.ReadyTimeout)
	}
	if c.SeriesWindow == 0 {
		c.SeriesWindow = time.Hour
	}
	if c.SeriesWindow < 0 || c.SeriesWindow > maxSeriesWindow {
		return broker.Invalid("series_window", "must be between 0 and %s, got %s", maxSeriesWindow, c.SeriesWindow)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.PlanInterval == 0 {
		c.PlanInterval = 5 * time.Second
	}
	if c.PlanInterval < 0 {
		return broker.Invalid("plan_interval", "must be positive, got %s", c.PlanInterval)
	}
	return nil
}

type server struct {
	cfg     Config
	st      Store
	rt      Runtime
	log     *slog.Logger
	auth    *authCache
	metrics *metrics
	// ops is the gpubroker_ops gauge, refreshed on each scrape.
	ops *opsGauge
	// state is the broker's state as metrics, refreshed on each scrape.
	state *stateMetrics
	// capCache holds the last capacity summary (see capacityCache).
	capCache capacityCache
	// planGate makes POST /plan single-flight, once per PlanInterval.
	planGate *planGate
}

// New returns the HTTP handler serving the API, the dashboard, /healthz,
// /readyz and /metrics.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, st: cfg.Store, rt: cfg.Runtime, log: cfg.Logger, metrics: m,
		auth: newAuthCache(cfg.AuthCacheTTL, cfg.Now), ops: newOpsGauge(), state: &stateMetrics{},
		planGate: &planGate{interval: cfg.PlanInterval, now: cfg.Now}}
	if err := cfg.Registry.Register(s.ops.g); err != nil {
		return nil, fmt.Errorf("register ops metric: %w", err)
	}
	if err := cfg.Registry.Register(s.state); err != nil {
		return nil, fmt.Errorf("register state metrics: %w", err)
	}
	dash, err := dashboardHandler()
	if err != nil {
		return nil, err
	}
	return s.routes(dash), nil
}

// Role sets used by the routes.
var (
	readers = []store.Role{store.RoleAdmin, store.RoleTenantAdmin, store.RoleViewer}
	admins  = []store.Role{store.RoleAdmin}
	editors = []store.Role{store.RoleAdmin, store.RoleTenantAdmin}
	agents  = []store.Role{store.RoleAdmin, store.RoleAgent}
)

func (s *server) routes(dash http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(s.instrument, s.recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", "", "no such path "+r.URL.Path+"; see /api/v1/openapi.json")
	})
	root := r
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110 15.5.6: a 405 lists the methods the path supports.
		allowed := allowedMethods(root, r.URL.Path)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeErr(w, http.StatusMethodNotAllowed, "method_not_allowed", "",
			r.Method+" is not allowed on "+r.URL.Path+"; use "+strings.Join(allowed, ", "))
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", s.metricsHandler(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{Registry: s.cfg.Registry})))
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/openapi.json", serveOpenAPI)
		r.Group(func(r chi.Router) {
			r.Use(checkInput, s.authenticate, s.audit, s.scopeGuard, s.invalidateOnWrite)
			r.With(allow(readers...)).Get("/tenants", s.listTenants)
			r.With(allow(admins...)).Post("/tenants", s.createTenant)
			r.With(allow(readers...)).Get("/tenants/{name}", s.getTenant)
			r.With(allow(editors...)).Put("/tenants/{name}", s.updateTenant)
			r.With(allow(admins...)).Delete("/tenants/{name}", s.deleteTenant)

			r.With(allow(readers...)).Get("/pools", s.listPools)
			r.With(allow(readers...)).Get("/pools/{name}", s.getPool)
			r.With(allow(admins...)).Patch("/pools/{name}", s.patchPool)

			r.With(allow(readers...)).Get("/policy", s.getPolicy)
			r.With(allow(admins...)).Patch("/policy", s.patchPolicy)

			r.With(allow(readers...), s.cached).Get("/demand", s.listDemand)
			r.With(allow(readers...)).Get("/demand/{id}/why", s.why)

			r.With(allow(readers...), s.cached).Get("/nodes", s.listNodes)
			r.With(allow(readers...)).Get("/nodes/{name}", s.getNode)
			r.With(allow(admins...)).Post("/nodes/{name}/cordon", s.cordon)
			r.With(allow(admins...)).Post("/nodes/{name}/drain", s.drain)
			r.With(allow(admins...)).Post("/nodes/{name}/transfer", s.transfer)
			r.With(allow(admins...)).Put("/nodes/{name}/protection", s.protect)
			r.With(allow(agents...)).Post("/nodes/{name}/report", s.report)

			r.With(allow(readers...)).Get("/decisions", s.listDecisions)
			r.With(allow(readers...)).Get("/ops", s.listOps)
			r.With(onlyAdmins(planRefusal)).Post("/plan", s.plan)

			r.With(allow(readers...), s.cached).Get("/capacity", s.capacity)
			r.With(allow(readers...)).Get("/capacity/series", s.capacitySeries)
			r.With(allow(readers...)).Get("/whoami", s.whoami)

			r.With(allow(editors...)).Get("/audit", s.listAudit)
		})
	})
	r.Method(http.MethodGet, "/*", dash)
	return r
}

// routedMethods are the methods the router serves on some path.
var routedMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods root routes for path, for the Allow
// header of a 405.
func allowedMethods(root *chi.Mux, path string) []string {
	var out []string
	for _, m := range routedMethods {
		if root.Find(chi.NewRouteContext(), m, path) != "" {
			out = append(out, m)
		}
	}
	return out
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness is the body of /readyz.
type readiness struct {
	Ready    bool                     `json:"ready"`
	Store    string                   `json:"store"`
	Role     string                   `json:"role"`
	LastTick time.Time                `json:"last_tick,omitzero"`
	Stale    map[broker.Source]string `json:"stale,omitempty"`
	Reasons  []string                 `json:"reasons,omitempty"`
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	out := readiness{Ready: true, Store: "ok", Role: "none"}
	if err := s.st.Ping(ctx); err != nil {
		out.Ready, out.Store = false, "unreachable"
		out.Reasons = append(out.Reasons, err.Error())
	}
	if s.rt == nil {
		out.Reasons = append(out.Reasons, "no tick loop attached: serving reads only")
	} else {
		st := s.rt.Status()
		out.Role, out.LastTick, out.Stale = "follower", st.LastTick, st.Stale
		if st.Leader {
			out.Role = "leader"
		}
		for _, src := range broker.Sources {
			if why, ok := st.Stale[src]; ok {
				out.Ready = false
				out.Reasons = append(out.Reasons, "source "+string(src)+" is stale: "+why)
			}
		}
	}
	code := http.StatusOK
	if !out.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}

// runtime returns the tick loop or answers 503 when none is attached.
func (s *server) runtime(w http.ResponseWriter) (Runtime, bool) {
	if s.rt == nil {
		writeErr(w, http.StatusServiceUnavailable, "unavailable", "", "no tick loop is attached to this server")
		return nil, false
	}
	return s.rt, true
}
