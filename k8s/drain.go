package k8s

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// DrainOutcome is how a drain ended.
type DrainOutcome string

// Drain outcomes.
const (
	// DrainDrained: every pod that a drain removes is gone.
	DrainDrained DrainOutcome = "drained"
	// DrainBlockedByPDB: the timeout passed while PodDisruptionBudgets
	// refused evictions (DrainResult.PDBs names them).
	DrainBlockedByPDB DrainOutcome = "blocked-by-pdb"
	// DrainTimedOut: the timeout passed with pods still terminating or
	// evictions failing for other reasons.
	DrainTimedOut DrainOutcome = "timed-out"
	// DrainUnplanned: the node runs a pod the caller's plan did not see
	// (DrainOptions.Planned); the drain stopped before evicting it and
	// names it in DrainResult.Unplanned.
	DrainUnplanned DrainOutcome = "unplanned"
)

// DrainOptions bound and tune a drain. Zero values mean the defaults.
type DrainOptions struct {
	// Timeout bounds the whole drain (default 10 minutes, the policy default).
	Timeout time.Duration
	// GracePeriod overrides the pods' terminationGracePeriodSeconds when
	// set; nil respects each pod's own grace period.
	GracePeriod *int64
	// RetryInitial and RetryMax bound the exponential backoff between
	// eviction attempts refused with 429 (defaults 500ms and 5s).
	RetryInitial time.Duration
	RetryMax     time.Duration
	// PollInterval is how often the node's pods are listed while waiting
	// for evicted pods to go (default 250ms).
	PollInterval time.Duration
	// Planned, when not nil, holds the UIDs of the pods the caller's plan
	// saw on the node: a pod the drain would evict that is not in it
	// stops the drain before any further eviction (DrainUnplanned).
	Planned map[types.UID]bool
}

func (o DrainOptions) defaults() DrainOptions {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = max(5*time.Second, o.RetryInitial)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	return o
}

// DrainResult says how a drain ended and what is left on the node.
type DrainResult struct {
	Node    string       `json:"node"`
	Outcome DrainOutcome `json:"outcome"`
	// PDBs names ("namespace/name") the budgets that refused the last
	// eviction of a pod still on the node.
	PDBs []string `json:"pdbs,omitempty"`
	// PodsLeft are the pods ("namespace/name") a drain removes that are
	// still on the node.
	PodsLeft []string `json:"pods_left,omitempty"`
	// Evicted are the pods whose eviction the API server accepted.
	Evicted []string `json:"evicted,omitempty"`
	// Skipped are DaemonSet and mirror pods, which a drain leaves.
	Skipped []string `json:"skipped,omitempty"`
	// Unplanned are the pods outside DrainOptions.Planned that stopped
	// the drain.
	Unplanned []string `json:"unplanned,omitempty"`
	// Message is one sentence for logs, events and the decision record.
	Message string        `json:"message"`
	Took    time.Duration `json:"took"`
}

// podState is the drain's memory of one pod across attempts.
type podState struct {
	name     string
	next     time.Time     // earliest next eviction attempt
	backoff  time.Duration // current 429 backoff
	pdbs     []string      // budgets that refused the latest attempt
	lastErr  string        // latest non-429 failure
	accepted bool          // eviction accepted; waiting for the pod to go
}

// Drain cordons the node if it is not yet unschedulable (without an owner
// taint: call Cordon first to hand it to a side) and evicts every pod on it
// through the Eviction API, except DaemonSet and mirror pods and pods that
// already finished. Evictions refused with 429 (a PodDisruptionBudget
// allows no disruption now) are retried with exponential backoff until
// opts.Timeout. The node is never forced: after the timeout the result says
// which PDB blocked or that pods were still terminating, and a Warning
// Event is written on the node.
//
// The returned error is for failures to talk to the API server and for
// cancellation; an unfinished drain is an outcome, not an error.
func (a *Actuator) Drain(ctx context.Context, node string, opts DrainOptions) (DrainResult, error) {
	opts = opts.defaults()
	start := a.now()
	deadline := start.Add(opts.Timeout)
	res := DrainResult{Node: node}

	// IMPORTANT: cordon before the first eviction, or the scheduler puts
	// evicted pods' replacements straight back on this node.
	err := a.updateNode(ctx, node, func(n *corev1.Node) bool {
		if n.Spec.Unschedulable {
			return false
		}
		n.Spec.Unschedulable = true
		return true
	})
	if err != nil {
		return res, fmt.Errorf("drain node %q: cordon: %w", node, apiError(err))
	}

	states := map[types.UID]*podState{}
	evicted := map[string]bool{}
	for {
		pods, err := a.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
		if err != nil {
			return res, fmt.Errorf("drain node %q: list pods: %w", node, apiError(err))
		}
		var left []*corev1.Pod
		res.Skipped = res.Skipped[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			switch {
			case isSystemPod(p):
				res.Skipped = append(res.Skipped, p.Namespace+"/"+p.Name)
			case podTerminal(p):
			default:
				left = append(left, p)
			}
		}
		now := a.now()
		if len(left) == 0 {
			res.Outcome = DrainDrained
			res.Message = fmt.Sprintf("node %s drained: %d pods evicted, %d DaemonSet or mirror pods left", node, len(evicted), len(res.Skipped))
			break
		}
		if unplanned := unplannedPods(left, opts.Planned); len(unplanned) > 0 {
			// IMPORTANT: compared on every live list, before any eviction
			// of it: a pod bound after the plan's observation (before the
			// cordon reached the scheduler) is work nobody decided to move.
			res.Outcome, res.Unplanned = DrainUnplanned, unplanned
			res.Message = fmt.Sprintf("node %s not drained: %s not seen by the plan; nothing of it evicted",
				node, strings.Join(unplanned, ", "))
			break
		}
		if !now.Before(deadline) {
			a.timeout(&res, left, states, opts.Timeout)
			break
		}
		for _, p := range left {
			st := states[p.UID]
			if st == nil {
				st = &podState{name: p.Namespace + "/" + p.Name, backoff: opts.RetryInitial}
				states[p.UID] = st
			}
			if p.DeletionTimestamp != nil || st.accepted || now.Before(st.next) {
				continue // terminating within its grace period, or backing off
			}
			if err := a.evict(ctx, p, opts.GracePeriod); err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				st.next = now.Add(st.backoff)
				st.backoff = min(2*st.backoff, opts.RetryMax)
				if apierrors.IsTooManyRequests(err) {
					st.pdbs, st.lastErr = a.blockingPDBs(ctx, p), ""
					a.log.Debug("eviction refused by disruption budget", "node", node, "pod", st.name, "pdbs", st.pdbs, "retry_in", st.backoff)
				} else if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					continue // gone or replaced since the list
				} else {
					st.pdbs, st.lastErr = nil, err.Error()
					a.log.Warn("eviction failed", "node", node, "pod", st.name, "err", err)
				}
				continue
			}
			st.accepted, st.pdbs, st.lastErr = true, nil, ""
			evicted[st.name] = true
			a.log.Info("evicted pod", "node", node, "pod", st.name)
		}
		wait := opts.PollInterval
		for _, p := range left {
			if st := states[p.UID]; !st.accepted && p.DeletionTimestamp == nil {
				wait = min(wait, max(st.next.Sub(a.now()), 10*time.Millisecond))
			}
		}
		wait = min(wait, max(deadline.Sub(a.now()), 0))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		case <-t.C:
		}
	}
	for name := range evicted {
		res.Evicted = append(res.Evicted, name)
	}
	sort.Strings(res.Evicted)
	sort.Strings(res.Skipped)
	res.Took = a.now().Sub(start)

	reason, typ := EventDrained, corev1.EventTypeNormal
	switch res.Outcome {
	case DrainBlockedByPDB:
		reason, typ = EventDrainBlocked, corev1.EventTypeWarning
	case DrainTimedOut, DrainUnplanned:
		reason, typ = EventDrainTimeout, corev1.EventTypeWarning
	}
	if err := a.NodeEvent(ctx, node, typ, reason, res.Message); err != nil {
		a.log.Warn("write drain event", "node", node, "err", err)
	}
	a.log.Info("drain finished", "node", node, "outcome", res.Outcome, "pdbs", res.PDBs, "pods_left", len(res.PodsLeft), "took_ms", res.Took.Milliseconds())
	return res, nil
}

// timeout fills in the result of a drain whose time ran out.
func (a *Actuator) timeout(res *DrainResult, left []*corev1.Pod, states map[types.UID]*podState, limit time.Duration) {
	pdbs := map[string]bool{}
	var errs []string
	for _, p := range left {
		res.PodsLeft = append(res.PodsLeft, p.Namespace+"/"+p.Name)
		if st := states[p.UID]; st != nil {
			for _, b := range st.pdbs {
				pdbs[b] = true
			}
			if st.lastErr != "" {
				errs = append(errs, st.name+": "+st.lastErr)
			}
		}
	}
	sort.Strings(res.PodsLeft)
	for b := range pdbs {
		res.PDBs = append(res.PDBs, b)
	}
	sort.Strings(res.PDBs)
	if len(res.PDBs) > 0 {
		res.Outcome = DrainBlockedByPDB
		res.Message = fmt.Sprintf("node %s not drained after %s: blocked by PDB %s; %d pods left (%s)",
			res.Node, limit, strings.Join(res.PDBs, ", "), len(res.PodsLeft), strings.Join(res.PodsLeft, ", "))
		return
	}
	res.Outcome = DrainTimedOut
	res.Message = fmt.Sprintf("node %s not drained after %s: %d pods left (%s)", res.Node, limit, len(res.PodsLeft), strings.Join(res.PodsLeft, ", "))
	if len(errs) > 0 {
		res.Message += "; last errors: " + strings.Join(errs, "; ")
	}
}

// evict asks the API server to evict one pod, guarded by its UID so a
// replacement pod of the same name is never evicted by mistake.
func (a *Actuator) evict(ctx context.Context, p *corev1.Pod, grace *int64) error {
	uid := p.UID
	return a.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			GracePeriodSeconds: grace,
			Preconditions:      &metav1.Preconditions{UID: &uid},
		},
	})
}

// blockingPDBs names the budgets in the pod's namespace that select it.
func (a *Actuator) blockingPDBs(ctx context.Context, p *corev1.Pod) []string {
	list, err := a.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"(unknown: " + err.Error() + ")"}
	}
	var names []string
	for _, b := range list.Items {
		if b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			names = append(names, b.Namespace+"/"+b.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		// The API answers 429 for budgets only; one may have just gone.
		names = []string{"(a budget in namespace " + p.Namespace + ")"}
	}
	return names
}

// unplannedPods names ("namespace/name", sorted) the pods of left that are
// not in planned; none when planned is nil (no plan to compare with).
func unplannedPods(left []*corev1.Pod, planned map[types.UID]bool) []string {
	if planned == nil {
		return nil
	}
	var out []string
	for _, p := range left {
		if !planned[p.UID] {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out
}
