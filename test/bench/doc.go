// Package bench holds benchmarks of the whole broker at scale: one tick of
// the real runtime against the simulators (yarnsim over HTTP, k8ssim
// through the real informers, awssim over the AWS query protocol) and a
// real PostgreSQL. They report figures and never fail on time.
//
// yarnsim and awssim are HTTP servers: the benchmarks run them in a child
// process (the test binary re-executed, see sims_test.go), so the peak RSS
// and CPU time reported for the benchmark process are the broker's and
// k8ssim's (a fake clientset, which must live in the broker's process;
// its own live heap is reported apart), and the child's are reported
// separately.
package bench
