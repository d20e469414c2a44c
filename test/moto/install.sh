#!/usr/bin/env bash
# install.sh installs moto in server mode into a virtualenv in the cache
# directory (${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/moto-VERSION) and
# prints the path of its moto_server executable. It is idempotent: a second
# run finds the finished virtualenv and returns at once. Concurrent runs
# (parallel test packages) serialise on a lock file.
set -euo pipefail

MOTO_VERSION=5.2.5
CACHE="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
VENV="$CACHE/moto-$MOTO_VERSION"
DONE="$VENV/.gpubroker-installed"

mkdir -p "$CACHE"
exec 9>"$CACHE/moto.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
fi

if [ ! -f "$DONE" ] || [ ! -x "$VENV/bin/moto_server" ] || [ ! -x "$VENV/bin/python" ]; then
	echo "installing moto[server]==$MOTO_VERSION into $VENV" >&2
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
		"moto[server]==$MOTO_VERSION" >&2
	touch "$DONE"
fi
echo "$VENV/bin/moto_server"
