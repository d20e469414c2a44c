package api

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
	"github.com/gpubroker/gpubroker/store"
)

// sideCapacity is the GPUs of one side (yarn, k8s, or none for nodes in
// transfer or unregistered).
type sideCapacity struct {
	Side          broker.Owner `json:"side"`
	Nodes         int          `json:"nodes"`
	NodesInFlight int          `json:"nodes_in_flight"`
	GPUsTotal     int          `json:"gpus_total"`
	GPUsBusy      int          `json:"gpus_busy"`
	GPUsIdle      int          `json:"gpus_idle"`
	GPUsInFlight  int          `json:"gpus_in_flight"`
}

// poolCapacity is one pool's size and GPU use.
type poolCapacity struct {
	Name string `json:"name"`
	// Provider is aws (an autoscaling group) or fleet (owned hosts).
	Provider      string               `json:"provider"`
	GPUModel      string               `json:"gpu_model"`
	GPUsPerNode   int                  `json:"gpus_per_node"`
	Sides         broker.PoolSides     `json:"sides"`
	MinNodes      int                  `json:"min_nodes"`
	MaxNodes      int                  `json:"max_nodes"`
	Nodes         int                  `json:"nodes"`
	NodesInFlight int                  `json:"nodes_in_flight"`
	GPUsTotal     int                  `json:"gpus_total"`
	GPUsBusy      int                  `json:"gpus_busy"`
	GPUsInFlight  int                  `json:"gpus_in_flight"`
	GPUsBySide    map[broker.Owner]int `json:"gpus_by_side"`
	BackoffUntil  time.Time            `json:"backoff_until,omitzero"`
	BackoffReason string               `json:"backoff_reason,omitempty"`
	// NodesBySide counts the pool's nodes by the side that owns them.
	NodesBySide map[broker.Owner]int `json:"nodes_by_side"`
	// HandOvers24h counts its nodes handed from one side to the other in
	// the last 24 hours.
	HandOvers24h int `json:"hand_overs_24h"`
	// Idle are its ready nodes that run nothing, longest idle first, with
	// the side they idle on.
	Idle []idleNode `json:"idle"`
	// MissingHosts are the hosts a fleet pool names that neither side
	// listed in the leader's last tick (off, or not installed yet).
	MissingHosts []string `json:"missing_hosts,omitempty"`
}

// idleNode is a node that runs nothing, since when, on which side.
type idleNode struct {
	Node        string       `json:"node"`
	Side        broker.Owner `json:"side"`
	Since       time.Time    `json:"since"`
	IdleSeconds float64      `json:"idle_seconds"`
}

// demandGroup is pending demand of one tenant at one priority waiting for
// one reason.
type demandGroup struct {
	store.DemandGroup
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
}

// capacitySummary is the body of GET /capacity.
type capacitySummary struct {
	At          time.Time             `json:"at"`
	Sides       []sideCapacity        `json:"sides"`
	Pools       []poolCapacity        `json:"pools"`
	Demand      []demandGroup         `json:"demand"`
	PendingGPUs int                   `json:"pending_gpus"`
	Runtime     *engine.RuntimeStatus `json:"runtime,omitempty"`
}

// capacityCache keeps the last summary for a short time: every dashboard
// polls it, and many readers at once then cost one computation, not one
// each. Only one computation runs at a time; readers that arrive during it
// wait and reuse its result.
type capacityCache struct {
	mu  sync.Mutex
	at  time.Time
	val capacitySummary
}

func (s *server) capacity(w http.ResponseWriter, r *http.Request) {
	if p := queryParams(r); p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	out, err := s.capacitySummary(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.rt != nil {
		st := s.rt.Status()
		out.Runtime = &st
		if len(st.MissingHosts) > 0 {
			out.Pools = slices.Clone(out.Pools)
			for i := range out.Pools {
				out.Pools[i].MissingHosts = st.MissingHosts[out.Pools[i].Name]
			}
		}
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, filterCapacity(sc, out))
}

func (s *server) capacitySummary(ctx context.Context) (capacitySummary, error) {
	c := &s.capCache
	c.mu.Lock()
	defer c.mu.Unlock()
	now := s.cfg.Now()
	if s.cfg.CapacityCacheTTL > 0 && !c.at.IsZero() && now.Sub(c.at) < s.cfg.CapacityCacheTTL {
		return c.val, nil
	}
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return capacitySummary{}, err
	}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return capacitySummary{}, err
	}
	groups, err := s.st.DemandSummary(ctx)
	if err != nil {
		return capacitySummary{}, err
	}
	handOvers, err := s.st.HandOvers(ctx, now.Add(-24*time.Hour))
	if err != nil {
		return capacitySummary{}, err
	}
	c.val, c.at = summarise(now, nodes, pools, groups), now
	for i := range c.val.Pools {
		c.val.Pools[i].HandOvers24h = handOvers[c.val.Pools[i].Name]
	}
	return c.val, nil
}

// summarise computes the capacity summary. Sides and pools count nodes by
// broker.CountNodeGPUs, the rule the executor's capacity samples use too:
// in-flight nodes (requested, booting, registered) count their pool's GPUs
// per node until they advertise GPUs; terminating, gone and down nodes
// count nowhere.
func summarise(now time.Time, nodes []broker.Node, pools []store.PoolRecord, groups []store.DemandGroup) capacitySummary {
	out := capacitySummary{At: now, Pools: []poolCapacity{}, Demand: []demandGroup{}}
	defs := make([]broker.Pool, len(pools))
	for i := range pools {
		defs[i] = pools[i].Pool
	}
	for _, c := range broker.CapacityBySide(nodes, defs, nil) {
		out.Sides = append(out.Sides, sideCapacity{Side: c.Side, Nodes: c.Nodes, NodesInFlight: c.NodesInFlight,
			GPUsTotal: c.GPUsTotal, GPUsBusy: c.GPUsBusy, GPUsIdle: c.GPUsIdle, GPUsInFlight: c.GPUsInFlight})
	}
	poolIdx := map[string]int{}
	for _, p := range pools {
		poolIdx[p.Name] = len(out.Pools)
		out.Pools = append(out.Pools, poolCapacity{Name: p.Name, Provider: p.Provider, GPUModel: p.GPUModel, GPUsPerNode: p.GPUsPerNode,
			Sides: p.Sides, MinNodes: p.MinNodes, MaxNodes: p.MaxNodes, GPUsBySide: map[broker.Owner]int{},
			BackoffUntil: p.BackoffUntil, BackoffReason: p.BackoffReason, NodesBySide: map[broker.Owner]int{}, Idle: []idleNode{}})
	}
	for i := range nodes {
		pi, ok := poolIdx[nodes[i].Pool]
		if !ok {
			continue
		}
		pc := &out.Pools[pi]
		c, ok := broker.CountNodeGPUs(&nodes[i], pc.GPUsPerNode)
		if !ok {
			continue
		}
		pc.Nodes++
		pc.NodesBySide[c.Side]++
		pc.GPUsTotal += c.Total
		pc.GPUsBySide[c.Side] += c.Total
		if c.InFlight {
			pc.NodesInFlight++
			pc.GPUsInFlight += c.Total
			continue
		}
		pc.GPUsBusy += c.Busy
		if n := &nodes[i]; n.Phase == broker.PhaseActive && n.GPUsAllocated == 0 && len(n.Work) == 0 && !n.UnderusedSince.IsZero() {
			pc.Idle = append(pc.Idle, idleNode{Node: n.Name, Side: n.Owner, Since: n.UnderusedSince, IdleSeconds: seconds(max(0, now.Sub(n.UnderusedSince)))})
		}
	}
	for i := range out.Pools {
		slices.SortFunc(out.Pools[i].Idle, func(a, b idleNode) int { return a.Since.Compare(b.Since) })
	}
	// pending_gpus is broker.PendingGPUs over the live ledger, summed by
	// the store's DemandSummary (the SQL implements that rule; a store test
	// binds them).
	for _, g := range groups {
		out.Demand = append(out.Demand, demandGroup{DemandGroup: g, OldestWaitSeconds: seconds(max(0, now.Sub(g.OldestSeen)))})
		out.PendingGPUs += g.GPUs
	}
	return out
}

// maxSeriesWindow bounds /capacity/series and maxSeriesPoints its answer.
const (
	maxSeriesWindow = 7 * 24 * time.Hour
	maxSeriesPoints = 720
)

// seriesPoint is the GPUs of every side at one sample time.
type seriesPoint struct {
	At    time.Time                        `json:"at"`
	Sides map[string]broker.CapacitySample `json:"sides"`
}

type series struct {
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Points []seriesPoint `json:"points"`
	// Step is the spacing of Demand, in seconds.
	Step float64 `json:"step_seconds"`
	// Demand is pending demand by tenant and priority at every step,
	// rebuilt from the ledger and its history.
	Demand []store.DemandPoint `json:"demand"`
}

// capacitySeries serves GPUs by side over time (busy, idle, in flight,
// pending demand), at most maxSeriesPoints points: longer windows keep
// evenly spaced samples.
func (s *server) capacitySeries(w http.ResponseWriter, r *http.Request) {
	p := queryParams(r, "from", "to", "window", "step")
	to := p.time("to")
	from := p.time("from")
	window := p.duration("window")
	step := p.duration("step")
	if p.err != nil {
		s.fail(w, r, p.err)
		return
	}
	if to.IsZero() {
		to = s.cfg.Now()
	}
	if !from.IsZero() && window != 0 {
		s.fail(w, r, broker.Invalid("window", "give from or window, not both"))
		return
	}
	if from.IsZero() {
		if window == 0 {
			window = s.cfg.SeriesWindow
		}
		from = to.Add(-window)
	}
	switch {
	case !from.Before(to):
		s.fail(w, r, broker.Invalid("from", "must be before to (%s)", to.Format(time.RFC3339)))
		return
	case to.Sub(from) > maxSeriesWindow:
		s.fail(w, r, broker.Invalid("window", "must be at most %s", maxSeriesWindow))
		return
	}
	if step == 0 {
		step = max(time.Second, (to.Sub(from) / 60).Round(time.Second))
	}
	if step < time.Second || to.Sub(from)/step > maxSeriesPoints {
		s.fail(w, r, broker.Invalid("step", "must be at least 1s and give at most %d points over %s", maxSeriesPoints, to.Sub(from)))
		return
	}
	// Steps fall on multiples of step, so successive polls line up.
	demand, err := s.st.DemandSeries(r.Context(), from.Truncate(step).Add(step), to, step)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	samples, err := s.st.Samples(r.Context(), from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var pts []seriesPoint
	for _, c := range samples {
		if len(pts) == 0 || !pts[len(pts)-1].At.Equal(c.At) {
			pts = append(pts, seriesPoint{At: c.At, Sides: map[string]broker.CapacitySample{}})
		}
		pts[len(pts)-1].Sides[c.Side] = c
	}
	if len(pts) > maxSeriesPoints {
		thin := make([]seriesPoint, 0, maxSeriesPoints)
		for i := 0; i < maxSeriesPoints; i++ {
			thin = append(thin, pts[i*len(pts)/maxSeriesPoints])
		}
		thin[len(thin)-1] = pts[len(pts)-1]
		pts = thin
	}
	sc, ok := s.scoped(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, series{From: from, To: to, Points: items(pts), Step: step.Seconds(), Demand: items(filterDemandPoints(sc, demand))})
}
