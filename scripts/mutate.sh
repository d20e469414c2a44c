#!/usr/bin/env bash
# Mutation check for the safety rules of the planner and executor (run on
# demand, not in CI): disable each check in turn, run the broker tests, and
# print which tests fail. A check whose row says NONE is not proven needed
# by any test.
#
#   scripts/mutate.sh            all mutations
#   scripts/mutate.sh validate   only those whose name contains "validate"
#
# Each mutation replaces one exact snippet of a source file (it must occur
# exactly once); the file is restored afterwards, also on interrupt. A row
# may name, in a fifth field, the packages whose tests must catch it
# (space-separated; default ./broker/ ./broker/engine/), with -run and other
# go test flags allowed before them. The script runs every row and exits 1
# at the end when any row is NONE, BUILD FAILED or does not apply.
set -euo pipefail
cd "$(dirname "$0")/.."

filter="${1:-}"
backup_dir="$(mktemp -d)"
current=""
restore() {
	if [ -n "$current" ] && [ -f "$backup_dir/current" ]; then
		cp "$backup_dir/current" "$current"
	fi
	rm -rf "$backup_dir"
}
trap restore EXIT INT TERM

# name~file~snippet~replacement[~go test arguments] (\n and \t are expanded in snippet and replacement)
mutations=$(cat <<'EOF'
validate: fresh plan must confirm destructive actions~broker/engine/executor.go~if confirmed[actionKey(a)] {~if true || confirmed[actionKey(a)] {
validate: compares the victim list~broker/engine/executor.go~a.From, a.To, victims})~a.From, a.To})
validate: compares transfer sides~broker/engine/executor.go~a.InstanceID, a.From, a.To, victims}~a.InstanceID, victims}
validate: compares the instance id~broker/engine/executor.go~[]any{a.Kind, a.Pool, a.Node, a.InstanceID,~[]any{a.Kind, a.Pool, a.Node,
validate: rejects preemption for NoPreempt demand~broker/engine/executor.go~if d.NoPreempt {~if false && d.NoPreempt {
plan: NoPreempt demand never preempts (preempt.go)~broker/preempt.go~pl.stale(d.d.Source) || d.d.NoPreempt {~pl.stale(d.d.Source) {
plan: a down node absorbs no demand~broker/plan.go~return n.Down == "" && (n.Healthy~return (n.Healthy
plan: a down node is not in flight and causes no backoff~broker/plan.go~case n.Down != "" && n.Phase != PhaseTerminating && n.Phase != PhaseGone:~case false:
plan: a node down past the timeout is replaced~broker/lifecycle.go~\t\tcase n.Down != "":\n~\t\tcase false && n.Down != "":\n
plan: an instance that never registers is removed~broker/lifecycle.go~for _, ni := range pl.overdue {~for _, ni := range pl.overdue[:0] {
plan: a replacement keeps the pool size (no min restore behind it)~broker/plan.go~if op.Kind == ActScaleDown || data.SurgeTo > 0 {~if true {
plan: capacity present but not scheduling~broker/plan.go~case pl.notScheduling(d):~case false && pl.notScheduling(d):
fence: a planned release fences first and checks for work that landed~broker/engine/fence.go~if !d.Guarded || op.Kind~if true || !d.Guarded || op.Kind
fence: a YARN fence starts only once the RM confirms the decommission~broker/engine/fence.go~\t\t\tif st.Unknown != "" {\n\t\t\t\t// IMPORTANT: a refresh~\t\t\tif false && st.Unknown != "" {\n\t\t\t\t// IMPORTANT: a refresh
fence: trusts only an observation that started after the fence~broker/engine/fence.go~if r.stale[side] != "" || r.observedFrom[side].Before(d.FencedAt.Add(fenceSettle)) {~if false {
runtime: remembers capacity present across ticks~broker/engine/runtime.go~\tr.rememberCapacity(snap, plan)\n~\n
plan: actions carry the instance id~broker/plan.go~a.InstanceID = pl.nodes[ni].n.InstanceID~a.InstanceID = pl.nodes[ni].n.InstanceID[:0]
plan: a stale pool gets nothing destructive~broker/plan.go~if wp.stale != "" {\n\t\t\t\t// IMPORTANT: nothing destructive~if false {\n\t\t\t\t// IMPORTANT: nothing destructive
plan: a stale pool does not grow~broker/plan.go~if wp.stale != "" {\n\t\t\twp.backoff~if false {\n\t\t\twp.backoff
plan: a side without actions turns transfer off~broker/plan.go~if len(s.NoActions) > 0 && pl.p.OwnershipTransfer {~if false {
plan: a pending scale-down is cancelled for new demand~broker/placement.go~if !ok && st == stageAll && !noCancel {~if false && !noCancel {
plan: nothing destructive on a stale side (YARN)~broker/plan.go~staleYARN: s.IsStale(SourceYARN),~staleYARN: false,
plan: nothing destructive on a stale side (Kubernetes)~broker/plan.go~staleK8s:  s.IsStale(SourceK8s),~staleK8s:  false,
runtime: one failing pool describe does not stop the tick~broker/engine/runtime.go~r.log.Warn("observe pools", "err", poolErr)~return nil, broker.Policy{}, poolErr
runtime: a stale pool keeps its last-known GPUs~broker/engine/runtime.go~ps.Desired, ps.Instances = prev.Desired, prev.Instances~_ = prev
runtime: claimed nodes are detected~broker/merge.go~if n.Owner != OwnerNone && sn.Owner != OwnerNone && n.Owner != sn.Owner {~if false {
plan: idle reclaim never drains a busy YARN node~broker/scaledown.go~case w.side == SourceYARN && nc.gpuWork > 0:~case false:
plan: unknown allocated GPUs are never idle~broker/scaledown.go~case n.GPUsAllocated > nc.knownGPUs:~case false:
plan: consolidation loses at most max_work_lost~broker/scaledown.go~case nc.lost > pl.p.MaxWorkLost.D():~case false:
executor: a scale-up waits for its instances to launch~broker/engine/executor.go~if have := ps.InService(); have < want {~if have := ps.InService(); have < want && want < 0 {
executor: every op has a deadline~broker/engine/executor.go~if !s.data.Expires.IsZero() && s.now.After(s.data.Expires) && op.Step != broker.StepGiveBack {~if false {
executor: retries are bounded~broker/engine/executor.go~if s.op.Attempts >= maxStepAttempts {\n\t\treturn s.giveUp~if false {\n\t\treturn s.giveUp
executor: an unknown release is never drained nor forced~broker/engine/executor.go~if st.Unknown != "" {\n\t\t\t// IMPORTANT: unknown is never drained~if false && st.Unknown != "" {\n\t\t\t// IMPORTANT: unknown is never drained
executor: terminate only after every side drained~broker/engine/executor.go~if st.Drained {~if true {
executor: a removal releases every side that holds the node~broker/engine/executor.go~s.data.Sides = r.sidesOf(op.Node, s.data.From)~s.data.Sides = nil
executor: a replacement is bought first at pool min~broker/engine/executor.go~case ps.Pool.MaxNodes <= 0 || ps.Desired+1 <= ps.Pool.MaxNodes:~case false:
executor: a node without instance is given back~broker/engine/executor.go~return s.giveUp(fmt.Sprintf("node %s has no cloud instance~return s.fail(fmt.Sprintf("node %s has no cloud instance
executor: a scale-up stays linked until gpu-ready~broker/engine/executor.go~if n := r.poolInFlight(ps); n > 0 {~if n := r.poolInFlight(ps); n > 0 && false {
executor: a hand-over waits until admitted~broker/engine/executor.go~if _, ok := r.actions[to].(AdmitChecker); ok {~if _, ok := r.actions[to].(AdmitChecker); ok && false {
executor: a drain in progress does not hold back scale-ups~broker/engine/executor.go~if first != nil && found && ps.Pool.MaxNodes > 0 && target > ps.Pool.MaxNodes {~if first != nil {
executor: a scale-up counts the removals still to come~broker/engine/executor.go~target := op.Target + pending~target := op.Target + 0*pending
journal: a scale-up supersedes one awaiting gpu-ready~broker/engine/executor.go~if o.Kind != broker.ActScaleUp || o.Pool != next.Pool || o.Step != broker.StepAwaitReady ||~if true ||
plan: a replacement is planned only when it can proceed~broker/lifecycle.go~return wp.size+1 <= pool.MaxNodes || wp.size-1 >= pool.MinNodes~return pool != nil
runtime: a group the cloud does not return is stale~broker/engine/runtime.go~stale = "group not found at the cloud provider"~stale = ""
executor: a transfer that cannot drain gives the node back~broker/engine/drainlimits.go~case broker.ActTransfer, broker.ActPreempt:\n\t\treturn true~case broker.ActTransfer, broker.ActPreempt:\n\t\treturn op.Kind == ""
drain limits: a PDB allowing no disruption keeps its node~broker/scaledown.go~case budgetBlock(n) != "": // disruption.go~case false:~-run TestConsolidationKnowsDrainLimits|TestConsolidationKeepsNodeWhosePDBAllowsNoDisruption ./broker/ ./test/e2e/
drain limits: the planner sees the PDBs (observer)~k8s/observer.go~attachBudgets(obs.Nodes, obs.PDBs)~_ = obs.PDBs~-run TestBudgetsReachThePlanner|TestObserverReadsWhatAnEvictionCosts|TestConsolidationKeepsNodeWhosePDBAllowsNoDisruption ./k8s/ ./test/e2e/
drain limits: work with local storage is not moved~broker/disruption.go~case w.LocalStorage != "":~case false:~-run TestConsolidationKnowsDrainLimits|TestConsolidationKeepsPodWithLocalScratch ./broker/ ./test/e2e/
drain limits: an emptyDir on disk is local storage~k8s/disruption.go~case v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory:~case false:~-run TestLocalStorage|TestObserverReadsWhatAnEvictionCosts|TestConsolidationKeepsPodWithLocalScratch ./k8s/ ./test/e2e/
drain limits: the informer keeps the volumes~k8s/observer.go~pod.Spec.Volumes = keepVolumes(pod.Spec.Volumes)~pod.Spec.Volumes = nil~-run TestLocalStorage|TestObserverReadsWhatAnEvictionCosts ./k8s/
drain limits: Fatal work is not moved~broker/disruption.go~case w.Fatal != "":~case false:~-run TestConsolidationKnowsDrainLimits|TestFatalVictimCostsItsWholeJob|TestConsolidationMovesTheDeploymentNotTheJobAtItsBackoffLimit ./broker/ ./test/e2e/
drain limits: a Fatal victim costs its Job's whole run~broker/cost.go~if w.Fatal != "" {\n\t\treturn w.fatalLost(now)~if false {\n\t\treturn w.fatalLost(now)~-run TestFatalVictimCostsItsWholeJob ./broker/
drain limits: a Job at its backoffLimit is Fatal~k8s/disruption.go~if j.Status.Failed < limit {~if true {~-run TestFatalEviction|TestObserverReadsWhatAnEvictionCosts|TestConsolidationMovesTheDeploymentNotTheJobAtItsBackoffLimit ./k8s/ ./test/e2e/
drain limits: an eviction counts unless podFailurePolicy ignores DisruptionTarget~k8s/disruption.go~return r.Action == batchv1.PodFailurePolicyActionIgnore~return false~-run TestFatalEviction ./k8s/
drain limits: an exit-code rule first may count the eviction~k8s/disruption.go~if r.OnExitCodes != nil {~if false {~-run TestFatalEviction ./k8s/
drain limits: a Job not observed is Fatal~k8s/disruption.go~w.Fatal = fmt.Sprintf("its Job %s/%s is not observed~_ = fmt.Sprintf("its Job %s/%s is not observed~-run TestFatalEviction ./k8s/
drain limits: a pod on a local PersistentVolume is Fatal~k8s/disruption.go~if pv.Spec.Local != nil || pv.Spec.HostPath != nil {~if false {~-run TestFatalEviction|TestObserverReadsWhatAnEvictionCosts ./k8s/
drain limits: the drain stops at a pod the plan did not see~k8s/drain.go~if unplanned := unplannedPods(left, opts.Planned); len(unplanned) > 0 {~if unplanned := unplannedPods(left, opts.Planned); false && len(unplanned) > 0 {~-run TestReleaseComparesLivePodsWithPlan ./k8s/
drain limits: a planned release compares with the plan~broker/engine/drainlimits.go~if pr, ok := act.(PlannedReleaser); ok && data.Guarded~if pr, ok := act.(PlannedReleaser); false && ok && data.Guarded~-run TestRuntimeDrainGivesBackOnWorkThePlanDidNotSee|TestRuntimeDrainGoesOnWithThePlannedCPUWork ./broker/engine/
drain limits: unplanned work gives the node back~broker/engine/executor.go~if len(st.Unplanned) > 0 {~if false {~-run TestRuntimeDrainGivesBackOnWorkThePlanDidNotSee ./broker/engine/
drain limits: the plan's work includes CPU pods~broker/engine/fence.go~if !w.System && !slices.Contains(ids, workID(w)) {~if w.GPUs > 0 && !w.System && !slices.Contains(ids, workID(w)) {~-run TestRuntimeDrainGoesOnWithThePlannedCPUWork ./broker/engine/
drain limits: the fence trusts only an observation showing the cordon~broker/engine/drainlimits.go~return side != broker.SourceK8s || n.Owner != broker.OwnerK8s~return true~-run TestRuntimeFenceWaitsForAnObservationShowingTheCordon ./broker/engine/
drain limits: a PDB-blocked scale-down gives its node back~broker/engine/drainlimits.go~return !policy.ForceAfterDrainTimeout && strings.HasPrefix(st.BlockedBy, "PodDisruptionBudget")~return false~-run TestRuntimePDBBlockedScaleDownGivesNodeBack|TestPDBBlockedScaleDownGivesNodeBack ./broker/engine/ ./test/e2e/
EOF
)

printf '%-70s | %s\n' "check disabled" "failing tests"
printf '%-70s-+-%s\n' "$(printf -- '-%.0s' $(seq 70))" "-------------"
bad=0
while IFS='~' read -r name file snippet replacement pkgs; do
	[ -z "$name" ] && continue
	case "$name" in *"$filter"*) ;; *) continue ;; esac
	current="$file"
	cp "$file" "$backup_dir/current"
	if ! SNIP="$snippet" REPL="$replacement" python3 - "$file" <<'PY'
import os, sys
path = sys.argv[1]
unesc = lambda s: s.replace('\\n', '\n').replace('\\t', '\t')
snip, repl = unesc(os.environ['SNIP']), unesc(os.environ['REPL'])
src = open(path).read()
n = src.count(snip)
if n != 1:
    print(f"snippet found {n} times in {path}: {snip!r}", file=sys.stderr)
    sys.exit(1)
open(path, 'w').write(src.replace(snip, repl))
PY
	then
		printf '%-70s | %s\n' "$name" "MUTATION DOES NOT APPLY (source changed?)"
		bad=1
		cp "$backup_dir/current" "$file"
		current=""
		continue
	fi
	# shellcheck disable=SC2086 # the packages are words
	out="$(go test -count=1 ${pkgs:-./broker/ ./broker/engine/} 2>&1 || true)"
	cp "$backup_dir/current" "$file"
	# rapid keeps a failing case under testdata/rapid and replays it first
	# next time: without this, one mutation's failure shows in every row.
	rm -rf broker/testdata/rapid broker/engine/testdata/rapid
	current=""
	if grep -q '^FAIL.*\[build failed\]\|^# ' <<<"$out"; then
		result="BUILD FAILED"
	else
		# grep finds nothing when no test failed: under pipefail that must
		# not end the script (it did, silently, after the first NONE row).
		result="$({ grep -E '^--- FAIL: ' <<<"$out" || true; } | sed -E 's/^--- FAIL: ([^ ]+).*/\1/' | sort -u | paste -sd, - | sed 's/,/, /g')"
		[ -z "$result" ] && result="NONE"
	fi
	case "$result" in NONE | "BUILD FAILED") bad=1 ;; esac
	printf '%-70s | %s\n' "$name" "$result"
done <<<"$mutations"
if [ "$bad" -ne 0 ]; then
	echo "mutate.sh: at least one check has no failing test (NONE), does not build or no longer applies" >&2
	exit 1
fi
