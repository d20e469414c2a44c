package k8ssim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// GPUResource is the extended resource the NVIDIA device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// DurationAnnotation on a pod is its run time once started (a Go duration).
const DurationAnnotation = "gpubroker.io/sim-duration"

// Config configures a simulated cluster.
type Config struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default: discard).
	Logger *slog.Logger
	// WatchHistory is how many recent events are kept for watches that
	// resume from a resource version (default DefaultWatchHistory); a
	// watch from an older one gets 410 Expired and its reflector relists.
	WatchHistory int
}

// Cluster is a simulated Kubernetes cluster.
type Cluster struct {
	client *fake.Clientset
	api    *apiServer
	now    func() time.Time
	log    *slog.Logger

	mu      sync.Mutex
	started map[string]time.Time // pod key → start
	evicted int
	uids    int
	// faulty are the FaultyClients' clientsets, whose recorded actions
	// Step drops too.
	faulty []*fake.Clientset
	// evictions are the pods evicted so far, in order (EvictedPods).
	evictions []EvictedPod
}

// New returns an empty cluster.
func New(cfg Config) *Cluster {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WatchHistory <= 0 {
		cfg.WatchHistory = DefaultWatchHistory
	}
	c := &Cluster{client: fake.NewClientset(), now: cfg.Now, log: cfg.Logger, started: map[string]time.Time{}}
	// Every read, write and watch goes through the apiServer in front of
	// the tracker (see apiserver.go); the eviction reactor, prepended
	// last, runs first.
	c.api = newAPIServer(c.client.Tracker(), cfg.WatchHistory)
	c.client.PrependReactor("*", "*", k8stesting.ObjectReaction(c.api))
	c.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := c.api.Watch(action.GetResource(), action.GetNamespace(), opts)
		return true, w, err
	})
	c.client.PrependReactor("create", "pods", c.onEviction)
	return c
}

// Client is the cluster's API, for the adapter under test.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Evictions counts pods evicted so far.
func (c *Cluster) Evictions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evicted
}

// NodeSpec describes a node to add.
type NodeSpec struct {
	Name       string
	GPUs       int
	Labels     map[string]string
	Taints     []corev1.Taint
	ProviderID string
}

// AddNode registers a ready node offering spec.GPUs GPUs.
func (c *Cluster) AddNode(ctx context.Context, spec NodeSpec) error {
	gpus := resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: spec.Labels},
		Spec:       corev1.NodeSpec{Taints: spec.Taints, ProviderID: spec.ProviderID},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{GPUResource: *gpus, corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{GPUResource: *gpus, corev1.ResourcePods: resource.MustParse("110")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(c.now())}},
		},
	}
	_, err := c.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("add node %s: %w", spec.Name, err)
	}
	return nil
}

// RemoveNode deletes a node and the pods bound to it, as a terminated
// machine's node is eventually removed.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == name {
			c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	return c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
}

// EnsurePriorityClass creates a PriorityClass if it does not exist.
func (c *Cluster) EnsurePriorityClass(ctx context.Context, name string, value int32) error {
	_, err := c.client.SchedulingV1().PriorityClasses().Create(ctx,
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
	if err != nil && !isAlreadyExists(err) {
		return err
	}
	return nil
}

// PodSpec describes a GPU pod to submit.
type PodSpec struct {
	Namespace, Name   string
	GPUs              int
	PriorityClassName string
	Priority          int32
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
	Duration          time.Duration
	Annotations       map[string]string
}

// SubmitPod creates a pending pod asking for GPUs.
func (c *Cluster) SubmitPod(ctx context.Context, spec PodSpec) error {
	prio := spec.Priority
	ann := map[string]string{DurationAnnotation: spec.Duration.String()}
	for k, v := range spec.Annotations {
		ann[k] = v
	}
	gpus := resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace, Name: spec.Name, Annotations: ann,
			UID: c.uid(spec.Namespace, spec.Name), CreationTimestamp: metav1.NewTime(c.now())},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName, PriorityClassName: spec.PriorityClassName, Priority: &prio,
			NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations, RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers: []corev1.Container{{Name: "main", Image: "trainer",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{GPUResource: *gpus},
					Limits: corev1.ResourceList{GPUResource: *gpus}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	_, err := c.client.CoreV1().Pods(spec.Namespace).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// uid returns a new unique pod UID.
func (c *Cluster) uid(ns, name string) types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids++
	return types.UID("uid-" + ns + "-" + name + "-" + strconv.Itoa(c.uids))
}

// onEviction handles pods/eviction: the pod is deleted and, like a Job's
// pod, replaced by a new pending one with the run time it had left.
func (c *Cluster) onEviction(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "eviction" {
		return false, nil, nil
	}
	ev, ok := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
	if !ok {
		return false, nil, nil
	}
	ns := action.GetNamespace()
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	obj, err := c.api.Get(pods, ns, ev.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	var del metav1.DeleteOptions
	if ev.DeleteOptions != nil {
		del = *ev.DeleteOptions // its UID precondition guards against a replacement of the same name
	}
	if err := c.api.Delete(pods, ns, ev.Name, del); err != nil {
		return true, nil, err
	}
	c.mu.Lock()
	c.evicted++
	c.evictions = append(c.evictions, EvictedPod{Namespace: ns, Name: pod.Name, UID: pod.UID, Node: pod.Spec.NodeName, GPUs: int(gpuRequest(pod))})
	start, ran := c.started[ns+"/"+pod.Name]
	delete(c.started, ns+"/"+pod.Name)
	c.mu.Unlock()
	if pod.Labels["gpubroker.io/sim-replaced"] == "" && !isDaemon(pod) {
		left := durationOf(pod)
		if ran {
			left -= c.now().Sub(start)
		}
		replacement := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name + "-r", Annotations: pod.Annotations,
				Labels: pod.Labels, UID: c.uid(ns, pod.Name+"-r"), CreationTimestamp: metav1.NewTime(c.now())},
			Spec:   *pod.Spec.DeepCopy(),
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
		replacement.Spec.NodeName = ""
		replacement.Annotations = map[string]string{}
		for k, v := range pod.Annotations {
			replacement.Annotations[k] = v
		}
		replacement.Annotations[DurationAnnotation] = max(left, time.Second).String()
		if err := c.api.Create(pods, replacement, ns); err != nil {
			c.log.Warn("replace evicted pod", "pod", ns+"/"+pod.Name, "err", err)
		}
	}
	return true, ev, nil
}

func isDaemon(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

func durationOf(p *corev1.Pod) time.Duration {
	d, err := time.ParseDuration(p.Annotations[DurationAnnotation])
	if err != nil {
		return time.Minute
	}
	return d
}

func gpuRequest(p *corev1.Pod) int64 {
	var n int64
	for _, ctr := range p.Spec.Containers {
		if q, ok := ctr.Resources.Requests[GPUResource]; ok {
			n += q.Value()
		} else if q, ok := ctr.Resources.Limits[GPUResource]; ok {
			n += q.Value()
		}
	}
	return n
}

// Run schedules and finishes pods every interval until ctx ends.
func (c *Cluster) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Step(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("k8ssim step", "err", err)
			}
		}
	}
}

// Step finishes pods whose run time is over, then schedules pending pods,
// highest priority first.
func (c *Cluster) Step(ctx context.Context) error {
	// The fake clientset records every action it serves; nothing reads
	// them here, so drop them rather than grow for the cluster's life.
	c.client.ClearActions()
	// IMPORTANT: clear the faulty clients' records outside c.mu. A fake
	// clientset holds its own lock while its reactors run, and the
	// eviction reactor takes c.mu: clearing under c.mu deadlocked the
	// chaos soak (Step waiting for a client's lock, an eviction through
	// that client waiting for c.mu).
	c.mu.Lock()
	faulty := slices.Clone(c.faulty)
	c.mu.Unlock()
	for _, f := range faulty {
		f.ClearActions()
	}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	now := c.now()
	free := map[string]int64{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		q := n.Status.Allocatable[GPUResource]
		free[n.Name] = q.Value()
	}
	var pending []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			if len(p.Spec.SchedulingGates) == 0 {
				pending = append(pending, p)
			}
			continue
		}
		key := p.Namespace + "/" + p.Name
		c.mu.Lock()
		start, ok := c.started[key]
		if !ok {
			start = now
			c.started[key] = now
		}
		c.mu.Unlock()
		if now.Sub(start) >= durationOf(p) {
			// The kubelet reports the container done; the Job keeps no pod.
			if err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
				c.mu.Lock()
				delete(c.started, key)
				c.mu.Unlock()
			}
			continue
		}
		free[p.Spec.NodeName] -= gpuRequest(p)
	}
	sort.SliceStable(pending, func(i, j int) bool {
		pi, pj := prio(pending[i]), prio(pending[j])
		if pi != pj {
			return pi > pj
		}
		return pending[i].CreationTimestamp.Before(&pending[j].CreationTimestamp)
	})
	for _, p := range pending {
		need := gpuRequest(p)
		node := ""
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if fits(p, n) && free[n.Name] >= need {
				node = n.Name
				break
			}
		}
		if node == "" {
			if err := c.markUnschedulable(ctx, p, len(nodes.Items), now); err != nil {
				return err
			}
			continue
		}
		free[node] -= need
		p = p.DeepCopy()
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = ptr(metav1.NewTime(now))
		p.Status.Conditions = setCondition(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)})
		if _, err := c.client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("bind %s/%s: %w", p.Namespace, p.Name, err)
		}
		c.mu.Lock()
		c.started[p.Namespace+"/"+p.Name] = now
		c.mu.Unlock()
	}
	return nil
}

func (c *Cluster) markUnschedulable(ctx context.Context, p *corev1.Pod, nodes int, now time.Time) error {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return nil
		}
	}
	p = p.DeepCopy()
	p.Status.Conditions = setCondition(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(now),
		Message: fmt.Sprintf("0/%d nodes are available: %d Insufficient nvidia.com/gpu.", nodes, nodes)})
	_, err := c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func setCondition(conds []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

func prio(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// fits checks readiness, cordon, node selector and NoSchedule/NoExecute taints.
func fits(p *corev1.Pod, n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return false
	}
	for k, v := range p.Spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for _, tol := range p.Spec.Tolerations {
			if tolerates(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

// tolerates follows the Kubernetes toleration rules for one taint.
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Operator == corev1.TolerationOpExists {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}

func ptr[T any](v T) *T { return &v }

func isAlreadyExists(err error) bool {
	type statusErr interface{ Status() metav1.Status }
	if se, ok := err.(statusErr); ok {
		return se.Status().Reason == metav1.StatusReasonAlreadyExists
	}
	return false
}
