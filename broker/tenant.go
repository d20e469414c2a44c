package broker

import (
	"regexp"
	"time"
)

// Tenant is the unit of quota. It maps YARN queues and Kubernetes namespaces
// to one name and holds their priority and GPU limits.
type Tenant struct {
	// Name identifies the tenant (lowercase DNS label).
	Name string `json:"name"`
	// BasePriority is added to a YARN app's priority to put it on the unified
	// scale shared with Kubernetes PriorityClass values.
	BasePriority int64 `json:"base_priority"`
	// GuaranteedGPUs are served before any other demand.
	GuaranteedGPUs int `json:"guaranteed_gpus"`
	// MaxGPUs caps the tenant's GPUs; demand beyond it waits for quota.
	MaxGPUs int `json:"max_gpus"`
	// Weight is the tenant's fair-share weight between guaranteed and max.
	Weight float64 `json:"weight"`
	// YARNQueues are the full queue paths (root.a.b) or leaf names that belong
	// to the tenant.
	YARNQueues []string `json:"yarn_queues"`
	// Namespaces are the Kubernetes namespaces that belong to the tenant.
	Namespaces []string `json:"namespaces"`
	// Admins are the principals allowed to administer the tenant.
	Admins []string `json:"admins"`
	// EvictGrace is how long the tenant's preempted YARN containers may
	// take to exit after GRACEFUL_SHUTDOWN (a trainer that checkpoints on
	// SIGTERM needs longer than a stateless executor) before that
	// container alone gets FORCEFUL_SHUTDOWN; zero for the broker's
	// yarn.evict_grace.
	EvictGrace Duration `json:"evict_grace,omitzero"`
	// Version increases on every change; updates must name the version they
	// read, so concurrent edits are detected rather than lost.
	Version int64 `json:"version"`
}

// MaxEvictGrace bounds a tenant's evict grace: a preemption waits that
// long for each victim at most, so the demand it serves is not held back
// for longer than an operator would expect.
const MaxEvictGrace = time.Hour

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidName reports whether s is a valid tenant or pool name: a DNS label of
// lowercase letters, digits and dashes, at most 63 characters.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate checks the tenant's fields.
func (t Tenant) Validate() error {
	switch {
	case !ValidName(t.Name):
		return Invalid("name", "must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters), got %q", t.Name)
	case t.GuaranteedGPUs < 0:
		return Invalid("guaranteed_gpus", "must not be negative, got %d", t.GuaranteedGPUs)
	case t.MaxGPUs < 0:
		return Invalid("max_gpus", "must not be negative, got %d", t.MaxGPUs)
	case t.MaxGPUs < t.GuaranteedGPUs:
		return Invalid("max_gpus", "must be at least guaranteed_gpus (%d), got %d", t.GuaranteedGPUs, t.MaxGPUs)
	case !(t.Weight > 0) || t.Weight > 1e6:
		return Invalid("weight", "must be greater than 0 and at most 1000000, got %g", t.Weight)
	case t.EvictGrace < 0 || t.EvictGrace.D() > MaxEvictGrace:
		return Invalid("evict_grace", "must be between 0 (the broker's default) and %s, got %s", MaxEvictGrace, t.EvictGrace)
	}
	seen := map[string]bool{}
	for i, q := range t.YARNQueues {
		if q == "" {
			return Invalid("yarn_queues["+itoa(i)+"]", "must not be empty")
		}
		if seen["q/"+q] {
			return Invalid("yarn_queues["+itoa(i)+"]", "queue %q is listed twice", q)
		}
		seen["q/"+q] = true
	}
	for i, ns := range t.Namespaces {
		if !ValidName(ns) {
			return Invalid("namespaces["+itoa(i)+"]", "must be a Kubernetes namespace name, got %q", ns)
		}
		if seen["n/"+ns] {
			return Invalid("namespaces["+itoa(i)+"]", "namespace %q is listed twice", ns)
		}
		seen["n/"+ns] = true
	}
	return nil
}
