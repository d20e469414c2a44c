package replay

import (
	"math"
	"slices"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// metrics accumulates one policy's replay.
type metrics struct {
	lastAt                            time.Duration
	gpuSec                            float64   // provisioned GPU-seconds (launch to gone)
	allocSec                          float64   // GPU-seconds held by tasks
	poolGPUSec                        []float64 // provisioned GPU-seconds per pool
	launches, terminations, handovers int
	preemptions, drainEvictions       int
	workLost                          float64 // GPU-hours
	// kills are evictions that threw work away (since the last
	// checkpoint); drainKills those not for a preemption, drainKillLost
	// their GPU-hours; lsKills every eviction of LS or Guaranteed work.
	kills, drainKills, lsKills int
	drainKillLost              float64
	attritions, recommissions  int
	migrationsCancelled        int
	// migrations counts tasks moved by a migration that lost no work;
	// migrationKills those a migration stopped inside its window, after
	// a checkpoint but not right at it (they lost at most the window).
	migrations, migrationKills int
	peakNodes, peakGPUs        int
	ticks, plans               int
	series                     []sample
	// Idle GPU-seconds by cause: booting (not yet schedulable), empty
	// (ready with nothing allocated), leaving (released, handed over or
	// terminating); the rest of idle is the free GPUs of partly used
	// nodes.
	bootSec, emptySec, leavingSec float64
	partSide                      [2]float64
}

// sample is the world at one time, for the capacity plot.
type sample struct {
	at                  time.Duration
	prov, demand, alloc int
}

func (m *metrics) init(pools int) { m.poolGPUSec = make([]float64, pools) }

// integrate adds the capacity and allocation held from s.now until to.
func (m *metrics) integrate(s *sim, to time.Duration) {
	dt := (to - s.now).Seconds()
	if dt <= 0 {
		return
	}
	for _, n := range s.nodes {
		g := float64(s.pools[n.pool].GPUsPerNode)
		m.gpuSec += g * dt
		m.poolGPUSec[n.pool] += g * dt
		m.allocSec += float64(n.used) * dt
		switch {
		case n.phase == broker.PhaseBooting || n.phase == broker.PhaseRegistered:
			m.bootSec += g * dt
		case n.phase == broker.PhaseActive && n.used == 0:
			m.emptySec += g * dt
		case n.phase == broker.PhaseActive && n.side != "":
			m.partSide[sideIdx(n.side)] += float64(n.gpus-n.used) * dt
		case n.phase != broker.PhaseActive:
			m.leavingSec += float64(n.gpus-n.used) * dt
			if n.gpus == 0 {
				m.leavingSec += g * dt
			}
		}
	}
	m.lastAt = to
}

// sample records the world after a step, when it changed.
func (m *metrics) sample(s *sim) {
	var prov, alloc, demand int
	for _, n := range s.nodes {
		if n.phase != broker.PhaseGone {
			prov += s.pools[n.pool].GPUsPerNode
		}
		alloc += n.used
	}
	for i := range s.pending {
		for _, t := range s.pending[i] {
			if t.state == taskPending {
				demand += t.GPUs
			}
		}
	}
	demand += alloc
	m.peakNodes = max(m.peakNodes, len(s.nodes))
	m.peakGPUs = max(m.peakGPUs, prov)
	if k := len(m.series); k > 0 {
		last := m.series[k-1]
		if last.prov == prov && last.demand == demand && last.alloc == alloc {
			return
		}
		if last.at == s.now {
			m.series[k-1] = sample{at: s.now, prov: prov, demand: demand, alloc: alloc}
			return
		}
	}
	m.series = append(m.series, sample{at: s.now, prov: prov, demand: demand, alloc: alloc})
}

// IdleHours splits the GPU-hours provisioned but not allocated.
type IdleHours struct {
	// Booting is nodes launched but not yet offering GPUs.
	Booting float64 `json:"booting"`
	// Empty is ready nodes with nothing allocated (waiting for work or
	// for their scale-down timer).
	Empty float64 `json:"empty"`
	// Leaving is nodes being released, handed over or terminated.
	Leaving float64 `json:"leaving"`
	// PartlyUsed is the free GPUs of ready nodes that run some work.
	PartlyUsed float64 `json:"partly_used"`
	// PartlyUsedYARN and PartlyUsedK8s split PartlyUsed by side (ready
	// nodes that serve a side and hold some work).
	PartlyUsedYARN float64 `json:"partly_used_yarn"`
	PartlyUsedK8s  float64 `json:"partly_used_k8s"`
}

// Percentiles are wait times in seconds, by class or side.
type Percentiles map[string]float64

// Result is one policy's outcome on one trace and load.
type Result struct {
	Name string `json:"name"`
	// GPUHours is the GPU-hours provisioned: every node from its launch
	// request until its instance stops being billed.
	GPUHours float64 `json:"gpu_hours"`
	// AllocatedGPUHours is the GPU-hours held by tasks.
	AllocatedGPUHours float64 `json:"allocated_gpu_hours"`
	// Idle is GPUHours - AllocatedGPUHours by cause.
	Idle IdleHours `json:"idle_gpu_hours"`
	// AllocationRatio is AllocatedGPUHours / GPUHours.
	AllocationRatio float64 `json:"allocation_ratio"`
	// Waits are each task's time pending, from its arrival to its first
	// placement plus, after every eviction, from its re-queue to its next
	// placement; per QoS class and side. A task pending at the end counts
	// its wait until then.
	WaitP50 Percentiles `json:"wait_p50_s"`
	WaitP95 Percentiles `json:"wait_p95_s"`
	WaitP99 Percentiles `json:"wait_p99_s"`
	// CompletedWorkGPUHours is the trace work (GPUs x run time) of the
	// tasks that finished: what the GPU-hours bought.
	CompletedWorkGPUHours float64 `json:"completed_work_gpu_hours"`
	// ProvisionedPerWork is GPUHours / CompletedWorkGPUHours: GPU-hours
	// paid per GPU-hour of work done (1.0 is the limit).
	ProvisionedPerWork float64 `json:"provisioned_per_work"`
	// Unserved counts tasks never placed by the end; Unfinished those
	// placed but not finished (running, or evicted and pending again).
	// NotDoneGPUHours is the work of both left undone at the end.
	Unserved        int     `json:"unserved"`
	Unfinished      int     `json:"unfinished"`
	NotDoneGPUHours float64 `json:"not_done_gpu_hours"`
	// Restarts counts every eviction; Kills those that threw work away
	// (the task redoes the work since its last checkpoint), and
	// KillsNotPreemption the kills that were not a preemption for
	// higher-priority demand (drains, decommission timeouts), with the
	// GPU-hours they lost. LSKills counts evictions of LS or Guaranteed
	// work, which is never preemptible.
	Restarts                   int     `json:"restarts"`
	Kills                      int     `json:"kills"`
	KillsNotPreemption         int     `json:"kills_not_preemption"`
	KillsNotPreemptionGPUHours float64 `json:"kills_not_preemption_gpu_hours"`
	LSKills                    int     `json:"ls_guaranteed_kills"`
	// Migrations counts zero-loss moves of checkpointed work (tasks a
	// migrate op moved right at their checkpoint; one that lost work is
	// a kill not for a preemption).
	Migrations int `json:"migrations"`
	// MigrationKills are the kills not for a preemption that a migration
	// made: a task stopped inside consolidation.migrate_window after its
	// checkpoint, losing at most the window (the rest are drains and
	// decommission timeouts).
	MigrationKills int `json:"migration_kills"`
	// Note says what sets the policy apart, e.g. that it kills work.
	Note string `json:"note,omitempty"`
	// Preemptions counts running tasks evicted for higher-priority work;
	// DrainEvictions those evicted or killed to release a node.
	Preemptions    int `json:"preemptions"`
	DrainEvictions int `json:"drain_evictions"`
	// WorkLostGPUHours is the work evictions threw away (since the last
	// checkpoint, or since the start when none is known).
	WorkLostGPUHours float64 `json:"work_lost_gpu_hours"`
	// WorkLostRuleOff is the work lost with the consolidation rule off
	// (consolidation.max_work_lost unbounded) when that was replayed; the
	// baselines have no such rule, so theirs equals WorkLostGPUHours.
	WorkLostRuleOff float64 `json:"work_lost_rule_off_gpu_hours"`
	// Attritions counts scale-downs that evicted nothing (YARN
	// decommission by attrition, Kubernetes cordon-and-wait);
	// Recommissions those cancelled and given back to their side.
	Attritions    int `json:"attritions"`
	Recommissions int `json:"recommissions"`
	// MigrationsCancelled counts migrations that pending demand cancelled
	// while they still waited for checkpoints (the node given back).
	MigrationsCancelled int `json:"migrations_cancelled"`
	Launches            int `json:"launches"`
	Terminations        int `json:"terminations"`
	Handovers           int `json:"handovers"`
	PeakNodes           int `json:"peak_nodes"`
	PeakGPUs            int `json:"peak_gpus"`
	// AvgGPUs is the mean provisioned GPUs over the replay.
	AvgGPUs float64 `json:"avg_gpus"`
	// EndS is when the replay ended (the last event), in virtual seconds.
	EndS float64 `json:"end_s"`
	// Ticks counts the controller's looks; Plans the planner calls.
	Ticks int `json:"ticks"`
	Plans int `json:"plans"`

	waits  map[string][]float64
	series []sample
	poolGS []float64
}

// result summarises the replay.
func (s *sim) result(name string) Result {
	m := &s.m
	r := Result{
		Name: name, GPUHours: m.gpuSec / 3600, AllocatedGPUHours: m.allocSec / 3600,
		Preemptions: m.preemptions, DrainEvictions: m.drainEvictions, WorkLostGPUHours: m.workLost,
		Attritions: m.attritions, Recommissions: m.recommissions, Migrations: m.migrations,
		MigrationsCancelled: m.migrationsCancelled,
		Restarts:            m.preemptions + m.drainEvictions, Kills: m.kills, KillsNotPreemption: m.drainKills,
		KillsNotPreemptionGPUHours: m.drainKillLost, LSKills: m.lsKills, MigrationKills: m.migrationKills,
		Launches: m.launches, Terminations: m.terminations, Handovers: m.handovers,
		PeakNodes: m.peakNodes, PeakGPUs: m.peakGPUs, EndS: m.lastAt.Seconds(),
		Ticks: m.ticks, Plans: m.plans, series: m.series, poolGS: m.poolGPUSec,
		WaitP50: Percentiles{}, WaitP95: Percentiles{}, WaitP99: Percentiles{},
		waits: map[string][]float64{},
	}
	r.Idle = IdleHours{Booting: m.bootSec / 3600, Empty: m.emptySec / 3600, Leaving: m.leavingSec / 3600}
	r.Idle.PartlyUsedYARN, r.Idle.PartlyUsedK8s = m.partSide[0]/3600, m.partSide[1]/3600
	r.Idle.PartlyUsed = r.GPUHours - r.AllocatedGPUHours - r.Idle.Booting - r.Idle.Empty - r.Idle.Leaving
	if r.GPUHours > 0 {
		r.AllocationRatio = r.AllocatedGPUHours / r.GPUHours
	}
	if m.lastAt > 0 {
		r.AvgGPUs = m.gpuSec / m.lastAt.Seconds()
	}
	for _, t := range s.tasks {
		w := t.waited
		switch t.state {
		case taskDone:
			r.CompletedWorkGPUHours += float64(t.GPUs) * t.Run.Hours()
		case taskPending:
			// Work pending at the end waited at least until then: count
			// that, so leaving work unserved never shortens the waits.
			w += max(0, m.lastAt-t.since)
		case taskFuture:
			w += max(0, m.lastAt-t.arrival)
		}
		if t.state != taskDone {
			left := t.left
			if t.state == taskRunning {
				left -= m.lastAt - t.startedAt
			}
			r.NotDoneGPUHours += float64(t.GPUs) * max(0, left).Hours()
			if t.firstStart < 0 {
				r.Unserved++
			} else {
				r.Unfinished++
			}
		}
		ws := w.Seconds()
		r.waits[string(t.QoS)] = append(r.waits[string(t.QoS)], ws)
		r.waits[string(t.side)] = append(r.waits[string(t.side)], ws)
		r.waits["all"] = append(r.waits["all"], ws)
	}
	if r.CompletedWorkGPUHours > 0 {
		r.ProvisionedPerWork = r.GPUHours / r.CompletedWorkGPUHours
	}
	for k, ws := range r.waits {
		slices.Sort(ws)
		r.WaitP50[k] = quantile(ws, 0.50)
		r.WaitP95[k] = quantile(ws, 0.95)
		r.WaitP99[k] = quantile(ws, 0.99)
	}
	return r
}

// quantile is the nearest-rank quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
