// Package bench holds benchmarks of the whole broker at scale: one tick of
// the real runtime against the simulators (yarnsim over HTTP, k8ssim
// through the real informers, awssim over the AWS query protocol) and a
// real PostgreSQL. They report figures and never fail on time.
package bench
