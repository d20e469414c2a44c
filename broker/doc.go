// Package broker is gpubroker's core: the domain model (demand, tenants,
// pools, nodes, policy), the immutable snapshot the planner reads, the pure
// planner and its actions, the merge of both sides' observations into one
// node list, and the op journal's step data (OpData and the step names).
//
// It does no I/O and imports only the standard library. The tick loop that
// observes, plans, validates and acts lives in broker/engine, which also
// declares the interfaces it needs from the world. Adapters (yarn, k8s,
// cloud, store, api) import broker and convert their foreign types and
// errors into the ones defined here at their boundary; broker never imports
// them.
package broker
