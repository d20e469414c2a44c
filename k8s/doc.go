// Package k8s is gpubroker's Kubernetes adapter.
//
// It watches pods, nodes, PodDisruptionBudgets and PriorityClasses through
// client-go shared informers (never polling lists) and turns what the
// scheduler gave up on into broker.Demand: one demand per Pending pod with
// PodScheduled=False/Unschedulable that asks for nvidia.com/gpu or MIG
// slices. GPU nodes become broker.Node with their running work.
//
// It also acts on the cluster: cordon plus the gpubroker.io/owner NoSchedule
// taint, uncordon, drain through the Eviction API (PDBs respected, 429
// retried with backoff, DaemonSet and mirror pods left, bounded by a
// timeout) and Kubernetes Events on pods and nodes.
//
// The package imports broker and client-go; it never imports another
// adapter. Foreign errors become broker errors at this boundary
// (NotFound wraps broker.ErrNotFound, Conflict wraps broker.ErrConflict).
package k8s
