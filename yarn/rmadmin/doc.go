// Package rmadmin is a Hadoop IPC client for the YARN ResourceManager's
// admin protocol (ResourceManagerAdministrationProtocol, served on
// yarn.resourcemanager.admin.address, port 8033 by default): the calls
// behind `yarn rmadmin -refreshNodes [-g timeout|-forceful]` and
// `yarn rmadmin -updateNodeResource`, and the node-label calls behind
// -addToClusterNodeLabels, -removeFromClusterNodeLabels and
// -replaceLabelsOnNode (labels.go) that hold a node under an exclusive
// label no queue may use: a cordon kept in the RM's label store.
//
// The wire format is Hadoop's RPC v9 with protocol buffers: the "hrpc"
// preamble, an IpcConnectionContextProto, then for every call one frame (a
// 4-byte big-endian length) of varint-delimited RpcRequestHeaderProto,
// RequestHeaderProto and the request message; answers are frames of a
// varint-delimited RpcResponseHeaderProto and, on success, the response.
// Only the few messages needed are encoded, by hand with protowire, rather
// than generated from the Hadoop .proto files: a few small messages do not
// justify a code generator in the build.
//
// Authentication is SIMPLE by default: the RM runs with
// hadoop.security.authentication=simple and yarn.admin.acl admits the
// configured user. With Config.Kerberos the connection authenticates with
// SASL GSSAPI first (sasl.go: auth byte 0xDF, then RpcSaslProto messages
// with call id -33: NEGOTIATE, INITIATE with the Kerberos AP-REQ for
// yarn.resourcemanager.principal, the server's security-layer offer in a
// CHALLENGE, our choice in a RESPONSE, SUCCESS), taking the strongest
// layer the server offers (hadoop.rpc.protection): with integrity or
// privacy every later frame travels in SASL WRAP messages, signed or
// sealed as RFC 4121 wrap tokens (gsswrap.go). The handshake follows
// Hadoop's SaslRpcClient and GssKrb5Server; colinmarc/hdfs's NameNode
// client was read for the protocol.
package rmadmin
