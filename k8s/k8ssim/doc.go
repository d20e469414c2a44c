// Package k8ssim is a small simulated Kubernetes for the demo and scale
// tests: client-go's fake clientset, with an API-server front of its own
// (apiserver.go: resource versions, ordered unbounded watches that resume
// from a resource version, conflicts, field selectors on lists) so the k8s
// adapter's informers run unchanged at any scale, plus a tiny scheduler and
// kubelet. The scheduler binds pending pods to ready, uncordoned nodes with
// free nvidia.com/gpu whose labels match the pod's node selector and whose
// NoSchedule taints it tolerates, and marks the rest PodScheduled=False,
// reason Unschedulable, as kube-scheduler does. The kubelet finishes pods
// after the run time in their annotation. Evictions delete the pod and, as
// a Job controller would, create a replacement that waits for GPUs again.
//
// It does not model PodDisruptionBudgets, preemption by the scheduler,
// affinity beyond node selectors, non-GPU resources, or selectors on
// watches: the real control plane (test/k8senv) covers those in the
// adapter's integration tests.
package k8ssim
