// Package simworld is the simulated world's machine bootstrap, written
// once for the demo (cmd/gpubroker), the chaos soak (test/chaos) and the
// end-to-end tests (test/e2e): what a simulated machine does when it boots
// or is terminated, as a real node's bootstrap script and its cloud do.
//
// A booted machine joins Kubernetes as a node and YARN as a NodeManager;
// unless it joins YARN, its host is in the exclude file first, so the RM
// turns the NodeManager away (DECOMMISSIONED) until the broker hands the
// machine over: it is released on YARN. A terminated machine leaves both
// clusters and its exclude entry goes with it, so a later machine of the
// same name is not turned away. The NodeManager of a machine that is gone
// cannot be restarted, as ssh to it would fail.
//
// What differs between the worlds stays with them: the Kubernetes side
// (the fake API of k8s/k8ssim, or a real control plane with KWOK), the node
// a machine joins as, which side it joins, and how a failed step is
// reported.
package simworld
