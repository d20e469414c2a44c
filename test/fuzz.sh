#!/usr/bin/env bash
# Run every go test -fuzz target for FUZZTIME each (default 10s), one at a
# time: Go fuzzes one target per package per invocation. The seed corpora
# (f.Add and testdata/fuzz/<Name>/) already run in every plain go test;
# this adds mutation. New crashers land in <pkg>/testdata/fuzz/<Name>/ and
# fail the run; commit them as regression seeds with the fix.
#
#   test/fuzz.sh                 all targets, FUZZTIME each
#   FUZZTIME=10m test/fuzz.sh    longer, on demand
#   test/fuzz.sh FuzzObserve     only the named targets
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
# Minimising a new interesting input runs it up to 60s by default; cap it
# so short runs spend their time fuzzing.
MINIMIZE=${FUZZMINIMIZETIME:-100x}

targets=(
	"./yarn FuzzObserve"
	"./yarn/rmadmin FuzzResponseHeader"
	"./yarn/rmadmin FuzzParseFrame"
	"./yarn/rmadmin FuzzClientAnswer"
	"./yarn/yarnsim FuzzAdminServerRequest"
	"./k8s FuzzClaimGPURequest"
	"./cloud FuzzPoolFromTags"
	"./cloud/awssim FuzzQueryRequest"
	"./cmd/gpubroker FuzzParseConfig"
	"./api FuzzAPIBody"
	"./api FuzzAPIParams"
)

start=$(date +%s)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
	echo "== fuzz $pkg $name for $FUZZTIME"
	for try in 1 2; do
		if out=$("$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$MINIMIZE" -parallel 1 "$pkg" 2>&1); then
			echo "$out" | tail -n 3
			break
		fi
		# Go's fuzzer fails with "context deadline exceeded" when
		# -fuzztime ends before a loaded machine has gathered baseline
		# coverage; that is no finding, so try once more.
		if [ "$try" = 1 ] && ! grep -q "Failing input written to" <<<"$out" && grep -q "context deadline exceeded" <<<"$out"; then
			echo "(fuzz engine ran out of time gathering coverage; once more)"
			continue
		fi
		echo "$out"
		exit 1
	done
done
echo "fuzzing done in $(($(date +%s) - start))s"
