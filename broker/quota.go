package broker

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
)

// tenantQuota is a tenant's quota and usage during one plan.
type tenantQuota struct {
	name       string
	guaranteed int
	max        int // math.MaxInt when the tenant is not configured
	weight     float64
	// usage is GPUs held by running work plus GPUs of admitted demand.
	usage int
}

// newQuotas returns the quota state of every tenant that has running work or
// pending demand. A tenant missing from the snapshot has no guarantee, no
// maximum and weight 1: quota is opt-in.
func newQuotas(s *Snapshot, nodes []wnode, demand []*wdemand) map[string]*tenantQuota {
	q := make(map[string]*tenantQuota)
	get := func(name string) *tenantQuota {
		if t, ok := q[name]; ok {
			return t
		}
		t := &tenantQuota{name: name, max: math.MaxInt, weight: 1}
		if cfg, ok := s.Tenants[name]; ok {
			t.guaranteed, t.max = cfg.GuaranteedGPUs, cfg.MaxGPUs
			if cfg.Weight > 0 {
				t.weight = cfg.Weight
			}
		}
		q[name] = t
		return t
	}
	for i := range nodes {
		n := nodes[i].n
		if n.Phase == PhaseGone {
			continue
		}
		for _, w := range n.Work {
			if !w.System && w.GPUs > 0 && w.Tenant != "" {
				get(w.Tenant).usage += w.GPUs
			}
		}
	}
	for _, d := range demand {
		get(d.d.Tenant)
	}
	return q
}

// admit decides which pending demand quota allows, and in which order the
// planner serves it: demand within its tenant's guarantee first (by
// priority, age, ID), then the rest by priority, then by weighted fair share
// (the tenant with the lowest usage per weight first), then age, then ID.
// Demand beyond its tenant's maximum waits "over-quota"; a non-gang demand
// may be admitted for part of its units.
func admit(q map[string]*tenantQuota, demand []*wdemand) []*wdemand {
	// demand arrives sorted by priority (descending), first-seen, ID.
	order := make([]*wdemand, 0, len(demand))
	var rest []*wdemand
	for _, d := range demand {
		t := q[d.d.Tenant]
		if g := d.d.GPUs(); t.guaranteed > 0 && t.usage+g <= t.guaranteed {
			t.usage += g
			d.admitted = d.d.Units
			d.guaranteed = true
			order = append(order, d)
			continue
		}
		rest = append(rest, d)
	}
	// Between guaranteed and max: priority levels in order; within a level,
	// tenants take turns by usage per weight.
	for i := 0; i < len(rest); {
		j := i
		for j < len(rest) && rest[j].d.Priority == rest[i].d.Priority {
			j++
		}
		order = fairShare(q, rest[i:j], order)
		i = j
	}
	return order
}

// fairShare admits one priority level's demand, appending it to order.
func fairShare(q map[string]*tenantQuota, level []*wdemand, order []*wdemand) []*wdemand {
	byTenant := make(map[string][]*wdemand)
	var names []string
	for _, d := range level {
		if _, ok := byTenant[d.d.Tenant]; !ok {
			names = append(names, d.d.Tenant)
		}
		byTenant[d.d.Tenant] = append(byTenant[d.d.Tenant], d)
	}
	h := &tenantHeap{}
	for _, name := range names {
		h.items = append(h.items, &tenantQueue{t: q[name], demand: byTenant[name]})
	}
	heap.Init(h)
	for h.Len() > 0 {
		tq := h.items[0]
		d := tq.demand[0]
		tq.demand = tq.demand[1:]
		t := tq.t
		per := d.d.GPUsPerUnit
		room := t.max - t.usage
		switch {
		case room >= d.d.GPUs():
			d.admitted = d.d.Units
		case !d.d.Gang && room >= per:
			d.admitted = room / per
		}
		if d.admitted > 0 {
			t.usage += d.admitted * per
			order = append(order, d)
		}
		if d.admitted < d.d.Units {
			d.quotaDetail = fmt.Sprintf("tenant %s uses %d of its %d GPUs (running work and admitted demand); %d more GPUs would exceed it",
				t.name, t.usage, t.max, (d.d.Units-d.admitted)*per)
		}
		if len(tq.demand) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return order
}

type tenantQueue struct {
	t      *tenantQuota
	demand []*wdemand
}

// tenantHeap orders tenants by usage per weight, then by the age and ID of
// their next demand.
type tenantHeap struct{ items []*tenantQueue }

func (h *tenantHeap) Len() int { return len(h.items) }
func (h *tenantHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	sa, sb := float64(a.t.usage)/a.t.weight, float64(b.t.usage)/b.t.weight
	if sa != sb {
		return sa < sb
	}
	return compareAge(a.demand[0], b.demand[0]) < 0
}
func (h *tenantHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *tenantHeap) Push(x any)    { h.items = append(h.items, x.(*tenantQueue)) }
func (h *tenantHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// compareAge orders demand oldest first, then by ID.
func compareAge(a, b *wdemand) int {
	if a.sec != b.sec {
		return cmp.Compare(a.sec, b.sec)
	}
	if a.nsec != b.nsec {
		return cmp.Compare(a.nsec, b.nsec)
	}
	return cmp.Compare(a.id, b.id)
}

// compareDemand is the base order: priority (higher first), age, ID.
func compareDemand(a, b *wdemand) int {
	if a.prio != b.prio {
		return cmp.Compare(b.prio, a.prio)
	}
	return compareAge(a, b)
}

func sortDemand(ds []*wdemand) { slices.SortFunc(ds, compareDemand) }
