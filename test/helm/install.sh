#!/usr/bin/env bash
# install.sh builds Helm from its Go module (pinned in tools/go.mod) for the chart
# tests in this package and caches it OUTSIDE the repository under
#   ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/helm-$HELM_VERSION/bin/helm
# It is idempotent (a second run takes well under a second and prints only the bin
# directory) and safe to run from several processes at once (flock). It prints the
# bin directory on its last line.
#
# A cold build takes a few minutes on two cores; GOFLAGS=-p=N trades speed for
# leaving cores to others (default -p=2).
set -euo pipefail

HELM_VERSION=v3.22.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
root="$cache/helm-$HELM_VERSION"
bin="$root/bin"
mkdir -p "$bin"

exec 9>"$root/.lock"
flock 9

if [[ ! -x "$bin/helm" ]]; then
	export GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false -trimpath"
	export CGO_ENABLED=0
	export GOWORK=off
	echo "helm: building helm $HELM_VERSION (cached in $bin)" >&2
	start=$SECONDS
	# helm version reports the pinned version, not "v3.x-dev".
	(cd "$here/tools" && go build -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
		-o "$bin/.helm.tmp" helm.sh/helm/v3/cmd/helm)
	mv -f "$bin/.helm.tmp" "$bin/helm"
	echo "helm: built helm in $((SECONDS - start))s" >&2
fi
echo "$bin"
