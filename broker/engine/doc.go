// Package engine runs gpubroker's tick loop: each tick it observes both
// sides, the node pools and the ledger, plans on the merged snapshot with
// the pure planner in package broker, re-validates destructive actions on a
// fresh observation, journals them as ops and advances every open op one
// step (Observe → Plan → Validate → Act).
//
// The interfaces it needs from the world are declared here, where they are
// used: SideObserver and SideActions (YARN, Kubernetes), NodePool (the
// cloud), Ledger (the store) and Checkpoints (HDFS). It imports only the
// standard library and package broker; adapters implement its interfaces
// and internal/app assembles them.
package engine
