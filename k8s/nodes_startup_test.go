package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpubroker/gpubroker/broker"
)

// TestReadyNodeWithStartupTaintIsInFlight: a node already Ready but still
// carrying the not-ready taint (the node lifecycle controller lifts it on
// its next pass) cannot take the pod it was bought for yet; it must count
// as capacity in flight, and the transient taint must not make the pool
// look unable to serve the pod, or a second node is bought.
func TestReadyNodeWithStartupTaintIsInFlight(t *testing.T) {
	cfg := Config{}.Defaults()
	c := &classifier{cfg: &cfg}
	n, d := c.buildNode(gpuNode("n1", 4, "A100", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{
			{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
			{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
		}
	}), nil)
	if n.Phase != broker.PhaseRegistered || d.Reason != NodeNotReady {
		t.Fatalf("phase %s reason %q, want registered / not ready", n.Phase, d.Reason)
	}
	if len(n.Taints) != 1 || n.Taints[0].Key != "nvidia.com/gpu" {
		t.Fatalf("taints %+v: the startup taint must be dropped, the GPU taint kept", n.Taints)
	}
	n, _ = c.buildNode(gpuNode("n2", 4, "A100"), nil)
	if n.Phase != broker.PhaseActive {
		t.Fatalf("once the taint is gone: phase %s, want active", n.Phase)
	}
}
