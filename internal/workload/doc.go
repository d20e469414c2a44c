// Package workload generates GPU demand whose distributions are fitted to a
// real production trace: Alibaba's "openb" GPU cluster trace (cluster-trace-
// gpu-v2023, from Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC
// 2023). The demo runs the generator, since the trace itself is not shipped;
// benchmarks replay the trace with ReadTrace.
//
// The fit (Fit, checked against the trace in the tests):
//   - arrivals: log-normal inter-arrival times (bursty: the median gap is a
//     tenth of the mean), with a small share of simultaneous arrivals;
//   - GPUs per task: the trace's categorical mix (1, 2, 4, 8);
//   - run time: log-normal (median minutes, mean hours: a heavy tail);
//   - priority: the trace's QoS classes, mapped onto the unified priority
//     scale (Guaranteed > LS > Burstable > BE, BE preemptible).
//
// The trace has no YARN/Kubernetes split: SideOf assigns each task by a hash
// of its name, so the split is deterministic and about even.
//
// The package uses only the standard library.
package workload
