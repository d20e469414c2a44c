// Package promtool checks gpubroker's monitoring files against Prometheus'
// own tooling and against what the broker really exports:
// deploy/prometheus/gpubroker-rules.yaml passes "promtool check rules" and
// its unit tests (gpubroker-rules_test.yaml) pass "promtool test rules";
// every PromQL expression of the rules and of the Grafana dashboard
// (deploy/grafana/gpubroker.json) parses and names only metrics that the
// API's registry serves at /metrics, read from a real broker handler on a
// real PostgreSQL (test/pgtest).
//
// promtool is built from the Prometheus Go module by install.sh, cached
// outside the repository under ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/bin;
// Binary runs the installer, which returns at once when the cache is warm.
//
// Product code never imports this package; tests do.
package promtool
