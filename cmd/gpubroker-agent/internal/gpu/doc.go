// Package gpu reads a node's NVIDIA GPUs through NVML and turns them into
// the broker's GPU reports: utilisation, memory, temperature, power,
// uncorrectable ECC errors, XID events, MIG mode and MIG instances.
//
// Everything goes through nvml.Interface, so tests run the real mapping
// code against go-nvml's mock DGX servers, and production uses the driver's
// libnvidia-ml.so.1 loaded at run time. A node without that library is
// reported as ErrNoLibrary, never as a node without GPUs: only the caller
// may decide that a GPU-less node is fine.
//
// XID errors arrive as NVML events. A fatal XID (a GPU fallen off the bus,
// an uncontained ECC error) leaves the GPU broken until it is reset, which
// restarts this agent, so the reader keeps every distinct XID code it has
// seen since it started: the broker stores only a node's latest report, and
// an XID reported once and then forgotten would let a broken node look
// healthy 15 seconds later.
package gpu
