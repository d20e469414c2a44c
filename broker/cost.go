package broker

import (
	"fmt"
	"time"
)

// Eviction cost: one scale for YARN containers and Kubernetes pods, used by
// both consolidation (idle reclaim, scaledown.go) and preemption
// (preempt.go), so that the two sides are compared on the same terms.

// EvictionCost is what evicting one workload at a given time throws away.
type EvictionCost struct {
	// Lost is the work that would be lost: zero for a service replica
	// (another replica serves while it moves), else the time since its
	// last checkpoint, or its whole run time when no checkpoint is known.
	Lost time.Duration
	// GPUHours is Lost times the GPUs the work holds.
	GPUHours float64
	// Never says why consolidation must never evict the work (a bare pod
	// that nothing recreates, work marked do-not-disrupt); empty when it
	// may. Only a recorded preemption for higher-priority demand may stop
	// such work.
	Never string
}

// Cost returns what evicting w at now would lose:
//   - services (Class WorkService: Deployment, ReplicaSet or StatefulSet
//     replicas) are cheap: nothing is lost;
//   - batch work (WorkBatch, or an unknown class) loses the work since its
//     last checkpoint, its whole run time when that is unknown (WorkAtRisk);
//   - bare pods (WorkBare) and work with DoNotDisrupt set also lose their
//     work at risk, and consolidation never evicts them;
//   - nor work with local storage or whose eviction fails its controller
//     for good (Fatal), which loses its controller's whole run time
//     (disruption.go).
//   - a YARN ApplicationMaster is priced on its whole application's GPUs
//     (AppGPUs): stopping it ends them all.
func (w *Workload) Cost(now time.Time) EvictionCost {
	c := EvictionCost{Lost: w.lost(now)}
	gpus := w.GPUs
	if w.AM {
		// Stopping an ApplicationMaster ends its application: all of
		// its GPUs, on other nodes too, lose their work.
		gpus = max(gpus, w.AppGPUs)
	}
	c.GPUHours = gpuHoursOf(c.Lost, gpus)
	switch {
	case w.DoNotDisrupt != "":
		c.Never = fmt.Sprintf("%s is marked do-not-disrupt (%s)", w.label(), w.DoNotDisrupt)
	case w.Class == WorkBare:
		c.Never = fmt.Sprintf("%s is a bare pod that nothing would recreate", w.label())
	case w.unmovable() != "": // disruption.go
		c.Never = w.unmovable()
	}
	return c
}

// lost is Cost's Lost without the rest, for the planner's hot paths.
func (w *Workload) lost(now time.Time) time.Duration {
	if w.Fatal != "" {
		return w.fatalLost(now) // disruption.go
	}
	if w.Class == WorkService {
		return 0
	}
	return w.WorkAtRisk(now)
}

// gpuHoursOf is lost work held on gpus GPUs, in GPU-hours. Work of unknown
// size counts as a very large but finite figure so sums stay ordered.
func gpuHoursOf(lost time.Duration, gpus int) float64 {
	if gpus <= 0 {
		return 0
	}
	return float64(gpus) * lost.Hours()
}

// addLost sums lost work without overflowing: unknown work stays unknown.
func addLost(a, b time.Duration) time.Duration {
	if a >= unknownWork || b >= unknownWork || a > unknownWork-b {
		return unknownWork
	}
	return a + b
}

// describeLost formats lost work for people.
func describeLost(d time.Duration) string {
	if d >= unknownWork {
		return "an unknown time (no start time or checkpoint)"
	}
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// label names a workload in reasons.
func (w *Workload) label() string {
	name := w.Name
	if name == "" {
		name = w.Key
	}
	if w.Source == SourceYARN {
		return "YARN container " + name
	}
	return "pod " + name
}

// nodeCost is what consolidating (draining) a node would cost: the summed
// eviction cost of its non-system work, and what forbids it outright.
type nodeCost struct {
	lost     time.Duration // summed Lost of all non-system work
	gpuHours float64
	never    string // a workload consolidation may never evict (the smallest key), and why
	// dearest is the batch workload with the most lost work, for reasons.
	dearest   *Workload
	dearLost  time.Duration
	gpuWork   int // non-system workloads holding GPUs
	gpusHeld  int // their GPUs
	knownGPUs int // GPUs of all listed non-system work
	// work counts all non-system workloads, with or without GPUs: on
	// YARN every container is work the RM would kill (a CPU executor, an
	// ApplicationMaster of 0 GPUs that ends its whole application).
	work int
}

// consolidationCost sums the eviction cost of node n's non-system work at now.
func consolidationCost(n *Node, now time.Time) nodeCost {
	var nc nodeCost
	var neverBy *Workload
	// The order of a node's work is not meaningful: ties go to the
	// smallest key, so the reasons do not depend on it.
	before := func(a, b *Workload) bool { return a.Source < b.Source || a.Source == b.Source && a.Key < b.Key }
	for i := range n.Work {
		w := &n.Work[i]
		if w.System {
			continue
		}
		nc.work++
		c := w.Cost(now)
		nc.lost = addLost(nc.lost, c.Lost)
		nc.gpuHours += c.GPUHours
		if c.Never != "" && (neverBy == nil || before(w, neverBy)) {
			nc.never, neverBy = c.Never, w
		}
		if w.Class != WorkService && (nc.dearest == nil || c.Lost > nc.dearLost || c.Lost == nc.dearLost && before(w, nc.dearest)) {
			nc.dearest, nc.dearLost = w, c.Lost
		}
		if w.GPUs > 0 {
			nc.gpuWork++
			nc.gpusHeld += w.GPUs
		}
		nc.knownGPUs += max(w.GPUs, 0)
	}
	return nc
}

// batchReason says what batch work keeps a node, for reasons and notes.
func (nc nodeCost) batchReason() string {
	if nc.dearest == nil {
		return fmt.Sprintf("its work would lose %s", describeLost(nc.lost))
	}
	since := "since its last checkpoint"
	if nc.dearest.CheckpointAge < 0 {
		since = "and no known checkpoint (its whole run time)"
	}
	return fmt.Sprintf("runs batch work with %s %s (%s); all its work would lose %s",
		describeLost(nc.dearLost), since, nc.dearest.label(), describeLost(nc.lost))
}

// yarnWork describes a YARN node's containers for reasons: how many, and
// how many of them hold GPUs.
func (nc nodeCost) yarnWork() string {
	switch {
	case nc.gpuWork == nc.work:
		return fmt.Sprintf("%d YARN GPU containers (%d GPUs)", nc.work, nc.gpusHeld)
	case nc.gpuWork == 0:
		return fmt.Sprintf("%d YARN containers without GPUs (CPU work or an ApplicationMaster: any container keeps a YARN node)", nc.work)
	}
	return fmt.Sprintf("%d YARN containers, %d of them GPU containers (%d GPUs) and %d without GPUs (any container keeps a YARN node)",
		nc.work, nc.gpuWork, nc.gpusHeld, nc.work-nc.gpuWork)
}
