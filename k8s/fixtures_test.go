package k8s

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
)

// gpuPod returns a pending pod asking for n GPUs in ns, marked
// unschedulable by the default scheduler unless changed by opts.
func gpuPod(ns, name string, n int, opts ...func(*corev1.Pod)) *corev1.Pod {
	prio := int32(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("uid-%s-%s", ns, name))},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			Priority:      &prio,
			Containers: []corev1.Container{{
				Name: "main",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)},
					Limits:   corev1.ResourceList{ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)},
				},
			}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withPriority(v int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Priority = &v }
}

func onNode(node string, phase corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = phase
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	}
}

func gpuNode(name string, gpus int, model string, opts ...func(*corev1.Node)) *corev1.Node {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourcePods: resource.MustParse("110")}
	if gpus > 0 {
		res[ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"infra-type": "gpu"}},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	if model != "" {
		n.Labels[DefaultGPUModelLabel] = model
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func errorsIsNotFound(err error) bool { return errors.Is(err, broker.ErrNotFound) }

// pendingGPUPod classifies without a request cache.
func pendingGPUPod(p *corev1.Pod) (GPURequest, bool) { return (&classifier{}).pendingGPUPod(p) }
