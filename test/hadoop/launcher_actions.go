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

// Spread starts an application with one real container per spec, each
// placed on its Host and running `sleep seconds` (a Trap container
// ignores SIGTERM, so GRACEFUL_SHUTDOWN does not stop it); the
// application finishes once all have completed. It returns the
// application id and the container ids in spec order.
func (c *Cluster) Spread(ctx context.Context, queue string, seconds int, specs ...ContainerSpec) (app string, containers []string, err error) {
	line := fmt.Sprintf("spread %s %d", queue, seconds)
	for _, s := range specs {
		line += fmt.Sprintf(" %s:%d", s.Host, s.GPUs)
		if s.Trap {
			line += ":trap"
		}
	}
	out, err := c.command(ctx, line)
	if err != nil {
		return "", nil, err
	}
	f := strings.Fields(out)
	if len(f) != 1+len(specs) {
		return "", nil, fmt.Errorf("launcher: spread: unexpected answer %q", out)
	}
	return f[0], f[1:], nil
}

// ContainerSpec is one container of Spread.
type ContainerSpec struct {
	Host string
	GPUs int
	// Trap makes the container ignore SIGTERM.
	Trap bool
}

// ManagedAM starts an application whose ApplicationMaster is a real
// managed AM (a JVM the RM places, 0 GPUs) that registers and stays for
// seconds. It returns the application, its AM container and the host
// the RM placed it on.
func (c *Cluster) ManagedAM(ctx context.Context, queue string, seconds int) (app, container, host string, err error) {
	out, err := c.command(ctx, fmt.Sprintf("am %s %d", queue, seconds))
	if err != nil {
		return "", "", "", err
	}
	f := strings.Fields(out)
	if len(f) != 3 {
		return "", "", "", fmt.Errorf("launcher: am: unexpected answer %q", out)
	}
	return f[0], f[1], f[2], nil
}

// Restartable starts an application tagged tag (e.g.
// "gpubroker.io/checkpoint-dir=hdfs://nn/ckpt/job") with one real
// container of spec.GPUs GPUs on spec.Host running `sleep seconds`; its
// AM asks again, with relaxed locality, whenever the container ends before
// its time and runs the new one wherever the RM places it, as a
// checkpointing trainer's AM does. It returns the application and its
// first container.
func (c *Cluster) Restartable(ctx context.Context, queue string, seconds int, spec ContainerSpec, tag string) (app, container string, err error) {
	out, err := c.command(ctx, fmt.Sprintf("restartable %s %d %s:%d %s", queue, seconds, spec.Host, spec.GPUs, tag))
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", "", fmt.Errorf("launcher: restartable: unexpected answer %q", out)
	}
	return f[0], f[1], nil
}
