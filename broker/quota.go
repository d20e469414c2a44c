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
	// queue is the tenant's demand at the priority level being admitted.
	queue []*wdemand
}

// newQuotas resolves the quota state of every tenant with pending demand
// (d.tq), counting the GPUs its running work holds and those of demand an
// in-flight op already serves. A tenant missing from the snapshot has no
// guarantee, no maximum and weight 1: quota is opt-in.
func newQuotas(s *Snapshot, nodes []wnode, demand, inflight []*wdemand) {
	q := make(map[string]*tenantQuota)
	for _, d := range demand {
		t, ok := q[d.d.Tenant]
		if !ok {
			t = &tenantQuota{name: d.d.Tenant, max: math.MaxInt, weight: 1}
			if cfg, ok := s.Tenants[t.name]; ok {
				t.guaranteed, t.max = toSlices(cfg.GuaranteedGPUs), toSlices(cfg.MaxGPUs)
				if cfg.Weight > 0 {
					t.weight = cfg.Weight
				}
			}
			q[t.name] = t
		}
		d.tq = t
	}
	for i := range nodes {
		n := nodes[i].n
		if n.Phase == PhaseGone {
			continue
		}
		for _, w := range n.Work {
			if !w.System && w.GPUs > 0 {
				if t := q[w.Tenant]; t != nil {
					t.usage += computeSlices(w.MIGProfile, w.GPUs)
				}
			}
		}
	}
	for _, d := range inflight {
		if t := q[d.d.Tenant]; t != nil {
			t.usage += d.slices(d.d.Units)
		}
	}
}

// admit decides which pending demand quota allows, and in which order the
// planner serves it: demand within its tenant's guarantee first (by
// priority, age, ID), then the rest by priority, then by weighted fair share
// (the tenant with the lowest usage per weight first), then age, then ID.
// Demand beyond its tenant's maximum waits "over-quota"; a non-gang demand
// may be admitted for part of its units. demand must be sorted by
// priority (descending), age and ID, with tenants resolved (newQuotas).
func admit(demand []*wdemand) []*wdemand {
	order := make([]*wdemand, 0, len(demand))
	var rest []*wdemand
	for _, d := range demand {
		t := d.tq
		if g := d.slices(d.d.Units); t.guaranteed > 0 && t.usage+g <= t.guaranteed {
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
		for j < len(rest) && rest[j].prio == rest[i].prio {
			j++
		}
		order = fairShare(rest[i:j], order)
		i = j
	}
	return order
}

// fairShare admits one priority level's demand, appending it to order.
func fairShare(level []*wdemand, order []*wdemand) []*wdemand {
	h := &tenantHeap{}
	for _, d := range level {
		t := d.tq
		if len(t.queue) == 0 {
			h.items = append(h.items, t)
		}
		t.queue = append(t.queue, d)
	}
	heap.Init(h)
	for h.Len() > 0 {
		t := h.items[0]
		d := t.queue[0]
		t.queue = t.queue[1:]
		per := d.slices(1)
		room := t.max - t.usage
		switch {
		case room >= d.slices(d.d.Units):
			d.admitted = d.d.Units
		case !d.d.Gang && room >= per:
			d.admitted = room / per
		}
		if d.admitted > 0 {
			t.usage += d.admitted * per
			order = append(order, d)
		}
		if d.admitted < d.d.Units {
			d.quotaUsage = t.usage
		}
		if len(t.queue) == 0 {
			t.queue = nil
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return order
}

// quotaDetail explains why units of d were not admitted.
func (d *wdemand) quotaDetail() string {
	return fmt.Sprintf("tenant %s uses %d of its %d GPUs (running work and admitted demand); %d more GPUs would exceed it",
		d.tq.name, fromSlices(d.quotaUsage), fromSlices(d.tq.max), fromSlices(d.slices(d.d.Units-d.admitted)))
}

// Quotas and fair share count compute slices, so seven 1g MIG devices
// weigh one GPU, not seven: usage, guarantees and maxima are in GPUs ×
// MIGSlicesPerGPU.

// slices is what units of d weigh in compute slices.
func (d *wdemand) slices(units int) int {
	return computeSlices(d.d.Constraints.MIGProfile, d.d.GPUsPerUnit) * units
}

// toSlices is a tenant's GPU bound in compute slices (no bound stays none).
func toSlices(gpus int) int {
	if gpus >= math.MaxInt/MIGSlicesPerGPU {
		return math.MaxInt
	}
	return gpus * MIGSlicesPerGPU
}

// fromSlices is compute slices as the GPUs they fill, rounded up.
func fromSlices(s int) int {
	if s == math.MaxInt {
		return s
	}
	return (s + MIGSlicesPerGPU - 1) / MIGSlicesPerGPU
}

// tenantHeap orders tenants by usage per weight, then by the age and ID of
// their next demand.
type tenantHeap struct{ items []*tenantQuota }

func (h *tenantHeap) Len() int { return len(h.items) }
func (h *tenantHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if sa, sb := float64(a.usage)/a.weight, float64(b.usage)/b.weight; sa != sb {
		return sa < sb
	}
	return compareAge(a.queue[0], b.queue[0]) < 0
}
func (h *tenantHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *tenantHeap) Push(x any)    { h.items = append(h.items, x.(*tenantQuota)) }
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
