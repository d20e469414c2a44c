// Package k8senv runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager, plus KWOK to
// play the kubelets of fake GPU nodes. Nothing is mocked: the scheduler
// really marks pods unschedulable, the disruption controller really
// computes PodDisruptionBudget status, the Eviction API really answers 429.
//
// The binaries are built once from the pinned tools modules under tools/
// by install.sh and cached outside the repository under
// ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/k8s-<version>/bin; Start runs
// the installer itself when the cache is missing. The processes listen on
// free loopback ports, die with the test binary (Pdeathsig) and are
// stopped by PID.
//
// Product code never imports this package; tests do.
package k8senv
