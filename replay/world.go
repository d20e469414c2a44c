package replay

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// World is the model of the clusters and the cloud that every policy runs
// in: the same times for all of them, printed at the top of the report.
//
// The step model of a node's life:
//
//	launch ──LaunchToReady──► registered ──DevicePluginLag──► active (GPUs schedulable)
//	release (cordon / graceful decommission):
//	  Kubernetes: every pod is evicted and gone after PreemptionGrace;
//	  YARN: running containers finish, or are killed at the drain timeout;
//	  then the side confirms the release after ReleaseLag.
//	scale-down: release, then terminate; billing stops TerminateTime later.
//	hand-over: release, then HandOverTime until the other side lists the
//	  node schedulable with its GPUs (uncordon / recommission and register).
//	preemption: the victim's GPUs are free PreemptionGrace after the
//	  eviction; the victim is pending again and must redo the work since its
//	  last checkpoint.
type World struct {
	// LaunchToReady is from the cloud request to the node registering with
	// its side (kubelet Ready, NodeManager RUNNING).
	LaunchToReady time.Duration `json:"launch_to_ready_s"`
	// DevicePluginLag is from registering to the GPUs being advertised
	// (NVIDIA device plugin, yarn.io/gpu); no GPU work lands before.
	DevicePluginLag time.Duration `json:"device_plugin_lag_s"`
	// PreemptionGrace is how long an evicted pod or preempted container
	// keeps its GPUs (terminationGracePeriodSeconds).
	PreemptionGrace time.Duration `json:"preemption_grace_s"`
	// ReleaseLag is from a node being empty to its side confirming the
	// release (drain done, DECOMMISSIONED).
	ReleaseLag time.Duration `json:"release_lag_s"`
	// DrainTimeout bounds a YARN graceful decommission: containers still
	// running then are killed. It is the policy's drain_timeout.
	DrainTimeout time.Duration `json:"drain_timeout_s"`
	// HandOverTime is from a released node to the other side scheduling on
	// it.
	HandOverTime time.Duration `json:"hand_over_s"`
	// TerminateTime is from the terminate call to the instance no longer
	// being billed.
	TerminateTime time.Duration `json:"terminate_s"`
	// CheckpointInterval is how often running work checkpoints; 0 means the
	// trace says nothing, so a workload's checkpoint age is unknown (-1 to
	// the planner) and an eviction loses all the work since it started.
	CheckpointInterval time.Duration `json:"checkpoint_interval_s"`
	// ScanInterval and NewPodHold are the cluster autoscaler's: it looks
	// every ScanInterval and acts on pods pending at least NewPodHold.
	ScanInterval time.Duration `json:"autoscaler_scan_s"`
	NewPodHold   time.Duration `json:"autoscaler_new_pod_hold_s"`
	// TickPeriod bounds the gap between gpubroker ticks while demand is
	// pending and the previous plan acted (see doc.go on event ticking).
	TickPeriod time.Duration `json:"tick_period_s"`
	// Placement is how both sides' schedulers pick among the nodes a task
	// fits: PlacementSpread (their defaults) or PlacementPack.
	Placement string `json:"placement"`
}

// The schedulers' placements (World.Placement).
const (
	// PlacementSpread is both schedulers' default: kube-scheduler scores
	// nodes LeastAllocated, and the CapacityScheduler places a container
	// on the node that heartbeats with room, which spreads too.
	PlacementSpread = "spread"
	// PlacementPack is kube-scheduler's MostAllocated scoring and the
	// CapacityScheduler's multi-node placement sorted by utilisation: the
	// fullest node that fits.
	PlacementPack = "pack"
)

// DefaultWorld returns the model the report uses unless told otherwise.
func DefaultWorld(p broker.Policy) World {
	return World{
		LaunchToReady:   3 * time.Minute,
		DevicePluginLag: 30 * time.Second,
		PreemptionGrace: 30 * time.Second,
		ReleaseLag:      10 * time.Second,
		DrainTimeout:    p.DrainTimeout.D(),
		HandOverTime:    30 * time.Second,
		TerminateTime:   time.Minute,
		ScanInterval:    10 * time.Second,
		NewPodHold:      30 * time.Second,
		TickPeriod:      10 * time.Second,
		Placement:       PlacementSpread,
	}
}

// Validate checks that no time is negative and the periods are positive.
func (w World) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
		pos  bool
	}{
		{"launch_to_ready", w.LaunchToReady, false}, {"device_plugin_lag", w.DevicePluginLag, false},
		{"preemption_grace", w.PreemptionGrace, false}, {"release_lag", w.ReleaseLag, false},
		{"drain_timeout", w.DrainTimeout, true}, {"hand_over", w.HandOverTime, false},
		{"terminate", w.TerminateTime, false}, {"checkpoint_interval", w.CheckpointInterval, false},
		{"autoscaler_scan", w.ScanInterval, true}, {"autoscaler_new_pod_hold", w.NewPodHold, false},
		{"tick_period", w.TickPeriod, true},
	} {
		if f.d < 0 || (f.pos && f.d == 0) {
			return broker.Invalid("world."+f.name, "must be %s, got %s", map[bool]string{true: "positive", false: "non-negative"}[f.pos], f.d)
		}
	}
	if w.Placement != PlacementSpread && w.Placement != PlacementPack {
		return broker.Invalid("placement", "must be %s or %s, got %q", PlacementSpread, PlacementPack, w.Placement)
	}
	return nil
}

// Describe is the world model in words, one line per rule.
func (w World) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- a new node registers with its side %s after the cloud request; its GPUs are schedulable %s later (device-plugin lag)\n", w.LaunchToReady, w.DevicePluginLag)
	fmt.Fprintf(&b, "- a node of a shared pool joins the side whose pending demand it was bought for (else the side with more pending GPUs); a per-side pool's nodes join its side\n")
	fmt.Fprintf(&b, "- an evicted pod or preempted container holds its GPUs for %s (grace), then is pending again and redoes the work since its last checkpoint\n", w.PreemptionGrace)
	ck := "unknown (the trace has none): an eviction loses all work since the task started"
	if w.CheckpointInterval > 0 {
		ck = fmt.Sprintf("every %s of run time", w.CheckpointInterval)
	}
	fmt.Fprintf(&b, "- checkpoints: %s\n", ck)
	fmt.Fprintf(&b, "- release: Kubernetes evicts every pod; YARN decommissions gracefully (containers finish, killed at the %s drain timeout); the side confirms %s after the node is empty\n", w.DrainTimeout, w.ReleaseLag)
	fmt.Fprintf(&b, "- scale-down: release, then terminate; billing stops %s after the terminate call\n", w.TerminateTime)
	fmt.Fprintf(&b, "- hand-over: release, then %s until the other side schedules on the node\n", w.HandOverTime)
	place := "spread (the defaults: kube-scheduler LeastAllocated, CapacityScheduler node heartbeats): on the node with the largest share of its GPUs free that fits"
	if w.Placement == PlacementPack {
		place = "pack (kube-scheduler MostAllocated, CapacityScheduler multi-node placement; not the defaults): on the fullest node that fits"
	}
	fmt.Fprintf(&b, "- schedulers: each side places its pending work at once, highest priority then oldest first, %s; kube-scheduler preempts lower-priority preemptible pods on Kubernetes nodes, YARN does not preempt\n", place)
	fmt.Fprintf(&b, "- cluster autoscaler baseline: scans every %s, acts on pods pending at least %s\n", w.ScanInterval, w.NewPodHold)
	fmt.Fprintf(&b, "- gpubroker ticks at every event and planner deadline, and every %s while demand is pending and its last plan acted\n", w.TickPeriod)
	return b.String()
}
