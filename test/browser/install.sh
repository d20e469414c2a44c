#!/bin/sh
# Installs Debian's chromium and chromium-driver for the dashboard's browser
# test (test/browser). Idempotent: when both are present it returns at once.
# The Go test runs this script itself when the binaries are missing, so
# `go test ./test/browser/` works on a fresh machine; `make test-deps` runs
# it beforehand so the test's own budget measures the test, not apt.
set -eu

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
if have; then
	exit 0
fi

cache="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
mkdir -p "$cache"
sudo=""
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "test/browser/install.sh: need root or sudo to apt-get install chromium chromium-driver" >&2; exit 1; }
	sudo="sudo"
fi

# One installer at a time on this machine (several test packages may call it).
exec 9>"$cache/browser-install.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if have; then
	exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt_opts="-o DPkg::Lock::Timeout=900 -o Acquire::Retries=3"
if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
	$sudo apt-get $apt_opts update -q
fi
$sudo apt-get $apt_opts install -y -q --no-install-recommends chromium chromium-driver fonts-liberation
have || { echo "test/browser/install.sh: chromium or chromedriver still missing after apt-get" >&2; exit 1; }
