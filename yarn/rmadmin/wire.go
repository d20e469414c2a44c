package rmadmin

import (
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// Protocol constants of Hadoop RPC v9 (org.apache.hadoop.ipc.RpcConstants).
const (
	rpcVersion          = 9
	serviceClassDefault = 0
	authProtocolNone    = 0
	connectionContextID = -3
	invalidRetryCount   = -1
	rpcKindProtobuf     = 2 // RpcKindProto.RPC_PROTOCOL_BUFFER
	rpcOpFinalPacket    = 0 // OperationProto.RPC_FINAL_PACKET
	// maxFrame bounds an answer; admin answers are tiny.
	maxFrame = 16 << 20
)

// Protocol names the RM admin protocol's PB interface and its version.
const (
	Protocol        = "org.apache.hadoop.yarn.server.api.ResourceManagerAdministrationProtocolPB"
	protocolVersion = 1
)

// Response status (RpcResponseHeaderProto.RpcStatusProto).
const (
	statusSuccess = 0
	statusError   = 1
	statusFatal   = 2
)

// preamble is what a client sends first on a connection.
func preamble() []byte {
	return []byte{'h', 'r', 'p', 'c', rpcVersion, serviceClassDefault, authProtocolNone}
}

// rpcRequestHeader encodes an RpcRequestHeaderProto.
func rpcRequestHeader(callID int32, clientID []byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, rpcKindProtobuf)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, rpcOpFinalPacket)
	b = protowire.AppendTag(b, 3, protowire.VarintType) // sint32
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(int64(callID)))
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, clientID)
	b = protowire.AppendTag(b, 5, protowire.VarintType) // sint32
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(invalidRetryCount))
	return b
}

// connectionContext encodes an IpcConnectionContextProto for user and
// protocol.
func connectionContext(user, protocol string) []byte {
	var ui []byte
	ui = protowire.AppendTag(ui, 1, protowire.BytesType) // effectiveUser
	ui = protowire.AppendString(ui, user)
	var b []byte
	b = protowire.AppendTag(b, 2, protowire.BytesType) // userInfo
	b = protowire.AppendBytes(b, ui)
	b = protowire.AppendTag(b, 3, protowire.BytesType) // protocol
	b = protowire.AppendString(b, protocol)
	return b
}

// requestHeader encodes a RequestHeaderProto (ProtobufRpcEngine2).
func requestHeader(method string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, method)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, Protocol)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, protocolVersion)
	return b
}

// frame joins varint-delimited messages behind a 4-byte big-endian length.
func frame(msgs ...[]byte) []byte {
	n := 0
	for _, m := range msgs {
		n += protowire.SizeVarint(uint64(len(m))) + len(m)
	}
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+n), uint32(n))
	for _, m := range msgs {
		b = protowire.AppendBytes(b, m)
	}
	return b
}

// readFrame reads one length-prefixed frame.
func readFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the %d limit", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// delimited splits one varint-delimited message off b.
func delimited(b []byte) (msg, rest []byte, err error) {
	m, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, nil, fmt.Errorf("delimited message: %w", protowire.ParseError(n))
	}
	return m, b[n:], nil
}

// responseHeader is the part of RpcResponseHeaderProto the client uses.
type responseHeader struct {
	callID         uint32
	status         uint64
	exceptionClass string
	errorMsg       string
	errorDetail    uint64
}

func parseResponseHeader(b []byte) (responseHeader, error) {
	var h responseHeader
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) {
		switch {
		case num == 1 && typ == protowire.VarintType:
			h.callID = uint32(v)
		case num == 2 && typ == protowire.VarintType:
			h.status = v
		case num == 4 && typ == protowire.BytesType:
			h.exceptionClass = string(s)
		case num == 5 && typ == protowire.BytesType:
			h.errorMsg = string(s)
		case num == 6 && typ == protowire.VarintType:
			h.errorDetail = v
		}
	})
	return h, err
}

// eachField walks the top-level fields of a message: varints in v, bytes
// in s; other wire types are skipped.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, s []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			f(num, typ, v, nil)
			b = b[m:]
		case protowire.BytesType:
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			f(num, typ, 0, s)
			b = b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return nil
}
