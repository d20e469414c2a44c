package rmadmin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// NodeLabel is a cluster node label (a partition) as addToClusterNodeLabels
// creates it. An exclusive label's nodes serve only asks that name it; a
// non-exclusive one lends its idle space to default-partition asks, so a
// cordon must be exclusive.
type NodeLabel struct {
	Name      string
	Exclusive bool
}

// NodeLabelsDisabled is the text of the IOException an RM without
// yarn.node-labels.enabled answers every label call with
// (CommonNodeLabelsManager.NODE_LABELS_NOT_ENABLED_ERR); the AdminService
// wraps it in a YarnException, so the class alone does not tell it apart.
const NodeLabelsDisabled = "Node-label-based scheduling is disabled"

// IsNodeLabelsDisabled reports whether err is the RM's refusal of a node
// label call because node labels are not enabled on it, as opposed to a
// bad argument or an unreachable RM: a cluster that cannot hold a label
// cordon answers this way every time.
func IsNodeLabelsDisabled(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && strings.Contains(re.Message, NodeLabelsDisabled)
}

// AddToClusterNodeLabels creates cluster node labels (yarn rmadmin
// -addToClusterNodeLabels "name(exclusive=true)"). The RM refuses a label
// that exists already with another exclusivity, and every label call when
// node labels are not enabled (see IsNodeLabelsDisabled).
func (c *Client) AddToClusterNodeLabels(ctx context.Context, labels []NodeLabel) error {
	req, err := addToClusterNodeLabelsRequest(labels)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, "addToClusterNodeLabels", req)
	return err
}

// RemoveFromClusterNodeLabels deletes cluster node labels; the RM refuses
// a label still on a node or still accessible to a queue.
func (c *Client) RemoveFromClusterNodeLabels(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return errors.New("rmadmin: removeFromClusterNodeLabels: no label names")
	}
	var b []byte
	for _, n := range names {
		if n == "" {
			return errors.New("rmadmin: removeFromClusterNodeLabels: empty label name")
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	_, err := c.call(ctx, "removeFromClusterNodeLabels", b)
	return err
}

// ReplaceLabelsOnNode sets the labels of nodes (yarn rmadmin
// -replaceLabelsOnNode): each key is "host" (every NodeManager of the
// host, port 0 on the wire as Hadoop's CLI sends it) or "host:port" (one
// NodeManager); an empty label list puts the node back in the default
// partition. YARN allows at most one label per node. With
// failOnUnknownNodes the RM refuses hosts it does not know. The RPC method
// is replaceLabelsOnNodes (the service's name, plural), not the request's.
func (c *Client) ReplaceLabelsOnNode(ctx context.Context, nodeToLabels map[string][]string, failOnUnknownNodes bool) error {
	req, err := replaceLabelsOnNodeRequest(nodeToLabels, failOnUnknownNodes)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, "replaceLabelsOnNodes", req)
	return err
}

// addToClusterNodeLabelsRequest encodes an AddToClusterNodeLabelsRequestProto:
// field 2 holds NodeLabelProto {name = 1, isExclusive = 2}; field 1 (the
// names of Hadoop 2.6) is left empty.
func addToClusterNodeLabelsRequest(labels []NodeLabel) ([]byte, error) {
	if len(labels) == 0 {
		return nil, errors.New("rmadmin: addToClusterNodeLabels: no labels")
	}
	var b []byte
	for _, l := range labels {
		if l.Name == "" {
			return nil, errors.New("rmadmin: addToClusterNodeLabels: empty label name")
		}
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, l.Name)
		m = protowire.AppendTag(m, 2, protowire.VarintType)
		m = protowire.AppendVarint(m, protowire.EncodeBool(l.Exclusive))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}

// replaceLabelsOnNodeRequest encodes a ReplaceLabelsOnNodeRequestProto:
// repeated NodeIdToLabelsProto {NodeIdProto nodeId = 1 {host = 1,
// port = 2}, repeated string nodeLabels = 2} = 1, bool failOnUnknownNodes
// = 2. Nodes go in sorted order, so one call always has the same bytes.
func replaceLabelsOnNodeRequest(nodeToLabels map[string][]string, failOnUnknownNodes bool) ([]byte, error) {
	if len(nodeToLabels) == 0 {
		return nil, errors.New("rmadmin: replaceLabelsOnNode: no nodes")
	}
	keys := make([]string, 0, len(nodeToLabels))
	for k := range nodeToLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	seen := map[string]string{}
	for _, k := range keys {
		host, port, err := splitNode(k)
		if err != nil {
			return nil, fmt.Errorf("rmadmin: replaceLabelsOnNode: %w", err)
		}
		// The RM keeps a map by node id: "h" and "h:0" are one node, and
		// which of two answers it kept would be up to the map.
		nodeID := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if other, dup := seen[nodeID]; dup {
			return nil, fmt.Errorf("rmadmin: replaceLabelsOnNode: %q and %q name the same node", other, k)
		}
		seen[nodeID] = k
		var id []byte
		id = protowire.AppendTag(id, 1, protowire.BytesType)
		id = protowire.AppendString(id, host)
		id = protowire.AppendTag(id, 2, protowire.VarintType)
		id = protowire.AppendVarint(id, uint64(int64(port)))
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendBytes(e, id)
		for _, l := range nodeToLabels[k] {
			if l == "" {
				return nil, fmt.Errorf("rmadmin: replaceLabelsOnNode: node %q: empty label name", k)
			}
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, l)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeBool(failOnUnknownNodes))
	return b, nil
}

// splitNode parses "host" (port 0: every NodeManager of the host) or
// "host:port".
func splitNode(s string) (string, int32, error) {
	if s == "" {
		return "", 0, errors.New("empty node")
	}
	if !strings.Contains(s, ":") {
		return s, 0, nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("node %q: want host or host:port: %w", s, err)
	}
	port, err := strconv.ParseInt(p, 10, 32)
	if err != nil || port < 0 || host == "" {
		return "", 0, fmt.Errorf("node %q: want host or host:port with a port from 0", s)
	}
	return host, int32(port), nil
}
