#!/usr/bin/env bash
# install-staticcheck.sh builds staticcheck from its module with `go install`
# (never a downloaded binary) into the cache directory
# (${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/bin/staticcheck-VERSION) and
# prints its path. It is idempotent: a second run finds the binary and
# returns at once; a new STATICCHECK_VERSION installs beside the old one.
# Concurrent runs serialise on a lock file.
set -euo pipefail

# v0.8.2 (staticcheck 2026.2.x) is the first release line whose go.mod
# requires Go 1.26, the language version of this module.
STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
GO="${GO:-go}"
CACHE="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
BIN="$CACHE/bin/staticcheck-$STATICCHECK_VERSION"

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/staticcheck.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
fi

if [ ! -x "$BIN" ]; then
	echo "building honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION into $BIN" >&2
	tmp="$(mktemp -d "$CACHE/bin/.staticcheck.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" GOFLAGS=-buildvcs=false "$GO" install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
	mv "$tmp/staticcheck" "$BIN"
fi
echo "$BIN"
