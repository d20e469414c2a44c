#!/usr/bin/env bash
# install.sh provides wrk, the HTTP load generator the read-API harness
# (test/wrk) runs as a separate process, and prints the path of its
# executable. A wrk on PATH is used as it is; otherwise the Debian packages
# wrk and libluajit2-5.1-2 are fetched with apt-get download (no root, no
# system change) and unpacked into the cache directory
# (${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/wrk-VERSION), with a wrapper
# that finds the unpacked LuaJIT. Idempotent; concurrent runs serialise on
# a lock file.
set -euo pipefail

if command -v wrk >/dev/null 2>&1; then
	command -v wrk
	exit 0
fi

WRK_VERSION=4.1.0
CACHE="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
DIR="$CACHE/wrk-$WRK_VERSION"
DONE="$DIR/.gpubroker-installed"

mkdir -p "$CACHE"
exec 9>"$CACHE/wrk.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
fi

if [ ! -f "$DONE" ] || [ ! -x "$DIR/wrk" ]; then
	echo "installing wrk $WRK_VERSION (Debian packages) into $DIR" >&2
	rm -rf "$DIR"
	mkdir -p "$DIR/debs" "$DIR/root"
	(cd "$DIR/debs" && apt-get download wrk libluajit2-5.1-2 >&2 2>/dev/null) || {
		echo "apt-get download wrk libluajit2-5.1-2 failed: install wrk (apt-get install wrk) or put it on PATH" >&2
		exit 1
	}
	for deb in "$DIR"/debs/*.deb; do
		dpkg-deb -x "$deb" "$DIR/root"
	done
	libdir="$(dirname "$(find "$DIR/root" -name 'libluajit-5.1.so.2*' | head -1)")"
	cat >"$DIR/wrk" <<WRAPPER
#!/bin/sh
LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$DIR/root/usr/bin/wrk" "\$@"
WRAPPER
	chmod +x "$DIR/wrk"
	"$DIR/wrk" --version >/dev/null 2>&1 || [ $? -eq 1 ] # wrk --version exits 1
	touch "$DONE"
fi
echo "$DIR/wrk"
