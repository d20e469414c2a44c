// Package cloud implements engine.NodePool for AWS EC2 Auto Scaling groups
// through aws-sdk-go-v2.
//
// Pools come from configuration (group name, min/max override) and from
// discovery by the tag gpubroker.io/pool=<name>. GPUs per node, GPU model,
// labels and taints are read from the group's tags — gpubroker's own
// (gpubroker.io/gpus-per-node, gpubroker.io/gpu-model, ...) and the Cluster
// Autoscaler's node-template tags — so a group at zero nodes can still be
// scaled from zero and groups set up for the Cluster Autoscaler work
// unchanged.
//
// The provider observes groups with DescribeAutoScalingGroups (paginated),
// matches instances to Kubernetes nodes and YARN NodeManagers through the
// private DNS name from DescribeInstances, scales up with SetDesiredCapacity
// to an absolute target and scales down one chosen instance with
// TerminateInstanceInAutoScalingGroup and ShouldDecrementDesiredCapacity.
//
// Backoff state lives here, in memory: failed launches found through
// DescribeScalingActivities (insufficient capacity and the like), throttling
// that outlasted the SDK's own retries, and instances that did not become a
// node within the max provision time put a pool into backoff, which Pools
// reports in broker.PoolState and SetDesired enforces with a
// *broker.BackoffError. Throttling is retried by the SDK's standard retryer
// with exponential, jittered backoff; the provider itself never loops.
//
// Package awssim next to it is a simulator of the same AWS query protocol
// with failure injection, used in tests and in the demo.
package cloud
