package k8s

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
)

// Node phase details, in NodeDetail.Reason.
const (
	NodeNotReady         = "not-ready"          // kubelet not Ready yet or any more
	NodeGPUNotAdvertised = "gpu-not-advertised" // Ready, but the device plugin has not reported GPUs
	NodeCordoned         = "cordoned"           // unschedulable
	NodeDown             = "down"               // was Ready, now NotReady or Unknown
)

// NodeDetail is what Observe knows about a node beyond broker.Node.
type NodeDetail struct {
	Ready         bool `json:"ready"`
	Unschedulable bool `json:"unschedulable"`
	// GPUsAdvertised is false while the device plugin has not reported.
	GPUsAdvertised bool `json:"gpus_advertised"`
	// Allocatable is the node's allocatable GPU resources.
	Allocatable GPURequest `json:"allocatable"`
	// Reason explains a phase other than active (NodeNotReady, ...).
	Reason string `json:"reason,omitempty"`
}

// isGPUNode reports whether a node offers or will offer GPUs.
func (c *Config) isGPUNode(n *corev1.Node) bool {
	if !nodeGPUs(n.Status.Allocatable).IsZero() || !nodeGPUs(n.Status.Capacity).IsZero() {
		return true
	}
	if _, ok := n.Labels[c.GPUModelLabel]; ok {
		return true
	}
	if _, ok := n.Labels[c.PoolLabel]; ok {
		return true
	}
	if len(c.GPUNodeLabels) == 0 {
		return false
	}
	for k, v := range c.GPUNodeLabels {
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}

func nodeReady(n *corev1.Node) (bool, time.Time) {
	if c := readyCondition(n); c != nil {
		return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
	}
	return false, n.CreationTimestamp.Time
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
			return c
		}
	}
	return nil
}

// nodeStatusNeverUpdated is the reason the node lifecycle controller gives
// a Ready=Unknown condition of a node whose kubelet never posted status: a
// node still booting, not one that died.
const nodeStatusNeverUpdated = "NodeStatusNeverUpdated"

// downReason says why a node that is not Ready had been Ready before, or ""
// when nothing shows it ever was (a new node still starting). It had been
// if the observer saw it Ready, if the node lifecycle controller set Ready
// to Unknown because its kubelet stopped posting status, or if user pods
// run on it (the scheduler binds none to a node that never was Ready).
func downReason(cond *corev1.NodeCondition, seenReady bool, userPodsRunning bool) string {
	if cond == nil && !seenReady && !userPodsRunning {
		return ""
	}
	unknown := cond != nil && cond.Status == corev1.ConditionUnknown && cond.Reason != nodeStatusNeverUpdated
	if !seenReady && !unknown && !userPodsRunning {
		return ""
	}
	if cond == nil {
		return "node lost its Ready condition"
	}
	why := cond.Reason
	if cond.Message != "" {
		why += ": " + cond.Message
	}
	if why == "" {
		return "node is Ready=" + string(cond.Status)
	}
	return "node is Ready=" + string(cond.Status) + " (" + why + ")"
}

// ownerOf reads the gpubroker.io/owner taint: no taint means the
// Kubernetes scheduler owns the node.
func ownerOf(n *corev1.Node) broker.Owner {
	for _, t := range n.Spec.Taints {
		if t.Key != OwnerTaintKey {
			continue
		}
		switch broker.Owner(t.Value) {
		case broker.OwnerYARN:
			return broker.OwnerYARN
		case broker.OwnerK8s:
			return broker.OwnerK8s
		}
		return broker.OwnerNone
	}
	return broker.OwnerK8s
}

// instanceID extracts the cloud instance id from spec.providerID
// ("aws:///us-east-1a/i-0abc" → "i-0abc").
func instanceID(providerID string) string {
	if providerID == "" {
		return ""
	}
	return providerID[strings.LastIndexByte(providerID, '/')+1:]
}

// isSystemPod reports pods a drain leaves in place: DaemonSet pods and
// mirror (static) pods.
func isSystemPod(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[mirrorPodAnnotation]; ok {
		return true
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Kind == "DaemonSet" && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

func podTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// buildNode converts a node and the pods bound to it.
// CheckpointDirAnnotation on a pod names where its job checkpoints
// (hdfs://namenode:8020/path); its age is the work a preemption would lose.
const CheckpointDirAnnotation = "gpubroker.io/checkpoint-dir"

// wasReady records a node seen Ready and reports whether it ever was.
func (c *classifier) wasReady(uid types.UID, ready bool) bool {
	if uid == "" {
		return ready
	}
	if ready {
		c.readySeen.Store(uid, struct{}{})
		return true
	}
	_, ok := c.readySeen.Load(uid)
	return ok
}

// forgetNodes drops the memory of nodes not in present (deleted nodes).
func (c *classifier) forgetNodes(present map[types.UID]bool) {
	c.readySeen.Range(func(k, _ any) bool {
		if !present[k.(types.UID)] {
			c.readySeen.Delete(k)
		}
		return true
	})
}

// addDRA adds the devices a pod's claims hold to its workload: as its
// units when the pod holds nothing else, otherwise as the whole GPUs they
// fill.
func addDRA(w *broker.Workload, dr GPURequest) {
	if dr.IsZero() {
		return
	}
	if u, p, why := dr.PlanUnits(); w.GPUs == 0 && why == "" {
		w.GPUs, w.MIGProfile = u, p
		return
	}
	w.GPUs += dr.WholeGPUs()
}

func (c *classifier) buildNode(n *corev1.Node, pods []*corev1.Pod) (broker.Node, NodeDetail) {
	alloc := nodeGPUs(n.Status.Allocatable)
	memMiB := 0
	if c.objs.sliceDevices != nil {
		// A node whose GPUs DRA's driver publishes (ResourceSlices) and
		// no device plugin advertises is gpu-ready with them: otherwise
		// it would look forever on its way and be replaced.
		var sl GPURequest
		sl, memMiB = c.objs.sliceDevices(n.Name)
		alloc.GPUs = max(alloc.GPUs, sl.GPUs)
		for k, v := range sl.MIG {
			if v > alloc.MIG[k] {
				if alloc.MIG == nil {
					alloc.MIG = map[string]int64{}
				}
				alloc.MIG[k] = v
			}
		}
	}
	units, profile := alloc.NodeUnits()
	ready, since := nodeReady(n)
	seenReady := c.wasReady(n.UID, ready)
	d := NodeDetail{
		Ready:          ready,
		Unschedulable:  n.Spec.Unschedulable,
		GPUsAdvertised: !alloc.IsZero(),
		Allocatable:    alloc,
	}
	bn := broker.Node{
		Name:         n.Name,
		InstanceID:   instanceID(n.Spec.ProviderID),
		Pool:         n.Labels[c.cfg.PoolLabel],
		Owner:        ownerOf(n),
		PhaseSince:   since,
		GPUModel:     n.Labels[c.cfg.GPUModelLabel],
		GPUsTotal:    units,
		MIGProfile:   profile,
		GPUMemoryMiB: memMiB,
		Utilisation:  -1,
		Healthy:      true,
	}
	if len(n.Labels) > 0 {
		bn.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			bn.Labels[k] = v
		}
	}
	starting := false
	for _, t := range n.Spec.Taints {
		if c.cfg.isStartupTaint(t.Key) {
			// Transient: the node lifecycle controller or the cloud
			// controller lifts it. Such a node is capacity still arriving.
			starting = true
			continue
		}
		bn.Taints = append(bn.Taints, broker.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	userWork, userRunning := 0, false
	if len(pods) > 0 {
		bn.Work = make([]broker.Workload, 0, len(pods))
	}
	var claimed map[string]bool // DRA claims counted on this node
	for _, pod := range pods {
		if podTerminal(pod) {
			continue
		}
		w := c.workload(pod)
		if c.objs.resourceClaim != nil && len(pod.Spec.ResourceClaims) > 0 {
			// IMPORTANT: GPUs a pod holds through DRA claims are its
			// GPUs: without them a node running DRA work looks idle.
			if claimed == nil {
				claimed = map[string]bool{}
			}
			addDRA(&w, c.draAllocated(pod, claimed))
		}
		if w.MIGProfile == bn.MIGProfile {
			// Work on devices of another kind than the node offers the
			// planner (a whole-GPU pod on a node planned by its MIG
			// slices) keeps the node busy but is not of its units.
			bn.GPUsAllocated += w.GPUs
		}
		if !w.System {
			userWork++
			userRunning = userRunning || pod.Status.Phase == corev1.PodRunning
		}
		bn.Work = append(bn.Work, w)
	}
	if len(bn.Work) == 0 {
		bn.Work = nil // as when no pod was appended
	}
	if !ready {
		bn.Down = downReason(readyCondition(n), seenReady, userRunning)
	}
	switch {
	case bn.Down != "":
		// IMPORTANT: a node that was Ready and failed (kubelet stopped, node
		// unreachable) is not capacity on its way, whatever taints the node
		// lifecycle controller put on it: reporting it as registered would
		// let it absorb the demand it can no longer serve and hold its pool
		// in the provision backoff. It keeps the phase it had while up, with
		// Down saying why it is down since its Ready transition.
		bn.DownSince, d.Reason = since, NodeDown
		switch {
		case n.Spec.Unschedulable && userWork > 0:
			bn.Phase = broker.PhaseDraining
		case n.Spec.Unschedulable:
			bn.Phase = broker.PhaseDrained
		default:
			bn.Phase = broker.PhaseActive
		}
	case !ready:
		bn.Phase, d.Reason = broker.PhaseRegistered, NodeNotReady
	case !d.GPUsAdvertised:
		// IMPORTANT: a node whose device plugin has not reported yet is
		// capacity in flight, not a node without GPUs: reporting it as
		// registered keeps the planner from buying a second node for the
		// same pod.
		bn.Phase, d.Reason = broker.PhaseRegistered, NodeGPUNotAdvertised
	case starting:
		// IMPORTANT: until the not-ready (or uninitialized) taint is gone
		// no pod can land here, yet the node is the capacity bought for
		// them: it must count as in flight, or a second node is bought.
		bn.Phase, d.Reason = broker.PhaseRegistered, NodeNotReady
	case n.Spec.Unschedulable && userWork > 0:
		bn.Phase, d.Reason = broker.PhaseDraining, NodeCordoned
	case n.Spec.Unschedulable:
		bn.Phase, d.Reason = broker.PhaseDrained, NodeCordoned
	default:
		bn.Phase = broker.PhaseActive
	}
	return bn, d
}
