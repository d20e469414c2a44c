// Package broker is gpubroker's core: the domain model (demand, tenants,
// pools, nodes, policy), the immutable snapshot the planner reads, the plan
// and its actions, and the small interfaces the core needs from the world.
//
// It does no I/O and imports only the standard library. Adapters (yarn, k8s,
// cloud, store, api) import broker and convert their foreign types and errors
// into the ones defined here at their boundary; broker never imports them.
package broker
