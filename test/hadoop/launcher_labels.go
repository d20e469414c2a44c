package hadoop

import (
	"context"
	"fmt"
)

// Label puts host's NodeManager into the partition of Config.Label.
func (c *Cluster) Label(ctx context.Context, host string) error {
	_, err := c.command(ctx, "label "+host)
	return err
}

// SubmitLabelled is Submit asking in the partition of Config.Label: the
// request's nodeLabelExpression names it.
func (c *Cluster) SubmitLabelled(ctx context.Context, queue string, prio, containers, gpus int) (string, error) {
	return c.command(ctx, fmt.Sprintf("submit-labelled %s %d %d %d", queue, prio, containers, gpus))
}
