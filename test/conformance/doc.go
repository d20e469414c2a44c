// Package conformance runs schemathesis, a property-based API fuzzer driven
// by the OpenAPI document, against a real "gpubroker serve" on a seeded
// PostgreSQL, with every check on. It fails on any finding: a 5xx, an answer
// that does not match the document, a schema-valid request that is
// rejected, a malformed request that is accepted, a 405 without Allow.
//
// CI runs a bounded pass (-conformance.examples, default 10 per operation);
// run more with
//
//	go test ./test/conformance -conformance.examples=200 -timeout 30m
package conformance
