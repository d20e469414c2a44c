package cloud

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gpubroker/gpubroker/broker"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxAttempts      = 5
	DefaultMaxBackoff       = 20 * time.Second
	DefaultPoolBackoff      = 5 * time.Minute
	DefaultMaxProvisionTime = 15 * time.Minute
	DefaultPageSize         = 50
	DefaultActivityRecords  = 20
)

// PoolConfig names one autoscaling group the broker manages. Values set
// here win over the group's tags; zero values are filled from the tags.
type PoolConfig struct {
	// Name is the pool's name in gpubroker (a DNS label).
	Name string `json:"name" yaml:"name"`
	// Group is the autoscaling group name; it defaults to Name.
	Group string `json:"group,omitempty" yaml:"group,omitempty"`
	// MinNodes and MaxNodes narrow the group's own min/max size. The
	// effective bounds are never wider than the group's.
	MinNodes *int `json:"min_nodes,omitempty" yaml:"min_nodes,omitempty"`
	MaxNodes *int `json:"max_nodes,omitempty" yaml:"max_nodes,omitempty"`
	// GPUModel and GPUsPerNode describe each node when the tags do not.
	GPUModel    string `json:"gpu_model,omitempty" yaml:"gpu_model,omitempty"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty" yaml:"gpus_per_node,omitempty"`
	// Sides says which side the pool may serve; default shared.
	Sides broker.PoolSides `json:"sides,omitempty" yaml:"sides,omitempty"`
	// PricePerHour and ExpanderPriority feed the price and priority expanders.
	PricePerHour     float64 `json:"price_per_hour,omitempty" yaml:"price_per_hour,omitempty"`
	ExpanderPriority int     `json:"expander_priority,omitempty" yaml:"expander_priority,omitempty"`
	// Labels and Taints are merged over the ones from tags.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Taints []broker.Taint    `json:"taints,omitempty" yaml:"taints,omitempty"`
}

// Config configures a Provider.
type Config struct {
	// Region is the AWS region; empty means the default chain's region
	// (AWS_REGION, the shared config file, instance metadata).
	Region string
	// Endpoint, when set, is the base URL of both the autoscaling and the
	// EC2 API (a simulator or moto); empty means the real AWS endpoints.
	Endpoint string
	// Credentials, when set, replace the default credential chain
	// (environment, shared files, IRSA web identity, instance profile).
	// Tests pass static credentials.
	Credentials aws.CredentialsProvider
	// Pools are the configured groups.
	Pools []PoolConfig
	// Discover adds every group tagged gpubroker.io/pool=<name>.
	Discover bool
	// MaxAttempts and MaxBackoff configure the SDK's standard retryer,
	// which retries throttling and transient errors with exponential,
	// jittered backoff capped at MaxBackoff.
	MaxAttempts int
	MaxBackoff  time.Duration
	// PoolBackoff is how long a pool backs off after a failed launch,
	// throttling that outlasted the retries, or an instance that never
	// registered.
	PoolBackoff time.Duration
	// MaxProvisionTime is how long an instance may take from launch to
	// registering as a node before the pool backs off, when ProvisionTime
	// is not set or cannot answer.
	MaxProvisionTime time.Duration
	// ProvisionTime, when set, returns the max provision time from its
	// owner (the policy in the store, broker.Policy.MaxProvisionTime, which
	// the planner and the executor read too); it is read on every
	// observation, so an edit through the API applies at once.
	ProvisionTime func(ctx context.Context) (time.Duration, error)
	// PageSize is MaxRecords for DescribeAutoScalingGroups (1..100).
	PageSize int
	// ActivityRecords is how many recent scaling activities per group are
	// read to find failed launches (1..100).
	ActivityRecords int
	// Bounds, when set, returns a pool's min and max nodes from their owner
	// (the store, where the API edits them); ok false means it knows no
	// bounds for the pool. It is read on every SetDesired and Terminate and
	// wins over PoolConfig.MinNodes and MaxNodes, which are only what the
	// file said at start. The group's own MinSize and MaxSize still bound
	// what AWS accepts.
	Bounds func(ctx context.Context, pool string) (minNodes, maxNodes int, ok bool, err error)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives one line per action and backoff; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.PoolBackoff == 0 {
		c.PoolBackoff = DefaultPoolBackoff
	}
	if c.MaxProvisionTime == 0 {
		c.MaxProvisionTime = DefaultMaxProvisionTime
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.ActivityRecords == 0 {
		c.ActivityRecords = DefaultActivityRecords
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for i := range c.Pools {
		if c.Pools[i].Group == "" {
			c.Pools[i].Group = c.Pools[i].Name
		}
	}
}

// Validate checks the configuration and names the offending field.
func (c Config) Validate() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return broker.Invalid("endpoint", "must be an http or https URL such as http://127.0.0.1:5000, got %q", c.Endpoint)
		}
	}
	switch {
	case c.MaxAttempts < 1:
		return broker.Invalid("max_attempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.MaxBackoff <= 0:
		return broker.Invalid("max_backoff", "must be positive, got %s", c.MaxBackoff)
	case c.PoolBackoff <= 0:
		return broker.Invalid("pool_backoff", "must be positive, got %s", c.PoolBackoff)
	case c.MaxProvisionTime <= 0:
		return broker.Invalid("max_provision_time", "must be positive, got %s", c.MaxProvisionTime)
	case c.PageSize < 1 || c.PageSize > 100:
		return broker.Invalid("page_size", "must be between 1 and 100, got %d", c.PageSize)
	case c.ActivityRecords < 1 || c.ActivityRecords > 100:
		return broker.Invalid("activity_records", "must be between 1 and 100, got %d", c.ActivityRecords)
	case len(c.Pools) == 0 && !c.Discover:
		return broker.Invalid("pools", "name at least one pool or enable discovery by tag %s", TagPool)
	}
	names := map[string]bool{}
	groups := map[string]bool{}
	for i, p := range c.Pools {
		field := fmt.Sprintf("pools[%d]", i)
		switch {
		case !broker.ValidName(p.Name):
			return broker.Invalid(field+".name", "must be a lowercase DNS label, got %q", p.Name)
		case names[p.Name]:
			return broker.Invalid(field+".name", "pool %q is named twice", p.Name)
		case groups[p.Group]:
			return broker.Invalid(field+".group", "group %q is named twice", p.Group)
		case p.MinNodes != nil && *p.MinNodes < 0:
			return broker.Invalid(field+".min_nodes", "must not be negative, got %d", *p.MinNodes)
		case p.MaxNodes != nil && p.MinNodes != nil && *p.MaxNodes < *p.MinNodes:
			return broker.Invalid(field+".max_nodes", "must be at least min_nodes (%d), got %d", *p.MinNodes, *p.MaxNodes)
		case p.MaxNodes != nil && *p.MaxNodes < 0:
			return broker.Invalid(field+".max_nodes", "must not be negative, got %d", *p.MaxNodes)
		case p.GPUsPerNode < 0:
			return broker.Invalid(field+".gpus_per_node", "must not be negative, got %d", p.GPUsPerNode)
		case p.Sides != "" && !p.Sides.Valid():
			return broker.Invalid(field+".sides", "must be %q, %q or %q, got %q", broker.PoolYARN, broker.PoolK8s, broker.PoolShared, p.Sides)
		case p.PricePerHour < 0:
			return broker.Invalid(field+".price_per_hour", "must not be negative, got %g", p.PricePerHour)
		}
		names[p.Name] = true
		groups[p.Group] = true
	}
	return nil
}
