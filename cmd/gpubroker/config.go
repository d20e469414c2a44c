package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/fleet"
	"github.com/gpubroker/gpubroker/yarn"
)

// fileConfig is the YAML configuration of "gpubroker serve" and friends.
// Field names match the REST API's JSON names.
type fileConfig struct {
	Database   databaseConfig   `yaml:"database"`
	API        apiConfig        `yaml:"api"`
	YARN       yarnConfig       `yaml:"yarn"`
	Kubernetes kubernetesConfig `yaml:"kubernetes"`
	Cloud      cloudConfig      `yaml:"cloud"`
	Policy     policyConfig     `yaml:"policy"`
	Pools      []poolConfig     `yaml:"pools"`
	Tenants    []tenantConfig   `yaml:"tenants"`
	Audit      auditConfig      `yaml:"audit"`
	Agents     agentsConfig     `yaml:"agents"`
}

type databaseConfig struct {
	URL      string `yaml:"url"`
	MaxConns int32  `yaml:"max_conns"`
}

type apiConfig struct {
	Listen string    `yaml:"listen"`
	TLS    tlsConfig `yaml:"tls"`
	// AgentServiceAccounts ("namespace/name") authenticate node agents by
	// their pod's projected service-account token, each for its own node.
	AgentServiceAccounts []string `yaml:"agent_service_accounts"`
}

// tlsConfig serves the API over TLS: PEM files, reloaded when they change.
// With ClientCAFile, agents may authenticate by a client certificate that
// names their node instead of a token.
type tlsConfig struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
	// AgentAnyNode lets a wildcard client certificate report for every
	// node it matches; off, a certificate must name its node exactly.
	AgentAnyNode bool `yaml:"agent_any_node"`
}

// agentsConfig classifies the XID codes node agents report: a code listed
// here takes that class instead of its default (broker.DefaultXIDClasses).
type agentsConfig struct {
	XIDFatal       []uint64 `yaml:"xid_fatal"`
	XIDNeedsReset  []uint64 `yaml:"xid_needs_reset"`
	XIDApplication []uint64 `yaml:"xid_application"`
}

// auditConfig bounds the audit trail of API and CLI writes.
type auditConfig struct {
	// Retention is how long entries are kept (default 90 days).
	Retention broker.Duration `yaml:"retention"`
}

type yarnConfig struct {
	// RM lists the ResourceManager web addresses (HA: several).
	RM           []string        `yaml:"rm"`
	User         string          `yaml:"user"`
	PollInterval broker.Duration `yaml:"poll_interval"`
	Timeout      broker.Duration `yaml:"timeout"`
	AdminAddress []string        `yaml:"admin_address"`
	ExcludeFile  string          `yaml:"exclude_file"`
	// ExcludeFileCopies are the same exclude file on the other RM hosts'
	// paths or mounts (an RM reads it from its own disk): every change is
	// made in each, under each one's lock.
	ExcludeFileCopies []string `yaml:"exclude_file_copies"`
	// NodeManagerRestart restarts a recommissioned host's NodeManager.
	NodeManagerRestart nodeManagerRestartConfig `yaml:"nodemanager_restart"`
	// EvictGrace is how long a preempted container has between
	// GRACEFUL_SHUTDOWN and FORCEFUL_SHUTDOWN (default 30s).
	EvictGrace broker.Duration `yaml:"evict_grace"`
	// Cordon is the YARN cordon: an exclusive node label that holds a
	// busy node without the exclude file (see the README's YARN section).
	Cordon yarnCordonConfig `yaml:"cordon"`
	// Kerberos, when set, authenticates to a kerberized cluster (see
	// kerberos_config.go).
	Kerberos *kerberosConfig `yaml:"kerberos"`
}

// yarnCordonConfig names the cordon label (default gpubroker-cordon; no
// queue may have it as its default node-label expression) and how long
// it must hold an empty host before the host is decommissioned (default
// 30s: the RM counts allocated-but-not-launched containers on their node,
// so the hold only outlasts an allocation in flight; yarn.DefaultCordonHold).
type yarnCordonConfig struct {
	Label string          `yaml:"label"`
	Hold  broker.Duration `yaml:"hold"`
}

// nodeManagerRestartConfig is a command run with the host name appended,
// e.g. [/usr/local/bin/restart-nodemanager]: a DECOMMISSIONED NodeManager
// has shut down, and a hand-over to YARN completes only when it runs
// again. Empty: the host's service manager restarts it (Restart=always).
type nodeManagerRestartConfig struct {
	Command []string        `yaml:"command"`
	Timeout broker.Duration `yaml:"timeout"`
}

type kubernetesConfig struct {
	// Kubeconfig is a file; empty means in-cluster configuration.
	Kubeconfig string `yaml:"kubeconfig"`
	// GPUModelLabel names the node label holding the GPU product.
	GPUModelLabel string `yaml:"gpu_model_label"`
	// SchedulerNames are the schedulers whose pods count as demand.
	SchedulerNames []string `yaml:"scheduler_names"`
	// GPUNodeLabels mark nodes that will offer GPUs before their device
	// plugin reports, e.g. {infra-type: gpu}.
	GPUNodeLabels map[string]string `yaml:"gpu_node_labels"`
	// StartupTaints are taint keys (or prefixes ending in "/") that new
	// nodes carry while they start, added to the built-in list
	// (k8s.DefaultStartupTaints: not-ready, unreachable, Cilium's
	// agent-not-ready, the cluster autoscaler's startup-taint prefix, ...).
	// A node carrying one is capacity in flight, never a second buy.
	StartupTaints []string `yaml:"startup_taints"`
	// StaleAfter bounds how old the watch caches may be before the
	// Kubernetes side is stale (default 30s).
	StaleAfter broker.Duration `yaml:"stale_after"`
	// DRA is auto (default: where the API serves resource.k8s.io/v1), on
	// or off: whether pods' ResourceClaims count as GPU demand; the device
	// classes that are GPUs and MIG slices default to NVIDIA's
	// (gpu.nvidia.com, mig.nvidia.com).
	DRA              string   `yaml:"dra"`
	GPUDeviceClasses []string `yaml:"gpu_device_classes"`
	MIGDeviceClasses []string `yaml:"mig_device_classes"`
	// GPUDrivers are the DRA drivers whose ResourceSlice devices are a
	// node's GPUs (default gpu.nvidia.com).
	GPUDrivers []string `yaml:"gpu_drivers"`
}

type cloudConfig struct {
	Provider string `yaml:"provider"`
	Region   string `yaml:"region"`
	Endpoint string `yaml:"endpoint"`
}

type policyConfig struct {
	ClusterMinGPUs         *int            `yaml:"cluster_min_gpus"`
	ClusterMaxGPUs         *int            `yaml:"cluster_max_gpus"`
	ModelMaxGPUs           map[string]int  `yaml:"model_max_gpus"`
	ScaleDownUnneeded      broker.Duration `yaml:"scale_down_unneeded"`
	ScaleDownUtilisation   *float64        `yaml:"scale_down_utilisation"`
	ScaleDownMeasured      *bool           `yaml:"scale_down_measured"`
	MaxProvisionTime       broker.Duration `yaml:"max_provision_time"`
	Expander               string          `yaml:"expander"`
	DrainTimeout           broker.Duration `yaml:"drain_timeout"`
	ForceAfterDrainTimeout *bool           `yaml:"force_after_drain_timeout"`
	Preemption             *bool           `yaml:"preemption"`
	OwnershipTransfer      *bool           `yaml:"ownership_transfer"`
	UnhealthyNodeTimeout   broker.Duration `yaml:"unhealthy_node_timeout"`
	PlacementGrace         broker.Duration `yaml:"placement_grace"`
	YARNDrainByAttrition   *bool           `yaml:"yarn_drain_by_attrition"`
	Consolidation          struct {
		MaxWorkLost          *broker.Duration `yaml:"max_work_lost"`
		CordonAndWait        *bool            `yaml:"cordon_and_wait"`
		Migrate              string           `yaml:"migrate"`
		MigrateWindow        broker.Duration  `yaml:"migrate_window"`
		MigrateMaxWait       broker.Duration  `yaml:"migrate_max_wait"`
		MaxMigrationsPerHour int              `yaml:"max_migrations_per_hour"`
		NoMigrateTenants     []string         `yaml:"no_migrate_tenants"`
	} `yaml:"consolidation"`
}

type taintConfig struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value"`
	Effect string `yaml:"effect"`
}

type poolConfig struct {
	Name             string            `yaml:"name"`
	Provider         string            `yaml:"provider"`
	Group            string            `yaml:"group"`
	GPUModel         string            `yaml:"gpu_model"`
	GPUsPerNode      int               `yaml:"gpus_per_node"`
	MinNodes         int               `yaml:"min_nodes"`
	MaxNodes         int               `yaml:"max_nodes"`
	Labels           map[string]string `yaml:"labels"`
	Taints           []taintConfig     `yaml:"taints"`
	Sides            string            `yaml:"sides"`
	PricePerHour     float64           `yaml:"price_per_hour"`
	ExpanderPriority int               `yaml:"expander_priority"`
	// Partition is the YARN node label the pool's NodeManagers join
	// (yarn.nodemanager.node-labels or the RM's node-to-label mapping);
	// empty for the default partition.
	Partition string `yaml:"partition"`
	// Hosts are a fleet pool's machines (provider fleet): the node names
	// both sides list. NodeSelector (Kubernetes node labels) and
	// YARNPartition (a YARN node label) name members too.
	Hosts         []string          `yaml:"hosts"`
	NodeSelector  map[string]string `yaml:"node_selector"`
	YARNPartition string            `yaml:"yarn_partition"`
	// MIG partitions every GPU of the pool's nodes into MIG devices of
	// one profile (NVIDIA's mig-parted "all-1g.10gb" layouts): the nodes
	// offer those slices, not whole GPUs.
	MIG *migConfig `yaml:"mig"`
	// GPUMemory is each GPU's memory ("80Gi"), so demand whose DRA claim
	// selects GPUs by memory matches the pool even at zero nodes.
	GPUMemory string `yaml:"gpu_memory"`
}

// migConfig is a pool's MIG layout: per_gpu devices of profile on each GPU.
type migConfig struct {
	Profile string `yaml:"profile"`
	PerGPU  int    `yaml:"per_gpu"`
}

// devices applies the pool's MIG layout and GPU memory to pool, naming
// the configuration's fields in errors.
func (pl poolConfig) devices(prefix string, pool *broker.Pool) error {
	if pl.GPUMemory != "" {
		q, err := resource.ParseQuantity(pl.GPUMemory)
		if err != nil || q.Sign() <= 0 {
			return broker.Invalid(prefix+".gpu_memory", "must be a positive quantity such as 80Gi or 24Gi, got %q", pl.GPUMemory)
		}
		pool.GPUMemoryMiB = int(q.Value() >> 20)
	}
	if pl.MIG != nil {
		// broker.Pool.Validate checks the layout (configFields names its
		// fields as the configuration does).
		pool.MIGProfile, pool.MIGPerGPU = pl.MIG.Profile, pl.MIG.PerGPU
	}
	return nil
}

// configFields maps broker.Pool's field names to the configuration's where
// they differ.
var configFields = map[string]string{"mig_profile": "mig.profile", "mig_per_gpu": "mig.per_gpu", "gpu_memory_mib": "gpu_memory"}

// pool is the validated pool of pl, its fields named under prefix. A fleet
// pool (provider fleet) names its hosts and no cloud group or bounds: its
// size is its hosts.
func (pl poolConfig) pool(prefix string) (broker.Pool, error) {
	pool := broker.Pool{
		Name: pl.Name, Provider: pl.Provider, Group: pl.Group, GPUModel: pl.GPUModel,
		GPUsPerNode: pl.GPUsPerNode, MinNodes: pl.MinNodes, MaxNodes: pl.MaxNodes,
		Labels: pl.Labels, Sides: broker.PoolSides(pl.Sides), PricePerHour: pl.PricePerHour,
		ExpanderPriority: pl.ExpanderPriority, Partition: pl.Partition,
	}
	if pool.Partition != "" && pool.Sides == broker.PoolK8s {
		return pool, broker.Invalid(prefix+".partition", "names a YARN partition, but the pool serves only k8s (set sides to yarn or shared)")
	}
	switch pool.Provider {
	case "", "aws":
		pool.Provider = "aws"
		for _, f := range []struct {
			name string
			set  bool
		}{{"hosts", len(pl.Hosts) > 0}, {"node_selector", len(pl.NodeSelector) > 0}, {"yarn_partition", pl.YARNPartition != ""}} {
			if f.set {
				return pool, broker.Invalid(prefix+"."+f.name, "names fleet members, but pool %q is a cloud pool (provider aws): set provider: fleet to share these machines without a cloud, or remove %s", pool.Name, f.name)
			}
		}
		if pool.Group == "" {
			pool.Group = pool.Name
		}
	case broker.ProviderFleet:
		for _, f := range []struct {
			name string
			set  bool
		}{{"group", pl.Group != ""}, {"min_nodes", pl.MinNodes != 0}, {"max_nodes", pl.MaxNodes != 0}} {
			if f.set {
				return pool, broker.Invalid(prefix+"."+f.name, "a fleet pool's size is its hosts present: remove %s from pool %q (or make it a cloud pool: provider aws)", f.name, pool.Name)
			}
		}
		if len(pl.Hosts) == 0 && len(pl.NodeSelector) == 0 && pl.YARNPartition == "" {
			return pool, broker.Invalid(prefix+".hosts", "a fleet pool names its members: hosts, as both sides list them (e.g. [gpu-01.example.com, gpu-02.example.com]), a node_selector (Kubernetes node labels) or a yarn_partition; pool %q names none", pool.Name)
		}
		pool.MinNodes, pool.MaxNodes = len(pl.Hosts), len(pl.Hosts)
	default:
		return pool, broker.Invalid(prefix+".provider", "must be aws (an autoscaling group) or fleet (hosts the company owns), got %q", pool.Provider)
	}
	if pool.Sides == "" {
		pool.Sides = broker.PoolShared
	}
	for j, t := range pl.Taints {
		switch t.Effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return pool, broker.Invalid(fmt.Sprintf("%s.taints[%d].effect", prefix, j), "must be NoSchedule, PreferNoSchedule or NoExecute, got %q", t.Effect)
		}
		pool.Taints = append(pool.Taints, broker.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	if err := pl.devices(prefix, &pool); err != nil {
		return pool, err
	}
	if err := pool.Validate(); err != nil {
		var ve *broker.ValidationError
		if errors.As(err, &ve) && configFields[ve.Field] != "" {
			err = broker.Invalid(configFields[ve.Field], "%s", ve.Problem)
		}
		return pool, broker.WithPrefix(prefix, err)
	}
	return pool, nil
}

// checkFleet checks the fleet pools' hosts as the fleet will (a host
// names one node and belongs to one pool).
func checkFleet(pools []broker.Pool, members map[string]fleet.Members) error {
	var fps []fleet.Pool
	for _, p := range pools {
		if p.Fleet() {
			fps = append(fps, fleet.Pool{Pool: p, Members: members[p.Name]})
		}
	}
	if len(fps) == 0 {
		return nil
	}
	_, err := fleet.New(fps)
	return err
}

type tenantConfig struct {
	Name           string   `yaml:"name"`
	BasePriority   int64    `yaml:"base_priority"`
	GuaranteedGPUs int      `yaml:"guaranteed_gpus"`
	MaxGPUs        int      `yaml:"max_gpus"`
	Weight         float64  `yaml:"weight"`
	YARNQueues     []string `yaml:"yarn_queues"`
	Namespaces     []string `yaml:"namespaces"`
	Admins         []string `yaml:"admins"`
	// EvictGrace is the tenant's preemption grace (broker.Tenant.EvictGrace).
	EvictGrace broker.Duration `yaml:"evict_grace"`
}

// config is the validated configuration, in domain types.
type config struct {
	file   fileConfig
	xids   broker.XIDClasses
	policy broker.Policy
	pools  []broker.Pool
	// fleet names the fleet pools' members, by pool name.
	fleet   map[string]fleet.Members
	tenants []broker.Tenant
}

// loadConfig reads and validates a YAML file. Every problem is a usage
// error naming the file, the field and the fix.
func loadConfig(path string) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("config: %s", err)
	}
	return parseConfig(path, b)
}

// yamlTypeNames maps Go type names in yaml.v3's messages to config paths.
var yamlTypeNames = map[string]string{
	"main.fileConfig": "the top level", "main.databaseConfig": "database", "main.apiConfig": "api",
	"main.yarnConfig": "yarn", "main.kubernetesConfig": "kubernetes", "main.cloudConfig": "cloud",
	"main.policyConfig": "policy", "main.poolConfig": "a pool", "main.tenantConfig": "a tenant",
	"main.taintConfig": "a taint", "main.nodeManagerRestartConfig": "yarn.nodemanager_restart",
	"main.tlsConfig": "api.tls", "main.auditConfig": "audit",
	"main.kerberosConfig": "yarn.kerberos",
}

var unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.*) not found in type (main\.\w+|struct \{.*\})$`)

var unmarshalRE = regexp.MustCompile(`^line \d+: cannot unmarshal `)

// plainTypes names config sections and kinds of value instead of Go types
// in yaml.v3's "cannot unmarshal !!seq into main.policyConfig" messages.
// The value shown may hold anything, so the type is after the last "into".
func plainTypes(msg string) string {
	i := strings.LastIndex(msg, " into ")
	if !unmarshalRE.MatchString(msg) || i < 0 {
		return msg
	}
	return msg[:i] + " into " + plainType(strings.TrimPrefix(msg[i+len(" into "):], "*"))
}

func plainType(t string) string {
	if w, ok := yamlTypeNames[t]; ok {
		return w + ", a mapping of keys"
	}
	switch {
	case strings.HasPrefix(t, "[]"):
		if w, ok := yamlTypeNames[strings.TrimPrefix(t, "[]")]; ok {
			return "a list of " + strings.TrimPrefix(w, "a ") + "s"
		}
		return "a list"
	case strings.HasPrefix(t, "map[") || strings.HasPrefix(t, "struct {") || strings.HasPrefix(t, "main."):
		return "a mapping of keys"
	case strings.HasSuffix(t, "Duration"):
		return "a duration such as 90s or 5m"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	}
	return "a value of another kind"
}

func parseConfig(path string, b []byte) (*config, error) {
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			msg := te.Errors[0]
			if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
				where := yamlTypeNames[m[3]]
				if strings.HasPrefix(m[3], "struct {") && strings.Contains(m[3], "max_work_lost") {
					where = "policy.consolidation" // the one unnamed section
				}
				if where == "" {
					where = "a section"
				}
				return nil, usagef("config %s: line %s: unknown key %q in %s; remove it or check its spelling", path, m[1], m[2], where)
			}
			return nil, usagef("config %s: %s", path, plainTypes(msg))
		}
		return nil, usagef("config %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	c, err := fc.validate()
	if err != nil {
		var ve *broker.ValidationError
		if errors.As(err, &ve) {
			return nil, usagef("config %s: %s: %s", path, ve.Field, ve.Problem)
		}
		return nil, usagef("config %s: %s", path, err)
	}
	return c, nil
}

func (fc fileConfig) validate() (*config, error) {
	c := &config{file: fc}
	var err error
	if c.policy, err = fc.Policy.policy(); err != nil {
		return nil, err
	}

	kc := fc.Kubernetes
	if kc.DRA != "" && kc.DRA != "auto" && kc.DRA != "on" && kc.DRA != "off" {
		return nil, broker.Invalid("kubernetes.dra", "must be auto (on where the API serves resource.k8s.io/v1), on or off, got %q", kc.DRA)
	}
	if kc.StaleAfter < 0 {
		return nil, broker.Invalid("kubernetes.stale_after", "must not be negative, got %s", kc.StaleAfter)
	}
	for i, k := range kc.StartupTaints {
		if strings.TrimSuffix(k, "/") == "" || strings.ContainsAny(k, " =:") {
			return nil, broker.Invalid(fmt.Sprintf("kubernetes.startup_taints[%d]", i), "must be a taint key such as example.com/agent-not-ready, or a prefix ending in /, got %q", k)
		}
	}
	if c.pools, c.fleet, err = poolsOf(fc.Pools); err != nil {
		return nil, err
	}
	if c.tenants, err = tenantsOf(fc.Tenants); err != nil {
		return nil, err
	}
	if fc.Database.MaxConns < 0 {
		return nil, broker.Invalid("database.max_conns", "must be positive, got %d", fc.Database.MaxConns)
	}
	if fc.YARN.PollInterval < 0 || (fc.YARN.PollInterval > 0 && fc.YARN.PollInterval.D() < 100*time.Millisecond) {
		return nil, broker.Invalid("yarn.poll_interval", "must be at least 100ms, got %s", fc.YARN.PollInterval)
	}
	if nr := fc.YARN.NodeManagerRestart; nr.Timeout < 0 || (nr.Timeout > 0 && len(nr.Command) == 0) {
		return nil, broker.Invalid("yarn.nodemanager_restart", "needs a command, and a timeout that is not negative (default 2m)")
	}
	if fc.YARN.EvictGrace < 0 {
		return nil, broker.Invalid("yarn.evict_grace", "must not be negative, got %s", fc.YARN.EvictGrace)
	}
	if fc.YARN.Cordon.Hold < 0 {
		return nil, broker.Invalid("yarn.cordon.hold", "must not be negative (default 30s), got %s", fc.YARN.Cordon.Hold)
	}
	if l := fc.YARN.Cordon.Label; l != "" {
		if err := yarn.CheckLabelName(l); err != nil {
			return nil, broker.Invalid("yarn.cordon.label", "%s", err)
		}
	}
	if err := fc.API.TLS.validate(); err != nil {
		return nil, err
	}
	for i, acc := range fc.API.AgentServiceAccounts {
		if ns, name, ok := strings.Cut(acc, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, broker.Invalid(fmt.Sprintf("api.agent_service_accounts[%d]", i), "must be namespace/name of the agents' service account, such as gpubroker/gpubroker-agent, got %q", acc)
		}
	}
	a := fc.Agents
	xids, err := broker.NewXIDClasses(a.XIDFatal, a.XIDNeedsReset, a.XIDApplication)
	if err != nil {
		return nil, broker.WithPrefix("agents", err)
	}
	c.xids = xids
	if r := fc.Audit.Retention; r < 0 || (r > 0 && r.D() < time.Hour) {
		return nil, broker.Invalid("audit.retention", "must be at least 1h (default 2160h, 90 days), got %s", r)
	}
	if err := fc.YARN.Kerberos.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// policy is the policy section over serve's defaults, validated.
func (pc policyConfig) policy() (broker.Policy, error) {
	p := broker.DefaultPolicy()
	if pc.ClusterMinGPUs != nil {
		p.ClusterMinGPUs = *pc.ClusterMinGPUs
	}
	if pc.ClusterMaxGPUs != nil {
		p.ClusterMaxGPUs = *pc.ClusterMaxGPUs
	}
	if pc.ModelMaxGPUs != nil {
		p.ModelMaxGPUs = pc.ModelMaxGPUs
	}
	if pc.ScaleDownUnneeded != 0 {
		p.ScaleDownUnneeded = pc.ScaleDownUnneeded
	}
	if pc.ScaleDownUtilisation != nil {
		p.ScaleDownUtilisation = *pc.ScaleDownUtilisation
	}
	if pc.ScaleDownMeasured != nil {
		p.ScaleDownMeasured = *pc.ScaleDownMeasured
	}
	if pc.MaxProvisionTime != 0 {
		p.MaxProvisionTime = pc.MaxProvisionTime
	}
	if pc.Expander != "" {
		p.Expander = broker.Expander(pc.Expander)
	}
	if pc.DrainTimeout != 0 {
		p.DrainTimeout = pc.DrainTimeout
	}
	if pc.ForceAfterDrainTimeout != nil {
		p.ForceAfterDrainTimeout = *pc.ForceAfterDrainTimeout
	}
	if pc.Preemption != nil {
		p.Preemption = *pc.Preemption
	}
	if pc.OwnershipTransfer != nil {
		p.OwnershipTransfer = *pc.OwnershipTransfer
	}
	if pc.UnhealthyNodeTimeout != 0 {
		p.UnhealthyNodeTimeout = pc.UnhealthyNodeTimeout
	}
	if pc.PlacementGrace != 0 {
		p.PlacementGrace = pc.PlacementGrace
	}
	if pc.YARNDrainByAttrition != nil {
		p.YARNDrainByAttrition = *pc.YARNDrainByAttrition
	}
	if pc.Consolidation.MaxWorkLost != nil {
		p.MaxWorkLost = *pc.Consolidation.MaxWorkLost
	}
	if pc.Consolidation.CordonAndWait != nil {
		p.CordonAndWait = *pc.Consolidation.CordonAndWait
	}
	if c := pc.Consolidation; c.Migrate != "" || c.MigrateWindow != 0 || c.MigrateMaxWait != 0 || c.MaxMigrationsPerHour != 0 || c.NoMigrateTenants != nil {
		if c.Migrate != "" {
			p.Migrate = broker.MigrateMode(c.Migrate)
		}
		if c.MigrateWindow != 0 {
			p.MigrateWindow = c.MigrateWindow
		}
		if c.MigrateMaxWait != 0 {
			p.MigrateMaxWait = c.MigrateMaxWait
		}
		if c.MaxMigrationsPerHour != 0 {
			p.MaxMigrationsPerHour = c.MaxMigrationsPerHour
		}
		p.NoMigrateTenants = c.NoMigrateTenants
	}
	if err := p.Validate(); err != nil {
		return p, broker.WithPrefix("policy", err)
	}
	return p, nil
}

// poolsOf validates the pools, and the fleet pools' members by pool name.
func poolsOf(pcs []poolConfig) (pools []broker.Pool, members map[string]fleet.Members, err error) {
	names := map[string]bool{}
	for i, pl := range pcs {
		prefix := "pools[" + strconv.Itoa(i) + "]"
		pool, err := pl.pool(prefix)
		if err != nil {
			return nil, nil, err
		}
		if names[pool.Name] {
			return nil, nil, broker.Invalid(prefix+".name", "pool %q is defined twice", pool.Name)
		}
		names[pool.Name] = true
		pools = append(pools, pool)
		if pool.Fleet() {
			if members == nil {
				members = map[string]fleet.Members{}
			}
			members[pool.Name] = fleet.Members{Hosts: pl.Hosts, NodeSelector: pl.NodeSelector, YARNPartition: pl.YARNPartition}
		}
	}
	if err := checkFleet(pools, members); err != nil {
		return nil, nil, err
	}
	return pools, members, nil
}

// tenantsOf validates the tenants: unique names, and each YARN queue and
// namespace owned by one tenant.
func tenantsOf(tcs []tenantConfig) (tenants []broker.Tenant, err error) {
	tnames := map[string]bool{}
	owners := map[string]string{}
	for i, tc := range tcs {
		prefix := "tenants[" + strconv.Itoa(i) + "]"
		t := broker.Tenant{
			Name: tc.Name, BasePriority: tc.BasePriority, GuaranteedGPUs: tc.GuaranteedGPUs,
			MaxGPUs: tc.MaxGPUs, Weight: tc.Weight, YARNQueues: tc.YARNQueues,
			Namespaces: tc.Namespaces, Admins: tc.Admins, EvictGrace: tc.EvictGrace,
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
		if err := t.Validate(); err != nil {
			return nil, broker.WithPrefix(prefix, err)
		}
		if tnames[t.Name] {
			return nil, broker.Invalid(prefix+".name", "tenant %q is defined twice", t.Name)
		}
		tnames[t.Name] = true
		for _, q := range t.YARNQueues {
			if o, ok := owners["q/"+q]; ok {
				return nil, broker.Invalid(prefix+".yarn_queues", "queue %q already belongs to tenant %q", q, o)
			}
			owners["q/"+q] = t.Name
		}
		for _, n := range t.Namespaces {
			if o, ok := owners["n/"+n]; ok {
				return nil, broker.Invalid(prefix+".namespaces", "namespace %q already belongs to tenant %q", n, o)
			}
			owners["n/"+n] = t.Name
		}
		tenants = append(tenants, t)
	}
	return tenants, nil
}

// validate checks that api.tls is whole; the files are read when serve
// starts, so plan and inspect run where they are absent.
func (t tlsConfig) validate() error {
	switch {
	case t.KeyFile != "" && t.CertFile == "":
		return broker.Invalid("api.tls.cert_file", "is missing: key_file is set, so name the PEM certificate it belongs to (or remove key_file to serve plain HTTP)")
	case t.CertFile != "" && t.KeyFile == "":
		return broker.Invalid("api.tls.key_file", "is missing: cert_file is set, so name the certificate's PEM private key (or remove cert_file to serve plain HTTP)")
	case t.ClientCAFile != "" && t.CertFile == "":
		return broker.Invalid("api.tls.client_ca_file", "needs api.tls.cert_file and key_file: client certificates are asked for over TLS only")
	}
	return nil
}
