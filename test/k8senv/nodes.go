package k8senv

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// KWOKAnnotation marks nodes KWOK plays the kubelet for (value "fake").
const KWOKAnnotation = "kwok.x-k8s.io/node"

// GPUResource is the device plugin's resource name.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// NodeSpec describes a fake node, as the cloud adapter's simulator creates
// one when an instance boots.
type NodeSpec struct {
	Name string
	// GPUs is how many nvidia.com/gpu the node has.
	GPUs int
	// Model is the nvidia.com/gpu.product label value (omitted if empty).
	Model string
	// Labels and Taints are added to the node.
	Labels map[string]string
	Taints []corev1.Taint
	// WithholdGPUs registers the node without advertising its GPUs, as a
	// node whose device plugin has not reported yet; AdvertiseGPUs adds
	// them later.
	WithholdGPUs bool
	// ProviderID is spec.providerID, e.g. "aws:///us-east-1a/i-0abc".
	ProviderID string
	// MIG, when set, partitions the node's GPUs: it advertises these MIG
	// devices by profile (nvidia.com/mig-<profile>, the device plugin's
	// mixed strategy) and no nvidia.com/gpu.
	MIG map[string]int
}

// AddNode registers a node that KWOK makes Ready. Its status carries 32
// CPUs, 256 GiB, 110 pods and, unless withheld, the GPUs.
func (e *Env) AddNode(ctx context.Context, s NodeSpec) (*corev1.Node, error) {
	labels := map[string]string{
		"kubernetes.io/hostname": s.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		// A kubelet sets the beta labels too; without them the node
		// lifecycle controller adds them with a GET and a PATCH per node.
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": "amd64",
		"type":                    "kwok",
	}
	if s.Model != "" {
		labels["nvidia.com/gpu.product"] = s.Model
		labels["nvidia.com/gpu.count"] = strconv.Itoa(s.GPUs)
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	switch {
	case s.WithholdGPUs:
	case len(s.MIG) > 0:
		for profile, n := range s.MIG {
			res[corev1.ResourceName("nvidia.com/mig-"+profile)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
		}
	default:
		res[GPUResource] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Labels:      labels,
			Annotations: map[string]string{KWOKAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: s.Taints, ProviderID: s.ProviderID},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Phase:       corev1.NodeRunning,
		},
	}
	out, err := e.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create node %q: %w", s.Name, err)
	}
	return out, nil
}

// AdvertiseGPUs sets the node's nvidia.com/gpu capacity and allocatable,
// as the device plugin does once it starts.
// It retries on write conflicts: KWOK and the controller manager update
// node status too.
func (e *Env) AdvertiseGPUs(ctx context.Context, name string, gpus int) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		if n.Status.Capacity == nil {
			n.Status.Capacity = corev1.ResourceList{}
		}
		if n.Status.Allocatable == nil {
			n.Status.Allocatable = corev1.ResourceList{}
		}
		n.Status.Capacity[GPUResource] = q
		n.Status.Allocatable[GPUResource] = q
		_, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("advertise gpus on node %q: %w", name, err)
	}
	return nil
}

// StopKubelet makes the node's kubelet stop posting status, as when a
// kubelet dies or its machine becomes unreachable: the node lifecycle
// controller marks it Ready=Unknown ("Kubelet stopped posting node
// status.") after its grace period and taints it unreachable. Pods bound to
// it stay bound.
//
// KWOK keeps renewing the lease of a node it manages even after the node's
// annotation changes, so the node object is recreated at once without the
// KWOK annotation, with its labels, taints, provider ID and last status
// (the object gets a new UID; the pod garbage collector's quarantine keeps
// the bound pods through the moment it is absent).
func (e *Env) StopKubelet(ctx context.Context, name string) error {
	n, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("stop kubelet of node %q: %w", name, err)
	}
	if err := e.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("stop kubelet of node %q: delete: %w", name, err)
	}
	again := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: map[string]string{}},
		Spec:       corev1.NodeSpec{Taints: n.Spec.Taints, ProviderID: n.Spec.ProviderID, PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     n.Status,
	}
	for k, v := range n.Annotations {
		if k != KWOKAnnotation {
			again.Annotations[k] = v
		}
	}
	for {
		_, err = e.Client.CoreV1().Nodes().Create(ctx, again, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) || ctx.Err() != nil {
			return fmt.Errorf("stop kubelet of node %q: recreate: %w", name, err)
		}
		select { // the deletion has not finished yet
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
