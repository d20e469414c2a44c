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
executor: a transfer that cannot drain gives the node back~broker/engine/executor.go~if op.Kind == broker.ActTransfer || op.Kind == broker.ActPreempt {~if false {
roles: a tenant-admin changes no admin-only tenant field~api/tenants.go~if field, rule := tenantFieldChange(cur, t); field != "" {~if field, rule := tenantFieldChange(cur, t); false && field != "" {~./api/ -run ^TestTenantAdminConfinement$
roles: base_priority is the admin's~api/scope.go~"base_priority": {byAdmin,~"base_priority": {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: guaranteed_gpus is the admin's~api/scope.go~"guaranteed_gpus": {byAdmin,~"guaranteed_gpus": {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: max_gpus is the admin's~api/scope.go~"max_gpus": {byAdmin,~"max_gpus": {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: weight is the admin's~api/scope.go~"weight":   {byAdmin,~"weight":   {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: yarn_queues are the admin's~api/scope.go~"yarn_queues": {byAdmin,~"yarn_queues": {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: namespaces are the admin's~api/scope.go~"namespaces": {byAdmin,~"namespaces": {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: admins are the admin's~api/scope.go~"admins":     {byAdmin,~"admins":     {byServer,~./api/ -run ^TestTenantAdminConfinement$
roles: every tenant field has a rule~api/scope.go~\t"admins":     {byAdmin, "it says who administers the tenant"},\n~\n~./api/ -run ^TestTenantFieldRulesCoverTenant$
roles: the role table names the roles the router lets through~api/scope.go~"POST /api/v1/plan":                   {admins, planRule},~"POST /api/v1/plan":                   {readers, planRule},~./api/ -run ^TestRouteRoles$
roles: a queue claim is an exact path from root~api/claims.go~if !queuePathRE.MatchString(q) {~if false {~./api/ -run ^TestQueueClaims$
roles: a claim shows the queues it takes from other tenants~api/claims.go~out.Captures = append(out.Captures, queueCapture{Queue: q, From: b.Name})~_ = b~./api/ -run ^TestQueueClaims$
roles: a create's dry run stores nothing~api/tenants.go~\tif dry {\n\t\tif err := t.Validate(); err != nil {\n\t\t\ts.fail(w, r, err)\n\t\t\treturn\n\t\t}\n\t\tt.Version = 1\n~\tif dry && false {\n\t\tif err := t.Validate(); err != nil {\n\t\t\ts.fail(w, r, err)\n\t\t\treturn\n\t\t}\n\t\tt.Version = 1\n~./api/ -run ^TestQueueClaims$
roles: an update's dry run stores nothing~api/tenants.go~\tif dry {\n\t\tif err := t.Validate(); err != nil {\n\t\t\ts.fail(w, r, err)\n\t\t\treturn\n\t\t}\n\t\tt.Version = cur.Version + 1\n~\tif dry && false {\n\t\tif err := t.Validate(); err != nil {\n\t\t\ts.fail(w, r, err)\n\t\t\treturn\n\t\t}\n\t\tt.Version = cur.Version + 1\n~./api/ -run ^TestQueueClaims$
roles: a create without weight gets weight 1~api/tenants.go~\tt := broker.Tenant{Weight: defaultWeight}\n\tif err := s.decode(w, r, &t, false); err != nil {\n\t\ts.fail(w, r, err)\n\t\treturn\n\t}\n\tif t.Version != 0 {~\tt := broker.Tenant{}\n\tif err := s.decode(w, r, &t, false); err != nil {\n\t\ts.fail(w, r, err)\n\t\treturn\n\t}\n\tif t.Version != 0 {~./api/ -run ^TestTenantWeightDefault$
roles: POST /plan is the admin's~api/api.go~r.With(onlyAdmins(planRefusal)).Post("/plan", s.plan)~r.With(allow(readers...)).Post("/plan", s.plan)~./api/ -run ^TestTenantAdminConfinement$
roles: POST /plan observes at most once per tick period~api/plan.go~if g.last != nil && g.now().Sub(g.last.at) < g.interval {~if false {~./api/ -run ^TestPlanOncePerTickPeriod$
roles: POST /plan is single-flight~api/plan.go~\tc = g.inflight\n~\tc = nil\n~./api/ -run ^TestPlanGateSingleFlight$
roles: bad text in a parameter is refused before the database~api/api.go~r.Use(checkInput, s.authenticate,~r.Use(s.authenticate,~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: path parameters are checked~api/input.go~for i, name := range rc.URLParams.Keys {~for i, name := range rc.URLParams.Keys[:0] {~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: a NUL character is refused~api/input.go~case strings.IndexByte(v, 0) >= 0:~case strings.IndexByte(v, 0) >= 0 && false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: invalid UTF-8 is refused~api/input.go~case !utf8.ValidString(v):~case !utf8.ValidString(v) && false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: an over-long parameter is refused~api/input.go~case len(v) > max:~case false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
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
