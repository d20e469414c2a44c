package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
)

// cordoner returns side's actions as a Cordoner, when they are one.
func (r *Runtime) cordoner(side broker.Source) (Cordoner, bool) {
	c, ok := r.actions[side].(Cordoner)
	return c, ok
}

// cordonUnavailable says why side cannot cordon a busy node, or "" when
// it can (or its cordon is no Cordoner's: Kubernetes').
func (r *Runtime) cordonUnavailable(ctx context.Context, side broker.Source) string {
	c, ok := r.cordoner(side)
	if !ok {
		return ""
	}
	if avail, why := c.CordonAvailable(ctx); !avail {
		if why == "" {
			why = "the cluster does not offer it"
		}
		return why
	}
	return ""
}

// cordonNode cordons op's node on side and reports done once the cordon
// is on; otherwise it returns the op to store and whether it progressed.
// A Cordoner's cordon is journaled first: the prior state it replaces is
// saved in the op (one step), and only the next step applies it, so a
// crash at any point still finds in the journal what to restore.
func (r *Runtime) cordonNode(ctx context.Context, s *stepCtx, side broker.Source, act SideActions) (broker.Op, bool, bool) {
	c, isC := act.(Cordoner)
	if !isC {
		if err := act.Cordon(ctx, s.op.Node); err != nil {
			op, progressed := s.retry(err)
			return op, progressed, false
		}
		return broker.Op{}, false, true
	}
	rec := s.data.Cordon
	if rec != nil && rec.Side == side && rec.Holds() {
		return broker.Op{}, false, true
	}
	if why := r.cordonUnavailable(ctx, side); why != "" {
		op, progressed := s.giveUp(fmt.Sprintf("cannot cordon node %s on %s, so its running work is left alone: %s", s.op.Node, side, why))
		return op, progressed, false
	}
	if rec == nil || rec.Side != side || rec.Undone {
		prior, err := c.CordonPrior(ctx, s.op.Node)
		if err != nil {
			op, progressed := s.retry(err)
			return op, progressed, false
		}
		// IMPORTANT: the prior is journaled before the cordon replaces it.
		s.data.Cordon = &broker.CordonRecord{Side: side, Prior: prior}
		if prior == nil {
			s.data.Cordon.Prior = []string{}
		}
		return s.save(), true, false
	}
	if err := act.Cordon(ctx, s.op.Node); err != nil {
		op, progressed := s.retry(err)
		return op, progressed, false
	}
	rec.Applied = true
	r.log.Info("node cordoned", "op", s.op.ID, "node", s.op.Node, "side", side, "prior", rec.Prior)
	return broker.Op{}, false, true
}

// uncordonNode undoes the op's cordon on side, restoring the journaled
// prior. A cordon journaled but not known to be applied is undone too: the
// crash may have come after the side took it.
func (r *Runtime) uncordonNode(ctx context.Context, s *stepCtx, side broker.Source) error {
	rec := s.data.Cordon
	if rec == nil || rec.Side != side || rec.Undone {
		return nil
	}
	c, ok := r.cordoner(side)
	if !ok {
		return nil
	}
	if err := c.Uncordon(ctx, s.op.Node, rec.Prior); err != nil {
		return err
	}
	rec.Undone = true
	r.log.Info("node uncordoned", "op", s.op.ID, "node", s.op.Node, "side", side, "restored", rec.Prior)
	return nil
}

// ensureCordons re-applies every cordon an open op holds that the side's
// latest observation shows missing (a label store that lost it across an
// RM failover, an operator's edit), right after the observation and
// before the plan acts on it.
func (r *Runtime) ensureCordons(ctx context.Context) {
	if !slices.ContainsFunc(broker.Sources[:], func(src broker.Source) bool { _, ok := r.cordoner(src); return ok }) {
		return
	}
	ops, err := r.cfg.Ledger.OpenOps(ctx)
	if err != nil {
		r.log.Warn("read journal to check cordons", "err", err)
		return
	}
	for i := range ops {
		op := &ops[i]
		d := broker.OpDataOf(op)
		if !d.Cordon.Holds() {
			continue
		}
		c, ok := r.cordoner(d.Cordon.Side)
		if !ok {
			continue
		}
		again, err := c.EnsureCordon(ctx, op.Node)
		if err != nil {
			r.log.Warn("re-apply a missing cordon", "op", op.ID, "node", op.Node, "side", d.Cordon.Side, "err", err)
			continue
		}
		if again {
			r.log.Warn("cordon was missing and has been re-applied", "op", op.ID, "node", op.Node, "side", d.Cordon.Side)
		}
	}
}

// cordonPolicy turns drain by attrition off for YARN when its cordon is
// unavailable: a busy YARN node is then left alone (the exclude file would
// lose its work at the next RM failover). The startup warning is the
// cordon's own; this logs once per runtime that attrition is off.
func (r *Runtime) cordonPolicy(ctx context.Context, p broker.Policy) broker.Policy {
	if !p.YARNDrainByAttrition {
		return p
	}
	why := r.cordonUnavailable(ctx, broker.SourceYARN)
	if why == "" {
		return p
	}
	p.YARNDrainByAttrition = false
	r.mu.Lock()
	warned := r.attritionOffWarned
	r.attritionOffWarned = true
	r.mu.Unlock()
	if !warned {
		r.log.Warn("yarn_drain_by_attrition is set but off: the yarn cordon is unavailable", "missing", why)
	}
	return p
}

// recordLoss records in the op, and as a decision, work that ended on its
// node without the op stopping it (st.Lost), with the GPU time it had run
// as the last observation that showed the node's work had it (all of that
// work when the side could only count the containers: "N containers").
func (r *Runtime) recordLoss(ctx context.Context, s *stepCtx, side broker.Source, lost []string) {
	l := &broker.WorkLost{At: s.now, Containers: slices.Clone(lost),
		Why: fmt.Sprintf("%s released node %s with work the release did not stop (an RM failover shut its NodeManager down?)", side, s.op.Node)}
	r.mu.Lock()
	for _, w := range r.seen.lastWork[s.op.Node] {
		if w.Source != side || !slices.Contains(lost, w.Key) && !slices.Contains(lost, w.Name) && !strings.HasSuffix(lost[0], " containers") {
			continue
		}
		if w.App != "" && !slices.Contains(l.Apps, w.App) {
			l.Apps = append(l.Apps, w.App)
		}
		if w.GPUs > 0 && !w.StartedAt.IsZero() && s.now.After(w.StartedAt) {
			l.GPUHours += float64(w.GPUs) * s.now.Sub(w.StartedAt).Hours()
		}
	}
	r.mu.Unlock()
	for _, c := range lost {
		if app := appOfContainer(c); app != "" && !slices.Contains(l.Apps, app) {
			l.Apps = append(l.Apps, app)
		}
	}
	slices.Sort(l.Apps)
	s.data.Lost = l
	reason := fmt.Sprintf("work lost on node %s: %d containers (%s) of %d applications, %.2f GPU-hours: %s",
		s.op.Node, len(lost), strings.Join(lost, ", "), len(l.Apps), l.GPUHours, l.Why)
	r.log.Error("work lost on a node being released", "op", s.op.ID, "node", s.op.Node, "side", side, "containers", lost, "apps", l.Apps, "gpu_hours", l.GPUHours)
	detail, _ := json.Marshal(l)
	r.mu.Lock()
	tick := r.tick
	r.mu.Unlock()
	if err := r.cfg.Ledger.RecordDecisions(ctx, []broker.Decision{{At: s.now, Tick: tick, Kind: broker.DecisionLoss, Pool: s.op.Pool, Node: s.op.Node,
		Reason: reason, Detail: detail}}); err != nil {
		r.log.Warn("record a loss", "op", s.op.ID, "err", err)
	}
}

// appOfContainer returns the application of a YARN container id
// (container_[e<epoch>_]<cluster>_<app>_<attempt>_<n>), or "".
func appOfContainer(id string) string {
	parts := strings.Split(id, "_")
	if len(parts) < 5 || parts[0] != "container" {
		return ""
	}
	if strings.HasPrefix(parts[1], "e") {
		parts = parts[1:]
	}
	if len(parts) < 5 {
		return ""
	}
	return "application_" + parts[1] + "_" + parts[2]
}
