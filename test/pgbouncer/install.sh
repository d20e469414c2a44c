#!/usr/bin/env bash
# install.sh provides PgBouncer for the store's pooler tests and prints the
# path of a runnable pgbouncer on its last line. A pgbouncer on PATH is used
# as it is; otherwise the distribution's packages (pgbouncer and the c-ares
# library it links) are fetched with `apt-get download`, which needs no root,
# and unpacked into ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/pgbouncer,
# with a wrapper that points the loader at the unpacked library. It is
# idempotent (a warm run prints the path at once) and safe to run from
# several processes at once (flock).
set -euo pipefail

if command -v pgbouncer >/dev/null 2>&1; then
	command -v pgbouncer
	exit 0
fi

cache="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
dir="$cache/pgbouncer"
bin="$dir/pgbouncer"
mkdir -p "$cache"
exec 9>"$cache/pgbouncer.lock"
flock 9

if [[ ! -x "$bin" ]]; then
	echo "pgbouncer: fetching the pgbouncer and libc-ares2 packages into $dir" >&2
	tmp="$(mktemp -d "$cache/.pgbouncer.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download pgbouncer libc-ares2 >&2)
	for deb in "$tmp"/*.deb; do
		dpkg -x "$deb" "$tmp/root"
	done
	rm -rf "$dir"
	mkdir -p "$dir"
	mv "$tmp/root" "$dir/root"
	cat >"$bin.tmp" <<WRAP
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$dir/root/usr/sbin/pgbouncer" "\$@"
WRAP
	chmod +x "$bin.tmp"
	mv -f "$bin.tmp" "$bin"
	"$bin" --version >&2
fi
echo "$bin"
