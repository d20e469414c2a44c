package k8ssim_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpubroker/gpubroker/k8s"
	"github.com/gpubroker/gpubroker/k8s/k8ssim"
)

// waitLong polls cond until it holds or 60 s pass: thousands of events on
// a loaded machine take a while, and this bounds a hang, it times nothing.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// seen is one informer notification.
type seen struct {
	typ  string // add, update, delete
	name string
	rv   int64
}

// recorder is an informer's event handler that keeps every notification.
type recorder struct {
	mu     sync.Mutex
	events []seen
	bad    []string
}

func (r *recorder) note(typ string, obj any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := obj.(*corev1.Pod)
	if !ok {
		// A cache.DeletedFinalStateUnknown means the informer missed the delete.
		r.bad = append(r.bad, fmt.Sprintf("%s of %T", typ, obj))
		return
	}
	rv, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
	r.events = append(r.events, seen{typ, p.Name, rv})
}

func (r *recorder) snapshot() ([]seen, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.events...), append([]string(nil), r.bad...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// gate is an informer transform that can hold the reflector: while shut,
// the reflector stops reading its watch, as a busy informer does.
type gate struct {
	mu   sync.Mutex
	shut chan struct{}
}

func (g *gate) close() {
	g.mu.Lock()
	g.shut = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	close(g.shut)
	g.shut = nil
	g.mu.Unlock()
}

func (g *gate) transform(obj any) (any, error) {
	g.mu.Lock()
	ch := g.shut
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return obj, nil
}

// startPodInformer runs a pod informer on the cluster with rec as its
// handler and g as its transform, and waits for its cache to sync.
func startPodInformer(ctx context.Context, t *testing.T, c *k8ssim.Cluster, rec *recorder, g *gate) cache.SharedIndexInformer {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(c.Client(), 0, informers.WithTransform(g.transform))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.note("add", obj) },
		UpdateFunc: func(_, obj any) { rec.note("update", obj) },
		DeleteFunc: func(obj any) { rec.note("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return inf
}

// runningPods adds a node of gpus GPUs and n one-GPU pods bound to it.
func runningPods(ctx context.Context, t *testing.T, c *k8ssim.Cluster, n int) {
	t.Helper()
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "gpu-1", GPUs: n}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: fmt.Sprintf("p%04d", i), GPUs: 1,
			Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInformerSyncsALargeCluster starts the adapter's Observer and a pod
// informer on a cluster that already holds 500 running pods, and opens a
// watch from resource version "": what a reflector sends when it restarts
// a watch without a known resource version (with the tracker's own
// watches that was every restart, since its events carried none). The API
// server answers it with the current state as 500 ADDED events; the
// tracker's watch pushes them all into a 100-event buffer before it is
// returned and panics ("channel full"). Every pod must also reach the
// informer's cache exactly once, as an ADDED with its resource version.
func TestInformerSyncsALargeCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	runningPods(ctx, t, c, 500)

	obs, err := k8s.NewObserver(c.Client(), k8s.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "the observer to see the 500 pods", func() bool {
		o, err := obs.Observe(ctx)
		return err == nil && len(o.Nodes) == 1 && o.Nodes[0].GPUsAllocated == 500
	})

	w, err := c.Client().CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 500 {
		ev := <-w.ResultChan()
		if ev.Type != watch.Added {
			t.Fatalf("watch from \"\": got %s first", ev.Type)
		}
		got[ev.Object.(*corev1.Pod).Name] = true
	}
	w.Stop()

	rec := &recorder{}
	inf := startPodInformer(ctx, t, c, rec, &gate{})
	if n := len(inf.GetStore().List()); n != 500 {
		t.Fatalf("informer cache holds %d pods, want 500", n)
	}
	events, bad := rec.snapshot()
	if len(bad) > 0 || len(events) != 500 {
		t.Fatalf("informer saw %d events (%v), want 500 adds", len(events), bad)
	}
	names := map[string]bool{}
	for _, e := range events {
		if e.typ != "add" || e.rv <= 1 || names[e.name] {
			t.Fatalf("unexpected event %+v", e)
		}
		names[e.name] = true
	}
}

// TestEvictionStormIsSeenInOrder evicts 500 running pods in a tight loop
// through the eviction subresource while the informer's reflector is held
// (a busy informer): 1,000 events, each eviction a DELETE of the pod and
// an ADD of its replacement. The tracker's watch panics at the 101st
// unread event; here the informer must see all of them once released, in
// the order they happened, with increasing resource versions, and no
// delete may come as a DeletedFinalStateUnknown (a missed event).
func TestEvictionStormIsSeenInOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	const n = 500
	runningPods(ctx, t, c, n)
	rec := &recorder{}
	g := &gate{}
	startPodInformer(ctx, t, c, rec, g)
	base := rec.count()
	if base != n {
		t.Fatalf("informer synced %d pods, want %d", base, n)
	}

	g.close()
	for i := range n {
		name := fmt.Sprintf("p%04d", i)
		if err := c.Client().PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
			t.Fatalf("evict %s: %v", name, err)
		}
	}
	g.open()
	if c.Evictions() != n {
		t.Fatalf("evictions: %d", c.Evictions())
	}
	waitLong(t, "the informer to see the storm", func() bool { return rec.count() >= base+2*n })

	events, bad := rec.snapshot()
	if len(bad) > 0 {
		t.Fatalf("missed events: %v", bad)
	}
	storm := events[base:]
	if len(storm) != 2*n {
		t.Fatalf("informer saw %d storm events, want %d", len(storm), 2*n)
	}
	last := int64(0)
	for _, e := range events[:base] {
		last = max(last, e.rv)
	}
	for i := range n {
		name := fmt.Sprintf("p%04d", i)
		want := []seen{{"delete", name, 0}, {"add", name + "-r", 0}}
		for j, w := range want {
			e := storm[2*i+j]
			if e.typ != w.typ || e.name != w.name {
				t.Fatalf("storm event %d: got %s %s, want %s %s", 2*i+j, e.typ, e.name, w.typ, w.name)
			}
			if e.rv <= last {
				t.Fatalf("storm event %d (%s %s): resource version %d not after %d", 2*i+j, e.typ, e.name, e.rv, last)
			}
			last = e.rv
		}
	}
}

// TestWatchResumesFromResourceVersion stops a watch midway and starts a
// new one from the last resource version it delivered, as a reflector
// does when its watch ends: the second watch continues exactly where the
// first stopped, with no event lost or repeated. A watch from a resource
// version older than the kept history gets 410 Expired, as from a real
// API server, so a reflector relists rather than missing events.
func TestWatchResumesFromResourceVersion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{WatchHistory: 50})
	pods := c.Client().CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(from, to int) {
		for i := from; i < to; i++ {
			if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: fmt.Sprintf("p%02d", i), GPUs: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(0, 20)
	var lastRV string
	for i := range 10 {
		ev := <-w.ResultChan()
		p := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Added || p.Name != fmt.Sprintf("p%02d", i) {
			t.Fatalf("first watch event %d: %s %s", i, ev.Type, p.Name)
		}
		lastRV = p.ResourceVersion
	}
	w.Stop()
	for range w.ResultChan() {
		// A stopped watch closes its channel; what is left is dropped.
	}
	submit(20, 30)

	w2, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: lastRV})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	for i := 10; i < 30; i++ {
		ev := <-w2.ResultChan()
		p := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Added || p.Name != fmt.Sprintf("p%02d", i) {
			t.Fatalf("resumed watch event %d: %s %s", i, ev.Type, p.Name)
		}
	}

	// 40 more writes push the first ones out of the 50 kept.
	submit(30, 70)
	w3, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: lastRV})
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Stop()
	ev, ok := <-w3.ResultChan()
	if !ok || ev.Type != watch.Error {
		t.Fatalf("watch from a compacted resource version: got %v %s, want an error event", ok, ev.Type)
	}
	if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch from a compacted resource version: %v, want 410 Expired", err)
	}
	if _, ok := <-w3.ResultChan(); ok {
		t.Fatal("an expired watch must end after its error")
	}
}

// TestWritesFollowAPIServerRules checks the write rules a real API server
// enforces and informers rely on: a stale update conflicts (so the
// adapter's RetryOnConflict is exercised), a no-op update writes nothing
// and sends no event, an eviction whose UID precondition names another
// pod is refused and the pod stays.
func TestWritesFollowAPIServerRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	nodes := c.Client().CoreV1().Nodes()
	n, err := nodes.Get(ctx, "gpu-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := nodes.Watch(ctx, metav1.ListOptions{ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	same, err := nodes.Update(ctx, n.DeepCopy(), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if same.ResourceVersion != n.ResourceVersion {
		t.Fatalf("a no-op update moved the resource version %s → %s", n.ResourceVersion, same.ResourceVersion)
	}
	cordoned := n.DeepCopy()
	cordoned.Spec.Unschedulable = true
	upd, err := nodes.Update(ctx, cordoned, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := n.DeepCopy()
	stale.Labels = map[string]string{"x": "y"}
	if _, err := nodes.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update at a stale resource version: %v, want a conflict", err)
	}
	ev := <-w.ResultChan()
	got := ev.Object.(*corev1.Node)
	if ev.Type != watch.Modified || !got.Spec.Unschedulable || got.ResourceVersion != upd.ResourceVersion {
		t.Fatalf("first event after the no-op update: %s %+v, want the cordon", ev.Type, got.Spec)
	}

	if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: "p", GPUs: 1, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	other := types.UID("not-this-pod")
	err = c.Client().PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: "default", Name: "p"},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &other}}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("eviction with another pod's UID: %v, want a conflict", err)
	}
	if _, err := c.Client().CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{}); err != nil || c.Evictions() != 0 {
		t.Fatalf("the pod must stay: %v, %d evictions", err, c.Evictions())
	}
}

// TestDrainEvictsOnlyTheNodesPods drains one node through the adapter's
// real Drain. It lists the node's pods with the field selector
// spec.nodeName, which the fake clientset ignores: it then got every pod
// of the cluster, evicted pods of other nodes and pending ones, and again
// their replacements at every poll (the demo's eviction storm). Here only
// the drained node's two pods are evicted, once, and the drain completes.
func TestDrainEvictsOnlyTheNodesPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := k8ssim.New(k8ssim.Config{})
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if err := c.AddNode(ctx, k8ssim.NodeSpec{Name: n, GPUs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for i, gpus := range []int{1, 1, 1, 1, 8} {
		if err := c.SubmitPod(ctx, k8ssim.PodSpec{Namespace: "default", Name: fmt.Sprintf("p%d", i), GPUs: gpus,
			Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	pods := c.Client().CoreV1().Pods("")
	on1, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-1"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range on1.Items {
		if p.Spec.NodeName != "gpu-1" {
			t.Fatalf("field selector spec.nodeName=gpu-1 listed %s on %q", p.Name, p.Spec.NodeName)
		}
		want = append(want, p.Namespace+"/"+p.Name)
	}
	if len(want) != 2 {
		t.Fatalf("pods on gpu-1: %v, want 2", want)
	}
	if _, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeSelector=x"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: %v, want 400", err)
	}

	act, err := k8s.NewActuator(c.Client(), k8s.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := act.Drain(ctx, "gpu-1", k8s.DrainOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != k8s.DrainDrained || fmt.Sprint(res.Evicted) != fmt.Sprint(want) || c.Evictions() != 2 {
		t.Fatalf("drain: %s %q, evicted %v (%d evictions), want drained, evicted %v", res.Outcome, res.Message,
			res.Evicted, c.Evictions(), want)
	}
	on2, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-2"})
	if err != nil || len(on2.Items) != 2 {
		t.Fatalf("gpu-2's pods must stay: %v, %d", err, len(on2.Items))
	}
}
