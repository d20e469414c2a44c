package rmadmin

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// DecommissionType is how refreshNodes treats hosts newly excluded
// (DecommissionTypeProto).
type DecommissionType int

// The decommission types.
const (
	// Normal decommissions excluded nodes at once (yarn rmadmin -refreshNodes).
	Normal DecommissionType = 1
	// Graceful lets running containers finish, up to a timeout (-g).
	Graceful DecommissionType = 2
	// Forceful decommissions at once, even nodes already decommissioning.
	Forceful DecommissionType = 3
)

// String names the type as Hadoop does.
func (t DecommissionType) String() string {
	switch t {
	case Normal:
		return "NORMAL"
	case Graceful:
		return "GRACEFUL"
	case Forceful:
		return "FORCEFUL"
	}
	return "DecommissionType(" + strconv.Itoa(int(t)) + ")"
}

// refreshNodesRequest encodes a RefreshNodesRequestProto. A zero timeout
// is left out: the RM then uses the per-host timeout of the exclude file
// or yarn.resourcemanager.nodemanager-graceful-decommission-timeout-secs.
func refreshNodesRequest(t DecommissionType, timeout time.Duration) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t))
	if t == Graceful && timeout > 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType) // int32 seconds
		b = protowire.AppendVarint(b, uint64(int32(timeout/time.Second)))
	}
	return b
}

// Resource is a node's total capability as updateNodeResource sets it.
type Resource struct {
	MemoryMB int64
	VCores   int32
	// Others are the other resource types by name, e.g. "yarn.io/gpu": 4.
	// Countable types only; units are left to the RM's defaults.
	Others map[string]int64
}

// encode builds a ResourceProto. Memory and vcores go both in the legacy
// fields and in the resource map, as Hadoop 3's ResourcePBImpl writes them.
func (r Resource) encode() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(r.MemoryMB))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(r.VCores)))
	info := func(key string, v int64, units string) {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, key)
		m = protowire.AppendTag(m, 2, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(v))
		if units != "" {
			m = protowire.AppendTag(m, 3, protowire.BytesType)
			m = protowire.AppendString(m, units)
		}
		m = protowire.AppendTag(m, 4, protowire.VarintType) // COUNTABLE
		m = protowire.AppendVarint(m, 0)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	info("memory-mb", r.MemoryMB, "Mi")
	info("vcores", int64(r.VCores), "")
	keys := make([]string, 0, len(r.Others))
	for k := range r.Others {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		info(k, r.Others[k], "")
	}
	return b
}

// updateNodeResourceRequest encodes an UpdateNodeResourceRequestProto for
// one node. overCommit < 0 means "never time out" (-1 on the wire).
func updateNodeResourceRequest(nodeID string, r Resource, overCommit time.Duration) ([]byte, error) {
	host, portS, err := net.SplitHostPort(nodeID)
	if err != nil {
		return nil, fmt.Errorf("node id %q: want host:port: %w", nodeID, err)
	}
	port, err := strconv.ParseInt(portS, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("node id %q: port: %w", nodeID, err)
	}
	var id []byte
	id = protowire.AppendTag(id, 1, protowire.BytesType)
	id = protowire.AppendString(id, host)
	id = protowire.AppendTag(id, 2, protowire.VarintType)
	id = protowire.AppendVarint(id, uint64(port))

	secs := int64(-1)
	if overCommit >= 0 {
		secs = int64(overCommit / time.Second)
	}
	var opt []byte
	opt = protowire.AppendTag(opt, 1, protowire.BytesType)
	opt = protowire.AppendBytes(opt, r.encode())
	opt = protowire.AppendTag(opt, 2, protowire.VarintType) // int32: negative is 10 bytes
	opt = protowire.AppendVarint(opt, uint64(secs))

	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendBytes(entry, id)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, opt)

	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, entry)
	return b, nil
}
