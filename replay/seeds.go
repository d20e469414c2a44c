package replay

import (
	"math"

	"github.com/gpubroker/gpubroker/broker"
)

// Spread is one figure over the seeds replayed: its mean, lowest and
// highest value.
type Spread struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Mean += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean /= float64(len(xs))
	return s
}

// Summary is one policy at one load over every seed replayed (the seed
// salts the task-to-side hash, so each seed is another split of the same
// trace between YARN and Kubernetes): the figures an operator compares.
type Summary struct {
	Load   float64 `json:"load"`
	Policy string  `json:"policy"`
	Note   string  `json:"note"`
	Seeds  int     `json:"seeds"`
	// GPUHours is provisioned, WorkGPUHours the completed work, PerWork
	// their ratio.
	GPUHours     Spread `json:"gpu_hours"`
	WorkGPUHours Spread `json:"completed_work_gpu_hours"`
	PerWork      Spread `json:"provisioned_per_work"`
	// LSP95 and BEP95 are p95 waits in seconds, re-queues included.
	LSP95 Spread `json:"ls_p95_wait_s"`
	BEP95 Spread `json:"be_p95_wait_s"`
	// NotDone is the work (GPU-hours) left unserved or unfinished.
	NotDone Spread `json:"not_done_gpu_hours"`
	// Kills are work-losing evictions; KillsNotPreemption those not for
	// a preemption, with KillsNotPreemptionLost their GPU-hours lost.
	Kills                  Spread `json:"kills"`
	KillsNotPreemption     Spread `json:"kills_not_preemption"`
	KillsNotPreemptionLost Spread `json:"kills_not_preemption_gpu_hours"`
	LSKills                Spread `json:"ls_guaranteed_kills"`
	Lost                   Spread `json:"work_lost_gpu_hours"`
	Migrations             Spread `json:"migrations"`
	MigrationKills         Spread `json:"migration_kills"`
	// GPUUse is the GPU-hours allocated to tasks per GPU-hour
	// provisioned (a fleet's utilisation); Handovers counts nodes moved
	// between the sides; YARNP95 and K8sP95 are p95 waits by side.
	GPUUse    Spread `json:"gpu_use"`
	Handovers Spread `json:"handovers"`
	YARNP95   Spread `json:"yarn_p95_wait_s"`
	K8sP95    Spread `json:"k8s_p95_wait_s"`
}

// RunSeeds replays c with seeds c.Seed .. c.Seed+n-1 and returns the first
// seed's report with Summary set over all of them.
func RunSeeds(c Config, n int) (*Report, error) {
	if n < 1 {
		return nil, broker.Invalid("seeds", "must be at least 1, got %d", n)
	}
	var reps []*Report
	for k := range n {
		ck := c
		ck.Seed = c.Seed + int64(k)
		rep, err := Run(ck)
		if err != nil {
			return nil, err
		}
		reps = append(reps, rep)
	}
	first := reps[0]
	first.Trace.Seeds = n
	for li, lr := range first.Loads {
		for pi, p := range lr.Policies {
			var rs []Result
			for _, r := range reps {
				rs = append(rs, r.Loads[li].Policies[pi])
			}
			first.Summary = append(first.Summary, summarise(lr.Load, p.Name, p.Note, rs))
		}
	}
	return first, nil
}

func summarise(load float64, name, note string, rs []Result) Summary {
	get := func(f func(Result) float64) Spread {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	return Summary{
		Load: load, Policy: name, Note: note, Seeds: len(rs),
		GPUHours:               get(func(r Result) float64 { return r.GPUHours }),
		WorkGPUHours:           get(func(r Result) float64 { return r.CompletedWorkGPUHours }),
		PerWork:                get(func(r Result) float64 { return r.ProvisionedPerWork }),
		LSP95:                  get(func(r Result) float64 { return r.WaitP95["LS"] }),
		BEP95:                  get(func(r Result) float64 { return r.WaitP95["BE"] }),
		NotDone:                get(func(r Result) float64 { return r.NotDoneGPUHours }),
		Kills:                  get(func(r Result) float64 { return float64(r.Kills) }),
		KillsNotPreemption:     get(func(r Result) float64 { return float64(r.KillsNotPreemption) }),
		KillsNotPreemptionLost: get(func(r Result) float64 { return r.KillsNotPreemptionGPUHours }),
		LSKills:                get(func(r Result) float64 { return float64(r.LSKills) }),
		Lost:                   get(func(r Result) float64 { return r.WorkLostGPUHours }),
		Migrations:             get(func(r Result) float64 { return float64(r.Migrations) }),
		MigrationKills:         get(func(r Result) float64 { return float64(r.MigrationKills) }),
		GPUUse:                 get(func(r Result) float64 { return r.AllocationRatio }),
		Handovers:              get(func(r Result) float64 { return float64(r.Handovers) }),
		YARNP95:                get(func(r Result) float64 { return r.WaitP95["yarn"] }),
		K8sP95:                 get(func(r Result) float64 { return r.WaitP95["k8s"] }),
	}
}
