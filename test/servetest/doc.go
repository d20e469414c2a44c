// Package servetest runs the real gpubroker binary for tests that measure
// or fuzz it from another process (test/conformance, test/wrk): it builds
// cmd/gpubroker, runs a component installer, and starts `gpubroker serve`
// on a free loopback port with a given configuration and database.
package servetest
