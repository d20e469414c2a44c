package hadoop

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RestartRM stops the ResourceManager and starts a new one on the same
// ports, as an RM restart (or a failover to a standby sharing the state
// and label stores) does; with Config.Recovery the new RM recovers the
// applications and keeps their containers. It returns how long the RM was
// away, from the stop until the new one serves.
func (c *Cluster) RestartRM(ctx context.Context) (time.Duration, error) {
	out, err := c.command(ctx, "rm-restart")
	if err != nil {
		return 0, err
	}
	ms, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("launcher: rm-restart: unexpected answer %q", out)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// NodeManagerState returns host's NodeManager service state (STARTED,
// STOPPED) and the containers it holds, each as "id=STATE".
func (c *Cluster) NodeManagerState(ctx context.Context, host string) (string, []string, error) {
	out, err := c.command(ctx, "nm "+host)
	if err != nil {
		return "", nil, err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return "", nil, fmt.Errorf("launcher: nm %s: empty answer", host)
	}
	return f[0], f[1:], nil
}
