package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpubroker/gpubroker/broker"
)

// PDBReport is one PodDisruptionBudget as drain planning needs it.
type PDBReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Selector is the label selector in its string form.
	Selector           string `json:"selector"`
	MinAvailable       string `json:"min_available,omitempty"`
	MaxUnavailable     string `json:"max_unavailable,omitempty"`
	DisruptionsAllowed int32  `json:"disruptions_allowed"`
	CurrentHealthy     int32  `json:"current_healthy"`
	DesiredHealthy     int32  `json:"desired_healthy"`
	ExpectedPods       int32  `json:"expected_pods"`
	// Pods are the bound, not finished pods ("namespace/name") the budget
	// selects, so drain planning knows which workloads it protects.
	Pods []string `json:"pods,omitempty"`
}

// Observation is one view of the cluster from the informer caches.
type Observation struct {
	// At is when the observation was taken.
	At time.Time `json:"at"`
	// Demand is one broker.Demand per counted pod, sorted by Name. The
	// observer leaves Tenant empty: MapTenants maps namespaces to tenants
	// through the broker's tenant index, the one tenant mapping.
	Demand []broker.Demand `json:"demand"`
	// Pods reports every pending GPU pod, counted or not, sorted by
	// namespace and name.
	Pods []PodReport `json:"pods"`
	// Nodes are the GPU nodes with their work, sorted by name.
	Nodes []broker.Node `json:"nodes"`
	// NodeDetails holds Kubernetes-specific facts per node name.
	NodeDetails map[string]NodeDetail `json:"node_details"`
	// PDBs are all PodDisruptionBudgets, sorted by namespace and name.
	PDBs []PDBReport `json:"pdbs"`
}

// Observer watches the cluster through shared informers.
type Observer struct {
	cfg     Config
	log     *slog.Logger
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	pdbs    cache.SharedIndexInformer
	classes cache.SharedIndexInformer
	// jobs, claims and volumes say what an eviction costs (disruption.go).
	jobs    cache.SharedIndexInformer
	claims  cache.SharedIndexInformer
	volumes cache.SharedIndexInformer
	// resourceClaims and claimTemplates are DRA's (nil when DRA is off):
	// a pod's GPU claims are GPU demand (dra.go).
	resourceClaims cache.SharedIndexInformer
	claimTemplates cache.SharedIndexInformer
	resourceSlices cache.SharedIndexInformer
	cls            *classifier
	notify         chan struct{}
	now            func() time.Time
	health         *health

	mu     sync.Mutex
	synced bool
}

// NewObserver builds an Observer on client. Call Start before Observe.
func NewObserver(client kubernetes.Interface, cfg Config, log *slog.Logger) (*Observer, error) {
	if client == nil {
		return nil, broker.Invalid("client", "must not be nil")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("k8s config: %w", err)
	}
	o := &Observer{
		cfg:     cfg,
		log:     log,
		factory: informers.NewSharedInformerFactoryWithOptions(client, cfg.ResyncPeriod, informers.WithTransform(stripManagedFields)),
		notify:  make(chan struct{}, cfg.NotifyBuffer),
		now:     time.Now,
	}
	o.pods = o.factory.Core().V1().Pods().Informer()
	o.nodes = o.factory.Core().V1().Nodes().Informer()
	o.pdbs = o.factory.Policy().V1().PodDisruptionBudgets().Informer()
	o.classes = o.factory.Scheduling().V1().PriorityClasses().Informer()
	o.jobs = o.factory.Batch().V1().Jobs().Informer()
	o.claims = o.factory.Core().V1().PersistentVolumeClaims().Informer()
	o.volumes = o.factory.Core().V1().PersistentVolumes().Informer()
	if on, err := draServed(client, cfg.DRA); err != nil {
		return nil, err
	} else if on {
		o.resourceClaims = o.factory.Resource().V1().ResourceClaims().Informer()
		o.claimTemplates = o.factory.Resource().V1().ResourceClaimTemplates().Informer()
		o.resourceSlices = o.factory.Resource().V1().ResourceSlices().Informer()
		if err := o.resourceSlices.AddIndexers(cache.Indexers{sliceNodeIndex: sliceNode}); err != nil {
			return nil, fmt.Errorf("index resource slices: %w", err)
		}
	}
	o.cls = &classifier{cfg: &o.cfg, classes: o.priorityOf, reqs: newRequestCache(), now: func() time.Time { return o.now() },
		objs: objects{
			job: func(ns, name string) (*batchv1.Job, bool) {
				return cached[*batchv1.Job](o.jobs, ns+"/"+name)
			},
			claim: func(ns, name string) (*corev1.PersistentVolumeClaim, bool) {
				return cached[*corev1.PersistentVolumeClaim](o.claims, ns+"/"+name)
			},
			volume: func(name string) (*corev1.PersistentVolume, bool) {
				return cached[*corev1.PersistentVolume](o.volumes, name)
			},
		}}
	if o.resourceClaims != nil {
		o.cls.objs.resourceClaim = func(ns, name string) (*resourcev1.ResourceClaim, bool) {
			return cached[*resourcev1.ResourceClaim](o.resourceClaims, ns+"/"+name)
		}
		o.cls.objs.sliceDevices = func(node string) (GPURequest, int) {
			return nodeSliceDevices(o.resourceSlices, node, o.cfg.GPUDrivers)
		}
	}
	o.health = &health{client: client, staleAfter: cfg.StaleAfter, now: func() time.Time { return o.now() },
		failing: map[string]watchFailure{}}
	for name, inf := range o.informers() {
		if err := inf.SetWatchErrorHandlerWithContext(o.health.watchErrorHandler(name, inf)); err != nil {
			return nil, fmt.Errorf("set %s watch error handler: %w", name, err)
		}
	}
	if _, err := o.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.onPod(nil, obj) },
		UpdateFunc: o.onPod,
	}); err != nil {
		return nil, fmt.Errorf("add pod handler: %w", err)
	}
	return o, nil
}

// informers names the observer's informers.
func (o *Observer) informers() map[string]cache.SharedIndexInformer {
	m := map[string]cache.SharedIndexInformer{"pods": o.pods, "nodes": o.nodes, "pdbs": o.pdbs, "priorityclasses": o.classes,
		"jobs": o.jobs, "persistentvolumeclaims": o.claims, "persistentvolumes": o.volumes}
	if o.resourceClaims != nil {
		m["resourceclaims"], m["resourceclaimtemplates"], m["resourceslices"] = o.resourceClaims, o.claimTemplates, o.resourceSlices
	}
	return m
}

// cached looks key up in inf's store.
func cached[T any](inf cache.SharedIndexInformer, key string) (T, bool) {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// stripManagedFields drops what Observe never reads, to keep 20,000 pods
// cheap in memory.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].Env = nil
			pod.Spec.Containers[i].Command = nil
			pod.Spec.Containers[i].Args = nil
		}
		// Only local and claim-backed volumes say what an eviction costs.
		pod.Spec.Volumes = keepVolumes(pod.Spec.Volumes)
		delete(pod.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
}

// Start starts the informers and waits until their caches are synced or
// ctx ends. The informers stop when ctx is cancelled.
func (o *Observer) Start(ctx context.Context) error {
	o.factory.Start(ctx.Done())
	start := time.Now()
	for typ, ok := range o.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sync %s informer: %w", typ, broker.ErrStale)
		}
	}
	o.mu.Lock()
	o.synced = true
	o.mu.Unlock()
	o.health.synced()
	go o.health.run(ctx)
	o.log.Debug("k8s informers synced", "took_ms", time.Since(start).Milliseconds())
	return nil
}

// Unschedulable returns a channel that receives when a GPU pod newly
// becomes pending demand. Wake-ups coalesce: a tick loop that batches for
// about a second and then calls Observe sees every pod that arrived.
func (o *Observer) Unschedulable() <-chan struct{} { return o.notify }

func (o *Observer) onPod(oldObj, newObj any) {
	pod, ok := newObj.(*corev1.Pod)
	if !ok {
		return
	}
	req, ok := o.cls.pendingGPUPod(pod)
	if !ok {
		return
	}
	if !o.cls.classify(pod, req).Counted {
		return
	}
	if old, ok := oldObj.(*corev1.Pod); ok {
		if oreq, ok := o.cls.pendingGPUPod(old); ok && o.cls.classify(old, oreq).Counted {
			return // already counted before this update
		}
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// priorityOf looks a PriorityClass up in the cache; "" finds the global
// default class.
func (o *Observer) priorityOf(name string) (int64, bool) {
	if name != "" {
		obj, ok, err := o.classes.GetStore().GetByKey(name)
		if err != nil || !ok {
			return 0, false
		}
		return int64(obj.(*schedulingv1.PriorityClass).Value), true
	}
	for _, obj := range o.classes.GetStore().List() {
		if pc := obj.(*schedulingv1.PriorityClass); pc.GlobalDefault {
			return int64(pc.Value), true
		}
	}
	return 0, false
}

// Observe returns pending demand, the pending GPU pods with why they count
// or not, the GPU nodes with their work and the PDBs, all from the informer
// caches. It fails with broker.ErrStale before the caches have synced, and
// when they may be older than Config.StaleAfter: no call to the API server
// succeeded for that long, or a watch failed and has not resynced since.
func (o *Observer) Observe(ctx context.Context) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	o.mu.Lock()
	synced := o.synced
	o.mu.Unlock()
	if !synced {
		return Observation{}, fmt.Errorf("observe kubernetes: informers not synced: %w", broker.ErrStale)
	}
	if why := o.health.stale(o.informers()); why != "" {
		return Observation{}, staleError(why)
	}
	obs := Observation{At: o.now()}

	// GPU nodes first, then ONE snapshot of the pod cache from which both
	// the pending demand and the nodes' work are derived: a pod that is
	// bound while Observe runs is either pending or on its node, never both
	// and never neither.
	o.cls.reqs.next()
	defer o.cls.reqs.prune()
	nodeObjs := o.nodes.GetStore().List()
	gpuNodes := make([]*corev1.Node, 0, len(nodeObjs))
	for _, obj := range nodeObjs {
		if n := obj.(*corev1.Node); o.cfg.isGPUNode(n) {
			gpuNodes = append(gpuNodes, n)
		}
	}
	slices.SortFunc(gpuNodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	nodeIndex := make(map[string]int32, len(gpuNodes))
	for i, n := range gpuNodes {
		nodeIndex[n.Name] = int32(i)
	}

	// The PDBs' namespaces: only their bound pods are kept for them.
	pdbObjs := o.pdbs.GetStore().List()
	var bound map[string][]*corev1.Pod // namespace -> bound, unfinished pods, for PDBs
	for _, obj := range pdbObjs {
		if pdb := obj.(*policyv1.PodDisruptionBudget); pdb.Spec.Selector != nil {
			if bound == nil {
				bound = map[string][]*corev1.Pod{}
			}
			bound[pdb.Namespace] = nil
		}
	}

	podObjs := o.pods.GetStore().List()
	placed := make([]boundPod, 0, len(podObjs))
	var pending []pendingPod
	for _, obj := range podObjs {
		pod := obj.(*corev1.Pod)
		if pod.Spec.NodeName != "" {
			if bound != nil && !podTerminal(pod) {
				if ps, ok := bound[pod.Namespace]; ok {
					bound[pod.Namespace] = append(ps, pod)
				}
			}
			if i, ok := nodeIndex[pod.Spec.NodeName]; ok {
				placed = append(placed, boundPod{pod, i})
			}
			continue
		}
		if req, facts, ok := o.cls.pendingGPUFacts(pod); ok {
			pending = append(pending, pendingPod{facts.sortKey, pod, req, facts})
		} else if o.resourceClaims != nil && len(pod.Spec.ResourceClaims) > 0 && podUnbound(pod) {
			// GPUs asked only through DRA: decided below, once sorted.
			facts := o.cls.pendingFacts(pod)
			pending = append(pending, pendingPod{facts.sortKey, pod, req, facts})
		}
	}

	obs.Pods, obs.Demand = o.pendingDemand(pending, obs.At)

	obs.Nodes, obs.NodeDetails = o.nodesWithWork(gpuNodes, placed)

	obs.PDBs = pdbReports(pdbObjs, bound)
	// The planner sees what each budget allows (disruption.go).
	attachBudgets(obs.Nodes, obs.PDBs)
	return obs, nil
}

// boundPod is a pod bound to the GPU node of index node.
type boundPod struct {
	pod  *corev1.Pod
	node int32
}

// pendingPod is an unbound pod that may ask for GPUs.
type pendingPod struct {
	key   string // pendingFacts.sortKey
	pod   *corev1.Pod
	req   GPURequest
	facts *pendingFacts
}

// pendingDemand classifies the pending pods: each one's report, and the
// demand of those that count, observed at at.
func (o *Observer) pendingDemand(pending []pendingPod, at time.Time) (pods []PodReport, demand []broker.Demand) {
	// Pending pods in namespace and name order make the reports sorted as
	// built; demand is sorted by its own name ("namespace/name", whose
	// order differs where a namespace is another's prefix).
	slices.SortFunc(pending, func(a, b pendingPod) int { return strings.Compare(a.key, b.key) })
	if len(pending) > 0 {
		pods = make([]PodReport, 0, len(pending))
		demand = make([]broker.Demand, 0, len(pending))
	}
	// A claim several pods share is counted once, for the first of them.
	var counted map[string]bool
	for _, p := range pending {
		var dra draPodRequest
		if o.resourceClaims != nil && len(p.pod.Spec.ResourceClaims) > 0 {
			if counted == nil {
				counted = map[string]bool{}
			}
			dra = o.draRequest(p.pod, counted)
			if p.req.IsZero() && dra.req.IsZero() {
				continue // its claims ask for no GPU, or another pod counts them
			}
			p.req, p.facts = dra.add(p.req, p.facts)
		}
		r := o.cls.classifyFacts(p.pod, p.req, p.facts)
		if r.Counted {
			// Without a tenant yet: MapTenants maps and validates it.
			d := o.cls.demandNamed(p.pod, r, p.facts.name, at)
			if dra.req.NotUnderstood != "" {
				d.Unsatisfiable = "DRA claim " + dra.claim + ": " + dra.req.NotUnderstood
				d.GPUsPerUnit = max(d.GPUsPerUnit, 1)
			}
			demand = append(demand, d)
		}
		pods = append(pods, r)
	}
	if len(demand) == 0 {
		demand = nil // as when none was appended
	}
	slices.SortFunc(demand, func(a, b broker.Demand) int { return strings.Compare(a.Name, b.Name) })
	return pods, demand
}

// nodesWithWork builds each GPU node with the pods placed on it.
func (o *Observer) nodesWithWork(gpuNodes []*corev1.Node, placed []boundPod) (out []broker.Node, details map[string]NodeDetail) {
	// Each GPU node's pods, grouped by node in one slice (a counting sort
	// on the node index), each group in namespace and name order.
	start := make([]int32, len(gpuNodes)+1)
	for _, p := range placed {
		start[p.node+1]++
	}
	for i := range gpuNodes {
		start[i+1] += start[i]
	}
	byNode := make([]*corev1.Pod, len(placed))
	fill := slices.Clone(start[:len(gpuNodes)])
	for _, p := range placed {
		byNode[fill[p.node]] = p.pod
		fill[p.node]++
	}
	out = make([]broker.Node, 0, len(gpuNodes))
	details = make(map[string]NodeDetail, len(gpuNodes))
	present := make(map[types.UID]bool, len(gpuNodes))
	for i, n := range gpuNodes {
		present[n.UID] = true
		var pods []*corev1.Pod
		if start[i] < start[i+1] {
			pods = byNode[start[i]:start[i+1]:start[i+1]]
			slices.SortFunc(pods, comparePods)
		}
		bn, d := o.cls.buildNode(n, pods)
		out = append(out, bn)
		details[n.Name] = d
	}
	o.cls.forgetNodes(present)
	return out, details
}

// pdbReports reports each PodDisruptionBudget with the bound pods of its
// namespace (bound) that it selects, in namespace and name order.
func pdbReports(pdbObjs []any, bound map[string][]*corev1.Pod) []PDBReport {
	var out []PDBReport
	for _, obj := range pdbObjs {
		pdb := obj.(*policyv1.PodDisruptionBudget)
		r := pdbReport(pdb)
		if pdb.Spec.Selector != nil {
			if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
				for _, pod := range bound[pdb.Namespace] {
					if sel.Matches(labels.Set(pod.Labels)) {
						r.Pods = append(r.Pods, pod.Namespace+"/"+pod.Name)
					}
				}
				slices.Sort(r.Pods)
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b PDBReport) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// comparePods orders pods by namespace, then name.
func comparePods(a, b *corev1.Pod) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func pdbReport(p *policyv1.PodDisruptionBudget) PDBReport {
	r := PDBReport{
		Namespace:          p.Namespace,
		Name:               p.Name,
		DisruptionsAllowed: p.Status.DisruptionsAllowed,
		CurrentHealthy:     p.Status.CurrentHealthy,
		DesiredHealthy:     p.Status.DesiredHealthy,
		ExpectedPods:       p.Status.ExpectedPods,
	}
	if p.Spec.Selector != nil {
		r.Selector = metav1.FormatLabelSelector(p.Spec.Selector)
	}
	if p.Spec.MinAvailable != nil {
		r.MinAvailable = p.Spec.MinAvailable.String()
	}
	if p.Spec.MaxUnavailable != nil {
		r.MaxUnavailable = p.Spec.MaxUnavailable.String()
	}
	return r
}
