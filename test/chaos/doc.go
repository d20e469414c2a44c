// Package chaos is the chaos soak: the whole product, assembled by
// internal/app as serve assembles it (two replicas on one PostgreSQL, one
// leading through the store's leader lock), on yarnsim (an RM HA pair and
// its admin port), k8ssim and awssim, under the openb-fitted workload,
// with faults injected at seeded random moments: the leader killed
// mid-scale-up, mid-drain and mid-decommission, PostgreSQL restarted, the
// RM failing over or answering 500s and login pages, the API server
// unavailable, cloud throttling, insufficient capacity, launches that never
// register, terminates that fail, and an agent reporting XID 79.
//
// An invariant checker (checker.go) looks at the world every 100 ms and
// fails the run on the first breach: pool and cluster bounds, no node
// schedulable on both sides, no running GPU work killed outside a recorded
// preemption, no double buy for one demand, every op ending, and no demand
// lost from the ledger.
//
// go test ./test/chaos/ runs a bounded soak; -chaos.duration runs longer,
// -chaos.seed picks another fault schedule and workload.
package chaos
