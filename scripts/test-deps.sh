#!/usr/bin/env bash
# Install (or check, when cached) every real test component before the
# tests run: test/*/install.sh, in two lanes that run side by side. Lane
# "apt" holds the installers that may call apt-get or Maven (apt-get takes
# a system-wide lock, so two of them at once would fail); lane "build"
# holds those that build from Go modules or install from PyPI. A cold
# machine spends much of this time downloading, which overlaps well with
# the other lane's compiling. Each installer's output is printed whole when
# it ends; the script fails when any installer fails, naming it.
set -uo pipefail
cd "$(dirname "$0")/.."

apt_lane=(browser hadoop kerberos pgbouncer wrk)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

lane() {
	local name=$1
	shift
	local s start
	for s in "$@"; do
		[ -x "test/$s/install.sh" ] || continue
		start=$(date +%s)
		if "test/$s/install.sh" >"$logs/$s.log" 2>&1; then
			echo "ok $(($(date +%s) - start))s" >"$logs/$s.status"
		else
			echo "FAILED (exit $?) after $(($(date +%s) - start))s" >"$logs/$s.status"
		fi
		{ echo "== test/$s/install.sh [$name lane]: $(cat "$logs/$s.status")"; cat "$logs/$s.log"; } >"$logs/$s.out"
		cat "$logs/$s.out"
	done
}

build_lane=()
for d in test/*/install.sh; do
	s=$(basename "$(dirname "$d")")
	[[ " ${apt_lane[*]} " == *" $s "* ]] || build_lane+=("$s")
done

start=$(date +%s)
lane apt "${apt_lane[@]}" &
a=$!
lane build "${build_lane[@]}" &
b=$!
wait "$a" "$b"

failed=()
for f in "$logs"/*.status; do
	[ -e "$f" ] || continue
	grep -q '^ok' "$f" || failed+=("test/$(basename "$f" .status)/install.sh")
done
echo "== test components ready in $(($(date +%s) - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "failed: ${failed[*]}" >&2
	exit 1
fi
