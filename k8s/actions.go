package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gpubroker/gpubroker/broker"
)

// Actuator changes the cluster: cordon, uncordon, drain and Events. Every
// call reads fresh state from the API server, never the informer caches,
// because destructive steps must not act on stale observations.
type Actuator struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
}

// NewActuator builds an Actuator on client.
func NewActuator(client kubernetes.Interface, cfg Config, log *slog.Logger) (*Actuator, error) {
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
	return &Actuator{client: client, cfg: cfg, log: log, now: time.Now}, nil
}

// apiError converts a Kubernetes API error into the broker's sentinels.
func apiError(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %w", broker.ErrNotFound, err)
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %w", broker.ErrConflict, err)
	}
	return err
}

// updateNode applies change to a fresh copy of the node and writes it,
// retrying on write conflicts. change returns false when nothing changes.
func (a *Actuator) updateNode(ctx context.Context, name string, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !change(n) {
			return nil
		}
		_, err = a.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Cordon marks the node unschedulable and adds the gpubroker.io/owner
// NoSchedule taint with value owner ("yarn", "none", ...), so the
// Kubernetes scheduler places nothing new on it even if someone uncordons
// it by hand. It is idempotent.
func (a *Actuator) Cordon(ctx context.Context, node, owner string) error {
	if owner == "" {
		return broker.Invalid("owner", "must name the new owner of node %q", node)
	}
	changed := false
	err := a.updateNode(ctx, node, func(n *corev1.Node) bool {
		changed = !n.Spec.Unschedulable
		n.Spec.Unschedulable = true
		i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OwnerTaintKey })
		want := corev1.Taint{Key: OwnerTaintKey, Value: owner, Effect: corev1.TaintEffectNoSchedule}
		switch {
		case i < 0:
			n.Spec.Taints = append(n.Spec.Taints, want)
			changed = true
		case n.Spec.Taints[i].Value != owner || n.Spec.Taints[i].Effect != corev1.TaintEffectNoSchedule:
			n.Spec.Taints[i] = want
			changed = true
		}
		return changed
	})
	if err != nil {
		return fmt.Errorf("cordon node %q: %w", node, apiError(err))
	}
	if changed {
		a.log.Info("cordoned node", "node", node, "owner", owner)
		a.bestEffortNodeEvent(ctx, node, corev1.EventTypeNormal, EventCordoned,
			fmt.Sprintf("gpubroker cordoned the node and tainted it %s=%s:NoSchedule", OwnerTaintKey, owner))
	}
	return nil
}

// bestEffortNodeEvent writes a node event; a failure is logged, not
// returned, because the action itself succeeded.
func (a *Actuator) bestEffortNodeEvent(ctx context.Context, node, eventType, reason, message string) {
	if err := a.NodeEvent(ctx, node, eventType, reason, message); err != nil && ctx.Err() == nil {
		a.log.Warn("write node event", "node", node, "reason", reason, "err", err)
	}
}

// Uncordon removes the gpubroker.io/owner taint and makes the node
// schedulable again. It is idempotent.
func (a *Actuator) Uncordon(ctx context.Context, node string) error {
	changed := false
	err := a.updateNode(ctx, node, func(n *corev1.Node) bool {
		changed = n.Spec.Unschedulable
		n.Spec.Unschedulable = false
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OwnerTaintKey })
		changed = changed || len(n.Spec.Taints) != before
		return changed
	})
	if err != nil {
		return fmt.Errorf("uncordon node %q: %w", node, apiError(err))
	}
	if changed {
		a.log.Info("uncordoned node", "node", node)
		a.bestEffortNodeEvent(ctx, node, corev1.EventTypeNormal, EventUncordoned, "gpubroker gave the node back to the Kubernetes scheduler")
	}
	return nil
}

// Event reasons gpubroker writes.
const (
	// EventTriggeredScaleUp on a pod: a node was ordered for it.
	EventTriggeredScaleUp = "TriggeredScaleUp"
	// EventNotTriggerScaleUp on a pod: no node was ordered, with the reason.
	EventNotTriggerScaleUp = "NotTriggerScaleUp"
	// Node events.
	EventCordoned     = "GPUBrokerCordoned"
	EventUncordoned   = "GPUBrokerUncordoned"
	EventDrained      = "GPUBrokerDrained"
	EventDrainBlocked = "GPUBrokerDrainBlocked"
	EventDrainTimeout = "GPUBrokerDrainTimedOut"
)

// PodEvent writes a Kubernetes Event about a pod, e.g. TriggeredScaleUp
// or NotTriggerScaleUp with the reason in the message.
func (a *Actuator) PodEvent(ctx context.Context, namespace, name, eventType, reason, message string) error {
	pod, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("event on pod %s/%s: %w", namespace, name, apiError(err))
	}
	return a.event(ctx, podRef(pod), eventType, reason, message)
}

// podRef is an Event's reference to pod.
func podRef(pod *corev1.Pod) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion}
}

// bestEffortPodEvent writes an Event about pod, as read before an action
// on it (the pod may be gone since), logging a failure.
func (a *Actuator) bestEffortPodEvent(ctx context.Context, pod *corev1.Pod, eventType, reason, message string) {
	if err := a.event(ctx, podRef(pod), eventType, reason, message); err != nil && ctx.Err() == nil {
		a.log.Warn("write pod event", "pod", pod.Namespace+"/"+pod.Name, "reason", reason, "err", err)
	}
}

// NodeEvent writes a Kubernetes Event about a node (in namespace default,
// where kubectl describe node finds node events).
func (a *Actuator) NodeEvent(ctx context.Context, node, eventType, reason, message string) error {
	n, err := a.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("event on node %q: %w", node, apiError(err))
	}
	ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: n.UID}
	return a.event(ctx, ref, eventType, reason, message)
}

func (a *Actuator) event(ctx context.Context, ref corev1.ObjectReference, eventType, reason, message string) error {
	if eventType != corev1.EventTypeNormal && eventType != corev1.EventTypeWarning {
		return broker.Invalid("event_type", "must be %q or %q, got %q", corev1.EventTypeNormal, corev1.EventTypeWarning, eventType)
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.NewTime(a.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()),
			Namespace: ns,
		},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		Source:              corev1.EventSource{Component: a.cfg.EventSource},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "gpubroker.io/" + a.cfg.EventSource,
		ReportingInstance:   a.cfg.EventSource,
	}
	if _, err := a.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create event %s on %s %q: %w", reason, ref.Kind, ref.Name, apiError(err))
	}
	return nil
}
