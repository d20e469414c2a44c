package k8ssim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
)

// DefaultWatchHistory is how many recent events of each resource the
// simulated API server keeps so that a watch restarted from a resource
// version (a reflector whose watch timed out) resumes where it stopped.
const DefaultWatchHistory = 10000

// apiServer puts the watch semantics of a real kube-apiserver in front of
// the fake clientset's object tracker.
//
// Why not the tracker's own watches: client-go's tracker hands every
// watcher a watch.RaceFreeFakeWatcher, a 100-event buffer that panics
// ("channel full") when a send would block. Its writes send under the
// tracker's lock, so a burst of more than 100 writes (an eviction storm
// during a drain) outruns an informer that is busy handling events, and a
// watch started with list options gets every existing object pushed into
// that buffer before it is even returned (a cluster of more than 100 pods).
// The tracker also keeps resource versions out of the objects (the events
// carry none), so a reflector cannot resume a watch from where it was.
//
// What this does instead, as a real API server does:
//   - Every write through the clientset comes here (ObjectReaction on this
//     tracker, prepended to the fake's chain; the fake already serializes
//     all actions under its own lock). Each write is stamped with the next
//     value of one cluster-wide resource version, stored in
//     metadata.resourceVersion, and appended as an event to its
//     resource's bounded history, all under mu, so events have one total
//     order. An Update whose resourceVersion is stale fails with 409
//     Conflict, a Create that sets one is rejected, delete preconditions
//     (UID, resourceVersion) are checked, and a write that changes nothing
//     writes nothing and sends no event.
//   - Lists report the current resource version and honour field
//     selectors (fields.go).
//   - A watch never touches the tracker's watchers. It gets its own
//     unbounded queue, filled under mu (never blocking a writer) and
//     drained by one goroutine into the unbuffered result channel, so a
//     slow consumer only makes the queue longer. Started from resource
//     version N it first replays the history after N, in order, then live
//     events: nothing between a List and its Watch, or between a watch that
//     ended and the next one, is lost or repeated. Started from "" or "0"
//     it sends ADDED for every current object first. A resource version
//     older than the history gets the 410 Expired error event a real API
//     server sends, on which a reflector relists. TimeoutSeconds ends the
//     watch as the API server would; Stop ends it at once.
//
// Label and field selectors on watches are ignored, as by the fake itself
// (the adapter's informers watch everything).
// Writes made straight on the fake's Tracker() bypass this and are not
// seen by watches; nothing in this package does that.
type apiServer struct {
	inner   k8stesting.ObjectTracker // the fake clientset's tracker
	kinds   map[schema.GroupVersionResource]schema.GroupVersionKind
	history int

	mu       sync.Mutex
	rv       int64 // the resource version of the latest write
	events   map[schema.GroupVersionResource]*eventLog
	watchers map[*simWatcher]struct{}
}

// eventLog is one resource's latest events, oldest first, as a real API
// server keeps a watch cache per resource.
type eventLog struct {
	compacted int64 // every event after this resource version is in events
	events    []watchEvent
}

var _ k8stesting.ObjectTracker = (*apiServer)(nil)

type watchEvent struct {
	rv  int64
	gvr schema.GroupVersionResource
	ns  string
	typ watch.EventType
	obj runtime.Object // shared by all watchers; each delivery gets a copy
}

func newAPIServer(inner k8stesting.ObjectTracker, history int) *apiServer {
	kinds := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		kinds[gvr] = gvk
	}
	// An empty store is at resource version 1, as the tracker's is.
	return &apiServer{inner: inner, kinds: kinds, history: history, rv: 1,
		events: map[schema.GroupVersionResource]*eventLog{}, watchers: map[*simWatcher]struct{}{}}
}

// publish records the write at s.rv and queues it for the watchers that
// match. The caller holds s.mu.
func (s *apiServer) publish(gvr schema.GroupVersionResource, ns string, typ watch.EventType, obj runtime.Object) {
	ev := watchEvent{rv: s.rv, gvr: gvr, ns: ns, typ: typ, obj: obj}
	l := s.log(gvr)
	l.events = append(l.events, ev)
	if len(l.events) > s.history {
		drop := len(l.events) - s.history
		l.compacted = l.events[drop-1].rv
		if cap(l.events) > 2*s.history {
			l.events = append([]watchEvent(nil), l.events[drop:]...)
		} else {
			clear(l.events[:drop])
			l.events = l.events[drop:]
		}
	}
	for w := range s.watchers {
		if w.matches(ev) {
			w.push(ev)
		}
	}
}

// log is gvr's event log. The caller holds s.mu.
func (s *apiServer) log(gvr schema.GroupVersionResource) *eventLog {
	l, ok := s.events[gvr]
	if !ok {
		l = &eventLog{}
		s.events[gvr] = l
	}
	return l
}

// stamp returns a copy of obj at resource version rv.
func stamp(obj runtime.Object, rv int64) (runtime.Object, metav1.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	m.SetResourceVersion(strconv.FormatInt(rv, 10))
	return obj, m, nil
}

// sameContent reports whether two versions of an object differ only in
// their resource version and managed fields (a no-op write).
func sameContent(a, b runtime.Object) bool {
	a, b = a.DeepCopyObject(), b.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		if m, err := meta.Accessor(o); err == nil {
			m.SetResourceVersion("")
			m.SetManagedFields(nil)
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

func namespaceOf(m metav1.Object, ns string) string {
	if m.GetNamespace() != "" {
		return m.GetNamespace()
	}
	return ns
}

// Add stores an object of a built-in kind, like Create.
func (s *apiServer) Add(obj runtime.Object) error {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	return s.Create(gvr, obj, m.GetNamespace())
}

// Get reads the stored object.
func (s *apiServer) Get(gvr schema.GroupVersionResource, ns, name string, opts ...metav1.GetOptions) (runtime.Object, error) {
	return s.inner.Get(gvr, ns, name, opts...)
}

// List reads the stored objects and the current resource version.
func (s *apiServer) List(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, ns string, opts ...metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.inner.List(gvr, gvk, ns, opts...)
	if err != nil {
		return nil, err
	}
	if len(opts) > 0 {
		// The fake filters label selectors itself, after this returns.
		if err := filterFields(list, opts[0].FieldSelector); err != nil {
			return nil, err
		}
	}
	if lm, err := meta.ListAccessor(list); err == nil {
		lm.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	}
	return list, nil
}

// Create stores a new object at the next resource version.
func (s *apiServer) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if m.GetResourceVersion() != "" {
		return apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	obj, m, err = stamp(obj, s.rv+1)
	if err != nil {
		return err
	}
	ns = namespaceOf(m, ns)
	if err := s.inner.Create(gvr, obj, ns, opts...); err != nil {
		return err
	}
	s.rv++
	return s.published(gvr, ns, m.GetName(), watch.Added)
}

// published publishes the stored object as it is now (with the managed
// fields the tracker added). The caller holds s.mu.
func (s *apiServer) published(gvr schema.GroupVersionResource, ns, name string, typ watch.EventType) error {
	stored, err := s.inner.Get(gvr, ns, name)
	if err != nil {
		return err
	}
	s.publish(gvr, ns, typ, stored)
	return nil
}

// Update replaces an object, failing with a conflict when the object's
// resource version is set and is not the stored one.
func (s *apiServer) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replace(gvr, obj, ns, func(stamped runtime.Object) error { return s.inner.Update(gvr, stamped, ns, opts...) })
}

// Patch stores an object patched from the stored one; a resource version
// the patch set works as a precondition.
func (s *apiServer) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replace(gvr, obj, ns, func(stamped runtime.Object) error { return s.inner.Patch(gvr, stamped, ns, opts...) })
}

// replace checks the write against the stored object and makes it at the
// next resource version. The caller holds s.mu.
func (s *apiServer) replace(gvr schema.GroupVersionResource, obj runtime.Object, ns string, write func(runtime.Object) error) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	ns = namespaceOf(m, ns)
	old, err := s.inner.Get(gvr, ns, m.GetName())
	if err != nil {
		return err
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return err
	}
	if rv := m.GetResourceVersion(); rv != "" && rv != om.GetResourceVersion() {
		return apierrors.NewConflict(gvr.GroupResource(), m.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if m.GetUID() != "" && om.GetUID() != "" && m.GetUID() != om.GetUID() {
		return apierrors.NewConflict(gvr.GroupResource(), m.GetName(),
			fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", m.GetUID(), om.GetUID()))
	}
	if sameContent(obj, old) {
		return nil // the API server does not write a no-op update
	}
	stamped, _, err := stamp(obj, s.rv+1)
	if err != nil {
		return err
	}
	if err := write(stamped); err != nil {
		return err
	}
	s.rv++
	return s.published(gvr, ns, m.GetName(), watch.Modified)
}

// Apply is server-side apply through the tracker's field manager; the
// result is then stamped with the next resource version.
func (s *apiServer) Apply(gvr schema.GroupVersionResource, applyConfiguration runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := meta.Accessor(applyConfiguration)
	if err != nil {
		return err
	}
	ns = namespaceOf(m, ns)
	old, err := s.inner.Get(gvr, ns, m.GetName())
	existed := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := s.inner.Apply(gvr, applyConfiguration, ns, opts...); err != nil {
		return err
	}
	applied, err := s.inner.Get(gvr, ns, m.GetName())
	if err != nil {
		return err
	}
	if existed && sameContent(applied, old) {
		return nil
	}
	stamped, _, err := stamp(applied, s.rv+1)
	if err != nil {
		return err
	}
	var upd metav1.UpdateOptions
	if len(opts) > 0 {
		upd = metav1.UpdateOptions{FieldManager: opts[0].FieldManager}
	}
	// The fake serializes actions, so no one sees the unstamped version.
	if err := s.inner.Update(gvr, stamped, ns, upd); err != nil {
		return err
	}
	s.rv++
	typ := watch.Modified
	if !existed {
		typ = watch.Added
	}
	return s.published(gvr, ns, m.GetName(), typ)
}

// Delete removes an object after checking the options' preconditions; the
// DELETED event carries the last state at the deletion's resource version.
func (s *apiServer) Delete(gvr schema.GroupVersionResource, ns, name string, opts ...metav1.DeleteOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.inner.Get(gvr, ns, name)
	if err != nil {
		return err
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return err
	}
	if len(opts) > 0 && opts[0].Preconditions != nil {
		p := opts[0].Preconditions
		if p.UID != nil && *p.UID != om.GetUID() {
			return apierrors.NewConflict(gvr.GroupResource(), name,
				fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, om.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != om.GetResourceVersion() {
			return apierrors.NewConflict(gvr.GroupResource(), name,
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s",
					*p.ResourceVersion, om.GetResourceVersion()))
		}
	}
	if err := s.inner.Delete(gvr, ns, name, opts...); err != nil {
		return err
	}
	s.rv++
	last, _, err := stamp(old, s.rv)
	if err != nil {
		return err
	}
	s.publish(gvr, ns, watch.Deleted, last)
	return nil
}

// Watch starts a watch of gvr in ns ("" for all namespaces) from
// opts.ResourceVersion.
func (s *apiServer) Watch(gvr schema.GroupVersionResource, ns string, opts ...metav1.ListOptions) (watch.Interface, error) {
	var o metav1.ListOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &simWatcher{s: s, gvr: gvr, ns: ns, result: make(chan watch.Event), wake: make(chan struct{}, 1),
		done: make(chan struct{})}
	switch o.ResourceVersion {
	case "", "0":
		// "Most recent" or "any": the current state as ADDED events first.
		gvk, ok := s.kinds[gvr]
		if !ok {
			return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
		}
		list, err := s.inner.List(gvr, gvk, ns)
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			w.queue = append(w.queue, watchEvent{rv: s.rv, gvr: gvr, ns: ns, typ: watch.Added, obj: it})
		}
	default:
		from, err := strconv.ParseInt(o.ResourceVersion, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", o.ResourceVersion))
		}
		l := s.log(gvr)
		if from < l.compacted {
			// What a real API server's watch cache answers.
			st := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, l.compacted+1)).ErrStatus
			w.queue = append(w.queue, watchEvent{typ: watch.Error, obj: &st})
			w.expired = true
		} else {
			for _, ev := range l.events {
				if ev.rv > from && w.matches(ev) {
					w.queue = append(w.queue, ev)
				}
			}
		}
	}
	if !w.expired {
		s.watchers[w] = struct{}{}
	}
	if o.TimeoutSeconds != nil && *o.TimeoutSeconds > 0 {
		w.timer = time.AfterFunc(time.Duration(*o.TimeoutSeconds)*time.Second, w.Stop)
	}
	go w.run()
	return w, nil
}

// simWatcher is one watch: an unbounded queue drained into result.
type simWatcher struct {
	s       *apiServer
	gvr     schema.GroupVersionResource
	ns      string
	result  chan watch.Event
	wake    chan struct{} // a push since the last look at the queue
	done    chan struct{} // closed by Stop
	stop    sync.Once
	timer   *time.Timer
	expired bool // sends its error, then ends

	mu    sync.Mutex
	queue []watchEvent
}

func (w *simWatcher) matches(ev watchEvent) bool {
	return ev.gvr == w.gvr && (w.ns == "" || w.ns == ev.ns)
}

// push queues an event; it never blocks. The caller holds w.s.mu.
func (w *simWatcher) push(ev watchEvent) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run forwards queued events to the consumer, in order, until Stop.
func (w *simWatcher) run() {
	defer close(w.result)
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			if w.expired {
				return
			}
			select {
			case <-w.wake:
				continue
			case <-w.done:
				return
			}
		}
		ev := w.queue[0]
		w.queue[0] = watchEvent{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		select {
		case w.result <- watch.Event{Type: ev.typ, Object: ev.obj.DeepCopyObject()}:
		case <-w.done:
			return
		}
	}
}

// ResultChan is the channel of events; it is closed when the watch ends.
func (w *simWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch and releases its queue.
func (w *simWatcher) Stop() {
	w.stop.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.s.mu.Lock()
		delete(w.s.watchers, w)
		w.s.mu.Unlock()
		close(w.done)
		w.mu.Lock()
		w.queue = nil
		w.mu.Unlock()
	})
}
