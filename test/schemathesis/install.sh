#!/usr/bin/env bash
# install.sh installs schemathesis, the property-based API fuzzer driven by
# an OpenAPI document, into a virtualenv in the cache directory
# (${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/schemathesis-VERSION) and
# prints the path of its st executable. It is idempotent: a second run finds
# the finished virtualenv and returns at once. Concurrent runs serialise on a
# lock file. schemathesis 4.x needs Python 3.9 or newer (CI uses 3.11).
set -euo pipefail

SCHEMATHESIS_VERSION=4.32.5
CACHE="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
VENV="$CACHE/schemathesis-$SCHEMATHESIS_VERSION"
DONE="$VENV/.gpubroker-installed"

mkdir -p "$CACHE"
exec 9>"$CACHE/schemathesis.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
fi

if [ ! -f "$DONE" ] || [ ! -x "$VENV/bin/st" ] || [ ! -x "$VENV/bin/python" ]; then
	echo "installing schemathesis==$SCHEMATHESIS_VERSION into $VENV" >&2
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
		"schemathesis==$SCHEMATHESIS_VERSION" >&2
	touch "$DONE"
fi
echo "$VENV/bin/st"
