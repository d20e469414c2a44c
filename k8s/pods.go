package k8s

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
)

// Why a pending GPU pod does or does not count as demand.
const (
	ReasonUnschedulable  = "unschedulable"         // counted: the scheduler found no node
	ReasonGated          = "scheduling-gated"      // held by schedulingGates
	ReasonNominated      = "nominated"             // preemption is freeing room on a node
	ReasonOtherScheduler = "other-scheduler"       // schedulerName not handled by gpubroker
	ReasonNoTenant       = "unmapped"              // namespace maps to no tenant (broker.WaitUnmapped)
	ReasonNotYetDecided  = "not-yet-unschedulable" // scheduler has not given up on it yet
	ReasonBound          = "bound"                 // has a node; not demand
	ReasonTerminating    = "terminating"           // being deleted
	ReasonInvalid        = "invalid"               // would not pass broker validation
)

// PodReport is one pending GPU pod and whether it counts as demand.
type PodReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Priority is the pod's priority (its PriorityClass value).
	Priority int64 `json:"priority"`
	// PriorityClass names the pod's PriorityClass, if any.
	PriorityClass string `json:"priority_class,omitempty"`
	// GPUs is the effective request in whole GPUs; Request has the detail.
	GPUs    int        `json:"gpus"`
	Request GPURequest `json:"request"`
	// Tenant is the tenant of the pod's namespace, set by MapTenants; the
	// observer leaves it empty.
	Tenant string `json:"tenant,omitempty"`
	// Counted is true when the pod is pending demand.
	Counted bool `json:"counted"`
	// Reason is one of the Reason* constants; Detail explains it.
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Constraints restrict the nodes that can serve the pod.
	Constraints broker.Constraints `json:"constraints"`
	// UnschedulableSince is when the scheduler marked it unschedulable.
	UnschedulableSince time.Time `json:"unschedulable_since,omitzero"`
	Created            time.Time `json:"created"`
}

// podPriority returns the pod's priority: spec.priority as set by the
// Priority admission plugin, else the value of its PriorityClass, else the
// global default class, else 0.
func podPriority(pod *corev1.Pod, classes priorityLookup) int64 {
	if pod.Spec.Priority != nil {
		return int64(*pod.Spec.Priority)
	}
	if classes != nil {
		if v, ok := classes(pod.Spec.PriorityClassName); ok {
			return v
		}
	}
	return 0
}

// priorityLookup returns a PriorityClass's value; the empty name asks for
// the global default class.
type priorityLookup func(name string) (int64, bool)

// unschedulableCondition returns the PodScheduled condition when it says
// False/Unschedulable.
func unschedulableCondition(pod *corev1.Pod) (*corev1.PodCondition, bool) {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.PodScheduled {
			if c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return c, true
			}
			return c, false
		}
	}
	return nil, false
}

// classifier turns pods into reports and demand with one configuration.
// It is safe for concurrent use: the informer's event handler and Observe
// share it.
type classifier struct {
	cfg     *Config
	classes priorityLookup
	// reqs, when set, memoises PodGPURequest per pod resource version.
	reqs *requestCache
	// readySeen holds the UIDs of nodes seen Ready (see wasReady).
	readySeen sync.Map // types.UID -> struct{}
	// now is the observation clock, for checkpoint ages (classifyWork);
	// nil leaves annotated checkpoint ages unknown.
	now func() time.Time
	// objs looks up the Jobs, claims and volumes that say whether an
	// eviction fails a pod's controller for good (disruption.go).
	objs objects
}

func (c *classifier) request(pod *corev1.Pod) GPURequest {
	if c.reqs != nil {
		return c.reqs.get(pod)
	}
	return PodGPURequest(pod)
}

// pendingGPUPod reports whether pod is a not-yet-bound GPU pod that the
// classifier should report on at all, and its request.
func (c *classifier) pendingGPUPod(pod *corev1.Pod) (GPURequest, bool) {
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return GPURequest{}, false
	}
	req := c.request(pod)
	return req, !req.IsZero()
}

// requestCache memoises what Observe derives from a pod alone (its GPU
// request, its constraints, its "namespace/name", its workload's class and
// annotations), by UID and resource version, so an observation of 20,000
// pods does not re-add every container's resource maps or rebuild every
// constraint and string each tick. A pod without a resource version is
// derived afresh each time. Entries not touched in an observation are
// pruned after it. What an entry holds is shared by every observation that
// read it, as the GPU request's MIG map always was: read only.
type requestCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[types.UID]*requestEntry
}

type requestEntry struct {
	rv  string
	gen uint64
	req GPURequest
	// pending and work are derived on first use (nil until then).
	pending *pendingFacts
	work    *workFacts
}

// pendingFacts are a pending pod's derived facts that depend on the pod
// alone.
type pendingFacts struct {
	name string // namespace/name
	// sortKey is namespace NUL name: its byte order is the order by
	// namespace, then name.
	sortKey     string
	constraints broker.Constraints
}

// workFacts are a running pod's workload as it depends on the pod alone:
// everything but its priority, preemptibility and checkpoint age.
type workFacts struct {
	w broker.Workload
	// checkpoint is the parsed LastCheckpointAnnotation, when valid.
	checkpoint    time.Time
	hasCheckpoint bool
}

func newRequestCache() *requestCache { return &requestCache{m: map[types.UID]*requestEntry{}} }

// entry returns pod's entry, renewed when its version changed, marked as
// seen in this observation. The caller holds rc.mu.
func (rc *requestCache) entry(pod *corev1.Pod) *requestEntry {
	e, ok := rc.m[pod.UID]
	if !ok || e.rv != pod.ResourceVersion || pod.ResourceVersion == "" {
		e = &requestEntry{rv: pod.ResourceVersion, req: PodGPURequest(pod)}
		rc.m[pod.UID] = e
	}
	e.gen = rc.gen
	return e
}

func (rc *requestCache) get(pod *corev1.Pod) GPURequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.entry(pod).req
}

// pending returns pod's pending facts, whatever it asks of its
// containers (a pod may ask GPUs through DRA claims only).
func (rc *requestCache) pending(pod *corev1.Pod, modelLabel string) *pendingFacts {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.entry(pod)
	if e.pending == nil {
		e.pending = newPendingFacts(pod, modelLabel)
	}
	return e.pending
}

// pendingGPU returns pod's GPU request and, when it asks for GPUs, its
// pending facts, in one look-up.
func (rc *requestCache) pendingGPU(pod *corev1.Pod, modelLabel string) (GPURequest, *pendingFacts) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.entry(pod)
	if e.req.IsZero() {
		return e.req, nil
	}
	if e.pending == nil {
		e.pending = newPendingFacts(pod, modelLabel)
	}
	return e.req, e.pending
}

func (rc *requestCache) work(pod *corev1.Pod, modelLabel string) *workFacts {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.entry(pod)
	if e.work == nil {
		e.work = newWorkFacts(pod, e.req, modelLabel)
	}
	return e.work
}

// next starts an observation; prune ends it, dropping pods it did not see.
func (rc *requestCache) next() {
	rc.mu.Lock()
	rc.gen++
	rc.mu.Unlock()
}

func (rc *requestCache) prune() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for uid, e := range rc.m {
		if e.gen != rc.gen {
			delete(rc.m, uid)
		}
	}
}

func newPendingFacts(pod *corev1.Pod, modelLabel string) *pendingFacts {
	return &pendingFacts{name: pod.Namespace + "/" + pod.Name, sortKey: pod.Namespace + "\x00" + pod.Name,
		constraints: podConstraints(pod, modelLabel)}
}

// pendingGPUFacts is pendingGPUPod with the pod's pending facts.
func (c *classifier) pendingGPUFacts(pod *corev1.Pod) (GPURequest, *pendingFacts, bool) {
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return GPURequest{}, nil, false
	}
	if c.reqs == nil {
		req := PodGPURequest(pod)
		if req.IsZero() {
			return req, nil, false
		}
		return req, newPendingFacts(pod, c.cfg.GPUModelLabel), true
	}
	req, f := c.reqs.pendingGPU(pod, c.cfg.GPUModelLabel)
	return req, f, f != nil
}

func (c *classifier) pendingFacts(pod *corev1.Pod) *pendingFacts {
	if c.reqs != nil {
		return c.reqs.pending(pod, c.cfg.GPUModelLabel)
	}
	return newPendingFacts(pod, c.cfg.GPUModelLabel)
}

// newWorkFacts derives running pod's workload but for what depends on
// more than the pod (see classifier.workload); req is its GPU request.
func newWorkFacts(pod *corev1.Pod, req GPURequest, modelLabel string) *workFacts {
	f := &workFacts{w: broker.Workload{
		Source:        broker.SourceK8s,
		Key:           string(pod.UID),
		Name:          pod.Namespace + "/" + pod.Name,
		CheckpointAge: -1,
		CheckpointDir: pod.Annotations[CheckpointDirAnnotation],
		System:        isSystemPod(pod),
	}}
	// A pod asking for both kinds counts as the whole GPUs its request
	// fills (the safe side for idleness and quotas).
	f.w.GPUs, f.w.MIGProfile, _ = req.PlanUnits()
	// What its replacement asks of a node: the pod's own constraints. A
	// pod with resource claims is left unknown (nil): what a new claim
	// from its template may select is not read here.
	if len(pod.Spec.ResourceClaims) == 0 {
		cs := podConstraints(pod, modelLabel)
		cs.MIGProfile = f.w.MIGProfile
		f.w.Constraints = &cs
	}
	if pod.Status.StartTime != nil {
		f.w.StartedAt = pod.Status.StartTime.Time
	}
	if !f.w.System {
		// class, app, do-not-disrupt; the checkpoint age is the
		// observation's (classifier.workload)
		classifyWork(pod, &f.w, time.Time{})
		if v, ok := pod.Annotations[LastCheckpointAnnotation]; ok {
			if at, err := time.Parse(time.RFC3339, strings.TrimSpace(v)); err == nil {
				f.checkpoint, f.hasCheckpoint = at, true
			}
		}
	}
	return f
}

// workload returns running pod as broker work: its cached facts, with the
// priority (its PriorityClass may change without the pod), preemptibility
// and checkpoint age at c.now.
func (c *classifier) workload(pod *corev1.Pod) broker.Workload {
	var f *workFacts
	if c.reqs != nil {
		f = c.reqs.work(pod, c.cfg.GPUModelLabel)
	} else {
		f = newWorkFacts(pod, PodGPURequest(pod), c.cfg.GPUModelLabel)
	}
	w := f.w
	w.Priority = podPriority(pod, c.classes)
	w.Preemptible = c.preemptible(pod, w.Priority)
	if !w.System {
		c.fatal(pod, &w) // the Job's failures and the claims change without the pod
	}
	if f.hasCheckpoint && c.now != nil {
		if now := c.now(); !now.IsZero() {
			w.CheckpointAge = max(now.Sub(f.checkpoint), 0)
		}
	}
	return w
}

// classify reports on one pending GPU pod; req is its PodGPURequest.
func (c *classifier) classify(pod *corev1.Pod, req GPURequest) PodReport {
	return c.classifyFacts(pod, req, c.pendingFacts(pod))
}

// classifyFacts is classify with the pod's pending facts at hand.
func (c *classifier) classifyFacts(pod *corev1.Pod, req GPURequest, facts *pendingFacts) PodReport {
	r := PodReport{
		Namespace:     pod.Namespace,
		Name:          pod.Name,
		UID:           string(pod.UID),
		Priority:      podPriority(pod, c.classes),
		PriorityClass: pod.Spec.PriorityClassName,
		Request:       req,
		Constraints:   facts.constraints,
		Created:       pod.CreationTimestamp.Time,
	}
	// MIG slices are planned as slices of their profile, on nodes that
	// offer it (PlanUnits).
	units, profile, _ := req.PlanUnits()
	r.GPUs, r.Constraints.MIGProfile = units, profile
	cond, unschedulable := unschedulableCondition(pod)
	if unschedulable {
		r.UnschedulableSince = cond.LastTransitionTime.Time
	}
	switch {
	case pod.DeletionTimestamp != nil:
		r.Reason, r.Detail = ReasonTerminating, "pod is being deleted"
	case pod.Spec.NodeName != "":
		r.Reason, r.Detail = ReasonBound, "bound to node "+pod.Spec.NodeName
	case len(pod.Spec.SchedulingGates) > 0:
		names := make([]string, len(pod.Spec.SchedulingGates))
		for i, g := range pod.Spec.SchedulingGates {
			names[i] = g.Name
		}
		r.Reason, r.Detail = ReasonGated, "waiting for scheduling gates "+strings.Join(names, ", ")
	case !slices.Contains(c.cfg.SchedulerNames, schedulerName(pod)):
		r.Reason, r.Detail = ReasonOtherScheduler, fmt.Sprintf("scheduler %q is not handled", schedulerName(pod))
	case pod.Status.NominatedNodeName != "":
		r.Reason, r.Detail = ReasonNominated, "preemption frees room on node "+pod.Status.NominatedNodeName
	case !unschedulable:
		r.Reason, r.Detail = ReasonNotYetDecided, "the scheduler has not marked it unschedulable"
	default:
		r.Counted, r.Reason = true, ReasonUnschedulable
		if cond != nil {
			r.Detail = cond.Message
		}
	}
	return r
}

func schedulerName(pod *corev1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return corev1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}

// demand converts a counted report into broker demand seen at now, without
// a tenant (MapTenants gives it one).
func (c *classifier) demand(pod *corev1.Pod, r PodReport, now time.Time) broker.Demand {
	return c.demandNamed(pod, r, c.pendingFacts(pod).name, now)
}

// demandNamed is demand with the pod's "namespace/name" at hand.
func (c *classifier) demandNamed(pod *corev1.Pod, r PodReport, name string, now time.Time) broker.Demand {
	return broker.Demand{
		Source:      broker.SourceK8s,
		Key:         r.UID,
		Name:        name,
		Queue:       r.Namespace,
		Priority:    r.Priority,
		GPUsPerUnit: r.GPUs,
		Units:       1,
		Constraints: r.Constraints,
		Preemptible: c.preemptible(pod, r.Priority),
		// preemptionPolicy: Never asks the scheduler never to preempt for
		// the pod; the broker honours it too.
		NoPreempt: pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever,
		// The PodScheduled condition's message ("0/3 nodes are available:
		// 3 Insufficient nvidia.com/gpu.") is the scheduler's reason.
		SchedulerReason: r.Detail,
		LastSeen:        now,
		Unsatisfiable:   mixedReason(r.Request),
	}
}

// mixedReason says why a request the planner cannot place as one kind of
// device waits unsatisfiable; empty when it can.
func mixedReason(req GPURequest) string {
	_, _, why := req.PlanUnits()
	return why
}

// preemptible applies the annotation, then the priority rule.
func (c *classifier) preemptible(pod *corev1.Pod, priority int64) bool {
	switch strings.ToLower(pod.Annotations[PreemptibleAnnotation]) {
	case "false", "no", "0":
		return false
	case "true", "yes", "1":
		return true
	}
	return priority < c.cfg.NonPreemptiblePriority
}

// podConstraints collects nodeSelector, required node affinity and
// tolerations. A nodeSelector or a single-valued In requirement on the GPU
// model label also becomes GPUModels.
func podConstraints(pod *corev1.Pod, modelLabel string) broker.Constraints {
	var cs broker.Constraints
	if len(pod.Spec.NodeSelector) > 0 {
		cs.NodeSelector = make(map[string]string, len(pod.Spec.NodeSelector))
		for k, v := range pod.Spec.NodeSelector {
			cs.NodeSelector[k] = v
		}
		if m, ok := pod.Spec.NodeSelector[modelLabel]; ok {
			cs.GPUModels = []string{m}
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		models := map[string]bool{}
		allTermsPinModel := true
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var t broker.AffinityTerm
			pinned := false
			for _, e := range term.MatchExpressions {
				t.Requirements = append(t.Requirements, broker.LabelRequirement{
					Key: e.Key, Operator: string(e.Operator), Values: slices.Clone(e.Values),
				})
				if e.Key == modelLabel && e.Operator == corev1.NodeSelectorOpIn {
					pinned = true
					for _, v := range e.Values {
						models[v] = true
					}
				}
			}
			// matchFields only supports metadata.name; keep it as a label-like
			// requirement so the planner can see a pod pinned to one node.
			for _, e := range term.MatchFields {
				t.Requirements = append(t.Requirements, broker.LabelRequirement{
					Key: "field:" + e.Key, Operator: string(e.Operator), Values: slices.Clone(e.Values),
				})
			}
			allTermsPinModel = allTermsPinModel && pinned
			cs.Affinity = append(cs.Affinity, t)
		}
		if allTermsPinModel && len(models) > 0 && cs.GPUModels == nil {
			for m := range models {
				cs.GPUModels = append(cs.GPUModels, m)
			}
			slices.Sort(cs.GPUModels)
		}
	}
	for _, t := range pod.Spec.Tolerations {
		cs.Tolerations = append(cs.Tolerations, broker.Toleration{
			Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect),
		})
	}
	return cs
}

// ConstraintsString formats constraints on one line for people.
func ConstraintsString(cs broker.Constraints) string {
	var parts []string
	if len(cs.NodeSelector) > 0 {
		keys := make([]string, 0, len(cs.NodeSelector))
		for k := range cs.NodeSelector {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			parts = append(parts, k+"="+cs.NodeSelector[k])
		}
	}
	for _, t := range cs.Affinity {
		var rs []string
		for _, r := range t.Requirements {
			rs = append(rs, r.Key+" "+r.Operator+" ("+strings.Join(r.Values, ",")+")")
		}
		parts = append(parts, "affinity["+strings.Join(rs, " && ")+"]")
	}
	for _, t := range cs.Tolerations {
		op := t.Operator
		if op == "" {
			op = "Equal"
		}
		parts = append(parts, "tolerates "+t.Key+" "+op+" "+t.Value+":"+t.Effect)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// Annotations that tell consolidation what evicting a running pod costs.
const (
	// TrainingAnnotation "true" marks a pod as batch (training) work,
	// whatever its controller.
	TrainingAnnotation = "gpubroker.io/training"
	// LastCheckpointAnnotation is the RFC 3339 time of the pod's newest
	// checkpoint, written by the workload; the work since is what an
	// eviction loses.
	LastCheckpointAnnotation = "gpubroker.io/last-checkpoint"
	// DoNotDisruptAnnotation (any value but "false") forbids evicting the
	// pod for consolidation, as do the cluster autoscaler's and
	// Karpenter's own annotations below.
	DoNotDisruptAnnotation          = "gpubroker.io/do-not-disrupt"
	SafeToEvictAnnotation           = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	KarpenterDoNotDisruptAnnotation = "karpenter.sh/do-not-disrupt"
)

// classifyWork fills in what consolidation and preemption need to know
// about running pod w at now: its class from the controller (Job → batch,
// ReplicaSet or StatefulSet → service, none → bare; the training
// annotation makes any controlled pod batch; other controllers stay unknown, which
// costs like batch), the application (the controller as
// "<kind>/<namespace>/<name>"), what forbids disrupting it, the local volumes whose data an eviction
// throws away (localStorage), and the age of
// its last checkpoint when the workload annotates it.
func classifyWork(pod *corev1.Pod, w *broker.Workload, now time.Time) {
	var ctrl *metav1.OwnerReference
	for i := range pod.OwnerReferences {
		if ref := &pod.OwnerReferences[i]; ref.Controller != nil && *ref.Controller {
			ctrl = ref
			break
		}
	}
	switch {
	case ctrl == nil:
		w.Class = broker.WorkBare
	case ctrl.Kind == "Job":
		w.Class = broker.WorkBatch
	case ctrl.Kind == "ReplicaSet" || ctrl.Kind == "StatefulSet":
		w.Class = broker.WorkService
	}
	if ctrl != nil {
		w.App = ctrl.Kind + "/" + pod.Namespace + "/" + ctrl.Name
	}
	if ctrl != nil && strings.EqualFold(pod.Annotations[TrainingAnnotation], "true") {
		// A bare pod stays bare: nothing would recreate it.
		w.Class = broker.WorkBatch
	}
	switch {
	case strings.EqualFold(pod.Annotations[SafeToEvictAnnotation], "false"):
		w.DoNotDisrupt = SafeToEvictAnnotation + "=false"
	case strings.EqualFold(pod.Annotations[KarpenterDoNotDisruptAnnotation], "true"):
		w.DoNotDisrupt = KarpenterDoNotDisruptAnnotation + "=true"
	default:
		if v, ok := pod.Annotations[DoNotDisruptAnnotation]; ok && !strings.EqualFold(v, "false") {
			w.DoNotDisrupt = DoNotDisruptAnnotation
		}
	}
	w.LocalStorage = localStorage(pod) // disruption.go
	if v, ok := pod.Annotations[LastCheckpointAnnotation]; ok && !now.IsZero() {
		if at, err := time.Parse(time.RFC3339, strings.TrimSpace(v)); err == nil {
			w.CheckpointAge = max(now.Sub(at), 0)
		}
	}
}
