// Package rmadmin is a Hadoop IPC client for the YARN ResourceManager's
// admin protocol (ResourceManagerAdministrationProtocol, served on
// yarn.resourcemanager.admin.address, port 8033 by default): the calls
// behind `yarn rmadmin -refreshNodes [-g timeout|-forceful]` and
// `yarn rmadmin -updateNodeResource`.
//
// The wire format is Hadoop's RPC v9 with protocol buffers: the "hrpc"
// preamble, an IpcConnectionContextProto, then for every call one frame (a
// 4-byte big-endian length) of varint-delimited RpcRequestHeaderProto,
// RequestHeaderProto and the request message; answers are frames of a
// varint-delimited RpcResponseHeaderProto and, on success, the response.
// Only the few messages needed are encoded, by hand with protowire, rather
// than generated from the Hadoop .proto files: five small messages do not
// justify a code generator in the build.
//
// Authentication is SIMPLE (no SASL, no Kerberos): the RM must run with
// hadoop.security.authentication=simple and yarn.admin.acl must admit the
// configured user.
package rmadmin
