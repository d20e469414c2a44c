package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/broker/engine"
)

// Side is the Kubernetes half of the tick loop: it observes through the
// Observer's informers and acts through the Actuator.
type Side struct {
	obs    *Observer
	act    *Actuator
	client kubernetes.Interface
	// DrainStep bounds one Release call; the executor calls again until
	// the node is drained or the policy's drain timeout passes.
	drainStep time.Duration
}

var (
	_ engine.SideObserver = (*Side)(nil)
	_ engine.SideActions  = (*Side)(nil)
	// The drain compares the node's live pods with the plan's.
	_ engine.PlannedReleaser = (*Side)(nil)
)

// NewSide wires an observer and an actuator on the same client. Side maps
// namespaces to tenants through the broker's tenant index on every
// observation (MapTenants), so tenant edits apply at once.
func NewSide(client kubernetes.Interface, obs *Observer, act *Actuator, drainStep time.Duration) *Side {
	if drainStep <= 0 {
		drainStep = 5 * time.Second
	}
	return &Side{obs: obs, act: act, client: client, drainStep: drainStep}
}

// Source reports the Kubernetes side.
func (s *Side) Source() broker.Source { return broker.SourceK8s }

// Observe returns pending GPU pods as demand, with tenants from idx.
func (s *Side) Observe(ctx context.Context, idx broker.TenantIndex) (broker.SideObservation, error) {
	o, err := s.obs.Observe(ctx)
	if err != nil {
		return broker.SideObservation{}, err
	}
	mapTenantsOwned(&o, idx) // o is this call's own: no copy
	out := broker.SideObservation{Source: broker.SourceK8s, At: o.At, Nodes: o.Nodes, Demand: o.Demand}
	ignored := 0
	for i := range o.Pods {
		if !o.Pods[i].Counted {
			ignored++
		}
	}
	if ignored > 0 {
		out.Ignored = make([]broker.Wait, 0, ignored)
		for i := range o.Pods {
			if p := &o.Pods[i]; !p.Counted {
				out.Ignored = append(out.Ignored, broker.Wait{Demand: "k8s/" + p.UID, Reason: broker.WaitReason(p.Reason), Detail: p.Detail})
			}
		}
	}
	// Why demand that left did (which demand left is the ledger's to
	// say): scheduled if it now runs on a node, else deleted. The set of
	// running pods is built on the first question, not every tick.
	nodes := o.Nodes
	running := sync.OnceValue(func() map[string]bool {
		n := 0
		for i := range nodes {
			n += len(nodes[i].Work)
		}
		m := make(map[string]bool, n)
		for i := range nodes {
			for j := range nodes[i].Work {
				m[nodes[i].Work[j].Key] = true
			}
		}
		return m
	})
	out.Departed = func(key string) broker.CloseReason {
		if running()[key] {
			return broker.CloseScheduled
		}
		return broker.CloseDeleted
	}
	return out, nil
}

// MapTenants maps the observation's namespaces to tenants through idx
// (broker.NewTenantIndex), the one tenant mapping, which the observer
// does not apply. Pending pods and their demand get their namespace's
// tenant; a counted pod of a namespace no tenant claims is not demand and
// waits as broker.WaitUnmapped (ReasonNoTenant); demand that then fails
// broker validation waits as ReasonInvalid. Running pods are charged to
// their namespace's tenant, or to none, so a tenant's quota counts what it
// runs. o's slices are not modified.
func MapTenants(o Observation, idx broker.TenantIndex) Observation {
	o.Demand = slices.Clone(o.Demand)
	o.Pods = slices.Clone(o.Pods)
	o.Nodes = slices.Clone(o.Nodes)
	for i := range o.Nodes {
		o.Nodes[i].Work = slices.Clone(o.Nodes[i].Work)
	}
	mapTenantsOwned(&o, idx)
	return o
}

// mapTenantsOwned is MapTenants on an observation whose slices belong to
// the caller (a fresh Observe), mapping them in place instead of copying.
func mapTenantsOwned(o *Observation, idx broker.TenantIndex) {
	var (
		lastNS, lastTenant string
		known              bool
	)
	tenantOf := func(ns string) string {
		// Pods come sorted by namespace: most look-ups repeat the last.
		if !known || ns != lastNS {
			t, _ := idx.NamespaceTenant(ns)
			lastNS, lastTenant, known = ns, t.Name, true
		}
		return lastTenant
	}
	var failed map[string]PodReport // pod UID -> why its demand is not demand
	fail := func(key string, r PodReport) {
		if failed == nil {
			failed = map[string]PodReport{}
		}
		failed[key] = r
	}
	demand := o.Demand[:0]
	for _, d := range o.Demand {
		d.Tenant = tenantOf(d.Queue)
		if d.Tenant == "" {
			fail(d.Key, PodReport{Reason: ReasonNoTenant,
				Detail: fmt.Sprintf("namespace %s maps to no tenant; add it to a tenant's namespaces", d.Queue)})
			continue
		}
		if err := d.Validate(); err != nil {
			fail(d.Key, PodReport{Reason: ReasonInvalid, Detail: err.Error()})
			continue
		}
		demand = append(demand, d)
	}
	clear(o.Demand[len(demand):]) // what was dropped keeps nothing alive
	for i := range o.Pods {
		p := &o.Pods[i]
		p.Tenant = tenantOf(p.Namespace)
		if f, ok := failed[p.UID]; ok && p.Counted {
			p.Counted, p.Reason, p.Detail = false, f.Reason, f.Detail
		}
	}
	for i := range o.Nodes {
		for j := range o.Nodes[i].Work {
			w := &o.Nodes[i].Work[j]
			ns, _, _ := strings.Cut(w.Name, "/")
			w.Tenant = tenantOf(ns)
		}
	}
	// MapTenants always returned slices, empty rather than nil.
	if demand == nil {
		demand = []broker.Demand{}
	}
	if o.Pods == nil {
		o.Pods = []PodReport{}
	}
	if o.Nodes == nil {
		o.Nodes = []broker.Node{}
	}
	o.Demand = demand
}

// Release cordons node with the owner taint and drains it for at most one
// drain step. It reports drained, or what is left and which budget blocks.
func (s *Side) Release(ctx context.Context, node string, deadline time.Time) (broker.ReleaseStatus, error) {
	return s.release(ctx, node, nil)
}

// release is Release, comparing the node's pods with planned when not nil.
func (s *Side) release(ctx context.Context, node string, planned map[types.UID]bool) (broker.ReleaseStatus, error) {
	if err := s.act.Cordon(ctx, node, string(broker.OwnerNone)); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return broker.ReleaseStatus{Drained: true}, nil // the node is gone
		}
		return broker.ReleaseStatus{}, err
	}
	res, err := s.act.Drain(ctx, node, DrainOptions{Timeout: s.drainStep, Planned: planned})
	if err != nil {
		return broker.ReleaseStatus{}, err
	}
	st := broker.ReleaseStatus{Drained: res.Outcome == DrainDrained, Remaining: res.PodsLeft, Unplanned: res.Unplanned}
	if len(res.PDBs) > 0 {
		st.BlockedBy = "PodDisruptionBudget " + strings.Join(res.PDBs, ", ")
	}
	return st, nil
}

// ReleasePlanned is Release for a drain the planner chose: planned lists
// the work ("k8s/<pod UID>") the plan saw on the node. The drain compares
// every live list of the node's pods with it and stops, evicting nothing
// more, at a pod the plan did not see; the status names it in Unplanned.
func (s *Side) ReleasePlanned(ctx context.Context, node string, deadline time.Time, planned []string) (broker.ReleaseStatus, error) {
	uids := make(map[types.UID]bool, len(planned))
	for _, id := range planned {
		if uid, ok := strings.CutPrefix(id, string(broker.SourceK8s)+"/"); ok {
			uids[types.UID(uid)] = true
		}
	}
	return s.release(ctx, node, uids)
}

// Cordon marks node unschedulable with the owner taint, evicting nothing.
var _ engine.Capable = (*Side)(nil)

// Capabilities tells the engine that an observation of a node shows the
// fence: the cordon's owner taint makes it no longer Kubernetes' node.
func (s *Side) Capabilities() engine.SideCaps { return engine.SideCaps{ShowsFence: true} }

func (s *Side) Cordon(ctx context.Context, node string) error {
	return s.act.Cordon(ctx, node, string(broker.OwnerNone))
}

// Admit removes the cordon and the owner taint.
func (s *Side) Admit(ctx context.Context, node string) error { return s.act.Uncordon(ctx, node) }

// The reasons of the Events written on a pod gpubroker evicts.
const (
	// EventPreempted: evicted for higher-priority GPU demand.
	EventPreempted = "Preempted"
	// EventMigrated: evicted right after its checkpoint by a migration
	// emptying its node; its controller recreates it on a fuller node.
	EventMigrated = "Migrated"
)

// Evict preempts one pod through the Eviction API. A pod already gone is
// success, so the executor may repeat the call.
func (s *Side) Evict(ctx context.Context, node string, w broker.Workload) error {
	return s.evict(ctx, node, w, corev1.EventTypeWarning, EventPreempted,
		fmt.Sprintf("preempted by gpubroker on %s for higher-priority GPU demand", node))
}

// EvictForMigration evicts one pod as Evict does, for a migration
// (engine.MigrationEvicter): the pod's Event says it was moved right
// after its checkpoint, not preempted.
func (s *Side) EvictForMigration(ctx context.Context, node string, w broker.Workload) error {
	return s.evict(ctx, node, w, corev1.EventTypeNormal, EventMigrated,
		fmt.Sprintf("moved by gpubroker right after its checkpoint: node %s is being emptied so that it can leave; the pod's controller recreates it on a fuller node", node))
}

func (s *Side) evict(ctx context.Context, node string, w broker.Workload, eventType, reason, message string) error {
	ns, name, ok := strings.Cut(w.Name, "/")
	if !ok {
		return fmt.Errorf("evict workload %q on %s: name is not namespace/name", w.Name, node)
	}
	// IMPORTANT: the victim is re-read from the API server, not the
	// informer cache, and evicted with its UID as a precondition: a pod that
	// finished, left the node or was recreated under the same name since the
	// plan was made is not the work the plan chose, and must not be evicted.
	pod, err := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("evict pod %s on %s: read pod: %w", w.Name, node, apiError(err))
	}
	if w.Key != "" && string(pod.UID) != w.Key || pod.Spec.NodeName != node || podTerminal(pod) {
		s.act.log.Info("eviction victim is gone; not evicting its successor", "node", node, "pod", w.Name,
			"want_uid", w.Key, "uid", string(pod.UID), "pod_node", pod.Spec.NodeName)
		return nil
	}
	uid := pod.UID
	err = s.client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: ns, Name: name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		// The UID precondition failed (replaced between the read and the
		// eviction), or a write raced: success only if the victim is gone.
		again, gerr := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) || gerr == nil && again.UID != uid {
			return nil
		}
		return fmt.Errorf("evict pod %s on %s: %w", w.Name, node, apiError(err))
	}
	if err != nil {
		return fmt.Errorf("evict pod %s on %s: %w", w.Name, node, err)
	}
	// The pod as read: once evicted it may be gone before an Event could
	// look it up again.
	s.act.bestEffortPodEvent(ctx, pod, eventType, reason, message)
	return nil
}
