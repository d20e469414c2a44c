// Package wrk is the read API's load harness: a real gpubroker serve on a
// seeded PostgreSQL store, driven by wrk (installed by install.sh) from a
// separate process, reporting p50/p99 latency and throughput per route. It
// prints figures and never fails on time; it fails on error answers.
package wrk
