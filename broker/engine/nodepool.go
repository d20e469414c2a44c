package engine

import (
	"context"

	"github.com/gpubroker/gpubroker/broker"
)

// NodePool is what the broker needs from a cloud provider's node groups
// (AWS autoscaling groups today; GCE managed instance groups or Azure scale
// sets would be further implementations). Errors wrap ErrNotFound for a
// missing group and *BackoffError when the provider asks the broker to stop
// growing a pool for a while.
type NodePool interface {
	// Pools returns every managed pool with its current state.
	Pools(ctx context.Context) ([]broker.PoolState, error)
	// SetDesired sets the pool's desired capacity to the absolute target.
	// Setting the value it already has is a no-op, so retries are safe.
	SetDesired(ctx context.Context, pool string, target int) error
	// Terminate removes one instance and decrements the desired capacity.
	// Terminating an instance that is already gone or terminating succeeds
	// without decrementing again.
	Terminate(ctx context.Context, pool, instanceID string) error
}
