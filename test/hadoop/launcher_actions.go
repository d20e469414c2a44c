package hadoop

import (
	"context"
	"fmt"
	"strings"
)

// Run starts an application whose one container of gpus GPUs really runs
// `sleep seconds` on host; the application finishes when the container
// completes, however it ends. It returns the application and container ids.
func (c *Cluster) Run(ctx context.Context, queue, host string, gpus, seconds int) (app, container string, err error) {
	out, err := c.command(ctx, fmt.Sprintf("run %s %s %d %d", queue, host, gpus, seconds))
	if err != nil {
		return "", "", err
	}
	app, container, ok := strings.Cut(out, " ")
	if !ok {
		return "", "", fmt.Errorf("launcher: run: unexpected answer %q", out)
	}
	return app, container, nil
}

// Restart stops host's NodeManager if it still runs and starts a new one,
// as a service manager restarts a NodeManager a decommission stopped.
func (c *Cluster) Restart(ctx context.Context, host string) error {
	_, err := c.command(ctx, "restart "+host)
	return err
}
