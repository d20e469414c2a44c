package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpubroker/gpubroker/broker"
)

// Reasons of the Events gpubroker writes on pending GPU pods, so that
// `kubectl describe pod` and `kubectl get events` say why a pod waits, as
// the cluster autoscaler's TriggeredScaleUp and NotTriggerScaleUp do. A pod
// that waits with no node bought for it now (pools at max, the cluster max,
// a pool backing off, an incomplete gang) gets EventNotTriggerScaleUp.
const (
	// EventScaleUpTriggered: a node is being bought for the pod (pool, target, ETA).
	EventScaleUpTriggered = "ScaleUpTriggered"
	// EventWaitingForQuota: the pod's tenant is at its max GPUs (tenant and numbers).
	EventWaitingForQuota = "WaitingForQuota"
	// EventUnsatisfiable: no pool could ever serve the pod (the reason).
	EventUnsatisfiable = "Unsatisfiable"
	// EventPreempting: lower-priority work is being preempted for the pod (the victims).
	EventPreempting = "Preempting"
)

// ReportingController is the reportingController of gpubroker's pod
// Events (events.k8s.io/v1 requires one, in the domain/name form).
const ReportingController = "gpubroker.io/broker"

// maxNote is the events.k8s.io/v1 limit on an Event's note.
const maxNote = 1024

// EventsConfig configures PodEvents. Zero fields take their defaults.
type EventsConfig struct {
	// Instance is the reportingInstance: which broker replica wrote the
	// event (default "gpubroker"; the assembly passes the host name).
	Instance string
	// ProvisionTime says how long a bought node may take to offer its GPUs
	// (the policy's max provision time, read from its owner, the stored
	// policy, when a scale-up is explained; default: 15m): the ETA of
	// ScaleUpTriggered.
	ProvisionTime func(ctx context.Context) time.Duration
	// Rate and Burst bound the Events written across all pods: Burst at
	// once, then Rate per second (defaults 10 and 50). Events beyond the
	// budget wait for a later batch; a pod's newer reason replaces one that
	// waits.
	Rate  float64
	Burst int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *EventsConfig) setDefaults() error {
	if c.Instance == "" {
		c.Instance = "gpubroker"
	}
	if c.ProvisionTime == nil {
		c.ProvisionTime = func(context.Context) time.Duration { return 15 * time.Minute }
	}
	if c.Rate == 0 {
		c.Rate = 10
	}
	if c.Burst == 0 {
		c.Burst = 50
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.Rate < 0:
		return broker.Invalid("rate", "must not be negative, got %g", c.Rate)
	case c.Burst < 1:
		return broker.Invalid("burst", "must be at least 1, got %d", c.Burst)
	}
	return nil
}

// podFinder finds pods by UID; *Observer implements it from its informer
// cache.
type podFinder interface {
	podsByUID(uids map[types.UID]bool) map[types.UID]*corev1.Pod
}

// PodEvents turns the broker's decisions about pending pods into
// events.k8s.io/v1 Events on the pods. That API, not core/v1, because it
// is the one the Kubernetes events guidelines name for new controllers: it
// requires what users need to tell whose word an Event is
// (reportingController gpubroker.io/broker, reportingInstance, action), and
// it is one resource with core/v1 Events, so `kubectl describe pod` and
// `kubectl get events` show them as they show the scheduler's. It writes one Event when a pod's
// reason or message changes, never the same reason and message twice in a
// row, and at most Burst then Rate Events per second over all pods. Writing
// is best effort: a failed write is logged and retried with the next
// batch, and never fails a tick.
type PodEvents struct {
	client kubernetes.Interface
	pods   podFinder
	cfg    EventsConfig
	log    *slog.Logger

	mu sync.Mutex
	// last is what was written last per pod; want what should be written
	// and is not yet (over the budget, or the write failed).
	last   map[types.UID]podEvent
	want   map[types.UID]podEvent
	tokens float64
	filled time.Time
	// batches counts Decisions calls, for the periodic prune of last.
	batches int
}

// podEvent is one Event's content.
type podEvent struct {
	Reason, Type, Note, Action string
}

// NewPodEvents returns a PodEvents writing through client and finding pods
// in obs's informer cache.
func NewPodEvents(client kubernetes.Interface, obs *Observer, cfg EventsConfig, log *slog.Logger) (*PodEvents, error) {
	if client == nil {
		return nil, broker.Invalid("client", "must not be nil")
	}
	if obs == nil {
		return nil, broker.Invalid("observer", "must not be nil")
	}
	return newPodEvents(client, obs, cfg, log)
}

func newPodEvents(client kubernetes.Interface, pods podFinder, cfg EventsConfig, log *slog.Logger) (*PodEvents, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("pod events config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PodEvents{client: client, pods: pods, cfg: cfg, log: log,
		last: map[types.UID]podEvent{}, want: map[types.UID]podEvent{},
		tokens: float64(cfg.Burst), filled: cfg.Now()}, nil
}

// Decisions takes one tick's decisions (as the runtime records them) and
// writes the Events they call for on pending Kubernetes pods.
func (e *PodEvents) Decisions(ctx context.Context, ds []broker.Decision) {
	next := map[types.UID]podEvent{}
	for _, d := range ds {
		for uid, ev := range e.eventsOf(ctx, d) {
			next[uid] = ev // later decisions of the tick win
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches++
	if e.batches%pruneEvery == 0 {
		e.prune()
	}
	for uid, ev := range next {
		if e.last[uid] == ev {
			delete(e.want, uid) // said already; a waiting older reason is moot
			continue
		}
		e.want[uid] = ev
	}
	if len(e.want) == 0 {
		return
	}
	uids := make(map[types.UID]bool, len(e.want))
	for uid := range e.want {
		uids[uid] = true
	}
	found := e.pods.podsByUID(uids)
	order := make([]types.UID, 0, len(e.want))
	for uid := range e.want {
		pod, ok := found[uid]
		if !ok || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			// Gone, or no longer pending: nothing to explain any more.
			delete(e.want, uid)
			delete(e.last, uid)
			continue
		}
		order = append(order, uid)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	e.refill()
	written, deferred := 0, 0
	for _, uid := range order {
		if e.tokens < 1 {
			deferred++
			continue
		}
		ev := e.want[uid]
		if err := e.write(ctx, found[uid], ev); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.WarnContext(ctx, "write pod event", "pod", found[uid].Namespace+"/"+found[uid].Name,
				"reason", ev.Reason, "err", err)
			continue
		}
		e.tokens--
		written++
		e.last[uid] = ev
		delete(e.want, uid)
	}
	if deferred > 0 {
		e.log.DebugContext(ctx, "pod events over the rate budget wait for the next batch",
			"written", written, "deferred", deferred)
	}
	// A pod that is scheduled or deleted is dropped at its next lookup;
	// beyond maxTracked pods what was written is forgotten, which at worst
	// repeats one Event per pod.
	if len(e.last) > maxTracked {
		clear(e.last)
	}
}

// maxTracked bounds how many pods' last Event PodEvents remembers.
const maxTracked = 100_000

// pruneEvery is how many batches pass between prunes of what was written
// for pods that are gone or no longer pending.
const pruneEvery = 100

// prune forgets pods that left the cache or were scheduled since their
// last Event, in one pass over the cache.
func (e *PodEvents) prune() {
	if len(e.last) == 0 {
		return
	}
	uids := make(map[types.UID]bool, len(e.last))
	for uid := range e.last {
		uids[uid] = true
	}
	found := e.pods.podsByUID(uids)
	for uid := range e.last {
		if p, ok := found[uid]; !ok || p.Spec.NodeName != "" {
			delete(e.last, uid)
		}
	}
}

// refill adds the tokens earned since the last refill.
func (e *PodEvents) refill() {
	now := e.cfg.Now()
	if el := now.Sub(e.filled).Seconds(); el > 0 {
		e.tokens = min(float64(e.cfg.Burst), e.tokens+el*e.cfg.Rate)
	}
	e.filled = now
}

// eventsOf maps one decision to the Events it means for the Kubernetes
// pods it concerns, keyed by pod UID.
func (e *PodEvents) eventsOf(ctx context.Context, d broker.Decision) map[types.UID]podEvent {
	out := map[types.UID]podEvent{}
	switch d.Kind {
	case string(broker.ActScaleUp):
		var a broker.Action
		if json.Unmarshal(d.Detail, &a) != nil {
			return nil
		}
		uids := podUIDs(a.Serves)
		if len(uids) == 0 {
			return nil
		}
		pt := e.cfg.ProvisionTime(ctx)
		eta := d.At.Add(pt).UTC().Format("15:04:05 MST")
		note := fmt.Sprintf("pod triggered scale-up: pool %s to %d nodes; its GPUs are expected by %s (max provision time %s): %s",
			a.Pool, a.Target, eta, pt, a.Reason)
		for _, uid := range uids {
			out[uid] = podEvent{Reason: EventScaleUpTriggered, Type: corev1.EventTypeNormal, Note: note, Action: "ScaleUp"}
		}
	case string(broker.ActPreempt):
		var a broker.Action
		if json.Unmarshal(d.Detail, &a) != nil {
			return nil
		}
		note := fmt.Sprintf("preempting %s on node %s for this pod: %s", victims(a.Victims), a.Node, a.Reason)
		if a.GPUHoursLost > 0 {
			note += fmt.Sprintf(" (%.1f GPU-hours of work lost since the last checkpoints)", a.GPUHoursLost)
		}
		for _, uid := range podUIDs(a.Serves) {
			out[uid] = podEvent{Reason: EventPreempting, Type: corev1.EventTypeNormal, Note: note, Action: "Preempt"}
		}
	case "wait":
		var w broker.Wait
		if json.Unmarshal(d.Detail, &w) != nil || w.Demand == "" {
			w = broker.Wait{Demand: d.Demand}
			r, detail, _ := strings.Cut(d.Reason, ": ")
			w.Reason, w.Detail = broker.WaitReason(r), detail
		}
		ev, ok := waitEvent(w, d.Tenant)
		if !ok {
			return nil
		}
		for _, uid := range podUIDs([]string{w.Demand}) {
			out[uid] = ev
		}
	}
	return out
}

// waitEvent is the Event of a wait, and false for waits that need none:
// in flight (ScaleUpTriggered said it), free GPUs for the scheduler to use,
// a stale side (nothing is decided about it).
func waitEvent(w broker.Wait, tenant string) (podEvent, bool) {
	switch w.Reason {
	case broker.WaitQuota:
		note := "waiting for quota: " + w.Detail
		if tenant != "" && !strings.Contains(w.Detail, tenant) {
			note = "waiting for quota of tenant " + tenant + ": " + w.Detail
		}
		return podEvent{Reason: EventWaitingForQuota, Type: corev1.EventTypeNormal, Note: note, Action: "Admit"}, true
	case broker.WaitUnsatisfiable:
		return podEvent{Reason: EventUnsatisfiable, Type: corev1.EventTypeWarning,
			Note: "no gpubroker pool can ever serve this pod: " + w.Detail, Action: "Place"}, true
	case broker.WaitPoolMax, broker.WaitClusterMax, broker.WaitBackoff, broker.WaitPriority,
		broker.WaitNoPreemptible, broker.WaitGang, broker.WaitNotScheduling:
		return podEvent{Reason: EventNotTriggerScaleUp, Type: corev1.EventTypeNormal,
			Note: "pod did not trigger scale-up (" + string(w.Reason) + "): " + w.Detail, Action: "ScaleUp"}, true
	}
	return podEvent{}, false
}

// podUIDs keeps the Kubernetes demand IDs ("k8s/<pod uid>") of ids.
func podUIDs(ids []string) []types.UID {
	var out []types.UID
	for _, id := range ids {
		if uid, ok := strings.CutPrefix(id, string(broker.SourceK8s)+"/"); ok && uid != "" {
			out = append(out, types.UID(uid))
		}
	}
	return out
}

// victims names the preempted work: "ml/trainer-0 (priority 100, 2 GPUs)".
func victims(ws []broker.Workload) string {
	if len(ws) == 0 {
		return "no workloads"
	}
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		name := w.Name
		if name == "" {
			name = string(w.Source) + "/" + w.Key
		}
		parts = append(parts, fmt.Sprintf("%s (priority %d, %d GPUs)", name, w.Priority, w.GPUs))
	}
	return strings.Join(parts, ", ")
}

// write creates one events.k8s.io/v1 Event regarding pod.
func (e *PodEvents) write(ctx context.Context, pod *corev1.Pod, ev podEvent) error {
	now := e.cfg.Now()
	note := ev.Note
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	obj := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
			Namespace: pod.Namespace,
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: ReportingController,
		ReportingInstance:   e.cfg.Instance,
		Action:              ev.Action,
		Reason:              ev.Reason,
		Note:                note,
		Type:                ev.Type,
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion},
	}
	if _, err := e.client.EventsV1().Events(pod.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create event %s on pod %s/%s: %w", ev.Reason, pod.Namespace, pod.Name, apiError(err))
	}
	return nil
}

// podsByUID finds pods in the informer cache by UID, in one pass.
func (o *Observer) podsByUID(uids map[types.UID]bool) map[types.UID]*corev1.Pod {
	out := make(map[types.UID]*corev1.Pod, len(uids))
	for _, obj := range o.pods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok && uids[p.UID] {
			out[p.UID] = p
		}
	}
	return out
}
