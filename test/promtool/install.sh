#!/usr/bin/env bash
# install.sh builds promtool, Prometheus' rule checker and rule unit-test
# runner, from its Go module with `go install` (never a downloaded binary)
# into ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/bin/promtool-VERSION and
# prints its path on its last line. It is idempotent (a warm run finds the
# binary and returns at once, printing only the path) and safe to run from
# several processes at once (flock). test/promtool's Go tests run it when
# the binary is missing.
#
# Prometheus tags its Go module v0.3MM.P for the v3.MM.P releases (the
# module path has no /v3 suffix), so v0.316.0 is Prometheus 3.16.0.
# Built with -tags=remove_all_sd: the rule checker and unit-test runner need
# none of Prometheus' service-discovery plugins (cloud SDKs, client-go), and
# leaving them out more than halves the cold build (2.5 instead of 5.5
# CPU-minutes measured here).
# A cold build downloads the module graph and compiles promtool (minutes on
# two cores); GOFLAGS=-p=N trades speed for leaving cores to others.
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
GO="${GO:-go}"
cache="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
bin="$cache/bin/promtool-$PROMETHEUS_MODULE_VERSION-nosd"

mkdir -p "$cache/bin"
exec 9>"$cache/promtool.lock"
flock 9

if [[ ! -x "$bin" ]]; then
	echo "promtool: building github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION into $bin" >&2
	start=$SECONDS
	tmp="$(mktemp -d "$cache/bin/.promtool.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false -trimpath -tags=remove_all_sd" \
		"$GO" install -ldflags='-s -w' "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
	mv -f "$tmp/promtool" "$bin"
	echo "promtool: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
