package broker

import (
	"slices"
	"strings"
)

// TenantIndex resolves YARN queues and namespaces to tenants. It is the one
// tenant mapping: the ledger builds it once per tick (NewTenantIndex) and
// the runtime hands it to both sides' observers, which look tenants up in
// it (QueueTenant, NamespaceTenant) rather than building maps of their own.
type TenantIndex struct {
	Tenants    map[string]Tenant
	Queues     map[string]string // YARN queue (full path or leaf name) → tenant
	Namespaces map[string]string // namespace → tenant
}

// NewTenantIndex indexes tenants by name, by the YARN queues they list and
// by their namespaces. Where two tenants claim one queue or namespace (the
// store refuses that; a file or a test may not), the first by name keeps
// it, so the index does not depend on the order of tenants.
func NewTenantIndex(tenants []Tenant) TenantIndex {
	x := TenantIndex{Tenants: make(map[string]Tenant, len(tenants)), Queues: map[string]string{}, Namespaces: map[string]string{}}
	sorted := slices.Clone(tenants)
	slices.SortStableFunc(sorted, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range sorted {
		if _, dup := x.Tenants[t.Name]; dup {
			continue
		}
		x.Tenants[t.Name] = t
		for _, q := range t.YARNQueues {
			if _, taken := x.Queues[q]; !taken {
				x.Queues[q] = t.Name
			}
		}
		for _, n := range t.Namespaces {
			if _, taken := x.Namespaces[n]; !taken {
				x.Namespaces[n] = t.Name
			}
		}
	}
	return x
}

// QueueTenant returns the tenant of the YARN queue at path (root.a.b): the
// tenant listing the full path, else the nearest listed ancestor path, else
// the queue's leaf name; false when no tenant claims it.
func (x TenantIndex) QueueTenant(path string) (Tenant, bool) {
	if name, ok := x.Queues[path]; ok {
		return x.tenant(name)
	}
	for p := path; ; {
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
		if name, ok := x.Queues[p]; ok {
			return x.tenant(name)
		}
	}
	if name, ok := x.Queues[path[strings.LastIndexByte(path, '.')+1:]]; ok {
		return x.tenant(name)
	}
	return Tenant{}, false
}

// NamespaceTenant returns the tenant of a Kubernetes namespace; false when
// no tenant claims it.
func (x TenantIndex) NamespaceTenant(ns string) (Tenant, bool) {
	if name, ok := x.Namespaces[ns]; ok {
		return x.tenant(name)
	}
	return Tenant{}, false
}

func (x TenantIndex) tenant(name string) (Tenant, bool) {
	t, ok := x.Tenants[name]
	if !ok {
		// An index built without tenant records still names the tenant.
		t = Tenant{Name: name}
	}
	return t, true
}
