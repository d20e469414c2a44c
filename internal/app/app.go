package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/cloud"
	"github.com/gpubroker/gpubroker/fleet"
	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// Config is the validated configuration, in domain and adapter types, plus
// the endpoints and clients a caller may inject instead of addresses.
type Config struct {
	// Store, when set, is used (and not closed by Close); otherwise the
	// store is opened from DatabaseURL.
	Store       *store.Store
	DatabaseURL string
	MaxConns    int32
	// Migrate applies the schema migrations before opening the store.
	Migrate bool
	// Seed writes Pools, Tenants and Policy into the store (see Seed); plan
	// leaves it off: it observes and plans without writing configuration.
	Seed bool
	// Preview shows the runtime the store as Seed would leave it, without
	// writing it (plan: what serve's first tick would do).
	Preview bool

	Pools []broker.Pool
	// FleetMembers names each fleet pool's nodes (broker.Pool.Fleet), by
	// pool name: hosts, a Kubernetes node selector, a YARN partition.
	FleetMembers map[string]fleet.Members
	Tenants      []broker.Tenant
	// Policy is seeded when the store has none, and its MaxProvisionTime
	// bounds how long a launched instance may take to register.
	Policy broker.Policy

	YARN       YARNConfig
	Kubernetes KubernetesConfig
	Cloud      CloudConfig

	// Logger receives the broker's logs (default: discard).
	Logger *slog.Logger
	// Now is the runtime's clock (default time.Now).
	Now func() time.Time
	// Period is the tick interval (default 5s); BatchWindow delays a
	// triggered tick (default 1s); ObserveTimeout bounds each observation
	// (default 10s); ReportMaxAge bounds agent reports (default 2m).
	Period, BatchWindow, ObserveTimeout, ReportMaxAge time.Duration
	// XIDs classifies the XID codes agents report (nil: the defaults).
	XIDs broker.XIDClasses
	// AgentServiceAccounts ("namespace/name") authenticate node agents by
	// their pod's projected service-account token (audience gpubroker),
	// each for the node its pod runs on; needs Kubernetes.
	AgentServiceAccounts []string
	// Checkpoints reads checkpoint ages for victim choice (default: the
	// HDFS/WebHDFS reader of yarn.NewCheckpointReader).
	Checkpoints engine.Checkpoints

	// Listen is the API and dashboard address Run serves; empty: no API.
	Listen string
	// Ready, when set, receives the API's listening address.
	Ready func(addr string)
	// Registry receives the API's metrics (default: a fresh registry).
	Registry *prometheus.Registry
	// TLS, when its CertFile is set, serves the API over TLS only.
	TLS TLSConfig
	// AuditRetention is how long audit entries are kept (default 90 days).
	AuditRetention time.Duration
}

// TLSConfig is the API's certificate and key (PEM files, reloaded when
// they change) and, optionally, the CAs whose client certificates
// authenticate agents.
type TLSConfig struct {
	CertFile, KeyFile, ClientCAFile string
	// AgentAnyNode lets a wildcard client certificate report for every
	// node it matches (see api.Config.AgentAnyNode).
	AgentAnyNode bool
}

// DefaultAuditRetention is how long audit entries are kept by default.
const DefaultAuditRetention = 90 * 24 * time.Hour

// YARNConfig is the YARN side. With no RM and no Client, there is no YARN
// side; without AdminAddress and ExcludeFile, YARN is observed only.
type YARNConfig struct {
	// RM lists the ResourceManager web addresses (HA: several).
	RM []string
	// Client, when set, replaces the client built from RM.
	Client           *yarn.Client
	User             string
	Timeout          time.Duration
	MaxResponseBytes int64
	AdminAddress     []string
	ExcludeFile      string
	// ExcludeFileCopies are the exclude file's copies on other RM hosts
	// (yarn.NewExcludeFile).
	ExcludeFileCopies []string
	// Exclude, when set, is the exclude file (ExcludeFile names its path):
	// a process that also writes the file shares its lock with the broker.
	Exclude *yarn.ExcludeFile
	// RestartNodeManager restarts a recommissioned host's NodeManager
	// (nil: its service manager does).
	RestartNodeManager func(ctx context.Context, host string) error
	EvictGrace         time.Duration
	// CordonLabel is the exclusive node label of the YARN cordon (default
	// yarn.DefaultCordonLabel); CordonHold how long it must hold an empty
	// host before a decommission (default yarn.DefaultCordonHold).
	CordonLabel string
	CordonHold  time.Duration
	// Labeler, when set, sets node labels for the cordon instead of the
	// RM admin client (tests). Without either there is no cordon: busy
	// YARN nodes are left alone.
	Labeler yarn.Labeler
	// Kerberos, when set, authenticates the RM REST client (SPNEGO), the
	// RM admin client and the HDFS checkpoint reader (SASL GSSAPI).
	Kerberos *yarn.KerberosConfig
}

// KubernetesConfig is the Kubernetes side: Client when set, otherwise one
// built from Kubeconfig, or in-cluster when InCluster; none: no side.
type KubernetesConfig struct {
	Client     kubernetes.Interface
	Kubeconfig string
	InCluster  bool
	// Adapter configures the observer and actuator.
	Adapter k8s.Config
	// DrainStep is the Kubernetes side's drain poll (default 5s).
	DrainStep time.Duration
}

// CloudConfig is the cloud provider: NodePool when set, otherwise the AWS
// provider at Endpoint (empty: AWS itself) for Pools.
type CloudConfig struct {
	NodePool    engine.NodePool
	Region      string
	Endpoint    string
	Credentials aws.CredentialsProvider
	// Pools are the provider's pools (default: Config.Pools converted).
	Pools []cloud.PoolConfig
	// Wrap, when set, wraps the AWS provider the runtime uses (tests
	// record its calls).
	Wrap func(*cloud.Provider) engine.NodePool
	// PoolBackoff is how long a pool backs off after insufficient
	// capacity or a provision timeout (default cloud.DefaultPoolBackoff).
	PoolBackoff time.Duration
}

// UsageError is a configuration problem the operator must fix.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Main is the assembled broker: the store, the cloud provider, both sides'
// observers and actions, and a factory for runtimes over them.
type Main struct {
	cfg         Config
	log         *slog.Logger
	st          *store.Store
	ownStore    bool
	provider    *cloud.Provider
	pools       engine.NodePool
	observers   []engine.SideObserver
	actions     []engine.SideActions
	sinks       []decisionSink // receive the decisions the runtime records (pod Events)
	trigger     <-chan struct{}
	checkpoints engine.Checkpoints
	reviewer    *k8s.AgentReviewer // nil: no service-account agents
	krb         *yarn.Kerberos
	cancel      context.CancelFunc
	// afterTick is the runtimes' AfterTick (Run sets it: the read model).
	afterTick func(ctx context.Context, rep *engine.TickReport, err error)
}

// Open assembles the broker. The Kubernetes informers run until Close (or
// until ctx ends).
func Open(ctx context.Context, cfg Config) (_ *Main, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Main{cfg: cfg, log: log, cancel: cancel, st: cfg.Store}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.st == nil {
		if cfg.DatabaseURL == "" {
			return nil, usagef("no database: set database.url in the config file or GPUBROKER_DATABASE_URL")
		}
		if cfg.Migrate {
			if err := store.Migrate(ctx, cfg.DatabaseURL); err != nil {
				return nil, usagef("%s", err)
			}
		}
		st, err := store.Open(ctx, store.Config{URL: cfg.DatabaseURL, MaxConns: cfg.MaxConns, Logger: log})
		if err != nil {
			return nil, usagef("%s", err)
		}
		m.st, m.ownStore = st, true
	}
	if cfg.Seed {
		if err := Seed(ctx, m.st, cfg.Pools, cfg.Tenants, cfg.Policy, log); err != nil {
			return nil, err
		}
	}
	if err := m.openCloud(ctx); err != nil {
		return nil, err
	}
	if err := m.openYARN(ctx); err != nil {
		return nil, err
	}
	if err := m.openKubernetes(ctx); err != nil {
		return nil, err
	}
	if err := m.checkFleetSides(); err != nil {
		return nil, err
	}
	m.checkpoints = cfg.Checkpoints
	if m.checkpoints == nil {
		cr, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Logger: log, Kerberos: m.krb})
		if err != nil {
			return nil, err
		}
		m.checkpoints = cr
	}
	if r, ok := m.pools.(registrar); ok {
		m.observers = withRegistration(r, m.observers)
	}
	return m, nil
}

// openCloud builds the node pools: the fleet pools the configuration names
// hosts for, and the cloud provider's pools beside them. With fleet pools
// only, no cloud provider is opened at all.
func (m *Main) openCloud(ctx context.Context) error {
	cc := m.cfg.Cloud
	if cc.NodePool != nil {
		m.pools = cc.NodePool
		return nil
	}
	fl, err := m.openFleet()
	if err != nil {
		return err
	}
	pools := cc.Pools
	if pools == nil {
		pools = CloudPools(m.cfg.Pools)
	}
	if fl != nil && len(pools) == 0 {
		m.pools = fleet.Combine(fl, nil)
		return nil
	}
	provider, err := cloud.New(ctx, cloud.Config{Region: cc.Region, Endpoint: cc.Endpoint, Credentials: cc.Credentials,
		Pools: pools, Bounds: StoreBounds(m.st), MaxProvisionTime: m.cfg.Policy.MaxProvisionTime.D(),
		ProvisionTime: StoreProvisionTime(m.st), PoolBackoff: cc.PoolBackoff, Logger: m.log})
	if err != nil {
		names := make([]string, 0, len(pools))
		for _, p := range pools {
			names = append(names, p.Name)
		}
		return fmt.Errorf("cloud provider for the cloud pools %s: %w (configure the cloud section, or make them fleet pools: provider: fleet with their hosts)",
			strings.Join(names, ", "), err)
	}
	m.provider, m.pools = provider, provider
	if cc.Wrap != nil {
		m.pools = cc.Wrap(provider)
	}
	if fl != nil {
		m.pools = fleet.Combine(fl, m.pools)
	}
	return nil
}

// checkFleetSides refuses a fleet pool that names members by what a side
// lists when that side is not configured: it would wait for a listing
// that never comes.
func (m *Main) checkFleetSides() error {
	has := map[broker.Source]bool{}
	for _, o := range m.observers {
		has[o.Source()] = true
	}
	for _, p := range m.cfg.Pools {
		fm := m.cfg.FleetMembers[p.Name]
		if !p.Fleet() {
			continue
		}
		if len(fm.NodeSelector) > 0 && !has[broker.SourceK8s] {
			return usagef("config: pool %s names members by node_selector, but no Kubernetes cluster is configured (kubernetes.kubeconfig, or in-cluster)", p.Name)
		}
		if fm.YARNPartition != "" && !has[broker.SourceYARN] {
			return usagef("config: pool %s names members by yarn_partition, but no ResourceManager is configured (yarn.rm)", p.Name)
		}
	}
	return nil
}

// openFleet builds the fleet pools of the configuration; nil when it has
// none.
func (m *Main) openFleet() (*fleet.NodePool, error) {
	var pools []fleet.Pool
	for _, p := range m.cfg.Pools {
		if p.Fleet() {
			pools = append(pools, fleet.Pool{Pool: p, Members: m.cfg.FleetMembers[p.Name]})
		}
	}
	if len(pools) == 0 {
		return nil, nil
	}
	fl, err := fleet.New(pools)
	if err != nil {
		return nil, usagef("config: %s", err)
	}
	return fl, nil
}

// openYARN builds the YARN observer for the configured RMs and, when the
// RM admin address and the exclude file are configured, the actions that
// decommission, recommission (with the NodeManager restart hook) and
// preempt (none otherwise: the broker then only observes YARN, ownership
// transfer to and from YARN is off, and YARN node operations fail with a
// reason).
func (m *Main) openYARN(ctx context.Context) error {
	yc, log := m.cfg.YARN, m.log
	if yc.Exclude != nil && yc.ExcludeFile == "" {
		yc.ExcludeFile = yc.Exclude.Path()
	}
	if yc.Kerberos != nil {
		kc := *yc.Kerberos
		kc.Logger = log
		krb, err := yarn.NewKerberos(kc)
		if err != nil {
			return usagef("config: yarn.kerberos: %s", err)
		}
		m.krb = krb
	}
	client := yc.Client
	if client == nil {
		if len(yc.RM) == 0 {
			return nil
		}
		var transport http.RoundTripper
		if m.krb != nil {
			transport, yc.User = yarn.NewSPNEGOTransport(m.krb, nil), "-"
		}
		c, err := yarn.NewClient(yarn.Config{RMs: yc.RM, User: yc.User, Timeout: yc.Timeout,
			MaxResponseBytes: yc.MaxResponseBytes, Logger: log, Transport: transport})
		if err != nil {
			return err
		}
		client = c
	}
	side := yarn.NewSide(client, yarn.MapOptions{})
	m.observers = append(m.observers, side)
	if len(yc.AdminAddress) == 0 && yc.ExcludeFile == "" {
		log.Warn("yarn.admin_address and yarn.exclude_file are not set: YARN has no actions, so ownership transfer to and from YARN is off and YARN nodes are observed but never moved, removed or preempted")
		return nil
	}
	if len(yc.AdminAddress) == 0 || yc.ExcludeFile == "" {
		return usagef("config: yarn.admin_address and yarn.exclude_file go together: set both to let the broker decommission NodeManagers")
	}
	acfg := rmadmin.Config{Addrs: yc.AdminAddress, User: yc.User}
	if m.krb != nil {
		acfg.Kerberos, acfg.ServerPrincipal = m.krb, m.krb.RMPrincipal()
	}
	admin, err := rmadmin.New(acfg)
	if err != nil {
		return usagef("config: yarn.admin_address: %s", err)
	}
	ex := yc.Exclude
	if ex == nil {
		if ex, err = yarn.NewExcludeFile(yc.ExcludeFile, yc.ExcludeFileCopies...); err != nil {
			return usagef("config: yarn.exclude_file: %s", err)
		}
	}
	if !strings.HasSuffix(strings.ToLower(yc.ExcludeFile), ".xml") {
		log.Warn("yarn.exclude_file is in the plain form: per-host graceful timeouts (and draining by attrition) need the XML form, a path ending in .xml", "exclude_file", yc.ExcludeFile)
	}
	if yc.RestartNodeManager == nil {
		log.Info("yarn.nodemanager_restart is not set: a recommissioned NodeManager must be restarted by its service manager (Restart=always)")
	}
	cordon, err := m.openCordon(ctx, client, admin)
	if err != nil {
		return err
	}
	if cordon != nil {
		side.WithCordon(cordon)
	}
	dec, err := yarn.NewDecommissioner(yarn.DecommissionConfig{Client: client, Admin: admin, Exclude: ex, Logger: log,
		RestartNodeManager: yc.RestartNodeManager, EvictGrace: yc.EvictGrace, Cordon: cordon})
	if err != nil {
		return err
	}
	m.actions = append(m.actions, dec)
	return nil
}

// openCordon builds the YARN cordon and probes, once at startup, whether
// the cluster offers it: the cordon logs one warning naming what is
// missing when it does not (and the broker then leaves busy YARN nodes
// alone). An RM that cannot be reached now is probed again when the
// cordon is next needed.
func (m *Main) openCordon(ctx context.Context, client *yarn.Client, admin *rmadmin.Client) (*yarn.Cordon, error) {
	yc := m.cfg.YARN
	labeler := yc.Labeler
	if labeler == nil {
		labeler = rmadminLabeler(admin)
	}
	c, err := yarn.NewCordon(yarn.CordonConfig{Client: client, Admin: labeler, Label: yc.CordonLabel, Hold: yc.CordonHold, Logger: m.log})
	if err != nil {
		return nil, usagef("config: yarn.cordon: %s", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c.Available(pctx)
	return c, nil
}

// openKubernetes starts the Kubernetes informers and adds the side.
func (m *Main) openKubernetes(ctx context.Context) error {
	kc := m.cfg.Kubernetes
	client := kc.Client
	if client == nil {
		if kc.Kubeconfig == "" && !kc.InCluster {
			if len(m.cfg.AgentServiceAccounts) > 0 {
				// Fails closed: their tokens authenticate nobody.
				m.log.Warn("api.agent_service_accounts needs Kubernetes (kubernetes.kubeconfig, or running in a cluster); agents' service-account tokens are refused",
					"agent_service_accounts", m.cfg.AgentServiceAccounts)
			}
			return nil
		}
		c, err := KubeClient(kc.Kubeconfig)
		if err != nil {
			return err
		}
		client = c
	}
	obs, err := k8s.NewObserver(client, kc.Adapter, m.log)
	if err != nil {
		return err
	}
	if len(m.cfg.AgentServiceAccounts) > 0 {
		if m.reviewer, err = k8s.NewAgentReviewer(client, m.cfg.AgentServiceAccounts); err != nil {
			return err
		}
	}
	if err := obs.Start(ctx); err != nil {
		return fmt.Errorf("start kubernetes informers: %w", err)
	}
	act, err := k8s.NewActuator(client, kc.Adapter, m.log)
	if err != nil {
		return err
	}
	step := kc.DrainStep
	if step <= 0 {
		step = 5 * time.Second
	}
	events, err := k8s.NewPodEvents(client, obs, k8s.EventsConfig{ProvisionTime: m.provisionTime}, m.log)
	if err != nil {
		return err
	}
	m.sinks = append(m.sinks, events)
	side := k8s.NewSide(client, obs, act, step)
	m.observers = append(m.observers, side)
	m.actions = append(m.actions, side)
	m.trigger = obs.Unschedulable()
	return nil
}

// KubeClient builds a client from a kubeconfig file, or in-cluster.
func KubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// InCluster reports whether the process runs in a Kubernetes pod, from
// the environment getenv reads.
func InCluster(getenv func(string) string) bool {
	return getenv("KUBERNETES_SERVICE_HOST") != ""
}

// NewRuntime returns a fresh runtime over the assembled parts: a broker
// process starting with empty memory, resuming from the ledger.
func (m *Main) NewRuntime() (*engine.Runtime, error) {
	c := m.cfg
	var ledger engine.Ledger = m.st.Ledger()
	if c.Preview {
		ledger = previewLedger{Ledger: ledger, pools: c.Pools, tenants: c.Tenants, policy: c.Policy}
	}
	ledger = m.withDecisionSinks(ledger)
	return engine.NewRuntime(engine.RuntimeConfig{Observers: m.observers, Actions: m.actions, Pools: m.pools,
		Ledger: ledger, Now: c.Now, Logger: m.log, ObserveTimeout: c.ObserveTimeout, Period: c.Period,
		BatchWindow: c.BatchWindow, ReportMaxAge: c.ReportMaxAge, XIDs: c.XIDs, Checkpoints: m.checkpoints, AfterTick: m.afterTick})
}

// Store is the assembled store.
func (m *Main) Store() *store.Store { return m.st }

// Pools is the node pool the runtime uses (the wrapped provider, if any).
func (m *Main) Pools() engine.NodePool { return m.pools }

// Provider is the AWS provider; nil when a NodePool was injected.
func (m *Main) Provider() *cloud.Provider { return m.provider }

// Trigger fires when Kubernetes reports new unschedulable pods; nil
// without a Kubernetes side.
func (m *Main) Trigger() <-chan struct{} { return m.trigger }

// Close stops the informers and closes the store Open opened.
func (m *Main) Close() {
	m.cancel()
	if m.krb != nil {
		m.krb.Close()
	}
	if m.ownStore && m.st != nil {
		m.st.Close()
	}
}

// Seed writes the configuration's pools, tenants and policy into the
// store: pools are upserted (the file owns their definition, except the
// bounds of a pool already stored), tenants are created when missing (the
// API owns them afterwards), and the policy is stored only when none is
// (edits through the API win over the file).
//
// IMPORTANT: pool bounds have one owner, the store. The file seeds
// min_nodes and max_nodes of a new pool; for a stored pool the stored
// values (perhaps edited through the API) win, and a file value that
// differs is logged with both values, never silently applied or dropped.
func Seed(ctx context.Context, st *store.Store, pools []broker.Pool, tenants []broker.Tenant, policy broker.Policy, log *slog.Logger) error {
	for _, p := range pools {
		cur, err := st.GetPool(ctx, p.Name)
		switch {
		case err == nil:
			for _, f := range []struct {
				field        string
				file, stored int
			}{{"min_nodes", p.MinNodes, cur.MinNodes}, {"max_nodes", p.MaxNodes, cur.MaxNodes}} {
				if f.file != f.stored {
					log.Warn("pool bound in the configuration file differs from the stored one; keeping the stored value (pool bounds are edited through the API once a pool exists: PATCH /api/v1/pools/{name})",
						"pool", p.Name, "field", f.field, "file_value", f.file, "stored_value", f.stored)
				}
			}
			p.MinNodes, p.MaxNodes = cur.MinNodes, cur.MaxNodes
		case !errors.Is(err, broker.ErrNotFound):
			return fmt.Errorf("seed pool %s: %w", p.Name, err)
		}
		if _, err := st.UpsertPool(ctx, p); err != nil {
			return fmt.Errorf("seed pool %s: %w", p.Name, err)
		}
	}
	for _, t := range tenants {
		_, err := st.CreateTenant(ctx, t)
		if errors.Is(err, broker.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("seed tenant %s: %w", t.Name, err)
		}
		log.Info("tenant created from configuration", "tenant", t.Name)
	}
	cur, err := st.GetPolicy(ctx)
	if err != nil {
		return err
	}
	if cur.Version == 0 {
		if _, err := st.UpdatePolicy(ctx, policy); err != nil && !errors.Is(err, broker.ErrConflict) {
			return fmt.Errorf("seed policy: %w", err)
		}
	}
	return nil
}

// CloudPools converts pools for the AWS provider.
func CloudPools(pools []broker.Pool) []cloud.PoolConfig {
	out := make([]cloud.PoolConfig, 0, len(pools))
	for _, p := range pools {
		if p.Fleet() {
			continue
		}
		minN, maxN := p.MinNodes, p.MaxNodes
		out = append(out, cloud.PoolConfig{Name: p.Name, Group: p.Group, MinNodes: &minN, MaxNodes: &maxN,
			GPUModel: p.GPUModel, GPUsPerNode: p.GPUsPerNode, Sides: p.Sides, PricePerHour: p.PricePerHour,
			ExpanderPriority: p.ExpanderPriority, Labels: p.Labels, Taints: p.Taints})
	}
	return out
}

// StoreProvisionTime reads the max provision time from the policy in the
// store, its one owner (the planner and the executor read the same policy
// each tick), for the cloud provider on every observation.
func StoreProvisionTime(st *store.Store) func(ctx context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		p, err := st.GetPolicy(ctx)
		if err != nil {
			return 0, err
		}
		return p.MaxProvisionTime.D(), nil
	}
}

// StoreBounds reads pool bounds from the store for the cloud provider on
// every scaling call, so edits through the API apply at once.
func StoreBounds(st *store.Store) func(ctx context.Context, pool string) (int, int, bool, error) {
	return func(ctx context.Context, pool string) (int, int, bool, error) {
		p, err := st.GetPool(ctx, pool)
		if errors.Is(err, broker.ErrNotFound) {
			return 0, 0, false, nil
		}
		if err != nil {
			return 0, 0, false, err
		}
		return p.MinNodes, p.MaxNodes, true, nil
	}
}

// rmadminLabeler returns the RM admin client as the cordon's Labeler.
func rmadminLabeler(c *rmadmin.Client) yarn.Labeler { return yarn.RMAdminLabeler{Client: c} }
