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
validate: fresh plan must confirm destructive actions~broker/engine/tickphases.go~if confirmed[actionKey(a)] {~if true || confirmed[actionKey(a)] {
validate: compares the victim list~broker/engine/tickphases.go~a.From, a.To, victims})~a.From, a.To})
validate: compares transfer sides~broker/engine/tickphases.go~a.InstanceID, a.From, a.To, victims}~a.InstanceID, victims}
validate: compares the instance id~broker/engine/tickphases.go~[]any{a.Kind, a.Pool, a.Node, a.InstanceID,~[]any{a.Kind, a.Pool, a.Node,
validate: rejects preemption for NoPreempt demand~broker/engine/tickphases.go~if d.NoPreempt {~if false && d.NoPreempt {
plan: NoPreempt demand never preempts (preempt.go)~broker/preempt.go~pl.stale(d.d.Source) || d.d.NoPreempt {~pl.stale(d.d.Source) {
plan: a down node absorbs no demand~broker/plan.go~return n.Down == "" && (n.Healthy~return (n.Healthy
plan: a down node is not in flight and causes no backoff~broker/plan.go~case n.Down != "" && n.Phase != PhaseTerminating && n.Phase != PhaseGone:~case false:
plan: a node down past the timeout is replaced~broker/lifecycle.go~\t\tcase n.Down != "":\n~\t\tcase false && n.Down != "":\n
plan: an instance that never registers is removed~broker/lifecycle.go~for _, ni := range pl.overdue {~for _, ni := range pl.overdue[:0] {
plan: a replacement keeps the pool size (no min restore behind it)~broker/steps.go~return d.SurgeTo > 0 && (o.Step == StepSurge || o.Step == StepTerminate)~return o.Step == StepSurge || o.Step == StepTerminate
plan: capacity present but not scheduling~broker/plan.go~case pl.notScheduling(d):~case false && pl.notScheduling(d):
fence: a planned release fences first and checks for work that landed~broker/engine/fence.go~if !d.Guarded || op.Kind~if true || !d.Guarded || op.Kind
fence: a YARN fence starts only once the RM confirms the decommission~broker/engine/fence.go~\t\t\tif st.Unknown != "" {\n\t\t\t\t// IMPORTANT: a refresh~\t\t\tif false && st.Unknown != "" {\n\t\t\t\t// IMPORTANT: a refresh
fence: trusts only an observation that started after the fence~broker/engine/fence.go~if r.seen.stale[side] != "" || r.seen.observedFrom[side].Before(d.FencedAt.Add(fenceSettle)) {~if false {
runtime: remembers capacity present across ticks~broker/engine/runtime.go~\tr.rememberCapacity(snap, plan)\n~\n
plan: actions carry the instance id~broker/plan.go~a.InstanceID = pl.nodes[ni].n.InstanceID~a.InstanceID = pl.nodes[ni].n.InstanceID[:0]
plan: a stale pool gets nothing destructive~broker/plan.go~if wp.stale != "" {\n\t\t\t\t// IMPORTANT: nothing destructive~if false {\n\t\t\t\t// IMPORTANT: nothing destructive
plan: a stale pool does not grow~broker/plan.go~if wp.stale != "" {\n\t\t\twp.backoff~if false {\n\t\t\twp.backoff
plan: a side without actions turns transfer off~broker/plan.go~if len(s.NoActions) > 0 && pl.p.OwnershipTransfer {~if false {
plan: a pending scale-down is cancelled for new demand~broker/placement.go~the op cancelled", from: stageAll,~the op cancelled", from: stageAll + 1,
plan: a migration waiting for checkpoints yields its node to LS demand~broker/steps.go~{By: ActCancelScaleDown, From: []string{StepEvict}, To: StepGiveBack},~~-run TestPlanMigrationYields|TestRuntimeMigrateYields ./broker/ ./broker/engine/
plan: a migration yields only to demand that may not be preempted~broker/lifecycle.go~if d.d.Preemptible || n.GPUsTotal <= 0 {~if n.GPUsTotal <= 0 {~-run TestPlanMigrationYields ./broker/
plan: a migration yields only to demand that fills its node past the underused threshold~broker/lifecycle.go~return float64(n.GPUsAllocated+g)/float64(n.GPUsTotal) > pl.p.ScaleDownUtilisation~return true~-run TestPlanMigrationYields ./broker/
replay: a migration cancelled for LS demand gives its node back~replay/planner.go~return n != nil && s.cancelMigration(n)~return n != nil && false~-run TestAMigrationYieldsItsNodeToLSDemand ./replay/
plan: nothing destructive on a stale side (YARN)~broker/plan.go~staleYARN: s.IsStale(SourceYARN),~staleYARN: false,
plan: nothing destructive on a stale side (Kubernetes)~broker/plan.go~staleK8s:  s.IsStale(SourceK8s),~staleK8s:  false,
runtime: one failing pool describe does not stop the tick~broker/engine/observe.go~r.log.Warn("observe pools", "err", o.poolErr)~return nil, o.poolErr
runtime: a stale pool keeps its last-known GPUs~broker/engine/runtime.go~ps.Desired, ps.Instances = prev.Desired, prev.Instances~_ = prev
runtime: claimed nodes are detected~broker/merge.go~if n.Owner != OwnerNone && sn.Owner != OwnerNone && n.Owner != sn.Owner {~if false {
merge: a node leaving a side keeps its capacity, not a placeholder's~broker/merge.go~|| placeholderOf(n, &sn) {~{~-run TestMergeKeepsTheCapacityOfANodeLeavingASide ./broker/
plan: idle reclaim never drains a busy YARN node~broker/scaledown.go~case w.side == SourceYARN && nc.work > 0:~case false:
plan: unknown allocated GPUs are never idle~broker/scaledown.go~case n.GPUsAllocated > nc.knownGPUs:~case false:
plan: consolidation loses at most max_work_lost~broker/scaledown.go~case nc.lost > pl.p.MaxWorkLost.D():~case false:
executor: a scale-up waits for its instances to launch~broker/engine/steps_pool.go~if have := ps.InService(); have < want {~if have := ps.InService(); have < want && want < 0 {
executor: every op has a deadline~broker/engine/executor.go~if !s.data.Expires.IsZero() && s.now.After(s.data.Expires) && op.Step != broker.StepGiveBack {~if false {
executor: retries are bounded~broker/engine/executor.go~if s.op.Attempts >= maxStepAttempts {\n\t\treturn s.giveUp~if false {\n\t\treturn s.giveUp
executor: an unknown release is never drained nor forced~broker/engine/steps_node.go~if st.Unknown != "" {\n\t\t\t// IMPORTANT: unknown is never drained~if false && st.Unknown != "" {\n\t\t\t// IMPORTANT: unknown is never drained
executor: terminate only after every side drained~broker/engine/steps_node.go~if st.Drained {~if true {
executor: a removal releases every side that holds the node~broker/engine/steps_node.go~broker.ActMigrate {\n\t\ts.data.Sides = r.sidesOf(op.Node, s.data.From)~broker.ActMigrate {\n\t\ts.data.Sides = nil
executor: a released node moves on to its kind's next step (OpSteps)~broker/engine/steps_node.go~	return s.moveTo(spec.Next[0])~	return s.done()
executor: a replacement is bought first at pool min~broker/engine/steps_pool.go~case withinCluster && (ps.Pool.MaxNodes <= 0 || ps.Desired+1 <= ps.Pool.MaxNodes):~case false && withinCluster:
executor: a node without instance is given back~broker/engine/steps_pool.go~return s.giveUp(fmt.Sprintf("node %s has no cloud instance~return s.fail(fmt.Sprintf("node %s has no cloud instance
executor: a scale-up stays linked until gpu-ready~broker/engine/steps_pool.go~if n := r.poolInFlight(ps); n > 0 {~if n := r.poolInFlight(ps); n > 0 && false {
executor: a hand-over waits until admitted~broker/engine/steps_node.go~if _, ok := r.actions[to].(AdmitChecker); ok {~if _, ok := r.actions[to].(AdmitChecker); ok && false {
executor: a drain in progress does not hold back scale-ups~broker/engine/steps_pool.go~if first != nil && found && ps.Pool.MaxNodes > 0 && target > ps.Pool.MaxNodes {~if first != nil {
executor: a scale-up counts the removals still to come~broker/engine/steps_pool.go~target := op.Target + pending~target := op.Target + 0*pending
journal: a scale-up supersedes one awaiting gpu-ready~broker/engine/tickphases.go~if o.Kind != broker.ActScaleUp || o.Pool != next.Pool || o.Step != broker.StepAwaitReady ||~if true ||
plan: a replacement is planned only when it can proceed~broker/lifecycle.go~return wp.size+1 <= pool.MaxNodes || wp.size-1 >= pool.MinNodes~return pool != nil
runtime: a group the cloud does not return is stale~broker/engine/runtime.go~stale = "group not found at the cloud provider"~stale = ""
executor: a transfer that cannot drain gives the node back~broker/engine/steps_node.go~if givesBackOnTimeout(op, st, policy) { // drainlimits.go~if false {
agents: a token reports only for its nodes~api/auth.go~if tok.MayReportFor(node, pool) {~if true {~-run TestAgentTokenReportsOnlyForItsNodes ./api/
agents: a token bound to nothing reports for no node~store/tokens.go~return t.Pool != "" && t.Pool == pool~return t.Pool == pool~-run TestAgentTokenReportsOnlyForItsNodes ./api/
agents: a certificate names its node exactly, no wildcard by default~api/auth.go~return anyNode && c.VerifyHostname(node) == nil~return c.VerifyHostname(node) == nil~-run TestClientCertificateAuthenticatesAnAgentForItsNode ./api/
agents: a certificate reports only for its node~api/auth.go~if certNames(c, node, s.cfg.AgentAnyNode) {~if true {~-run TestClientCertificateAuthenticatesAnAgentForItsNode ./api/
agents: a service-account token reports only for its pod's node~api/auth.go~tok, ok = store.Token{Name: name, Role: store.RoleAgent, Nodes: []string{node}}, true~tok, ok = store.Token{Name: name, Role: store.RoleAdmin, Nodes: []string{node}}, true~-run TestServiceAccountAgentReportsOnlyForItsNode ./api/
agents: only the agents' service accounts authenticate~k8s/agentreview.go~if st.User.Username == "system:serviceaccount:"+strings.Replace(acc, "/", ":", 1) {~if strings.Contains(acc, "/") {~-run TestAgentReviewerNamesThePodsNode ./k8s/
agents: a report dated ahead of the server is refused~api/nodes.go~if now := s.cfg.Now(); rep.At.After(now.Add(broker.MaxReportSkew)) {~if now := s.cfg.Now(); false && rep.At.After(now.Add(broker.MaxReportSkew)) {~-run TestReportTimeIsTheServers ./api/
agents: the server's receive time, not the agent's~store/reports.go~r.ReceivedAt = received~_ = received~-run TestReportTimeIsTheServers ./api/
agents: a retried sample does not count as a second report~store/reports.go~WHERE node_reports.at < excluded.at`~WHERE node_reports.at <= excluded.at`~-run TestReportsKeepThePreviousAndIgnoreRetries ./store/
agents: pruning keeps the reports of live nodes~store/reports.go~AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = r.node AND n.phase <> 'gone')~AND true~-run TestPruneReports ./store/
agents: freshness is the receive time~broker/merge.go~received := r.ReceivedAt~received := r.At~-run TestMergeHealthNeedsTwoReports ./broker/
agents: unhealthy needs two consecutive reports~broker/merge.go~case fresh && prevBad:~case fresh || prevBad:~-run TestMergeHealthNeedsTwoReports ./broker/
agents: XID 94 is contained, an application error~broker/report.go~94: {XIDApplication, "contained ECC error"}~94: {XIDFatal, "contained ECC error"}~-run TestXIDClasses ./broker/
agents: repairs pause past 20% of a pool~broker/lifecycle.go~if bad <= allowed {~if true {~-run TestPlanRepairsPauseWhenMuchOfAPoolIsUnhealthy ./broker/
agents: the repair pause is exported per pool~broker/lifecycle.go~if why, paused := repairPause(p, t, bad[p]); paused {~if why, paused := repairPause(p, t, 0); paused {~-run TestPoolRepairsPausedMetric ./api/
agents: a node that needs a reset keeps its work~broker/lifecycle.go~if n.NeedsReset && hasWork(n) {~if false {~-run TestPlanRepairsPauseWhenMuchOfAPoolIsUnhealthy ./broker/
agents: GPU memory through NVML v2~cmd/gpubroker-agent/internal/gpu/reader.go~m, ret := d.GetMemoryInfo_v2()~m, ret := nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED~-run TestMemoryThroughNVMLv2 ./cmd/gpubroker-agent/internal/gpu/
fencing: an op update carries the leader's epoch~store/ops.go~AND ($8::bigint = 0 OR epoch = $8)`~AND true`~-run TestStaleLeaderOpWritesAreFenced ./store/
fencing: a journal insert carries the leader's epoch~store/ops.go~WHERE $11::bigint = 0 OR le.epoch = $11 FOR SHARE OF le~WHERE true FOR SHARE OF le~-run TestStaleLeaderOpWritesAreFenced ./store/
fencing: a new epoch adopts the open ops~store/leader.go~UPDATE ops SET epoch = $1 WHERE state IN ('pending', 'running')~UPDATE ops SET epoch = $1 WHERE false~-run TestStaleLeaderOpWritesAreFenced ./store/
fencing: a fenced write ends the lease~store/leader.go~l.markLost(err.Error())~_ = l~-run TestStaleLeaderOpWritesAreFenced ./store/
fencing: a lost lease cancels the acting context~store/leader.go~c(fmt.Errorf("%s: %w", why, ErrLeaseLost))~_ = c~-run TestStaleLeaderOpWritesAreFenced|TestLeaseWithoutProofStopsActing ./store/
fencing: no proof within the bound ends the lease~store/leader.go~l.markLost(fmt.Sprintf("no proof of the leader lock for %s", l.bound))~_ = l~-run TestLeaseWithoutProofStopsActing ./store/
fencing: a lease whose epoch moved is lost~store/leader.go~case epoch != l.epoch:~case false:~-run TestLeaseLostWhenEpochMoves ./store/
fencing: a pooler that breaks session locks is refused~store/leader.go~if err := s.checkSession(ctx, conn, pid); err != nil {~if err := error(nil); err != nil {~-run TestLeaderRefusesTransactionPooler ./store/
fencing: a new leader waits out the bound before acting~internal/app/serve.go~if err := lease.Settle(termCtx); err != nil {~if err := error(nil); err != nil {~-run TestFencedLeaderNeverOverlaps ./test/chaos/
fencing: the tick loop runs under the lease's context~internal/app/serve.go~termCtx, cancel := lease.Context(ctx)~termCtx, cancel := context.WithCancel(ctx)~-run TestFencedLeaderNeverOverlaps ./test/chaos/
victim: instances are protected from scale in~cloud/scale.go~if err := p.protect(ctx, pool, g); err != nil {~if err := error(nil); err != nil {~-run TestCloudNeverPicksAVictim ./cloud/
victim: a group the broker grows launches protected~cloud/scale.go~if !g.newProtected {~if false {~-run TestCloudNeverPicksAVictim ./cloud/
victim: a lower target never goes below the launched instances~cloud/scale.go~target < g.desired && target < launched {~false {~-run TestCloudNeverPicksAVictim|TestHandBackLowersOnlyUnlaunchedCapacity ./cloud/
victim: a scale-up never lowers a raised group~broker/engine/steps_pool.go~if found && ps.Desired > target {~if false {~-run TestScaleUpNeverLowersARaisedGroup ./broker/engine/
victim: awssim never scales in a protected instance~cloud/awssim/groups.go~(in.lifecycle == "Pending" || in.lifecycle == "InService") && !in.protected {~(in.lifecycle == "Pending" || in.lifecycle == "InService") {~-run TestSetInstanceProtectionShape|TestCloudNeverPicksAVictim ./cloud/awssim/ ./cloud/
executor: a transfer that cannot drain gives the node back~broker/engine/drainlimits.go~\t\t// its side again.\n\t\treturn true~\t\t// its side again.\n\t\treturn false
executor: a transfer that cannot drain gives the node back~broker/engine/drainlimits.go~\t\t// its side again.\n\t\treturn true~\t\t// its side again.\n\t\treturn op.Kind == ""
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
drain limits: unplanned work gives the node back~broker/engine/steps_node.go~if len(st.Unplanned) > 0 {~if false {~-run TestRuntimeDrainGivesBackOnWorkThePlanDidNotSee ./broker/engine/
drain limits: the plan's work includes CPU pods~broker/engine/fence.go~if !w.System && !slices.Contains(ids, workID(w)) {~if w.GPUs > 0 && !w.System && !slices.Contains(ids, workID(w)) {~-run TestRuntimeDrainGoesOnWithThePlannedCPUWork ./broker/engine/
drain limits: the fence trusts only an observation showing the cordon~broker/engine/drainlimits.go~return !caps.ShowsFence || !owned || owner != side~return !caps.ShowsFence || !owned || owner != side || true~-run TestRuntimeFenceWaitsForAnObservationShowingTheCordon ./broker/engine/
drain limits: a PDB-blocked scale-down gives its node back~broker/engine/drainlimits.go~return !policy.ForceAfterDrainTimeout && strings.HasPrefix(st.BlockedBy, "PodDisruptionBudget")~return false~-run TestRuntimePDBBlockedScaleDownGivesNodeBack|TestPDBBlockedScaleDownGivesNodeBack ./broker/engine/ ./test/e2e/
yarncordon: a cordon's prior is journaled before it is applied~broker/engine/cordon.go~return s.save(), true, false\n\t}\n\tif err := act.Cordon(ctx, s.op.Node)~rec = s.data.Cordon\n\t}\n\tif err := act.Cordon(ctx, s.op.Node)~./broker/engine/
yarncordon: undoing a cordon restores the journaled labels~broker/engine/cordon.go~if err := c.Uncordon(ctx, s.op.Node, rec.Prior); err != nil {~if err := c.Uncordon(ctx, s.op.Node, nil); err != nil {~./broker/engine/
yarncordon: a missing cordon is re-applied after each observation~broker/engine/runtime.go~r.ensureCordons(ctx)~_ = ctx~./broker/engine/
yarncordon: without a cordon, drain by attrition is off~broker/engine/cordon.go~p.YARNDrainByAttrition = false~p.YARNDrainByAttrition = true~./broker/engine/
yarncordon: a YARN preemption cordons before signalling victims~broker/engine/steps_node.go~if next, progressed, done := r.cordonNode(ctx, s, side, act); !done {\n\t\treturn next, progressed, false\n\t}~_ = act~./broker/engine/
yarncordon: the fence is the cordon, not the exclude file~broker/engine/fence.go~if labelled && r.cordonUnavailable(ctx, side) == "" {~if labelled && false {~./broker/engine/
yarncordon: the fence counts every YARN container~broker/engine/fence.go~return w.GPUs > 0 || caps.CountsAllWork~return w.GPUs > 0 || caps.CountsAllWork && false~./broker/engine/
yarncordon: the cordon comes off once the node is released~broker/engine/steps_node.go~if err := r.uncordonNode(ctx, s, side); err != nil {\n\t\t\t\treturn s.retry(err)\n\t\t\t}\n\t\t\tr.log.Info(~if false {\n\t\t\t\treturn s.retry(nil)\n\t\t\t}\n\t\t\tr.log.Info(~./broker/engine/
yarncordon: give-back restores the labels~broker/engine/steps_node.go~if err := r.uncordonNode(ctx, s, from); err != nil {~if err := r.uncordonNode(ctx, s, broker.Source("none")); err != nil {~./broker/engine/
yarncordon: work lost on a released node is recorded~broker/engine/steps_node.go~if len(st.Lost) > 0 && s.data.Lost == nil {~if false {~./broker/engine/
yarncordon: a busy host never enters the exclude file~yarn/decommission.go~if len(running) > 0 {\n\t\trs := broker.ReleaseStatus{Remaining: running}~if len(running) > 0 && false {\n\t\trs := broker.ReleaseStatus{Remaining: running}~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarncordon: a DECOMMISSIONED placeholder is never a release~yarn/decommission.go~case placeholder(n):~case false:~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarncordon: the exclude file only after the cordon held the empty host~yarn/decommission.go~if d.cordonAvailable(ctx) && held < hold {~if false {~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarncordon: a released host's last-seen work is reported lost~yarn/decommission.go~\t\treturn broker.ReleaseStatus{Drained: true, Lost: lost}, nil\n\t}\n\tvar running~\t\treturn broker.ReleaseStatus{Drained: true}, nil\n\t}\n\tvar running~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarncordon: a cordon missing from the RM is re-applied~yarn/cordon.go~if !listed || slices.Contains(labels, c.cfg.Label) {~if !listed || true {~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarncordon: the probe names a cluster without node labels~yarn/cordon.go~if why, known := labelRefusal(err); known {\n\t\t\treturn false, true, why\n\t\t}\n\t\treturn false, false, fmt.Sprintf("add node label~if why, known := labelRefusal(err); known && false {\n\t\t\treturn false, true, why\n\t\t}\n\t\treturn false, false, fmt.Sprintf("add node label~./yarn/ -run TestCordon|TestRelease|TestDecommissionerSideActions|TestEvictUnderCordon
yarnwork: a YARN node with any container is busy, GPU or not~broker/scaledown.go~case w.side == SourceYARN && nc.work > 0:~case w.side == SourceYARN && nc.gpuWork > 0:~-run TestConsolidation|TestPropIdleReclaim|TestPropConsolidation ./broker/
yarnwork: an ApplicationMaster is priced on its whole application~broker/cost.go~gpus = max(gpus, w.AppGPUs)~gpus = max(gpus, 0)~-run TestCost ./broker/
yarnwork: the fence counts landed work without GPUs~broker/engine/fence.go~return w.GPUs > 0 || caps.CountsAllWork~return w.GPUs > 0 || caps.CountsAllWork && false~-run TestRuntime ./broker/engine/
yarnwork: a GPU node the RM counts more on than is listed carries unknown work~yarn/demand.go~if extra > 0 || gpuNode(&n) && (n.Containers > u.containers || n.UsedMemoryMB > u.mb || n.UsedVCores > u.vcores) {~if extra > 0 || gpuNode(&n) && u.containers < 0 {~-run TestBrokerNodes|TestEveryContainerCounts|TestNumContainersMismatch ./yarn/
yarnwork: GPU nodes' other containers are read from their NodeManagers~yarn/containers.go~\t\t\tc.completeNodes(ctx, obs, now)\n\t\t\treturn nil~\t\t\treturn nil~-run TestEveryContainerCounts ./yarn/
yarnwork: a NodeManager answer that left the node unexplained is read again~yarn/nodework.go~if explained(n, l) {~if true {~-run TestNumContainersMismatch ./yarn/
yarnwork: the exclude file is written under its lock~yarn/exclude.go~err = flock(lf)~err = nil~-run TestExcludeFileLockShared ./yarn/
yarnwork: other writers' entries are kept~yarn/exclude.go~hs, mode, err := f.read(path)\n\tif err != nil {\n\t\treturn false, err\n\t}\n\ths, changed := change(hs)~_, mode, err := f.read(path)\n\tif err != nil {\n\t\treturn false, err\n\t}\n\ths, changed := change(nil)~-run TestExcludeFile ./yarn/
yarnwork: the exclude file is replaced atomically~yarn/exclude.go~\tdir := filepath.Dir(path)\n\ttmp, err := os.CreateTemp~\tif err := os.WriteFile(path, b, mode); err != nil || len(b) > 0 {\n\t\treturn err\n\t}\n\tdir := filepath.Dir(path)\n\ttmp, err := os.CreateTemp~-run TestExcludeFileNoPartialFileEverVisible ./yarn/
yarnwork: no refresh while the file holds unrefreshed entries~yarn/exclude_refresh.go~if len(hosts) > 0 {~if false {~-run TestDecommissionRefuses ./yarn/
yarnwork: another writer's changed timeout is unrefreshed~yarn/exclude.go~if t != h.Timeout {~if t != h.Timeout && false {~-run TestExcludeFileUnrefreshed ./yarn/
yarnwork: a victim that cannot be signalled does not take its app along~yarn/preempt.go~if len(others) == 0 {~if true {~-run TestEvict ./yarn/
yarnwork: an AM is killed only with all of its application on the node~yarn/preempt.go~if len(elsewhere) > 0 {~if false {~-run TestEvict ./yarn/
yarnwork: a victim gets its tenant's grace~yarn/preempt.go~if w.EvictGrace > 0 {\n\t\tgrace = w.EvictGrace~if false {\n\t\tgrace = w.EvictGrace~-run TestEvict ./yarn/
yarnwork: a tenant's evict grace is bounded~broker/tenant.go~case t.EvictGrace < 0 || t.EvictGrace.D() > MaxEvictGrace:~case false:~-run TestTenantEvictGraceBounds ./broker/
yarnwork: the op records what a preemption stopped~broker/engine/steps_node.go~\t\t\ts.data.Stopped = append(s.data.Stopped, howStopped(act, w))\n\t\tcase errors.Is(err, broker.ErrInProgress):~\t\tcase errors.Is(err, broker.ErrInProgress):~-run TestRuntimePreempts ./broker/engine/
yarnrm: an exclusive label's node takes no default-partition ask~yarn/yarnsim/labels.go~return lbl == "" && !s.exclusive(nl)~return lbl == ""~./yarn/yarnsim ./yarn/rmadmin -run TestLabelExclusivity|TestNodeLabelCordon|TestFailoverSemantics
yarnrm: a new active RM shuts down an excluded host's NodeManager~yarn/yarnsim/restart.go~				shutdown = append(shutdown, h)~				_ = h~./yarn/yarnsim -run TestFailoverSemantics
yarnrm: a new active RM lists an excluded host as the placeholder host:-1~yarn/yarnsim/restart.go~			n.placeholder, n.unlisted = true, false~			n.unlisted = false~./yarn/yarnsim -run TestFailoverSemantics
yarnrm: replaceLabelsOnNode calls Hadoop's method replaceLabelsOnNodes~yarn/rmadmin/labels.go~"replaceLabelsOnNodes", req)~"replaceLabelsOnNode", req)~./yarn/rmadmin -run TestLabelWireBytes
yarnrm: a queue may not ask for a label it cannot access~yarn/yarnsim/sim.go~		if !accessible(q, r.NodeLabel) {~		if false {~./yarn/yarnsim -run TestLabelExclusivity
replay: a re-queued task's wait counts~replay/steps.go~\tt.waited += s.now - t.since\n~\tif t.restarts == 0 {\n\t\tt.waited += s.now - t.since\n\t}\n~-run TestRequeueWaitsCount ./replay/
replay: an attrition scale-down is no pending removal~replay/planner.go~ && !x.attrition {~ {~-run TestAttritionIsNoPendingRemoval ./replay/
replay: a scale-up waits for removals only past the pool's max~replay/planner.go~if pending > 0 && want > s.pools[o.pool].MaxNodes {~if pending > 0 {~-run TestScaleUpWaitsForPendingRemovals ./replay/
replay: static-p95 is sized at the demand's p95~replay/replay.go~{PolicyStaticP95, float64(dem.p95)},~{PolicyStaticP95, float64(dem.peak)},~-run TestStaticSplitSizes ./replay/
replay: static-peak is sized at the demand's peak~replay/replay.go~{PolicyStaticPeak, float64(dem.peak)},~{PolicyStaticPeak, float64(dem.p95)},~-run TestStaticSplitSizes ./replay/
replay: spread places on the node with the most GPUs free~replay/schedule.go~return a.free()*b.gpus > b.free()*a.gpus~return a.free() < b.free()~-run TestSpreadAndPack ./replay/
replay: the safe autoscaler never drains a busy YARN node~replay/baselines.go~(c.safe && !c.safeToDrain(s, n))~false~-run TestSafeAutoscalerKillsNothing ./replay/
replay: work-losing kills outside preemption are counted~replay/steps.go~if why != "preempt" {\n\t\t\ts.m.drainKills++~if false {\n\t\t\ts.m.drainKills++~-run TestSafeAutoscalerKillsNothing ./replay/
replay: work left undone is reported~replay/metrics.go~r.NotDoneGPUHours += float64(t.GPUs) * max(0, left).Hours()~_ = left~-run TestUnservedWorkIsReported ./replay/
replay: the README's tables cannot drift from the replay~replay/world.go~Placement:       PlacementSpread,~Placement:       PlacementPack,~-run TestReplayTablesMatchAFreshRun ./cmd/gpubroker/
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
roles: a create without weight gets weight 1~api/tenants.go~\tt := broker.Tenant{Weight: defaultWeight}\n\tif err := s.decode(w, r, &t, false); err != nil {\n\t\ts.fail(w, r, err)\n\t\treturn\n\t}\n\tt.EvictGrace = storedGrace(t.EvictGrace)\n\tif t.Version != 0 {~\tt := broker.Tenant{}\n\tif err := s.decode(w, r, &t, false); err != nil {\n\t\ts.fail(w, r, err)\n\t\treturn\n\t}\n\tt.EvictGrace = storedGrace(t.EvictGrace)\n\tif t.Version != 0 {~./api/ -run ^TestTenantWeightDefault$
roles: POST /plan is the admin's~api/api.go~r.With(onlyAdmins(planRefusal)).Post("/plan", s.plan)~r.With(allow(readers...)).Post("/plan", s.plan)~./api/ -run ^TestTenantAdminConfinement$
roles: POST /plan observes at most once per tick period~api/plan.go~if g.last != nil && g.now().Sub(g.last.at) < g.interval {~if false {~./api/ -run ^TestPlanOncePerTickPeriod$
roles: POST /plan is single-flight~api/plan.go~\tc = g.inflight\n~\tc = nil\n~./api/ -run ^TestPlanGateSingleFlight$
roles: bad text in a parameter is refused before the database~api/api.go~r.Use(checkInput, s.authenticate,~r.Use(s.authenticate,~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: path parameters are checked~api/input.go~for i, name := range rc.URLParams.Keys {~for i, name := range rc.URLParams.Keys[:0] {~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: a NUL character is refused~api/input.go~case strings.IndexByte(v, 0) >= 0:~case strings.IndexByte(v, 0) >= 0 && false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: invalid UTF-8 is refused~api/input.go~case !utf8.ValidString(v):~case !utf8.ValidString(v) && false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
roles: an over-long parameter is refused~api/input.go~case len(v) > max:~case false:~./api/ -run ^TestBadTextNeverReachesTheDatabase$
yarnfail: a real RM's placeholder is never a release~yarn/decommission.go~case placeholder(n):~case false:~./test/hadoop -run TestFailover/yarnsim
yarnfail: a tenant's evict grace is answered as stored~api/tenants.go~return broker.Duration(d.D().Truncate(time.Millisecond))~return d~./test/conformance
yarnfail: a busy host is held by the cordon, never the exclude file~yarn/decommission.go~\tif len(running) > 0 {\n\t\trs := broker.ReleaseStatus{Remaining: running}~\tif false {\n\t\trs := broker.ReleaseStatus{Remaining: running}~./test/hadoop -run TestBrokerCordonSurvivesFailover/yarnsim
chaosfail: a replace's surge stays within the cluster GPU max~broker/engine/steps_pool.go~case withinCluster && (ps.Pool.MaxNodes <= 0~case (withinCluster || true) && (ps.Pool.MaxNodes <= 0~-run TestRuntimeReplace ./broker/engine/
chaosfail: the placeholder of a host excluded empty is a release~yarn/decommission.go~if ok, why := d.placeholderReleased(host, now); ok {~if ok, why := d.placeholderReleased(host, now); ok && false {~-run TestPlaceholderOfAnEmptyExcludedHostIsReleased ./yarn/
chaosfail: only a host the broker excluded empty is released by its placeholder~yarn/decommission.go~mine := d.emptyExcluded[host]~mine := true~-run TestPlaceholderOfAnEmptyExcludedHostIsReleased ./yarn/
chaosfail: a new leader trusts only the short timeout~yarn/decommission.go~h.Timeout > 0 && h.Timeout == d.cfg.ShortTimeout~h.Timeout != 0~-run TestPlaceholderOfAnEmptyExcludedHostIsReleased ./yarn/
stranded: a node nobody owns and no op holds is reconsidered~broker/lifecycle.go~\tpl.removeStranded(pendingDownGPUs, attr)\n~\t_, _ = pendingDownGPUs, attr\n~-run TestPlanScaleDown ./broker/
stranded: a node an op holds is left to it~broker/lifecycle.go~return n.Owner == OwnerNone && !w.busy && w.pool >= 0~return n.Owner == OwnerNone && w.pool >= 0~-run TestPlanScaleDown ./broker/
stranded: a node nobody owns that runs work is kept~broker/lifecycle.go~!hasWork(n) && n.GPUsAllocated == 0 && !pl.staleYARN~!pl.staleYARN~-run TestPlanScaleDown ./broker/
stranded: only a node nobody owns (an operator's cordon is not the broker's)~broker/lifecycle.go~return n.Owner == OwnerNone && !w.busy~return !w.busy~-run TestPlanScaleDown ./broker/
chaosfail: a placeholder that stays one past the settle is released~yarn/decommission.go~now.Sub(since) >= settle {~now.Sub(since) >= settle && false {~-run TestPlaceholderOfAnEmptyExcludedHostIsReleased ./yarn/
chaosfail: a placeholder is no release before the settle~yarn/decommission.go~now.Sub(since) >= settle {~now.Sub(since) >= 0 {~-run TestPlaceholderOfAnEmptyExcludedHostIsReleased|TestReleasePlaceholderIsNeverDrained ./yarn/
yarnwork e2e: the op records that the victim needed FORCEFUL_SHUTDOWN~yarn/preempt.go~case !ev.forceful.IsZero():~case false:~./test/hadoop -run TestBrokerStopsNothingItNeedNot/yarnsim
yarnwork e2e: FORCEFUL_SHUTDOWN only once the victim's grace is over~yarn/preempt.go~case now.Sub(ev.sent()) < grace:~case false:~./test/hadoop -run TestBrokerStopsNothingItNeedNot/yarnsim
lease: a session that lost the lock stops acting~store/leader.go~case !held:~case false:~-run TestLeaseLostWhenLockOrBackendMoves ./store/
lease: a connection moved to another backend stops acting~store/leader.go~case pid != l.pid:~case false:~-run TestLeaseLostWhenLockOrBackendMoves ./store/
stranded: a node nobody owns serves pending demand before a purchase~broker/placement.go~case (w.owned && !ownSide || w.stranded) && poolServes:~case w.owned && !ownSide && poolServes:~-run TestPlanScaleDown|TestRuntimeStranded ./broker/ ./broker/engine/
stranded: a node nobody owns is offered only once settled~broker/plan.go~pl.now.Sub(n.PhaseSince) >= StrandedSettle~true~-run TestPlanScaleDown ./broker/
steps: a move outside its kind's table gives the op up~broker/engine/executor.go~if err := broker.CanMove(s.op.Kind, s.op.Step, step); err != nil {~if err := error(nil); err != nil {~-run TestMoveOutsideTheTableGivesUp ./broker/engine/
steps: an op ends done only where its table allows~broker/engine/executor.go~if err := broker.CanMove(s.op.Kind, s.op.Step, broker.StepDone); err != nil {~if err := error(nil); err != nil {~-run TestMoveOutsideTheTableGivesUp ./broker/engine/
steps: giving up from a step that holds a node gives it back~broker/engine/executor.go~\tif broker.HoldsNode(s.op.Kind, s.op.Step) {\n\t\tif _, ok~\tif false {\n\t\tif _, ok~./broker/engine/
steps: the table marks the steps that hold a node~broker/steps.go~return ok && s.HoldsNode~return ok && s.HoldsNode && false~./broker/ ./broker/engine/
policy: the tick applies the policy's defaults where it enters~broker/engine/observe.go~o.policy = r.cordonPolicy(ctx, policy.WithDefaults())~o.policy = r.cordonPolicy(ctx, policy)~-run TestPolicyDefaultsAppliedAtTheEdge ./broker/engine/
dra: GPUs held through DRA claims count on their node~k8s/nodes.go~addDRA(&w, c.draAllocated(pod, claimed))~addDRA(&w, GPURequest{})~-run TestObserverDRADemand|TestObserverMIG|TestDRARunningPodKeepsNodeFromIdleReclaim ./k8s/ ./test/e2e/
dra: a claim several pods share is demand once~k8s/dra.go~\t\tcounted[key] = true\n\t\tnote(name~\t\tnote(name~-run TestObserverDRADemand ./k8s/
dra: a selector not understood buys nothing~broker/plan.go~\t\tif d.d.Unsatisfiable != "" {~\t\tif false {~-run TestObserverDRADemand ./k8s/
dra: a node's GPUs from its ResourceSlices make it gpu-ready~k8s/nodes.go~alloc.GPUs = max(alloc.GPUs, sl.GPUs)~_ = sl~-run TestObserverDRADemand ./k8s/
dra: an allocated claim is no demand~k8s/dra.go~if !ok || claim.Status.Allocation != nil || counted[key] {~if !ok || counted[key] {~-run TestObserverDRADemand ./k8s/
migrate: work without a known checkpoint is never migrated~broker/migrate.go~		case wl.CheckpointAge < 0:\n~		case false:\n~-run TestMigrate ./broker/
migrate: a checkpoint older than the max wait is never migrated~broker/migrate.go~		case wl.CheckpointAge > wait:~		case false:~-run TestMigrate ./broker/
migrate: an ApplicationMaster is never migrated~broker/migrate.go~		case wl.AM:~		case false:~-run TestMigrate ./broker/
migrate: a gang is never moved partly~broker/migrate.go~		case pl.gangElsewhere(wl, n.Name):~		case false:~-run TestMigrate ./broker/
migrate: a tenant that opted out is never migrated~broker/migrate.go~		case slices.Contains(pl.p.NoMigrateTenants, wl.Tenant):~		case false:~-run TestMigrate ./broker/
migrate: the hourly budget holds~broker/migrate.go~	if left := pl.migrationsLeft(); len(work) > left {~	if left := pl.migrationsLeft(); false {~-run TestMigrate ./broker/
migrate: work lands only on nodes its constraints match~broker/migrate.go~if w.sched && w.side == side && c.matches(side, pl.nodeTarget(int32(i))) {~if w.sched && w.side == side {~-run TestMigrateLandsAcrossPools ./broker/
migrate: work of unknown constraints lands only on its own pool~broker/migrate.go~		if wl.Constraints != nil {\n~		if true {\n~-run TestMigrateLandsAcrossPools ./broker/
migrate: a migration in flight is a pending removal for the scale-up target~broker/plan.go~ && op.Kind != ActReplace && op.Kind != ActMigrate || AttritionOp(op) {~ && op.Kind != ActReplace || AttritionOp(op) {~-run TestScaleUpTargetLeavesPendingRemovalsOut ./broker/
replay: only an op's own victims end its wait~replay/sim.go~			if t.victimOf == o {~			if o.kind == broker.ActPreempt || o.kind == broker.ActMigrate {~-run TestOnlyItsVictimsEndAMigrationsWait ./replay/
migrate: ended migrations count against the budget~broker/engine/observe.go~		MigratedLastHour: migrated, NoActions~		MigratedLastHour: migrated * 0, NoActions~-run TestRuntimeMigrateBudgetCountsEndedOps ./broker/engine/
migrate: a task is stopped only right after a checkpoint~broker/engine/migrate.go~		if !stopping && !checkpointedSince(cur, s.now, s.data.MigrateFrom, window) {~		if !stopping && window < 0 {~-run TestRuntimeMigrate ./broker/engine/
migrate: a checkpoint written before the cordon does not let a task stop~broker/engine/migrate.go~	return !now.Add(-w.CheckpointAge).Before(from.Add(-checkpointSlack))~	return true~-run TestRuntimeMigrate ./broker/engine/
migrate: a task is never stopped on a stale side's observation~broker/engine/migrate.go~\tif _, stale := r.seen.stale[side]; stale {~\tif false {~-run TestRuntimeMigrate ./broker/engine/
migrate: a task missing beside work its side cannot name has not ended~broker/engine/migrate.go~return broker.Workload{}, false, !unlisted~return broker.Workload{}, false, true~-run TestRuntimeMigrate ./broker/engine/
migrate: only the side's own listing of the node says a task ended~broker/engine/migrate.go~\tif !slices.ContainsFunc(r.seen.lastGood[side].Nodes~\tif false && !slices.ContainsFunc(r.seen.lastGood[side].Nodes~-run TestRuntimeMigrate ./broker/engine/
yarn: a container of a recovering application is not taken for gone~yarn/preempt.go~\tif isNotFound(err) && st.State == "ACCEPTED" {~\tif false && isNotFound(err) && st.State == "ACCEPTED" {~-run TestEvict ./yarn/
yarn: containers the RM cannot name are marked unlisted~yarn/demand.go~Class: broker.WorkBatch, Unlisted: true,~Class: broker.WorkBatch,~-run TestBrokerNodes ./yarn/
migrate: a YARN node is cordoned before its tasks are stopped~broker/engine/migrate.go~			if next, progressed, done := r.cordonNode(ctx, s, from, act); !done {\n\t\t\t\treturn next, progressed\n\t\t\t}~			_ = act~-run TestRuntimeMigrate ./broker/engine/
migrate: why names the migrations of a YARN application~store/why.go~			UNION\n\t\t\t(SELECT * FROM decisions WHERE at >= $2 AND kind = 'migrate'~			UNION ALL\n\t\t\t(SELECT * FROM decisions WHERE false AND kind = 'migrate'~-run TestDemandDecisionsNameMigrations ./store/
fleet: a fleet's faulty host is cordoned, never replaced~broker/lifecycle.go~\t\tif pl.pools[w.pool].st.Pool.Fleet() {\n\t\t\tpl.repairFleet(w)\n~\t\tif false {\n\t\t\tpl.repairFleet(w)\n~-run TestFleetPools ./broker/
fleet: a fleet's faulty host is only cordoned, its work left to end~broker/lifecycle.go~To: OwnerNone, CordonOnly: true,~To: OwnerNone,~-run TestFleetPools ./broker/
fleet: the cordon-only mark reaches the journaled op~broker/engine/tickphases.go~Attrition: a.Attrition, CordonOnly: a.CordonOnly}~Attrition: a.Attrition}~-run TestFleetCordonOnlyIsJournaled ./broker/engine/
fleet: the provider never grows a fleet pool~fleet/fleet.go~\tif target == st.Desired {\n\t\treturn nil\n\t}\n~\treturn nil\n~./fleet/
fleet: the provider never terminates a fleet host~fleet/fleet.go~\treturn fmt.Errorf("pool %s is a fleet pool: the broker never terminates its host %s (it cordons a faulty host and reports it)", pool, instanceID)~\treturn nil~./fleet/
fleet: a call for a fleet pool never reaches the cloud~fleet/fleet.go~\tif c.fleet.Has(pool) || c.cloud == nil {\n\t\treturn c.fleet.Terminate(ctx, pool, instanceID)~\tif c.cloud == nil {\n\t\treturn c.fleet.Terminate(ctx, pool, instanceID)~./fleet/
fleet: before the first listing every host is a member (no purchase at start)~fleet/fleet.go~if _, ok := reg[h]; ok || reg == nil {~if _, ok := reg[h]; ok {~-run TestFleetBurstsToCloudOnlyWhenFull|TestMembers ./fleet/ ./test/e2e/
fleet: a host neither side lists is no capacity~fleet/fleet.go~if _, ok := reg[h]; ok || reg == nil {~if _, ok := reg[h]; ok || true {~-run TestMembers|TestOpenFleetWithoutCloud ./fleet/ ./internal/app/
fleet: a pool named by a side's listing waits for it on the first tick~fleet/fleet.go~\t\t\t\tcase <-f.listedOnce[src]:\n\t\t\t\tcase <-ctx.Done():~\t\t\t\tdefault:\n\t\t\t\t\t_ = src\n\t\t\t\tcase <-ctx.Done():~-run TestMembersBySides ./fleet/
fleet: only the first call waits for a listing (a side that cannot be listed never slows each tick)~fleet/fleet.go~\tf.waited = true\n~\n~-run TestMembersBySides ./fleet/
fleet: a selector without its side configured is refused~internal/app/app.go~\tif err := m.checkFleetSides(); err != nil {~\tif err := error(nil); err != nil {~-run TestOpenFleetWithoutCloud ./internal/app/
fleet: a host a pool lists by name is never another's~fleet/fleet.go~if !taken[n.Name] && f.host[n.Name] == "" && p.names(src, n) {~if !taken[n.Name] && p.names(src, n) {~-run TestMembersBySides ./fleet/
mig: whole GPUs and MIG slices never serve each other's demand~broker/match.go~if c.MIGProfile != t.mig {~if false && c.MIGProfile != t.mig {
mig: unknown GPU memory never serves a memory selector~broker/match.go~if c.MinGPUMemoryMiB > 0 && t.memMiB < c.MinGPUMemoryMiB {~if false {
mig: cluster and model caps count a MIG node's GPUs, not its slices~broker/placement.go~gpn, phys := wp.st.Pool.Units(), wp.st.Pool.GPUsPerNode~gpn, phys := wp.st.Pool.Units(), wp.st.Pool.Units()
mig: quotas count MIG slices by their compute slices~broker/quota.go~t.usage += computeSlices(w.MIGProfile, w.GPUs)~t.usage += computeSlices("", w.GPUs)
mig: a node's MIG work counts as its slices (observer)~k8s/nodes.go~if w.MIGProfile == bn.MIGProfile {~if w.MIGProfile == "" {~-run TestObserverMIG ./k8s/
mig: a MIG node offers only the devices its agent finds~broker/merge.go~\t\tn.GPUsTotal = c\n~\t\t_ = c\n
mig: a learned pool memory only goes down~store/pools.go~ AND (learned_gpu_memory_mib = 0 OR learned_gpu_memory_mib > $2)`~`~-run TestPoolDevices ./store/
mig: a pod asking whole GPUs and MIG slices waits unsatisfiable~k8s/pods.go~Unsatisfiable:   mixedReason(r.Request),~Unsatisfiable:   "",~-run TestObserverMIG ./k8s/
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
