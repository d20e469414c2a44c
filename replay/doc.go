// Package replay replays a GPU job trace against gpubroker's planner and
// two baselines operators run today, on one virtual clock and one world
// model, and reports GPU-hours provisioned and how long work waited.
//
// # Policies
//
//   - gpubroker: every tick builds a broker.Snapshot of the replayed world
//     (pending demand, nodes with their running work, pools, in-flight ops)
//     and calls broker.MakePlan with the policy, the function serve runs.
//     Its actions go through a step model of the executor (World): scale-up
//     sets a pool's desired capacity once its pending removals are done;
//     scale-down and hand-over release the node (evict / decommission),
//     then terminate it or admit it on the other side; an attrition
//     scale-down (Action.Attrition: YARN decommission with an infinite
//     timeout, Kubernetes cordon-and-wait) evicts nothing, takes no new
//     work and terminates the node once its work has ended, unless an
//     ActRecommission gives it back first; preemption evicts the victims,
//     and the op stays in flight until they are gone, and a preemption
//     across sides (ActPreempt with From and To) then releases the node and
//     hands it over. Running work is Workload{Class: batch, StartedAt,
//     CheckpointAge, App}; an eviction's work since the last checkpoint is
//     redone, in every policy alike (the task runs that much longer).
//   - per-side-autoscaler: each side has its own copy of every pool, the max
//     split by the side's share of the work, scaled by the cluster
//     autoscaler's rules (autoscalerCtl); no moves or preemption across
//     sides.
//   - safe-per-side-autoscaler: the same, held to gpubroker's rule: it
//     never drains a YARN node running containers, and drains a
//     Kubernetes node only when its pods lose at most max_work_lost.
//   - static-p95, static-peak: fixed running nodes per pool and side,
//     holding the demand's time-weighted p95 or peak concurrent GPUs
//     (spread over the pools by their max), split by the sides' work
//     shares; never resized. static-gpubroker-avg holds the average GPUs
//     the gpubroker run provisioned per pool (equal average; a strawman).
//
// Every policy reports GPU-hours provisioned per GPU-hour of completed
// work, waits with re-queues counted, work left undone, and restarts split
// into work-losing kills (by preemption or not) and kills of LS or
// Guaranteed work. Both schedulers spread by default (World.Placement).
//
// # Ticking
//
// The clock jumps from event to event (arrivals, completions, node phase
// changes, the ends of grace periods, drains and hand-overs), so 149 days
// replay in seconds. gpubroker's planner is called at every event, at every
// time a node's scale-down timer runs out, at every checkpoint of the work
// on an underused node past its timer (it may be cheap to move just then;
// serve, ticking on its period, would see that moment), and every
// World.TickPeriod while
// demand is pending and its last plan acted; those are the only times its
// output can change, as it reads the clock only through those timers (and
// ranks preemption victims by work at risk, which is re-read at the next
// event). The autoscaler looks at its 10 s scan times, but only those after
// a change or a timer (pod hold, unneeded time): a scan that sees nothing
// new decides nothing new.
//
// # The trace format (openb_pod_list_default.csv)
//
// One row per task, with a header; columns by name, others ignored:
//
//	name            unique task name; it decides the side (hash)
//	num_gpu         whole GPUs the task needs (0: CPU-only, skipped)
//	gpu_milli       share of one GPU in thousandths when num_gpu is 1
//	                (fractional shares take one whole GPU)
//	gpu_spec        allowed GPU models separated by '|' (optional; empty: any)
//	qos             LS, BE, Burstable or Guaranteed
//	creation_time   seconds since the trace start: the arrival
//	scheduled_time  seconds: when it started (empty: never scheduled, skipped)
//	deletion_time   seconds: when it ended; the run time is
//	                deletion_time - scheduled_time
//
// The node list (openb_node_list_gpu_node.csv) needs the columns gpu and
// model: each distinct (model, GPUs per node) becomes a shared pool whose
// max is the number of such nodes.
//
// The trace is Alibaba's cluster-trace-gpu-v2023 "openb" (Weng et al.,
// "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
// Fragmentation Gradient Descent", USENIX ATC 2023).
//
// The package imports broker and the standard library only; it reads no
// files itself (cmd/gpubroker does).
package replay
